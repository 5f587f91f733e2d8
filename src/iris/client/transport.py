"""Makes Connect unary calls to a controller and turns Connect errors into `iris.core.errors` types.

Why not the generated `ControllerServiceClientSync`: importing `connectrpc`'s client stack costs
about 130 ms, three times a whole `iris job run --no-wait`. A unary Connect call is one HTTP POST of
the binary request to `/<service>/<Method>`: 200 carries the binary response, any other status a
JSON body `{"code": …, "message": …}`. That much fits on the standard library's `http.client` with
a kept-alive connection, so the SDK and the CLI both start fast and stay fast in a submit loop.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from typing import TypeVar
from urllib.parse import urlsplit

from google.protobuf.message import DecodeError, Message

from iris.core import errors

SERVICE = "iris.v1.ControllerService"
_M = TypeVar("_M", bound=Message)

# Connect code name -> the typed error the SDK raises. Codes not listed keep their name on a plain
# IrisError, so nothing the server says is lost.
_ERRORS: dict[str, type[errors.IrisError]] = {
    cls.code: cls
    for cls in (
        errors.InvalidArgument,
        errors.NotFound,
        errors.AlreadyExists,
        errors.PermissionDenied,
        errors.FailedPrecondition,
        errors.Unavailable,
        errors.Unauthenticated,
    )
}
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
    """The typed error for a Connect error code (`not_found` → NotFound, …)."""
    cls = _ERRORS.get(code)
    if cls is not None:
        return cls(message)
    err = errors.IrisError(message)
    err.code = code
    return err


def unreachable(url: str, reason: str) -> errors.Unavailable:
    return errors.Unavailable(
        f"cannot reach the Iris controller at {url} ({reason}); start one with "
        "`iris cluster start --local`, or point at a running one with --controller URL or IRIS_CONTROLLER"
    )


class ConnectTransport:
    """One controller endpoint; each thread that calls it gets its own kept-alive connection."""

    def __init__(self, url: str, token: str | None = None, timeout: float = 30.0):
        parts = urlsplit(url if "://" in url else f"http://{url}")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise errors.InvalidArgument(f"controller URL {url!r} is not understood; use http://HOST:PORT")
        self.url = f"{parts.scheme}://{parts.netloc}{parts.path.rstrip('/')}"
        self._scheme = parts.scheme
        self._host = parts.hostname
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._prefix = parts.path.rstrip("/")
        self._timeout = timeout
        self._headers = {
            "Content-Type": "application/proto",
            "Connect-Protocol-Version": "1",
            "User-Agent": "iris-client",
        }
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._local = threading.local()

    def call(self, method: str, request: Message, response_type: type[_M]) -> _M:
        """Calls `method` (e.g. "LaunchJob") and returns its decoded response or raises a typed error."""
        body = request.SerializeToString()
        path = f"{self._prefix}/{SERVICE}/{method}"
        status, headers, payload = self._post(path, body)
        if headers.get("content-encoding", "identity") not in ("identity", ""):
            payload = _decompress(headers["content-encoding"], payload)
        if status != 200:
            raise self._error(status, headers, payload)
        try:
            return response_type.FromString(payload)
        except DecodeError as exc:
            raise errors.IrisError(f"{self.url} answered {method} with a body that is not a {response_type.__name__}: {exc}") from None

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def _connection(self) -> tuple[http.client.HTTPConnection, bool]:
        """The calling thread's connection, and whether it has served a request before."""
        conn = getattr(self._local, "conn", None)
        if conn is not None and time.monotonic() - self._local.last_used < _IDLE_RECONNECT_S:
            return conn, True
        if conn is not None:
            conn.close()
        cls = http.client.HTTPSConnection if self._scheme == "https" else http.client.HTTPConnection
        conn = cls(self._host, self._port, timeout=self._timeout)
        self._local.conn = conn
        return conn, False

    def _post(self, path: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
        for attempt in (0, 1):
            conn, reused = self._connection()
            try:
                conn.request("POST", path, body, self._headers)
                resp = conn.getresponse()
                payload = resp.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as exc:
                self.close()
                # A kept-alive connection the server had already closed: nothing was processed, so
                # one retry on a fresh connection is safe. A fresh connection failing is real.
                if reused and attempt == 0:
                    continue
                raise unreachable(self.url, _describe(exc)) from None
            except (OSError, http.client.HTTPException) as exc:
                self.close()
                raise unreachable(self.url, _describe(exc)) from None
            self._local.last_used = time.monotonic()
            if resp.will_close:
                self.close()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, payload
        raise AssertionError("unreachable")  # pragma: no cover

    def _error(self, status: int, headers: dict[str, str], payload: bytes) -> errors.IrisError:
        code, message = _HTTP_CODES.get(status, "unknown"), ""
        if headers.get("content-type", "").startswith("application/json"):
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


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, http.client.RemoteDisconnected):
        return "the connection closed without an answer"
    text = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    return text


def _decompress(encoding: str, payload: bytes) -> bytes:
    if encoding == "gzip":
        import gzip

        return gzip.decompress(payload)
    raise errors.IrisError(f"the controller answered with content-encoding {encoding!r}, which this client cannot read")
