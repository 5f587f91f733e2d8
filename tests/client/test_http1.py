"""The HTTP/1.1 wire layer under the Connect transport: framing, where answers end, TLS, and what it imports."""

from __future__ import annotations

import datetime
import socket
import ssl
import subprocess
import sys
import threading
import time

import pytest

from iris.rpc import controller_pb2 as pb
from iris.rpc import http1
from iris.rpc.transport import ConnectTransport
from tests.client.test_transport import ScriptedServer, ok_response


@pytest.fixture
def server():
    made: list[ScriptedServer] = []

    def make(*responses: bytes, close_after: int | None = None) -> ScriptedServer:
        made.append(ScriptedServer(list(responses), close_after))
        return made[-1]

    yield make
    for s in made:
        s.close()


def _exchange(url: str) -> tuple[http1.Answer, bytes]:
    host, port = url.removeprefix("http://").split(":")
    conn = http1.Connection(host, int(port), timeout=5)
    try:
        answer = conn.request("POST", "/x", b"hello", {"Content-Type": "text/plain"})
        return answer, answer.body(1 << 20, time.monotonic() + 5)
    finally:
        conn.close()


def test_http1_chunked_answer_with_trailers_and_extensions_is_joined(server):
    raw = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-A: 1\r\nX-A: 2\r\n\r\n"
        b"3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nTrailer: t\r\n\r\n"
    )
    answer, body = _exchange(server(raw).url)
    assert (answer.status, body, answer.headers["x-a"], answer.will_close) == (200, b"abcde", "1, 2", False)


def test_http1_answer_without_a_length_ends_at_close_and_closes_the_connection(server):
    srv = server(b"HTTP/1.0 200 OK\r\n\r\nuntil close")
    answer, body = _exchange(srv.url)
    assert body == b"until close" and answer.will_close
    assert srv.requests[0].startswith(b"POST /x HTTP/1.1\r\nHost: 127.0.0.1:") and srv.requests[0].endswith(b"hello")


def test_http1_interim_answer_is_skipped_and_a_204_has_no_body(server):
    answer, body = _exchange(server(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n").url)
    assert (answer.status, body, answer.will_close) == (204, b"", False)


@pytest.mark.parametrize(
    "raw, error, words",
    [
        (b"SSH-2.0-OpenSSH\r\n\r\n", http1.BadAnswer, "did not answer in HTTP/1.x"),
        (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", http1.BadAnswer, "without a colon"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nshort", http1.Incomplete, "middle of an answer"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", http1.BadAnswer, "is not a number"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", http1.BadAnswer, "chunk size"),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n0\r\n\r\n",
            http1.BadAnswer,
            "does not end",
        ),
        (b"HTTP/1.1 200 OK\r\n", http1.Incomplete, "middle of an answer"),
    ],
)
def test_http1_malformed_or_cut_answers_are_named_errors(server, raw, error, words):
    srv = server(raw, close_after=1)
    with pytest.raises(error, match=words):
        _exchange(srv.url)


def test_http1_a_closed_connection_before_any_answer_is_closed_not_incomplete():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()

        def read_then_close() -> None:
            conn = listener.accept()[0]
            conn.recv(65536)
            conn.close()

        thread = threading.Thread(target=read_then_close, daemon=True)
        thread.start()
        with pytest.raises(http1.Closed):
            _exchange(f"http://127.0.0.1:{listener.getsockname()[1]}")
        thread.join(timeout=10)


def test_http1_a_header_with_a_line_break_is_refused_before_sending():
    conn = http1.Connection("127.0.0.1", 9, timeout=1)
    with pytest.raises(ValueError, match="line break"):
        conn.request("POST", "/", b"", {"Authorization": "Bearer a\r\nX-Evil: 1"})
    assert conn.sock is None  # nothing was opened


def test_http1_requests_on_one_connection_carry_each_its_own_length_and_headers(server):
    reply = pb.GetClusterInfoResponse(name="c")
    s = server(ok_response(reply), ok_response(reply), ok_response(reply))
    host, port = s.url.removeprefix("http://").split(":")
    conn = http1.Connection(host, int(port), timeout=5)
    try:
        for body, token in ((b"one", "a"), (b"three", "a"), (b"x", "b")):
            answer = conn.request("POST", "/m", body, {"Authorization": f"Bearer {token}"})
            answer.body(1 << 20, time.monotonic() + 5)
        with pytest.raises(ValueError, match="line break"):  # a head built before is no pass for a bad one
            conn.request("POST", "/m", b"", {"Authorization": "Bearer a\r\nX-Evil: 1"})
    finally:
        conn.close()
    heads = [r.partition(b"\r\n\r\n") for r in s.requests]
    assert [body for _, _, body in heads] == [b"one", b"three", b"x"]
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
        for _ in range(2):  # the untrusting client, then the trusting one
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

        with pytest.raises(Unavailable, match="CERTIFICATE_VERIFY_FAILED"):
            ConnectTransport(f"https://localhost:{port}", timeout=5).call(
                "GetClusterInfo", pb.GetClusterInfoRequest(), pb.GetClusterInfoResponse
            )
        monkeypatch.setenv("SSL_CERT_FILE", cert)  # the default context trusts the test's own certificate
        got = ConnectTransport(f"https://localhost:{port}", timeout=5).call(
            "GetClusterInfo", pb.GetClusterInfoRequest(), pb.GetClusterInfoResponse
        )
        assert got == info
    finally:
        listener.close()
        thread.join(timeout=10)


def test_a_call_to_an_http_url_imports_neither_ssl_nor_email(server):
    body = b'{"name": "plain"}'
    srv = server(
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
    )
    code = (
        "import sys\n"
        "from iris.rpc.transport import ConnectTransport\n"
        f"print(ConnectTransport({srv.url!r}, local_socket=False).call_json('GetClusterInfo', {{}}))\n"
        "print(sorted(m for m in ('ssl', 'email', 'http.client', 'typing') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["{'name': 'plain'}", "[]"]
