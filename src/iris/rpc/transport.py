"""Makes Connect unary calls to a controller and turns its answers into messages or typed errors:
the one transport the SDK (and so the CLI) and the federation peer client share.

It speaks HTTP/1.1 through the standard library's `http.client`: the generated Connect client with
its HTTP client costs about 130 ms to import and `httpx` about 250 ms, against a budget for `iris job
run --no-wait` of three times a bare `python -c pass`. `http.client` is imported when the first call
is made, so a command that fails its checks before any request pays nothing for it. Each call opens
its connection through `_new_connection`, the one place that decides how the controller is reached
(TCP, or TLS for an https URL). TLS verifies the server's certificate against the system's trust
store, or against the CA file a `ClientTls` names, and presents a client certificate when one is
given (for a controller that asks for one, `tls.client_ca` in its config); a certificate that does
not verify is an unreachable controller whose reason says which check failed (an unknown CA, a
certificate issued for another host name) and where to name the CA.

A unary Connect call is one POST of the request to `/<service>/<Method>`: 200 carries the response,
any other status a JSON body `{"code": …, "message": …}`, turned into the `iris.core.errors` type
for that code. Each calling thread keeps its own connection alive between calls, so a submit loop
pays one round trip per call, not a connection setup. A kept-alive connection the server closed
while idle is retried once on a fresh one (the server processed nothing); a fresh connection
failing is real, and raises whatever `on_unreachable` makes of it. An answer 429 with a
`retry-after` header (a user's submit rate, see `iris.controller.api.submit_rate`) is waited out and
the call sent again, for at most `MAX_RETRY_WAIT_S` in all.

On the controller's own host calls go through the controller's Unix socket
(`<state_dir>/controller.sock`), where the kernel tells the controller who is calling (see
`iris.controller.auth.callers`): a call without a token is then its caller's account, where over
TCP it would be anonymous, and each account's connections are its own share of the controller's.
The first call to a loopback URL asks it for GetClusterInfo, which names the controller's state
directory and pid; when that directory holds a socket whose server (`SO_PEERCRED`) is that very
process, every later call of the transport goes through it, and otherwise over TCP as before. That
costs one round trip per transport, and needs nothing written anywhere but the socket itself.

An answer is bounded: its body (and what it decompresses to) may be at most `max_answer_bytes`,
and once its head has come the whole body must come within `timeout`, not merely each read, so a server that
trickles a byte at a time, declares a huge body or answers a compression bomb is an error, not a
hang or a client out of memory.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from iris.core import errors

TYPE_CHECKING = False  # typing's own constant costs `import typing` (4 ms) on the CLI's submit path
if TYPE_CHECKING:
    from collections.abc import Callable
    from http.client import HTTPConnection, HTTPResponse
    from ssl import SSLContext
    from typing import Any, TypeVar

    from google.protobuf.message import Message

    _M = TypeVar("_M", bound=Message)

SERVICE = "iris.v1.ControllerService"
SOCKET_NAME = "controller.sock"  # the controller's Unix socket, in its state directory
_UNKNOWN = object()  # a transport's socket before a call has looked for it
# The longest path bound or connected as it is: `sockaddr_un` holds 108 bytes with its NUL.
_MAX_UNIX_PATH = 100

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
# The longest one call waits in all for answers that say to retry later (429 with retry-after).
MAX_RETRY_WAIT_S = 300.0
# The largest answer body a call accepts, before and after decompression.
MAX_ANSWER_BYTES = 256 * 1024 * 1024
_READ_BYTES = 256 * 1024  # the most one read of an answer's body asks for


# The start of an unreachable controller's reason when TLS refused the connection: the hint to
# start a controller does not apply then.
TLS_REASON = "TLS: "


@dataclass(frozen=True)
class ClientTls:
    """How a client's TLS connections check the server, and what certificate they present.

    `ca`: the certificates that may vouch for the server's (a private CA's, or the server's own),
    as a PEM file or as PEM text (what a task finds in $IRIS_CA); "" trusts the system's store.
    `certificate` and `key`: this client's certificate (chain) and its private key files, for a
    server that asks for one; `key` "" when `certificate` holds it.
    """

    ca: str = ""
    certificate: str = ""
    key: str = ""

    def context(self) -> SSLContext:
        """An `ssl` context for client connections; a file that cannot be read or used is a clear error."""
        import ssl

        text = self._ca_text()
        try:
            context = ssl.create_default_context(cafile=None if text else self.ca or None, cadata=text)
        except (OSError, ssl.SSLError) as exc:
            what = "the CA certificates given as PEM text" if text else f"the CA file {self.ca}"
            raise errors.InvalidArgument(
                f"{what} cannot be read as PEM certificates ({_ssl_words(exc)}); check --ca, $IRIS_CA or the"
                " `ca:` that names it"
            ) from None
        if self.ca:
            # A certificate in the CA file vouches on its own, whether or not it is a root: an
            # intermediate CA, or the server's own certificate (pinned), may be what one trusts.
            context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
        if self.certificate:
            try:
                context.load_cert_chain(self.certificate, self.key or None)
            except (OSError, ssl.SSLError) as exc:
                raise errors.InvalidArgument(
                    f"the client certificate {self.certificate}"
                    + (f" and key {self.key}" if self.key else "")
                    + f" cannot be used ({_ssl_words(exc)}); check --client-cert and --client-key"
                ) from None
        return context

    def pem(self) -> tuple[bytes | None, bytes | None, bytes | None]:
        """The CA, certificate and key files' bytes (None where not set), for clients that take PEM
        rather than an `ssl` context; a file that cannot be read is a clear error."""

        def read(path: str, what: str) -> bytes | None:
            if not path:
                return None
            try:
                with open(path, "rb") as f:
                    return f.read()
            except OSError as exc:
                raise errors.InvalidArgument(f"the {what} {path} cannot be read: {exc.strerror or exc}") from None

        certificate = read(self.certificate, "client certificate")
        key = read(self.key, "client key") if self.key else certificate
        text = self._ca_text()
        return text.encode() if text else read(self.ca, "CA file"), certificate, key if certificate else None

    def _ca_text(self) -> str | None:
        """`ca` when it is PEM text rather than a file's path."""
        return self.ca if self.ca.lstrip().startswith("-----BEGIN") else None


def tls_refusal(message: str) -> str | None:
    """The reason, in the words `_describe` gives it, when `message` (a failed call's, from the
    generated Connect client's HTTP client) says TLS refused the connection; None otherwise."""
    _, found, detail = message.partition("invalid peer certificate: ")
    if found:
        detail = detail.split(")", 1)[0].strip()
        if "NotValidForName" in detail or "not valid for name" in detail:
            return (
                f"{TLS_REASON}the server's certificate is not for this address ({detail}); use the host name"
                " the certificate was issued for in the URL, or give the server a certificate naming this one"
            )
        return (
            f"{TLS_REASON}the server's certificate is not trusted ({detail}): its CA is unknown here; name the CA"
            " that signed it with --ca FILE or $IRIS_CA"
        )
    for alert in ("CertificateRequired", "BadCertificate", "UnknownCA"):
        if alert in message:
            return (
                f"{TLS_REASON}the server refused this client's certificate, or wanted one ({alert}); present one"
                " its client CA signed with --client-cert FILE and --client-key FILE"
            )
    return None


def _ssl_words(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or getattr(exc, "reason", None) or str(exc) or type(exc).__name__


class _TooLarge(Exception):
    """An answer's body is (or declares that it is) larger than the call accepts."""

    def __init__(self, size: int):
        super().__init__(f"an answer body of {size} bytes or more")
        self.size = size


def error_from_code(code: str, message: str) -> errors.IrisError:
    """The typed error for a Connect error code (`not_found` → NotFound, …), by the one table."""
    return errors.error_for_code(code, message)


def repeated_page_token(what: str, token: str) -> str:
    """The error message for a paged answer whose next-page token came before: following it would
    fetch the same pages for ever."""
    return (
        f"the controller answered {what} with page token {token[:80]!r} a second time, so its pages do not"
        " advance; the controller is misbehaving: upgrade or restart it"
    )


def unreachable(url: str, reason: str) -> errors.Unavailable:
    """The error for a controller that does not answer at all, saying how to get one (or, when TLS
    refused it, what failed)."""
    if reason.startswith(TLS_REASON):
        return errors.Unavailable(f"cannot reach the Iris controller at {url}: {reason}")
    return errors.Unavailable(
        f"cannot reach the Iris controller at {url} ({reason}); start one with "
        "`iris cluster start --local`, or point at a running one with --controller URL or IRIS_CONTROLLER"
    )


class ConnectTransport:
    """One controller endpoint; each thread that calls it gets its own kept-alive connection."""

    def __init__(
        self,
        url: str,
        token: str | None = None,
        timeout: float = 30.0,
        on_unreachable: Callable[[str, str], errors.IrisError] = unreachable,
        max_answer_bytes: int = MAX_ANSWER_BYTES,
        local_socket: bool | str = True,
        tls: ClientTls | None = None,
    ):
        """`local_socket` false: never look for the controller's Unix socket (a probe of who answers);
        a path: call through that socket, known to be the controller's (from its config). `tls`: how
        an https URL's server is checked (None: against the system's store, no client certificate)."""
        self._scheme, self._host, self._port, self._prefix = parse_url(url)
        text = url.strip().rstrip("/")
        self.url = text if "://" in text else f"http://{text}"
        self._timeout = timeout
        self._max_answer = max_answer_bytes
        self._on_unreachable = on_unreachable  # (url, reason) -> what a failed connection raises
        self.token = token
        self._headers = {"Connect-Protocol-Version": "1", "User-Agent": "iris-client"}
        self._local = threading.local()
        self._lock = threading.Lock()
        self._open: set[HTTPConnection] = set()  # every thread's, for close()
        # The controller's Unix socket once found; None: calls go over TCP.
        self._socket: object = local_socket if isinstance(local_socket, str) else None
        if local_socket is True and _may_be_here(self._scheme, self._host):
            self._socket = _UNKNOWN
        self._finding = threading.Lock()
        self._found = False  # whether `_socket` is one this transport found (not one it was given)
        self._tls = tls or ClientTls()
        self._tls_context: SSLContext | None = None  # made on the first https connection, then shared

    def call(self, method: str, request: Message, response_type: type[_M], token: str | None = None) -> _M:
        """Calls `method` (e.g. "LaunchJob") and returns its decoded response or raises a typed error;
        `token`, when given, is sent instead of the transport's own."""
        from google.protobuf.message import DecodeError

        payload = self._unary(method, request.SerializeToString(), "application/proto", token)
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

    def close(self) -> None:
        """Closes every thread's connection; a later call opens a new one."""
        with self._lock:
            conns, self._open = self._open, set()
        for conn in conns:
            conn.close()
        self._local.conn = None

    def _drop(self, conn: HTTPConnection) -> None:
        """Closes the calling thread's connection after a failure or a `Connection: close` answer."""
        conn.close()
        with self._lock:
            self._open.discard(conn)
        self._local.conn = None

    def _unary(self, method: str, body: bytes, content_type: str, token: str | None = None) -> bytes:
        """POSTs one encoded request; returns the 200 answer's body or raises the typed error of any other."""
        headers = {**self._headers, "Content-Type": content_type}
        token = token or self.token
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if self._socket is _UNKNOWN and not getattr(self._local, "finding", False):
            self._find_socket()
        waited = 0.0
        while True:
            status, answer, payload = self._post(f"{self._prefix}/{SERVICE}/{method}", body, headers)
            retry_after = answer.get("retry-after", "")
            if status != 429 or not retry_after.isdigit() or waited >= MAX_RETRY_WAIT_S:
                break
            # A limit on pace (a user's submit rate): wait as told, spread a little so that threads
            # told alike do not all come back at once, and send it again.
            pause = min(int(retry_after) + (time.monotonic_ns() % 500) / 1000, MAX_RETRY_WAIT_S - waited)
            time.sleep(pause)
            waited += pause
        encoding = answer.get("content-encoding") or "identity"
        if encoding != "identity":
            payload = _decompress(self.url, encoding, payload, self._max_answer)
        if status != 200:
            raise self._error(status, answer, payload)
        if not answer.get("content-type", "").startswith(content_type):
            # A controller answers in the encoding it was asked in; a web page here is another program.
            kind = answer.get("content-type", "").partition(";")[0] or "no content type"
            raise errors.Unavailable(
                f"no Iris controller answers at {self.url}: it answered {method} with {kind}, not {content_type}; "
                "check the address (--controller, $IRIS_CONTROLLER, --cluster or --config)"
            )
        return payload

    def _find_socket(self) -> None:
        """Looks for the controller's Unix socket (see the module docstring); from then on the
        calling thread's connection is to it when found; any other answer leaves the calls on TCP.
        A controller that does not answer at all raises as the call would, and is asked again."""
        with self._finding:  # one thread asks; the others wait for its answer
            if self._socket is not _UNKNOWN:
                return
            self._local.finding, self._local.unreached = True, False  # the question itself goes over TCP
            try:
                conn = self._socket_connection()
            except errors.IrisError:
                if self._local.unreached:
                    raise  # nothing listens (yet): the call fails as it would, and the next one asks again
                conn = None  # something answers, but not as a controller saying where it is
            finally:
                self._local.finding = False
            self._socket, self._found = (None, False) if conn is None else (conn.path, True)
        if conn is not None:
            old = getattr(self._local, "conn", None)
            if old is not None:
                self._drop(old)
            self._local.conn, self._local.last_used = conn, time.monotonic()
            with self._lock:
                self._open.add(conn)

    def _socket_connection(self):  # -> UnixConnection | None
        """A connection to the controller's Unix socket, when the URL's controller serves one here."""
        # JSON, not the protobuf runtime: this question is asked by every CLI command to a loopback URL.
        doc = self.call_json("GetClusterInfo", {})  # an error: `_find_socket` decides what it means
        state_dir, pid = doc.get("stateDir"), doc.get("pid")
        if not isinstance(state_dir, str) or not state_dir.startswith("/") or not isinstance(pid, int):
            return None
        conn = _unix_connection_class()(f"{state_dir.rstrip('/')}/{SOCKET_NAME}", self._host, self._port, self._timeout)
        try:
            conn.connect()
            served_by = peer_pid(conn.sock)
        except OSError:
            conn.close()
            return None
        if served_by != pid:  # another process's socket (or one of another pid namespace): not this controller
            conn.close()
            return None
        return conn

    @property
    def local_socket(self) -> str | None:
        """The controller's Unix socket this transport's calls go through; None: over TCP (or not yet known)."""
        return self._socket if isinstance(self._socket, str) else None

    def _new_connection(self) -> HTTPConnection:
        """A connection to the controller, not yet open (it connects on its first request): through
        its Unix socket once found, else TCP, or TLS for an https URL."""
        import http.client

        if isinstance(self._socket, str):
            return _unix_connection_class()(self._socket, self._host, self._port, self._timeout)

        if self._scheme == "https":
            if self._tls_context is None:
                self._tls_context = self._tls.context()
            return http.client.HTTPSConnection(self._host, self._port, timeout=self._timeout, context=self._tls_context)
        return _plain_connection_class()(self._host, self._port, timeout=self._timeout)

    def _connection(self) -> tuple[HTTPConnection, bool]:
        """The calling thread's connection, and whether it has served a request before."""
        conn = getattr(self._local, "conn", None)
        if (
            conn is not None
            and conn.sock is not None
            and time.monotonic() - self._local.last_used < _IDLE_RECONNECT_S
            and getattr(conn, "path", None) == self.local_socket  # not one opened before the socket was found
        ):
            return conn, True
        if conn is not None:
            self._drop(conn)
        conn = self._new_connection()
        self._local.conn = conn
        with self._lock:
            self._open.add(conn)
        return conn, False

    def _post(self, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        import http.client

        for attempt in (0, 1):
            conn, reused = self._connection()
            try:
                try:
                    conn.request("POST", path, body, headers)
                except ValueError as exc:  # a header value with a line break, say: nothing was sent
                    if isinstance(exc, OSError):  # a TLS failure is both
                        raise
                    self._drop(conn)
                    raise errors.InvalidArgument(f"a request header cannot be sent: {exc}") from None
                sock = conn.sock  # the answer is read through it, even once `conn` lets go of it
                answer = conn.getresponse()
                payload = self._read_body(answer, sock, time.monotonic() + self._timeout)
            except _TooLarge as exc:
                self._drop(conn)
                raise errors.IrisError(
                    f"{self.url} answered with a body of {exc.size} bytes or more; at most {self._max_answer} are accepted"
                ) from None
            except (ConnectionResetError, BrokenPipeError) as exc:  # RemoteDisconnected too: no byte came
                connected = conn.sock is not None
                self._drop(conn)
                if reused and attempt == 0:
                    continue  # the server dropped an idle connection: it processed nothing
                raise self._unreachable(exc, connected) from None
            except (OSError, http.client.HTTPException) as exc:
                connected = conn.sock is not None
                self._drop(conn)
                raise self._unreachable(exc, connected) from None
            except BaseException:
                # Ctrl-C (or any exception) in the middle of an exchange leaves the connection
                # holding half of it; the next call must start on a fresh one.
                self._drop(conn)
                raise
            self._local.last_used = time.monotonic()
            if answer.will_close:
                self._drop(conn)
            head: dict[str, str] = {}
            for name, value in answer.getheaders():
                key = name.lower()
                head[key] = f"{head[key]}, {value}" if key in head else value
            return answer.status, head, payload
        raise AssertionError("not reached")  # pragma: no cover

    def _read_body(self, answer: HTTPResponse, sock: Any, deadline: float) -> bytes:
        """The answer's whole body: `_TooLarge` past the bound, TimeoutError once `deadline` (monotonic)
        passes, however the server trickles it (each read waits at most what is left of the call's time)."""
        declared = answer.getheader("content-length")
        if declared is not None and not declared.strip().isdigit():
            declared = None  # http.client reads such an answer to the close
        if declared is not None and int(declared) > self._max_answer:
            raise _TooLarge(int(declared))
        parts: list[bytes] = []
        size = 0
        while True:
            left = deadline - time.monotonic()
            try:
                if left <= 0:
                    raise TimeoutError()
                if sock is not None:
                    sock.settimeout(left)
                part = answer.read1(min(_READ_BYTES, self._max_answer + 1 - size))
            except TimeoutError:
                raise TimeoutError(f"no whole answer within {self._timeout:g} s") from None
            if not part:
                break
            parts.append(part)
            size += len(part)
            if size > self._max_answer:
                raise _TooLarge(size)
        if declared is not None and not answer.chunked and size < int(declared):
            import http.client

            raise http.client.IncompleteRead(b"".join(parts), int(declared) - size)
        if sock is not None and not answer.will_close:
            sock.settimeout(self._timeout)  # for the next request's answer
        answer.close()  # read whole: the connection may carry the next request
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _unreachable(self, exc: Exception, connected: bool) -> errors.IrisError:
        """What a call raises for a controller it could not exchange with (see `on_unreachable`);
        `connected`: a connection was made (and the server then dropped or stalled the call)."""
        self._local.unreached = not connected
        if self._found and not connected:  # the controller went away, or came back elsewhere: the next call looks again
            self._socket, self._found = _UNKNOWN, False
        reason = _describe(exc)
        # A connection made, then closed before any answer (not one refused).
        dropped = isinstance(exc, ConnectionError) and not isinstance(exc, ConnectionRefusedError)
        if self._scheme == "http" and self.local_socket is None and dropped:
            reason += "; a server that speaks only TLS closes a plain connection so: if this one does, use https://"
        elif self._scheme == "https" and not self._tls.certificate and dropped:
            # TLS 1.3 settles the client's certificate after the handshake: a server that wants one
            # and got none simply closes the connection.
            reason = (
                f"{TLS_REASON}{reason}, as a server that wants a client certificate and got none closes it;"
                " if this one does, present one with --client-cert FILE and --client-key FILE"
                " ($IRIS_CLIENT_CERT, $IRIS_CLIENT_KEY)"
            )
        return self._on_unreachable(self.url, reason)

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
            if payload and code not in ("unauthenticated", "permission_denied", "unavailable"):
                # Not a Connect error document (a real controller sends one with every error but a bare
                # 404 for a call it lacks): another program answers at this address.
                kind = headers.get("content-type", "").partition(";")[0] or "no content type"
                return errors.Unavailable(
                    f"no Iris controller answers at {self.url}: it answered HTTP {status} ({kind}); check the "
                    "address (--controller, $IRIS_CONTROLLER, --cluster or --config)"
                )
            text = payload.decode("utf-8", "replace").strip()
            message = f"the controller at {self.url} answered HTTP {status}" + (f": {text[:200]}" if text else "")
        return error_from_code(code, message)


_PLAIN: list[type] = []  # the class below, made on first use: importing this module imports no http.client


def _plain_connection_class() -> type[HTTPConnection]:
    if _PLAIN:
        return _PLAIN[0]
    import http.client
    import socket

    class PlainConnection(http.client.HTTPConnection):
        """http.client's connection, with the host looked up as ASCII bytes where it is ASCII: a str
        host is encoded with the `idna` codec, whose first use imports `stringprep` and `unicodedata`
        (a few ms of every CLI command)."""

        def connect(self) -> None:
            host = self.host.encode("ascii") if self.host.isascii() else self.host
            self.sock = socket.create_connection((host, self.port), self.timeout)  # type: ignore[arg-type]
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    _PLAIN.append(PlainConnection)
    return PlainConnection


class unix_address:  # noqa: N801 (used as a context manager, like a function)
    """`with unix_address(path) as address:` the address to bind or connect a Unix socket at `path`
    by: the path itself, or one too long for `sockaddr_un` reached through a descriptor of its
    folder (`/proc/self/fd/N/NAME`), closed on leaving."""

    def __init__(self, path: str):
        self.path = path
        self._fd: int | None = None

    def __enter__(self) -> str:
        if len(self.path.encode()) <= _MAX_UNIX_PATH:
            return self.path
        import os

        folder, _, name = self.path.rpartition("/")
        self._fd = os.open(folder or "/", os.O_PATH | os.O_DIRECTORY)
        return f"/proc/self/fd/{self._fd}/{name}"

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            import os

            os.close(self._fd)
            self._fd = None


def _may_be_here(scheme: str, host: str) -> bool:
    """Whether a controller URL may name one on this host, whose socket to look for: plain HTTP to
    a loopback address (a controller's socket serves this host alone, and TLS is for remote ones)."""
    if scheme != "http":
        return False
    if host == "localhost" or host == "::1":
        return True
    first, _, rest = host.partition(".")
    return first == "127" and rest.count(".") == 2 and rest.replace(".", "").isdigit()


def peer_pid(sock) -> int:
    """The pid of the process at the other end of a Unix socket, as the kernel recorded it."""
    import socket
    import sys

    credentials = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)  # pid, uid, gid: three ints
    return int.from_bytes(credentials[:4], sys.byteorder, signed=True)


_UnixConnection: list[type] = []


def _unix_connection_class() -> type:
    """`UnixConnection`, made on first use: importing this module imports no http.client."""
    if _UnixConnection:
        return _UnixConnection[0]
    import http.client
    import socket

    class UnixConnection(http.client.HTTPConnection):
        """A connection to the controller's Unix socket at `path`, whose requests name HOST:PORT
        (the controller's URL) as their Host."""

        def __init__(self, path: str, host: str, port: int, timeout: float):
            super().__init__(host, port, timeout=timeout)
            self.path = path

        def connect(self) -> None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.settimeout(self.timeout)
                with unix_address(self.path) as address:
                    sock.connect(address)
            except BaseException:
                sock.close()
                raise
            self.sock = sock

    _UnixConnection.append(UnixConnection)
    return UnixConnection


def parse_url(url: str) -> tuple[str, str, int, str]:
    """(scheme, host, port, path prefix) of `http://HOST:PORT[/prefix]`; a bare HOST:PORT means http."""
    scheme, sep, rest = url.strip().partition("://")
    if not sep:
        scheme, rest = "http", url.strip()
    scheme = scheme.lower()
    netloc, slash, path = rest.partition("/")
    host, port_text = netloc, ""
    if netloc.startswith("["):  # [::1]:10000
        host, closed, tail = netloc[1:].partition("]")
        port_text = tail[1:] if tail.startswith(":") else ""
        host = host if closed and (not tail or tail.startswith(":")) else ""
    elif netloc.count(":") == 1:
        host, _, port_text = netloc.partition(":")
    if scheme not in ("http", "https") or not host or (port_text and not port_text.isdigit()) or "@" in netloc:
        raise errors.InvalidArgument(f"controller URL {url!r} is not understood; use http://HOST:PORT")
    port = int(port_text) if port_text else (443 if scheme == "https" else 80)
    if not 0 < port < 65536:
        raise errors.InvalidArgument(
            f"controller URL {url!r} is not understood: a port is 1 to 65535; use http://HOST:PORT"
        )
    return scheme, host, port, ("/" + path).rstrip("/") if slash else ""


def _describe(exc: BaseException) -> str:
    """A failed connection's cause in a few words."""
    import http.client
    import socket

    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    import ssl

    if isinstance(exc, ssl.SSLCertVerificationError):
        return _untrusted(exc)
    if isinstance(exc, ssl.SSLError):
        return _tls_failure(exc)
    if isinstance(exc, TimeoutError):
        return str(exc) or "timed out"
    if isinstance(exc, socket.gaierror):
        return f"unknown host: {exc.strerror}"
    if isinstance(exc, http.client.IncompleteRead):
        return "the connection closed in the middle of an answer"
    if isinstance(exc, http.client.RemoteDisconnected):
        return "the connection closed before an answer"
    if isinstance(exc, http.client.BadStatusLine):
        return f"the server did not answer in HTTP/1.x: {str(exc)[:80]!r}"
    if isinstance(exc, http.client.HTTPException):
        return f"the answer could not be read: {type(exc).__name__}: {str(exc)[:80]}"
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


def _untrusted(exc) -> str:  # exc: ssl.SSLCertVerificationError
    """Why the server's certificate was refused, and what to do about it."""
    message = (exc.verify_message or exc.reason or "certificate verify failed").rstrip(".")
    if message.startswith("Hostname mismatch") or message.startswith("IP address mismatch"):
        return (
            f"{TLS_REASON}the server's certificate is not for this address ({message}); use the host name the"
            " certificate was issued for in the URL, or give the server a certificate naming this one"
        )
    return (
        f"{TLS_REASON}the server's certificate is not trusted ({message}): its CA is unknown here; name the CA"
        " that signed it with --ca FILE, $IRIS_CA, `ca:` in clusters.yaml, or `ca:` of a peer in the cluster config"
    )


def _tls_failure(exc) -> str:  # exc: ssl.SSLError
    """A TLS handshake that failed for another reason than the server's certificate."""
    reason = str(exc.reason or exc)
    if reason in ("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG"):
        return f"{TLS_REASON}the server does not speak TLS at this address ({reason}); use http:// for it"
    if "CERTIFICATE_REQUIRED" in reason or "BAD_CERTIFICATE" in reason or "UNKNOWN_CA" in reason:
        return (
            f"{TLS_REASON}the server refused this client's certificate, or wanted one ({reason}); present one its"
            " client CA signed with --client-cert FILE and --client-key FILE"
        )
    return f"{TLS_REASON}the handshake failed ({reason})"


def _decompress(url: str, encoding: str, payload: bytes, limit: int) -> bytes:
    """A gzip answer's body, at most `limit` bytes of it; a bad or oversized one is a clear error."""
    if encoding != "gzip":
        raise errors.IrisError(f"{url} answered with content-encoding {encoding!r}, which this client cannot read")
    import zlib

    inflater = zlib.decompressobj(wbits=31)  # gzip framing
    try:
        out = inflater.decompress(payload, limit + 1)
    except zlib.error as exc:
        raise errors.IrisError(f"{url} answered with a gzip body that cannot be read: {exc}") from None
    if len(out) > limit:
        raise errors.IrisError(f"{url} answered with a gzip body of more than {limit} bytes once unpacked")
    if not inflater.eof:
        raise errors.IrisError(f"{url} answered with a gzip body that is cut short")
    return out
