"""The Connect transport on the wire: where answers end, malformed or cut answers, bad headers, TLS."""

from __future__ import annotations

import datetime
import socket
import ssl
import threading

import pytest

from iris.core import errors
from iris.rpc import controller_pb2 as pb
from iris.rpc.transport import ClientTls, ConnectTransport
from tests.client.test_transport import ScriptedServer, ok_response

INFO = pb.GetClusterInfoResponse(name="c")
BODY = INFO.SerializeToString()
PROTO = b"content-type: application/proto\r\n"


@pytest.fixture
def server():
    made: list[ScriptedServer] = []

    def make(*responses: bytes, close_after: int | None = None) -> ScriptedServer:
        made.append(ScriptedServer(list(responses), close_after))
        return made[-1]

    yield make
    for s in made:
        s.close()


def _info(url: str, **kwargs) -> pb.GetClusterInfoResponse:
    return ConnectTransport(url, local_socket=False, timeout=5, **kwargs).call(
        "GetClusterInfo", pb.GetClusterInfoRequest(), pb.GetClusterInfoResponse
    )


def _chunk(data: bytes, ext: bytes = b"") -> bytes:
    return b"%x%s\r\n%s\r\n" % (len(data), ext, data)


def test_transport_joins_a_chunked_answer_with_extensions_and_trailers(server):
    raw = (
        b"HTTP/1.1 200 OK\r\n"
        + PROTO
        + b"Transfer-Encoding: chunked\r\nX-A: 1\r\nX-A: 2\r\n\r\n"
        + _chunk(BODY[:2], b";ext=1")
        + _chunk(BODY[2:])
        + b"0\r\nTrailer: t\r\n\r\n"
    )
    assert _info(server(raw).url) == INFO


def test_transport_reads_an_answer_without_a_length_to_the_close_and_then_opens_a_new_connection(server):
    srv = server(b"HTTP/1.0 200 OK\r\n" + PROTO + b"\r\n" + BODY, ok_response(INFO), close_after=1)
    transport = ConnectTransport(srv.url, local_socket=False, timeout=5)
    for _ in range(2):
        assert transport.call("GetClusterInfo", pb.GetClusterInfoRequest(), pb.GetClusterInfoResponse) == INFO
    assert srv.connections == 2
    assert srv.requests[0].startswith(b"POST /iris.v1.ControllerService/GetClusterInfo HTTP/1.1\r\n")


def test_transport_skips_an_interim_answer(server):
    assert _info(server(b"HTTP/1.1 100 Continue\r\n\r\n" + ok_response(INFO)).url) == INFO


@pytest.mark.parametrize(
    "raw, words",
    [
        (b"SSH-2.0-OpenSSH\r\n\r\n", "did not answer in HTTP/1.x"),
        (b"HTTP/1.1 200 OK\r\n" + PROTO + b"Content-Length: 9\r\n\r\nshort", "middle of an answer"),
        (b"HTTP/1.1 200 OK\r\n" + PROTO + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n", "middle of an answer"),
        (
            b"HTTP/1.1 200 OK\r\n" + PROTO + b"Transfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n0\r\n\r\n",
            "middle of an answer",
        ),
        (b"HTTP/1.1 200 OK\r\n", "no Iris controller answers"),
    ],
)
def test_transport_names_a_malformed_or_cut_answer_as_an_unreachable_controller(server, raw, words):
    with pytest.raises(errors.Unavailable, match=words):
        _info(server(raw, close_after=1).url)


def test_transport_a_connection_closed_before_any_answer_is_named_so():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()

        def read_then_close() -> None:
            conn = listener.accept()[0]
            conn.recv(65536)
            conn.close()

        thread = threading.Thread(target=read_then_close, daemon=True)
        thread.start()
        with pytest.raises(errors.Unavailable, match="closed before an answer"):
            _info(f"http://127.0.0.1:{listener.getsockname()[1]}")
        thread.join(timeout=10)


def test_transport_refuses_a_token_with_a_line_break_before_sending_anything(server):
    srv = server(ok_response(INFO), ok_response(INFO))
    transport = ConnectTransport(srv.url, local_socket=False, timeout=5, token="a\r\nX-Evil: 1")
    with pytest.raises(errors.InvalidArgument, match="header cannot be sent"):
        transport.call("GetClusterInfo", pb.GetClusterInfoRequest(), pb.GetClusterInfoResponse)
    transport.token = "good"
    assert transport.call("GetClusterInfo", pb.GetClusterInfoRequest(), pb.GetClusterInfoResponse) == INFO
    assert len(srv.requests) == 1 and b"Authorization: Bearer good" in srv.requests[0]


def test_transport_requests_on_one_connection_carry_each_its_own_length_and_token(server):
    srv = server(ok_response(INFO), ok_response(INFO), ok_response(INFO))
    transport = ConnectTransport(srv.url, local_socket=False, timeout=5, token="a")
    for request, token in (
        (pb.GetClusterInfoRequest(), None),
        (pb.GetJobStatusRequest(job_id="/u/j"), None),
        (pb.GetClusterInfoRequest(), "b"),
    ):
        transport.call("GetClusterInfo", request, pb.GetClusterInfoResponse, token=token)
    heads = [r.partition(b"\r\n\r\n") for r in srv.requests]
    assert srv.connections == 1
    assert [len(body) for _, _, body in heads] == [0, len(pb.GetJobStatusRequest(job_id="/u/j").SerializeToString()), 0]
    assert [b"Content-Length: %d" % len(body) in head.split(b"\r\n") for head, _, body in heads] == [True] * 3
    assert [b"Authorization: Bearer a" in head for head, _, _ in heads] == [True, True, False]
    assert b"Authorization: Bearer b" in heads[2][0]


def _self_signed(tmp_path) -> tuple[str, str]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return str(cert_path), str(key_path)


def test_transport_speaks_tls_to_an_https_url_and_verifies_the_certificate(tmp_path, monkeypatch):
    cert, key = _self_signed(tmp_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    info = pb.GetClusterInfoResponse(name="tls")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]

    def serve() -> None:
        for _ in range(3):  # the untrusting client, then the trusting ones
            raw, _ = listener.accept()
            try:
                with context.wrap_socket(raw, server_side=True) as conn:
                    conn.recv(65536)
                    conn.sendall(ok_response(info))
            except (ssl.SSLError, OSError):
                continue

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        from iris.core.errors import Unavailable

        with pytest.raises(Unavailable, match="TLS: the server's certificate is not trusted"):
            ConnectTransport(f"https://localhost:{port}", timeout=5).call(
                "GetClusterInfo", pb.GetClusterInfoRequest(), pb.GetClusterInfoResponse
            )
        # A CA file named for the transport (`--ca`, $IRIS_CA) vouches for the certificate.
        got = ConnectTransport(f"https://localhost:{port}", timeout=5, tls=ClientTls(ca=cert)).call(
            "GetClusterInfo", pb.GetClusterInfoRequest(), pb.GetClusterInfoResponse
        )
        assert got == info
        monkeypatch.setenv("SSL_CERT_FILE", cert)  # the default context trusts the test's own certificate
        got = ConnectTransport(f"https://localhost:{port}", timeout=5).call(
            "GetClusterInfo", pb.GetClusterInfoRequest(), pb.GetClusterInfoResponse
        )
        assert got == info
    finally:
        listener.close()
        thread.join(timeout=10)
