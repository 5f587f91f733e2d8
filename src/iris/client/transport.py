"""Makes Connect unary calls to a controller and turns Connect errors into `iris.core.errors` types.

Why not the generated `ControllerServiceClientSync`: importing `connectrpc`'s client stack costs
about 130 ms, and even the standard library's `http.client` (with the `email` and `ssl` packages it
pulls in) about 20 ms, against a budget of 50 ms for a whole `iris job run --no-wait`. A unary
Connect call is one HTTP/1.1 POST of the request to `/<service>/<Method>`: 200 carries the
response, any other status a JSON body `{"code": …, "message": …}`. That much is a small client
over a kept-alive socket, so the SDK and the CLI both start fast and stay fast in a submit loop
(one round trip per call, no connection setup).

`call` sends and reads binary protobuf messages; `call_json` sends and reads Connect JSON
documents, for the CLI's submit path, which skips importing the protobuf runtime altogether. For
the same reason a plain-HTTP connection is made with the `_socket` module under `socket`: `socket`
itself (its enum conversions and `selectors`) costs about 2 ms to import, and only TLS needs it.
"""

from __future__ import annotations

import _socket
import io
import threading
import time
from typing import TYPE_CHECKING, Any, TypeVar

from iris.core import errors

if TYPE_CHECKING:
    from google.protobuf.message import Message

SERVICE = "iris.v1.ControllerService"
_M = TypeVar("_M", bound="Message")

# The Connect protocol's code for a non-200 answer without a Connect error body.
_HTTP_CODES = {
    400: "internal",
    401: "unauthenticated",
    403: "permission_denied",
    404: "unimplemented",
    429: "unavailable",
    502: "unavailable",
    503: "unavailable",
    504: "unavailable",
}
# uvicorn closes an idle kept-alive connection after 5 s; reconnect before that instead of
# finding out by a failed send.
_IDLE_RECONNECT_S = 4.0


def error_from_code(code: str, message: str) -> errors.IrisError:
    """The typed error for a Connect error code (`not_found` → NotFound, …), by the one table."""
    return errors.error_for_code(code, message)


def unreachable(url: str, reason: str) -> errors.Unavailable:
    return errors.Unavailable(
        f"cannot reach the Iris controller at {url} ({reason}); start one with "
        "`iris cluster start --local`, or point at a running one with --controller URL or IRIS_CONTROLLER"
    )


class ConnectTransport:
    """One controller endpoint; each thread that calls it gets its own kept-alive connection."""

    def __init__(self, url: str, token: str | None = None, timeout: float = 30.0):
        self._scheme, self._host, self._port, self._prefix = parse_url(url)
        text = url.strip().rstrip("/")
        self.url = text if "://" in text else f"http://{text}"
        self._timeout = timeout
        self.token = token
        self._headers = {"Connect-Protocol-Version": "1", "User-Agent": "iris-client"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._local = threading.local()

    def call(self, method: str, request: Message, response_type: type[_M]) -> _M:
        """Calls `method` (e.g. "LaunchJob") and returns its decoded response or raises a typed error."""
        from google.protobuf.message import DecodeError

        payload = self._unary(method, request.SerializeToString(), "application/proto")
        try:
            return response_type.FromString(payload)
        except DecodeError as exc:
            raise errors.IrisError(
                f"{self.url} answered {method} with a body that is not a {response_type.__name__}: {exc}"
            ) from None

    def call_json(self, method: str, request: dict[str, Any]) -> dict[str, Any]:
        """Calls `method` with a request given as its Connect JSON document; returns the response's document."""
        import json

        body = json.dumps(request, separators=(",", ":")).encode("utf-8")
        payload = self._unary(method, body, "application/json")
        try:
            doc = json.loads(payload)
        except ValueError as exc:
            raise errors.IrisError(f"{self.url} answered {method} with a body that is not JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise errors.IrisError(f"{self.url} answered {method} with JSON that is not an object")
        return doc

    def _unary(self, method: str, body: bytes, content_type: str) -> bytes:
        """POSTs one encoded request; returns the 200 answer's body or raises the typed error of any other."""
        status, headers, payload = self._post(f"{self._prefix}/{SERVICE}/{method}", body, content_type)
        if headers.get("content-encoding", "identity") not in ("identity", ""):
            payload = _decompress(headers["content-encoding"], payload)
        if status != 200:
            raise self._error(status, headers, payload)
        return payload

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def _connection(self) -> tuple[_Connection, bool]:
        """The calling thread's connection, and whether it has served a request before."""
        conn = getattr(self._local, "conn", None)
        if conn is not None and time.monotonic() - self._local.last_used < _IDLE_RECONNECT_S:
            return conn, True
        if conn is not None:
            conn.close()
        conn = _Connection(self._host, self._port, self._timeout, tls=self._scheme == "https")
        self._local.conn = conn
        return conn, False

    def _post(self, path: str, body: bytes, content_type: str) -> tuple[int, dict[str, str], bytes]:
        head = self._request_head(path, len(body), content_type)
        for attempt in (0, 1):
            reused = False
            try:
                conn, reused = self._connection()
                status, headers, payload, keep_alive = conn.exchange(head + body)
            except _ClosedEarly as exc:
                self.close()
                # A kept-alive connection the server had already closed: nothing was processed, so
                # one retry on a fresh connection is safe. A fresh connection failing is real.
                if reused and attempt == 0:
                    continue
                raise unreachable(self.url, str(exc)) from None
            except OSError as exc:
                self.close()
                if reused and attempt == 0 and isinstance(exc, (ConnectionResetError, BrokenPipeError)):
                    continue
                raise unreachable(self.url, _describe(exc)) from None
            self._local.last_used = time.monotonic()
            if not keep_alive:
                self.close()
            return status, headers, payload
        raise AssertionError("not reached")  # pragma: no cover

    def _request_head(self, path: str, length: int, content_type: str) -> bytes:
        lines = [
            f"POST {path} HTTP/1.1",
            f"Host: {_netloc(self._host, self._port)}",
            f"Content-Type: {content_type}",
            f"Content-Length: {length}",
        ]
        lines += [f"{k}: {v}" for k, v in self._headers.items()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def _error(self, status: int, headers: dict[str, str], payload: bytes) -> errors.IrisError:
        code, message = _HTTP_CODES.get(status, "unknown"), ""
        if headers.get("content-type", "").startswith("application/json"):
            import json

            try:
                doc = json.loads(payload)
                code = str(doc.get("code") or code)
                message = str(doc.get("message") or "")
            except (ValueError, AttributeError):
                pass
        if not message:
            text = payload.decode("utf-8", "replace").strip()
            message = f"the controller at {self.url} answered HTTP {status}" + (f": {text[:200]}" if text else "")
        return error_from_code(code, message)


def parse_url(url: str) -> tuple[str, str, int, str]:
    """(scheme, host, port, path prefix) of `http://HOST:PORT[/prefix]`; a bare HOST:PORT means http."""
    scheme, sep, rest = url.strip().partition("://")
    if not sep:
        scheme, rest = "http", url.strip()
    scheme = scheme.lower()
    netloc, slash, path = rest.partition("/")
    host, port_text = netloc, ""
    if netloc.startswith("["):  # [::1]:10000
        host, _, tail = netloc[1:].partition("]")
        port_text = tail[1:] if tail.startswith(":") else ""
    elif netloc.count(":") == 1:
        host, _, port_text = netloc.partition(":")
    if scheme not in ("http", "https") or not host or (port_text and not port_text.isdigit()) or "@" in netloc:
        raise errors.InvalidArgument(f"controller URL {url!r} is not understood; use http://HOST:PORT")
    port = int(port_text) if port_text else (443 if scheme == "https" else 80)
    return scheme, host, port, ("/" + path).rstrip("/") if slash else ""


def _netloc(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, _socket.gaierror):
        return f"unknown host: {exc.strerror}"
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


def _connect(host: str, port: int, timeout: float) -> _socket.socket:
    """A TCP connection to the first address of `host` that accepts one, with Nagle's delay off.

    What `socket.create_connection` does, over `_socket` (see the module docstring).
    """
    # An ASCII host goes to getaddrinfo as bytes: a str host is encoded with the `idna` codec,
    # whose import (with `stringprep` and `unicodedata`) costs more than the call itself.
    name = host.encode("ascii") if host.isascii() else host
    errors_seen: list[OSError] = []
    for family, kind, proto, _, address in _socket.getaddrinfo(name, port, 0, _socket.SOCK_STREAM):
        sock = None
        try:
            sock = _socket.socket(family, kind, proto)
            sock.settimeout(timeout)
            sock.connect(address)
        except OSError as exc:
            if sock is not None:
                sock.close()
            errors_seen.append(exc)
            continue
        sock.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
        return sock
    raise errors_seen[0] if errors_seen else OSError(f"no address found for {host}")


class _SocketReader(io.RawIOBase):
    """The raw stream a `BufferedReader` reads a socket through (what `socket.makefile` builds)."""

    def __init__(self, sock: _socket.socket):
        self._sock = sock

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        return self._sock.recv_into(buffer)


class _ClosedEarly(OSError):
    """The server closed the connection before a complete answer."""


_MAX_LINE = 65536


class _Connection:
    """One HTTP/1.1 connection: send a request, read one response (length-delimited or chunked)."""

    def __init__(self, host: str, port: int, timeout: float, tls: bool):
        sock = _connect(host, port, timeout)
        if tls:
            import socket
            import ssl

            plain = socket.socket(fileno=sock.detach())
            plain.settimeout(timeout)
            sock = ssl.create_default_context().wrap_socket(plain, server_hostname=host)
        self._sock = sock
        self._file = io.BufferedReader(_SocketReader(sock))

    def close(self) -> None:
        try:
            self._file.close()
        finally:
            self._sock.close()

    def exchange(self, request: bytes) -> tuple[int, dict[str, str], bytes, bool]:
        """Sends `request`; returns (status, lower-cased headers, body, whether to keep the connection)."""
        self._sock.sendall(request)
        status_line = self._file.readline(_MAX_LINE)
        if not status_line:
            raise _ClosedEarly("the connection closed without an answer")
        parts = status_line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].isdigit():
            raise _ClosedEarly(f"not an HTTP answer: {status_line[:80]!r}")
        version, status = parts[0], int(parts[1])
        headers: dict[str, str] = {}
        while True:
            line = self._file.readline(_MAX_LINE)
            if not line:
                raise _ClosedEarly("the connection closed in the middle of an answer")
            if line in (b"\r\n", b"\n"):
                break
            key, _, value = line.decode("latin-1").partition(":")
            headers[key.strip().lower()] = value.strip()
        keep_alive = version == b"HTTP/1.1" and headers.get("connection", "").lower() != "close"
        if "chunked" in headers.get("transfer-encoding", "").lower():
            body = self._read_chunked()
        elif "content-length" in headers:
            body = self._read_exactly(int(headers["content-length"]))
        else:
            body, keep_alive = self._file.read(), False
        return status, headers, body, keep_alive

    def _read_exactly(self, n: int) -> bytes:
        data = self._file.read(n)
        if len(data) != n:
            raise _ClosedEarly("the connection closed in the middle of an answer")
        return data

    def _read_chunked(self) -> bytes:
        chunks: list[bytes] = []
        while True:
            size_line = self._file.readline(_MAX_LINE)
            if not size_line:
                raise _ClosedEarly("the connection closed in the middle of an answer")
            try:
                size = int(size_line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise _ClosedEarly(f"a malformed chunk header {size_line[:40]!r}") from None
            if size == 0:
                while self._file.readline(_MAX_LINE) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(chunks)
            chunks.append(self._read_exactly(size))
            self._read_exactly(2)  # the CRLF after each chunk


def _decompress(encoding: str, payload: bytes) -> bytes:
    if encoding == "gzip":
        import gzip

        return gzip.decompress(payload)
    raise errors.IrisError(f"the controller answered with content-encoding {encoding!r}, which this client cannot read")
