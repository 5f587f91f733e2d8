"""The Connect transport the SDK and the peer client share: URL parsing, connection reuse and error mapping."""

from __future__ import annotations

import os
import socket
import threading

import pytest

from iris.core import errors
from iris.rpc import controller_pb2 as pb
from iris.rpc.transport import ConnectTransport, error_from_code, parse_url


class ScriptedServer:
    """A loopback TCP server that answers each request with the next canned raw HTTP response.

    `close_after` closes the connection after that many responses, to imitate a server dropping an
    idle kept-alive connection.
    """

    def __init__(self, responses: list[bytes], close_after: int | None = None):
        self.responses = list(responses)
        self.close_after = close_after
        self.requests: list[bytes] = []
        self.connections = 0
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while self.responses:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            served = 0
            with conn, conn.makefile("rb") as f:
                while self.responses:
                    head = b""
                    while not head.endswith(b"\r\n\r\n"):
                        try:
                            chunk = f.readline()
                        except ConnectionResetError:  # the client closed with an answer unread
                            chunk = b""
                        if not chunk:
                            break
                        head += chunk
                    if not head:
                        break
                    length = int(
                        next(
                            (
                                ln.split(b":")[1]
                                for ln in head.split(b"\r\n")
                                if ln.lower().startswith(b"content-length")
                            ),
                            b"0",
                        )
                    )
                    self.requests.append(head + f.read(length))
                    conn.sendall(self.responses.pop(0))
                    served += 1
                    if self.close_after is not None and served >= self.close_after:
                        break

    def close(self) -> None:
        self.sock.close()


def ok_response(message, chunked: bool = False) -> bytes:
    body = message.SerializeToString()
    if chunked:
        half = len(body) // 2
        parts = [body[:half], body[half:]]
        payload = b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in parts if p) + b"0\r\n\r\n"
        return b"HTTP/1.1 200 OK\r\ncontent-type: application/proto\r\ntransfer-encoding: chunked\r\n\r\n" + payload
    return b"HTTP/1.1 200 OK\r\ncontent-type: application/proto\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)


@pytest.fixture
def scripted():
    servers: list[ScriptedServer] = []

    def make(*responses: bytes, close_after: int | None = None) -> ScriptedServer:
        server = ScriptedServer(list(responses), close_after)
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.close()


@pytest.mark.parametrize(
    "url, expected",
    [
        ("http://127.0.0.1:10000", ("http", "127.0.0.1", 10000, "")),
        ("127.0.0.1:9", ("http", "127.0.0.1", 9, "")),
        ("https://iris.example.org/api/", ("https", "iris.example.org", 443, "/api")),
        ("http://[::1]:5/", ("http", "::1", 5, "")),
    ],
)
def test_parse_url_accepts_http_urls_and_bare_host_port(url, expected):
    assert parse_url(url) == expected


@pytest.mark.parametrize(
    "url", ["ftp://x", "http://:5", "http://h:port", "http://user@h:5", "http://[::1", "http://h:99999", "http://h:0"]
)
def test_parse_url_rejects_what_is_not_a_controller_url(url):
    with pytest.raises(errors.InvalidArgument, match="not understood"):
        parse_url(url)


def test_call_decodes_a_length_delimited_and_a_chunked_answer(scripted):
    info = pb.GetClusterInfoResponse(name="marin", version="0.1.0", pid=42)
    server = scripted(ok_response(info), ok_response(info, chunked=True))
    transport = ConnectTransport(server.url, local_socket=False)
    for _ in range(2):
        got = transport.call("GetClusterInfo", pb.GetClusterInfoRequest(), pb.GetClusterInfoResponse)
        assert got == info
    assert server.connections == 1  # kept alive
    first = server.requests[0]
    assert first.startswith(b"POST /iris.v1.ControllerService/GetClusterInfo HTTP/1.1\r\n")
    assert b"Content-Type: application/proto" in first and b"Connect-Protocol-Version: 1" in first


def test_call_sends_the_bearer_token(scripted):
    server = scripted(ok_response(pb.ListPeersResponse()))
    ConnectTransport(server.url, token="tok123", local_socket=False).call(
        "ListPeers", pb.ListPeersRequest(), pb.ListPeersResponse
    )
    assert b"Authorization: Bearer tok123" in server.requests[0]


def test_call_retries_once_when_the_server_dropped_the_kept_alive_connection(scripted):
    info = pb.GetClusterInfoResponse(name="a")
    server = scripted(ok_response(info), ok_response(info), close_after=1)
    transport = ConnectTransport(server.url, timeout=5, local_socket=False)
    transport.call("GetClusterInfo", pb.GetClusterInfoRequest(), pb.GetClusterInfoResponse)
    assert transport.call("GetClusterInfo", pb.GetClusterInfoRequest(), pb.GetClusterInfoResponse) == info
    assert server.connections == 2


def test_connect_error_body_becomes_the_typed_error_with_the_server_message(scripted):
    body = b'{"code": "not_found", "message": "job /a/b does not exist"}'
    server = scripted(
        b"HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
    )
    with pytest.raises(errors.NotFound) as err:
        ConnectTransport(server.url, local_socket=False).call(
            "GetJobStatus", pb.GetJobStatusRequest(job_id="/a/b"), pb.GetJobStatusResponse
        )
    assert err.value.message == "job /a/b does not exist"


def test_http_error_without_a_connect_body_maps_by_status(scripted):
    server = scripted(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 4\r\nconnection: close\r\n\r\nbusy")
    with pytest.raises(errors.Unavailable, match="HTTP 503: busy"):
        ConnectTransport(server.url, local_socket=False).call("ListPeers", pb.ListPeersRequest(), pb.ListPeersResponse)


def test_unreachable_controller_is_unavailable_naming_the_url_and_how_to_start_one():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound but not listening: connections are refused
        url = f"http://127.0.0.1:{port}"
        with pytest.raises(errors.Unavailable) as err:
            ConnectTransport(url, local_socket=False).call("ListPeers", pb.ListPeersRequest(), pb.ListPeersResponse)
    assert url in err.value.message and "connection refused" in err.value.message
    assert "iris cluster start" in err.value.message


def test_error_from_code_keeps_unknown_codes():
    assert isinstance(error_from_code("already_exists", "dup"), errors.AlreadyExists)
    err = error_from_code("resource_exhausted", "too many")
    assert type(err) is errors.IrisError and err.code == "resource_exhausted" and err.message == "too many"


def test_transport_close_closes_the_connections_of_every_thread(scripted):
    info = pb.GetClusterInfoResponse(name="a")
    # The scripted server serves one connection at a time: it drops each after one answer.
    server = scripted(ok_response(info), ok_response(info), ok_response(info), close_after=1)
    transport = ConnectTransport(server.url, timeout=5, local_socket=False)
    worker = threading.Thread(
        target=transport.call, args=("GetClusterInfo", pb.GetClusterInfoRequest(), pb.GetClusterInfoResponse)
    )
    worker.start()
    worker.join()
    transport.call("GetClusterInfo", pb.GetClusterInfoRequest(), pb.GetClusterInfoResponse)
    assert len(transport._open) == 2
    transport.close()
    assert not transport._open
    assert transport.call("GetClusterInfo", pb.GetClusterInfoRequest(), pb.GetClusterInfoResponse) == info
    assert server.connections == 3


def test_peer_client_shares_the_transport_and_names_the_peer_in_its_errors(scripted):
    from iris.federation.peer import PeerClient

    body = b'{"code": "permission_denied", "message": "submitter bob is not allowed"}'
    refusal = b"HTTP/1.1 403 Forbidden\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
        len(body),
        body,
    )
    server = scripted(refusal, ok_response(pb.TerminateJobResponse(state="KILLED")))
    peer = PeerClient("cw-h100", server.url, token_source=lambda: "peer-token", requester="marin")
    with pytest.raises(errors.PermissionDenied, match="^peer cw-h100: submitter bob is not allowed$"):
        peer.launch_job(pb.LaunchJobRequest(name="/alice/j"))
    assert peer.terminate_job("/alice/j", "cancelled").state == "KILLED"
    assert server.connections == 1  # the refusal kept the connection
    assert all(b"Authorization: Bearer peer-token" in r for r in server.requests)
    assert server.requests[0].startswith(b"POST /iris.v1.ControllerService/LaunchJob HTTP/1.1\r\n")


def test_peer_client_turns_an_unknown_code_into_unavailable(scripted):
    from iris.federation.peer import PeerClient

    body = b'{"code": "resource_exhausted", "message": "too many handoffs"}'
    server = scripted(
        b"HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
        % (len(body), body)
    )
    with pytest.raises(errors.Unavailable, match="^peer p at .*: resource_exhausted: too many handoffs$"):
        PeerClient("p", server.url, requester="marin").federation_sync(0)


def test_peer_client_of_a_peer_that_does_not_answer_is_unavailable():
    from iris.federation.peer import PeerClient

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
        with pytest.raises(errors.Unavailable, match="^peer cw-h100 at .* is unreachable: connection refused$"):
            PeerClient("cw-h100", url).list_backends()


def test_a_call_interrupted_midway_leaves_the_next_call_a_fresh_connection(scripted, monkeypatch):
    import http.client

    info = pb.GetClusterInfoResponse(name="a")
    server = scripted(ok_response(info), ok_response(info), ok_response(info))
    transport = ConnectTransport(server.url, timeout=5, local_socket=False)
    transport.call("GetClusterInfo", pb.GetClusterInfoRequest(), pb.GetClusterInfoResponse)

    def interrupted(self):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(http.client.HTTPConnection, "getresponse", interrupted)
        with pytest.raises(KeyboardInterrupt):
            transport.call("GetClusterInfo", pb.GetClusterInfoRequest(), pb.GetClusterInfoResponse)
    assert transport.call("GetClusterInfo", pb.GetClusterInfoRequest(), pb.GetClusterInfoResponse) == info
    assert server.connections == 2  # the interrupted one was closed, not reused


def test_an_answer_larger_than_the_bound_is_a_clear_error_not_read_whole(scripted):
    declared = b"HTTP/1.1 200 OK\r\ncontent-type: application/proto\r\ncontent-length: 1000000000000\r\n\r\nxx"
    undeclared = b"HTTP/1.1 200 OK\r\ncontent-type: application/proto\r\nconnection: close\r\n\r\n" + b"x" * 5000
    for response in (declared, undeclared):
        server = scripted(response)
        transport = ConnectTransport(server.url, timeout=5, max_answer_bytes=1000, local_socket=False)
        with pytest.raises(errors.IrisError, match="at most 1000 are accepted"):
            transport.call("GetClusterInfo", pb.GetClusterInfoRequest(), pb.GetClusterInfoResponse)


def test_a_gzip_answer_that_is_garbage_or_a_bomb_is_a_clear_error(scripted):
    import gzip

    def gzipped(body: bytes) -> bytes:
        head = "HTTP/1.1 200 OK\r\ncontent-type: application/proto\r\ncontent-encoding: gzip\r\n"
        return f"{head}content-length: {len(body)}\r\n\r\n".encode() + body

    info = pb.GetClusterInfoResponse(name="packed")
    cases = [
        (gzipped(b"not gzip at all"), "cannot be read"),
        (gzipped(gzip.compress(b"\0" * 100_000)), "more than 1000 bytes once unpacked"),
        (gzipped(gzip.compress(info.SerializeToString())[:-12]), "cut short"),
    ]
    for response, words in cases:
        transport = ConnectTransport(scripted(response).url, timeout=5, max_answer_bytes=1000, local_socket=False)
        with pytest.raises(errors.IrisError, match=words):
            transport.call("GetClusterInfo", pb.GetClusterInfoRequest(), pb.GetClusterInfoResponse)
    good = ConnectTransport(
        scripted(gzipped(gzip.compress(info.SerializeToString()))).url, timeout=5, local_socket=False
    )
    assert good.call("GetClusterInfo", pb.GetClusterInfoRequest(), pb.GetClusterInfoResponse) == info


def test_a_server_that_trickles_its_answer_is_cut_off_at_the_call_timeout():
    """Each byte comes well within the socket timeout, but the whole answer would take far longer."""
    stop = threading.Event()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()

    def serve() -> None:
        conn, _ = sock.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/proto\r\ncontent-length: 100000\r\n\r\n")
            while not stop.wait(0.05):
                try:
                    conn.sendall(b"x")
                except OSError:
                    return

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        transport = ConnectTransport(f"http://127.0.0.1:{sock.getsockname()[1]}", timeout=1, local_socket=False)
        with pytest.raises(errors.Unavailable, match="no whole answer within 1 s"):
            transport.call("GetClusterInfo", pb.GetClusterInfoRequest(), pb.GetClusterInfoResponse)
    finally:
        stop.set()
        sock.close()
        thread.join(timeout=10)


def test_a_unix_socket_path_too_long_for_sockaddr_un_is_bound_and_reached(tmp_path):
    from iris.rpc.transport import peer_pid, unix_address

    folder = tmp_path / ("d" * 60) / ("e" * 60)
    folder.mkdir(parents=True)
    path = str(folder / "controller.sock")
    assert len(path) > 108
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        with unix_address(path) as address:
            server.bind(address)
        server.listen()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            with unix_address(path) as address:
                conn.connect(address)
            assert peer_pid(conn) == os.getpid()
    assert (folder / "controller.sock").exists()
