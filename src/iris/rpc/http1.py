"""Sends one HTTP/1.1 request at a time over a kept-alive socket and decides where each answer ends.

It frames a request (one POST with a Content-Length body) and reads an answer whose end is given by
Content-Length, by chunked transfer coding, or by the server closing the connection: the part of
HTTP a Connect unary call uses, and no more. Every answer is bounded: its head in size, its body in
size and, once the head has come, in total time, so a server that trickles, lies about a length or
never stops sending is an error rather than a hang or a client out of memory.

Why not the standard library's `http.client`: importing it imports `email` (for its header parser)
and `ssl`, about 14 ms on a 2-core machine, where `iris job run --no-wait` has a budget of about
30 ms in all (three times a bare `python -c pass`). The libraries measured on the same machine cost
more still to import: `h11` 17 ms, `pyqwest` 13 ms. This module imports the C module `_socket`
alone: the `socket` module around it builds its enums of address families and flags when imported,
about 3 ms of CPU against half a millisecond for `_socket` (each figure the least of ten fresh
processes). Plain connections need nothing of it but `create_connection`'s loop over the addresses,
written out below; `socket` and `ssl` are imported only when a connection is made to an https URL.
"""

from __future__ import annotations

import _socket
import time

MAX_HEAD_BYTES = 64 * 1024
_RECV = 256 * 1024
_JOIN_BELOW = 64 * 1024
_NO_BODY = (204, 304)
_HEADS_KEPT = 32  # request heads a connection remembers (one per method and token in practice)


class Closed(ConnectionResetError):
    """The server closed the connection before sending any byte of an answer."""

    def __init__(self) -> None:
        super().__init__("the connection closed before an answer")


class Incomplete(ConnectionError):
    """The server closed the connection in the middle of an answer."""

    def __init__(self) -> None:
        super().__init__("the connection closed in the middle of an answer")


class BadAnswer(OSError):
    """What the server sent is not an HTTP/1.x answer."""


class BadHeader(ValueError):
    """A request header that cannot be sent (a line break or NUL byte would split the head)."""


class TooLarge(Exception):
    """An answer's body is (or declares that it is) larger than the caller accepts."""

    def __init__(self, size: int):
        super().__init__(f"an answer body of {size} bytes or more")
        self.size = size


class Answer:
    """An answer's status and head; `body` reads what follows it."""

    def __init__(self, conn: Connection, status: int, headers: dict[str, str], will_close: bool):
        self._conn = conn
        self.status = status
        self.headers = headers  # names lower-cased; repeated ones joined with ", "
        self.will_close = will_close  # the connection cannot carry another request after this answer

    def body(self, max_bytes: int, deadline: float) -> bytes:
        """The whole body: TooLarge past `max_bytes`, TimeoutError past the monotonic `deadline`."""
        conn = self._conn
        if self.status in _NO_BODY or 100 <= self.status < 200:
            return b""
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            return conn.read_chunked(max_bytes, deadline)
        length = self.headers.get("content-length")
        if length is not None:
            if not length.strip().isdigit():
                raise BadAnswer(f"the answer's content-length {length[:40]!r} is not a number")
            size = int(length)
            if size > max_bytes:
                raise TooLarge(size)
            return conn.read_exactly(size, deadline)
        return conn.read_to_close(max_bytes, deadline)


class Connection:
    """One connection to HOST:PORT (TLS-wrapped for https), opened on the first request."""

    def __init__(self, host: str, port: int, timeout: float, tls: bool = False):
        self.host = host
        self.port = port
        self.timeout = timeout
        self.tls = tls
        self.sock: _socket.socket | None = None
        self._buffer = bytearray()
        self._heads: dict[tuple, bytes] = {}  # (method, path, headers) -> the head without its length
        self._timeout_text = f"no whole answer within {timeout:g} s"
        shown = f"[{host}]" if ":" in host else host
        self._host_header = shown if port == (443 if tls else 80) else f"{shown}:{port}"

    def connect(self) -> None:
        # getaddrinfo encodes a str host with the `idna` codec, whose first use imports `stringprep`
        # and `unicodedata` (a few ms); an ASCII name passed as bytes skips that.
        name = self.host.encode("ascii") if self.host.isascii() else self.host
        sock: _socket.socket
        if self.tls:
            import socket
            import ssl

            sock = socket.create_connection((name, self.port), self.timeout)  # type: ignore[arg-type]
            try:
                sock.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
                sock = ssl.create_default_context().wrap_socket(sock, server_hostname=self.host)
            except BaseException:
                sock.close()
                raise
        else:
            sock = _connect(name, self.port, self.timeout)
        self.sock = sock
        self._buffer.clear()

    def close(self) -> None:
        sock, self.sock = self.sock, None
        if sock is not None:
            sock.close()

    def request(self, method: str, path: str, body: bytes, headers: dict[str, str]) -> Answer:
        """Sends the request and waits for the answer's head (each send and read: the socket timeout)."""
        head = self._head(method, path, headers) + b"Content-Length: %d\r\n\r\n" % len(body)
        if self.sock is None:
            self.connect()
        assert self.sock is not None
        if len(body) < _JOIN_BELOW:  # one send: a small request leaves in one packet
            self.sock.sendall(head + body)
        else:  # no copy of a large body (a workspace upload)
            self.sock.sendall(head)
            self.sock.sendall(body)
        while True:
            answer = self._read_head()
            if not 100 <= answer.status < 200:  # an interim answer (100 Continue) precedes the real one
                return answer

    def _head(self, method: str, path: str, headers: dict[str, str]) -> bytes:
        """The request's head up to its Content-Length, built and checked once per method, path and
        headers: a submit loop sends the same head again and again, and building it cost about as
        much of the client's CPU as encoding the request."""
        key = (method, path, tuple(headers.items()))
        head = self._heads.get(key)
        if head is None:
            lines = [f"{method} {path} HTTP/1.1", f"Host: {self._host_header}"]
            for name, value in headers.items():
                if any(c in value for c in "\r\n\0") or any(c in name for c in "\r\n\0: "):
                    raise BadHeader(f"the {name!r} header holds a line break or NUL byte; it cannot be sent")
                lines.append(f"{name}: {value}")
            head = ("\r\n".join(lines) + "\r\n").encode("latin-1")
            if len(self._heads) >= _HEADS_KEPT:
                self._heads.clear()
            self._heads[key] = head
        return head

    def _read_head(self) -> Answer:
        buffer = self._buffer
        while True:
            end = buffer.find(b"\r\n\r\n")
            if end >= 0:
                break
            if len(buffer) > MAX_HEAD_BYTES:
                raise BadAnswer(f"the answer's head is longer than {MAX_HEAD_BYTES} bytes")
            if not self._recv(None):
                raise Closed() if not buffer else Incomplete()
        lines = bytes(buffer[:end]).decode("latin-1").split("\r\n")
        del buffer[: end + 4]
        version, _, rest = lines[0].partition(" ")
        code = rest[:3]
        if not version.startswith("HTTP/1.") or not code.isdigit():
            raise BadAnswer(f"the server did not answer in HTTP/1.x: {lines[0][:80]!r}")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep:
                raise BadAnswer(f"the answer holds a header line without a colon: {line[:80]!r}")
            key = name.strip().lower()
            headers[key] = f"{headers[key]}, {value.strip()}" if key in headers else value.strip()
        framed = "chunked" in headers.get("transfer-encoding", "").lower() or "content-length" in headers
        tokens = {t.strip().lower() for t in headers.get("connection", "").split(",")}
        will_close = "close" in tokens or (version == "HTTP/1.0" and "keep-alive" not in tokens)
        will_close = will_close or not (framed or int(code) in _NO_BODY)
        return Answer(self, int(code), headers, will_close)

    def _recv(self, deadline: float | None) -> int:
        """Reads what the socket has into the buffer; returns how many bytes came (0: closed)."""
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(self._timeout_text)
        assert self.sock is not None
        data = self.sock.recv(_RECV)
        self._buffer += data
        return len(data)

    def read_exactly(self, size: int, deadline: float) -> bytes:
        while len(self._buffer) < size:
            if not self._recv(deadline):
                raise Incomplete()
        return self._take(size)

    def read_chunked(self, max_bytes: int, deadline: float) -> bytes:
        parts: list[bytes] = []
        total = 0
        while True:
            line = self._line(deadline)
            size_text = line.split(";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise BadAnswer(f"the answer's chunk size {size_text[:40]!r} is not a number") from None
            if size == 0:
                while self._line(deadline):  # trailer fields, up to the empty line
                    pass
                return b"".join(parts)
            total += size
            if total > max_bytes:
                raise TooLarge(total)
            parts.append(self.read_exactly(size, deadline))
            if self._line(deadline):
                raise BadAnswer("a chunk of the answer does not end where its size says")

    def read_to_close(self, max_bytes: int, deadline: float) -> bytes:
        while len(self._buffer) <= max_bytes:
            if not self._recv(deadline):
                return self._take(len(self._buffer))
        raise TooLarge(len(self._buffer))

    def _line(self, deadline: float) -> str:
        while True:
            end = self._buffer.find(b"\r\n")
            if end >= 0:
                line = self._take(end + 2)[:-2]
                return line.decode("latin-1")
            if len(self._buffer) > MAX_HEAD_BYTES:
                raise BadAnswer("a chunk header of the answer is too long")
            if not self._recv(deadline):
                raise Incomplete()

    def _take(self, size: int) -> bytes:
        out = bytes(self._buffer[:size])
        del self._buffer[:size]
        return out


def _connect(host: bytes | str, port: int, timeout: float) -> _socket.socket:
    """A TCP connection to the first of the host's addresses that accepts one, as
    `socket.create_connection` makes it (the first address's error when none does), with Nagle off."""
    errors: list[OSError] = []
    for family, kind, proto, _, address in _socket.getaddrinfo(host, port, 0, _socket.SOCK_STREAM):
        sock = _socket.socket(family, kind, proto)
        try:
            sock.settimeout(timeout)
            sock.connect(address)
            sock.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
            return sock
        except OSError as exc:
            sock.close()
            errors.append(exc)
        except BaseException:
            sock.close()
            raise
    if errors:
        raise errors[0]
    raise OSError(f"no address found for {host!r}")
