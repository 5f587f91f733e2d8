"""The `/proxy/t/…` surface: capability URLs relayed to a task's serving endpoint, and the blind
relay a parent cluster runs for its peers' URLs.

`/proxy/t/<token>/<name>/<path>` is served here: the token is checked against this cluster's key
for endpoint `name`, the endpoint is looked up among live attempts, and the request is streamed
to it. `/proxy/t/cluster=<peer>/<rest>` is relayed to that configured peer's `/proxy/t/<rest>`
without reading the token: the cluster that minted it is the only one that judges it. A relayed
path with `.` or `..` segments is refused, so a relay can never reach past the peer's `/proxy/t/`.
The path is relayed as the client sent it (`raw_path`), percent-encoding and all: relaying the
decoded one would turn an app's `%2F`, `%3F` or `%23` into a separator, a query or a fragment, so
the app (or the peer) would be asked for another path than the client asked for.

Bodies are streamed both ways (httpx for HTTP, `websockets` for WebSockets): a request body is
forwarded as it arrives and a response (chunked, server-sent events, a large download) is passed
on chunk by chunk, so no body is held whole in the controller. `Authorization` and `Cookie` are
dropped before forwarding: the capability URL is the credential, and the cluster's own credentials
never reach a served app. Hop-by-hop headers, and any header a `Connection` header names, are not
passed on in either direction (RFC 9110 §7.6.1). An unknown or ended endpoint answers 404 at once.

An app knows nothing of the path it is served under, so a redirect it answers with (`Location:
/login`, or its own `http://127.0.0.1:8888/login`) would send the browser out of the capability URL
to the controller's own `/login`. Such a `Location` is rewritten to the same place under the URL the
client used, and a relative one passes unchanged while it stays under that URL. A redirect that
leaves the endpoint (another site, or a relative path climbing out of its capability URL) is never
followed nor passed on: the relay answers 502 saying so, so a capability URL cannot be made an open
redirect to anywhere. Through a `cluster=` relay, the peer has already rewritten it under its own
`/proxy/t/`, and the relay puts its tag back in front.
A WebSocket's subprotocols are negotiated with the app (the client offers, the app picks), and the
code and reason either side closes with reach the other.

The relay keeps no state between requests: its HTTP client stores no cookie (httpx's client keeps
a jar by default, and one app's `Set-Cookie` was then sent with later requests to every endpoint on
the same host, so another user's app received it), and `Cookie` and `Set-Cookie` pass neither way.

Nothing one caller relays may take the controller from others (`RelayLimits`): a relayed request
holds two descriptors (the client's connection and the app's) for as long as the app takes, so each
client (as the connection guard counts them: an address, or a uid on loopback) holds at most
`controller.proxy_max_per_caller` relayed requests and WebSockets at once, each endpoint at most
`controller.proxy_max_per_endpoint`, and all of them together at most a quarter of the controller's
connections, the rest being the API's; past a bound, a request is answered 503 at once with
`Retry-After`, and its connection closed. An app that sends nothing for `controller.proxy_read_timeout`
is given up on (504 before its answer began; the connection is cut after).

httpx and `websockets` are imported by the first relayed request, not with this module: together
they are a tenth of the controller's start-up, and most clusters never relay anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.cookiejar
import itertools
from collections import Counter
from collections.abc import Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import unquote

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from iris.controller.api import endpoints
from iris.controller.auth import RELAYED_HEADER
from iris.controller.http.connections import caller_of, connection_limit
from iris.controller.tls import peer_tls
from iris.core.errors import InvalidArgument, IrisError, NotFound, Unauthenticated, Unavailable

if TYPE_CHECKING:
    import httpx

    from iris.controller.app import Controller
    from iris.rpc.transport import ClientTls

PREFIX = "/proxy/t/"
CLUSTER_TAG = "cluster="
METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
# `cluster=` tags one relayed URL may chain. A minted URL holds one; each hop strips one, so two
# clusters that are each other's peers would otherwise bounce one request between them once per tag
# in its path, a held connection on both sides per hop: thousands from one request.
MAX_RELAY_HOPS = 4
# The largest WebSocket message relayed from an endpoint, as uvicorn's default for the other
# direction: a message is held whole in the controller before it is passed on, so without a bound
# one served app could make the controller hold any amount. A larger one closes the socket (1009).
MAX_WS_MESSAGE_BYTES = 16 * 1024 * 1024
# Not forwarded in either direction: per-connection headers, and the caller's credentials.
HOP_HEADERS = frozenset(
    {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer", "transfer-encoding"}
    | {"upgrade", "host"}
)
# Forwarding headers are the client's word about itself, arriving at the app from the relay's
# loopback address, where apps commonly trust a proxy to have set them: the client may not set them.
FORWARDING_HEADERS = frozenset(
    {"forwarded", "x-forwarded-for", "x-forwarded-host", "x-forwarded-proto", "x-forwarded-port", "x-real-ip"}
)
STRIPPED_REQUEST_HEADERS = HOP_HEADERS | FORWARDING_HEADERS | {"authorization", "cookie", RELAYED_HEADER}
# Not passed back: headers by which a served page would act on the controller's whole origin, and
# CORS headers, which the relay sets itself for a sandboxed page's calls. A cookie would be set for
# the controller's host name, which browsers send to every port of that host (to other services
# there too), and it could never come back to the app: the relay drops `Cookie`.
STRIPPED_RESPONSE_HEADERS = HOP_HEADERS | {
    "set-cookie",
    "date",  # the controller's server sets its own; two make an invalid answer
    "service-worker-allowed",
    "clear-site-data",
    "access-control-allow-origin",
    "access-control-allow-credentials",
}
# The served page runs sandboxed in an opaque origin (see the module docstring): scripts, forms,
# dialogs and popups (sandboxed too) work; the controller's origin, its storage and its API do not.
PAGE_SANDBOX = (
    "content-security-policy",
    "sandbox allow-scripts allow-forms allow-modals allow-popups allow-downloads allow-pointer-lock",
)
SANDBOXED_ORIGIN = "null"


@dataclass(frozen=True, slots=True)
class Upstream:
    """Where one relayed request goes (`url`), and how the app's redirects map back: a `Location`
    under `origin` (the app's own address, or the peer's `/proxy/t/`) is moved under `mount`, the
    part of the client's path that names the endpoint (or the relay tag)."""

    url: str
    origin: str
    mount: str
    tls: ClientTls | None = None  # how an https peer is checked (a relay to a peer); None: plain

    def location(self, value: str, client_path: str) -> str | None:
        """`value`, an app's `Location`, under the URL the client used where it points at the app
        (its own address, with or without the scheme, or an absolute path); dot segments are
        resolved first, as the browser would against the app, so none climbs out of the mount. A
        relative one passes unchanged while it resolves (against `client_path`, the path the
        client asked for) to somewhere under the mount. None: it leaves the endpoint."""
        lowered, origin = value.lower(), self.origin.lower()
        rest = None
        for prefix in (origin, origin[len("http:") :] if origin.startswith("http://") else ""):
            if prefix and lowered.startswith(prefix) and value[len(prefix) : len(prefix) + 1] in ("", "/", "?", "#"):
                rest = "/" + value[len(prefix) :].lstrip("/")
                break
        if rest is None:
            if value.startswith("/") and value[1:2] not in ("/", "\\"):
                rest = value
            elif _scheme_or_host(value):
                return None  # another site
            else:  # relative to where the client is: fine while it stays under the mount
                folder = client_path[: client_path.rfind("/") + 1]
                resolved = _without_dot_segments(folder + value)
                return value if resolved.startswith(self.mount + "/") else None
        return self.mount + _without_dot_segments(rest)


class Proxy:
    """Resolves a `/proxy/t/…` path to an upstream URL and relays one request or WebSocket to it."""

    def __init__(self, controller: Controller):
        self.config = controller.config
        self.db = controller.db
        self.signing_key = controller.auth.signing_key
        self.backends = controller.backends
        settings = controller.config.controller
        self.read_timeout_s = settings.proxy_read_timeout
        self.limits = RelayLimits(
            settings.proxy_max_per_caller,
            settings.proxy_max_per_endpoint,
            max(8, connection_limit(settings.max_connections) // 4),
        )
        self.peer_tls = peer_tls(controller.config)
        self._clients: dict[ClientTls | None, httpx.AsyncClient] = {}

    def client(self, tls: ClientTls | None = None) -> httpx.AsyncClient:
        """The HTTP client for upstreams checked by `tls` (a peer's; None: endpoints, plain HTTP)."""
        client = self._clients.get(tls)
        if client is None:
            import httpx

            client = self._clients[tls] = httpx.AsyncClient(
                timeout=httpx.Timeout(connect=10.0, read=self.read_timeout_s, write=self.read_timeout_s, pool=None),
                limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
                follow_redirects=False,
                cookies=_NoCookies(),  # keeps nothing between requests (see the module docstring)
                verify=tls.context() if tls is not None else True,
            )
        return client

    def _target(self, rest: str) -> Upstream:
        """Where `rest`, the part after /proxy/t/ as the client sent it (percent-encoded), is
        relayed to; typed errors otherwise."""
        if rest.startswith(CLUSTER_TAG):
            hops = list(itertools.takewhile(lambda part: unquote(part).startswith(CLUSTER_TAG), rest.split("/")))
            if len(hops) > MAX_RELAY_HOPS:
                raise InvalidArgument(
                    f"a relayed capability URL may pass through at most {MAX_RELAY_HOPS} clusters, and this one names"
                    f" {len(hops)}; use the URL `iris endpoint url` printed"
                )
            tag, _, tail = rest.partition("/")
            peer = unquote(tag[len(CLUSTER_TAG) :])
            config = self.config.peers.get(peer)
            if config is None:
                raise NotFound(f"no federation peer named {peer!r} here; this cluster relays only to its peers")
            address = config.address.rstrip("/")
            # The peer answers redirects under its /proxy/t/ (as an absolute path): the tag goes back in.
            return Upstream(address + relay_path(tail), PREFIX[:-1], PREFIX + tag, self.peer_tls.get(peer))
        raw_token, _, tail = rest.partition("/")
        raw_name, _, path = tail.partition("/")
        token, name = unquote(raw_token), unquote(raw_name)
        if not token or not name:
            raise NotFound("a capability URL has the form /proxy/t/<token>/<name>/…; mint one with `iris endpoint url`")
        cluster = self.config.name
        job_id = endpoints.verify_capability(self.signing_key, cluster, token, name)
        with self.db.read() as conn:
            endpoint = endpoints.live_endpoint(conn, job_id, name)
        if endpoint is None:
            raise NotFound(
                f"endpoint {name!r} of {job_id} is not being served (its task has ended or never registered it)"
            )
        origin = f"http://{endpoints.relay_target(endpoint, self.backends)}"
        return Upstream(f"{origin}/{path}", origin, f"{PREFIX}{raw_token}/{raw_name}")

    async def http(self, request: Request):
        try:
            upstream_at = await asyncio.to_thread(self._target, _raw_rest(request.scope))
        except IrisError as exc:
            return _error(exc)
        sandboxed = request.headers.get("origin") == SANDBOXED_ORIGIN
        if sandboxed and request.method == "OPTIONS" and "access-control-request-method" in request.headers:
            return _preflight(request)
        try:
            slot = self.limits.take(caller_of(request.scope), upstream_at.mount)
        except Unavailable as exc:
            return _busy(exc.message)
        try:
            return await self._relay(request, upstream_at, sandboxed, slot)
        except BaseException:
            slot.release()
            raise

    async def _relay(self, request: Request, upstream_at: Upstream, sandboxed: bool, slot: Slot) -> Response:
        """Relays one request holding its `slot`, which the answer gives back once it is sent."""
        url = upstream_at.url + (f"?{request.url.query}" if request.url.query else "")
        headers = _passed_on(request.headers.items(), STRIPPED_REQUEST_HEADERS)
        headers.append((RELAYED_HEADER, self.config.name))  # never local_admin where it lands
        has_body = "content-length" in request.headers or "transfer-encoding" in request.headers
        client = self.client(upstream_at.tls)
        upstream_request = client.build_request(
            request.method, url, headers=headers, content=request.stream() if has_body else None
        )
        import httpx

        try:
            upstream = await client.send(upstream_request, stream=True)
        except httpx.TimeoutException:
            slot.release()
            return JSONResponse(
                {"error": f"the endpoint sent nothing for {self.read_timeout_s:g}s (controller.proxy_read_timeout)"},
                status_code=504,
            )
        except httpx.HTTPError as exc:
            slot.release()
            return JSONResponse({"error": f"the endpoint did not answer: {type(exc).__name__}"}, status_code=502)
        except httpx.InvalidURL:  # httpx reads an answer's Location even when it follows none
            slot.release()
            return _off_endpoint()
        # As bytes, each read as latin-1: an app's header that is not ASCII passes on unchanged.
        raw = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in upstream.headers.raw]
        client_path = _raw_path(request.scope)
        out = []
        for k, v in _passed_on(raw, STRIPPED_RESPONSE_HEADERS):
            if k == "location":
                moved = upstream_at.location(v, client_path)
                if moved is None:
                    await upstream.aclose()
                    slot.release()
                    return _off_endpoint()
                v = moved
            out.append((k, v))
        out.append(PAGE_SANDBOX)
        if sandboxed:
            out.extend(_cors())

        async def done() -> None:
            await upstream.aclose()
            slot.release()

        response = _Relayed(upstream.aiter_raw(), status_code=upstream.status_code, done=done)
        response.raw_headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in out]
        return response

    async def websocket(self, ws: WebSocket):
        try:
            upstream_at = await asyncio.to_thread(self._target, _raw_rest(ws.scope))
        except IrisError as exc:
            await ws.close(code=4404 if isinstance(exc, NotFound) else 4401, reason=exc.message[:120])
            return
        try:
            slot = self.limits.take(caller_of(ws.scope), upstream_at.mount)
        except Unavailable as exc:
            await ws.close(code=1013, reason=exc.message[:120])  # try again later
            return
        try:
            await self._relay_websocket(ws, upstream_at.url, upstream_at.tls)
        finally:
            slot.release()

    async def _relay_websocket(self, ws: WebSocket, target: str, tls: ClientTls | None) -> None:
        url = "ws" + target[len("http") :] + (f"?{ws.url.query}" if ws.url.query else "")
        import websockets
        from websockets.typing import Subprotocol

        lines = ws.headers.getlist("sec-websocket-protocol")
        offered = [Subprotocol(p.strip()) for line in lines for p in line.split(",") if p.strip()]
        try:
            upstream = await websockets.connect(
                url,
                max_size=MAX_WS_MESSAGE_BYTES,
                open_timeout=10,
                subprotocols=offered or None,
                additional_headers={RELAYED_HEADER: self.config.name},
                ssl=tls.context() if tls is not None and url.startswith("wss://") else None,
            )
        except ValueError:  # a subprotocol that is not a token (the server refuses those first)
            await ws.close(code=1002, reason="Sec-WebSocket-Protocol holds a value that is not a token")
            return
        except (OSError, websockets.WebSocketException, TimeoutError):
            await ws.close(code=1014, reason="the endpoint did not answer")
            return
        async with upstream:  # closed however this ends: a client gone before the accept too
            await ws.accept(subprotocol=upstream.subprotocol)
            await _pump(ws, upstream)


class RelayLimits:
    """Decides whether one more relayed request (or WebSocket) may start now: at most `per_caller`
    held by one client, `per_endpoint` by one endpoint (its capability URL's mount, or a peer's
    relayed mount), and `total` by all. Used on the event loop's one thread only: no lock."""

    def __init__(self, per_caller: int, per_endpoint: int, total: int):
        self.per_caller, self.per_endpoint, self.total = per_caller, per_endpoint, total
        self.callers: Counter[Hashable] = Counter()
        self.endpoints: Counter[Hashable] = Counter()
        self.held = 0

    def take(self, caller: Hashable, endpoint: str) -> Slot:
        """A slot for one more relayed request; Unavailable, taking nothing, past a bound."""
        refusal = self._refusal(caller, endpoint)
        if refusal is not None:
            raise Unavailable(refusal)
        self.callers[caller] += 1
        self.endpoints[endpoint] += 1
        self.held += 1
        return Slot(self, caller, endpoint)

    def _refusal(self, caller: Hashable, endpoint: str) -> str | None:
        if self.held >= self.total:
            return (
                f"the controller relays {self.held} requests to endpoints already, the most it holds at once"
                " (a quarter of its connections, the rest being kept for its API); try again shortly"
            )
        if self.callers[caller] >= self.per_caller:
            return (
                f"you hold {self.callers[caller]} relayed requests open already, the most one client may"
                " (controller.proxy_max_per_caller); try again once one has finished"
            )
        if self.endpoints[endpoint] >= self.per_endpoint:
            return (
                f"this endpoint has {self.endpoints[endpoint]} relayed requests open already, the most one"
                " endpoint may (controller.proxy_max_per_endpoint); try again shortly"
            )
        return None

    def give(self, caller: Hashable, endpoint: str) -> None:
        self.held -= 1
        pairs: tuple[tuple[Counter[Hashable], Hashable], ...] = ((self.callers, caller), (self.endpoints, endpoint))
        for counts, key in pairs:
            counts[key] -= 1
            if counts[key] <= 0:
                del counts[key]


class Slot:
    """One relayed request's hold on `RelayLimits`, given back once, however often released."""

    def __init__(self, limits: RelayLimits, caller: Hashable, endpoint: str):
        self.limits, self.caller, self.endpoint = limits, caller, endpoint
        self.released = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.limits.give(self.caller, self.endpoint)


class _NoCookies(http.cookiejar.CookieJar):
    """A cookie jar that never keeps one: the relay's client answers many callers."""

    def set_cookie(self, cookie) -> None:
        pass

    def extract_cookies(self, response, request) -> None:
        pass


class _Relayed(StreamingResponse):
    """A relayed answer that runs `done` (closing the app's side, giving back the slot) once it has
    been sent, or once sending it failed or the client went away, whichever way it ends."""

    def __init__(self, content, status_code: int, done) -> None:
        super().__init__(content, status_code=status_code)
        self._done = done

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._done()


def _busy(why: str) -> Response:
    """A relayed request refused for the bounds: retry shortly, on a fresh connection."""
    return JSONResponse(
        {"code": "unavailable", "message": why},
        status_code=503,
        headers={"retry-after": "1", "connection": "close", **dict([PAGE_SANDBOX])},
    )


def _off_endpoint() -> Response:
    return JSONResponse(
        {
            "error": "the endpoint redirected off itself (to another site, another scheme, or out of its URL);"
            " the relay neither follows nor passes on such a redirect"
        },
        status_code=502,
        headers=dict([PAGE_SANDBOX]),
    )


def _scheme_or_host(value: str) -> bool:
    """Whether a `Location` names a scheme (`https:`, `javascript:`) or a host (`//h`)."""
    head = value.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
    return value.startswith(("//", "\\")) or ":" in head


def _raw_path(scope) -> str:
    return (scope.get("raw_path") or scope["path"].encode()).decode("latin-1")


def _raw_rest(scope) -> str:
    """The part of the request's path after /proxy/t/, as the client sent it (percent-encoded).
    A path that reaches this route only once decoded (`/proxy/%74/…`) names no capability URL."""
    path = _raw_path(scope)
    if not path.startswith(PREFIX):
        raise NotFound("a capability URL has the form /proxy/t/<token>/<name>/…; mint one with `iris endpoint url`")
    return path[len(PREFIX) :]


def _passed_on(headers, stripped: frozenset[str]) -> list[tuple[str, str]]:
    """`headers` less those in `stripped` and those a `Connection` header names (hop-by-hop by
    declaration: a client could otherwise hand the app a header as if the relay had set it)."""
    pairs = [(k.lower(), v) for k, v in headers]
    named = {t.strip().lower() for k, v in pairs if k == "connection" for t in v.split(",")}
    return [(k, v) for k, v in pairs if k not in stripped and k not in named]


def _undotted(part: str) -> str:
    """`part` percent-decoded until nothing changes (a `%252e` is a `.` to a second decoder)."""
    while (decoded := unquote(part)) != part:
        part = decoded
    return part


def _without_dot_segments(target: str) -> str:
    """An absolute path (with its query and fragment) with `.` and `..` segments resolved, as
    RFC 3986 §5.2.4 does and a browser would (percent-encoded dots and `\\` as a separator too)."""
    cut = min((i for i in (target.find("?"), target.find("#")) if i >= 0), default=len(target))
    parts = target[:cut].replace("\\", "/").split("/")[1:]
    out: list[str] = []
    for i, part in enumerate(parts):
        dots = _undotted(part)
        if dots in (".", ".."):
            if dots == ".." and out:
                out.pop()
            if i == len(parts) - 1:
                out.append("")  # `/a/..` is `/`, a folder
            continue
        out.append(part)
    return "/" + "/".join(out) + target[cut:]


def relay_path(tail: str) -> str:
    """The peer's `/proxy/t/<tail>`, refusing a tail with `.` or `..` segments (percent-encoded,
    once or more, too).

    An HTTP client resolves dot segments before sending (httpx does), so `cluster=<peer>/../../x`
    would reach the peer's `/x`, its API, from this cluster's address, which the peer may trust as
    an admin (loopback is trusted by default): the relay would hand anyone who reaches this URL
    the peer's API. A capability URL never needs such a segment between the tag and its path."""
    if any(part in (".", "..") for part in _undotted(tail).split("/")):
        raise InvalidArgument(
            "a relayed capability URL may not hold '.' or '..' path segments; use the URL `iris endpoint url` printed"
        )
    return PREFIX + tail


# Close codes that may not be sent in a close frame (RFC 6455 §7.4.1): what each side is told instead.
_UNSENDABLE_CLOSE = {1005: 1000, 1006: 1001, 1015: 1001}


def _close_code(code: int | None) -> int:
    """`code`, as one side closed, in a form the other side may be sent."""
    if code is None:
        return 1001
    if code in _UNSENDABLE_CLOSE:
        return _UNSENDABLE_CLOSE[code]
    return code if 1000 <= code <= 4999 else 1001


async def _pump(ws: WebSocket, upstream) -> None:
    """Relays messages both ways until one side closes, then closes the other with its code and reason."""
    import websockets

    closed: dict[str, tuple[int | None, str]] = {}

    async def client_to_upstream():
        try:
            while True:
                message = await ws.receive()
                if message["type"] == "websocket.disconnect":
                    closed["client"] = (message.get("code", 1000), message.get("reason") or "")
                    return
                await upstream.send(message["bytes"] if message.get("bytes") is not None else message["text"])
        except WebSocketDisconnect as exc:
            closed["client"] = (exc.code, exc.reason or "")
        except websockets.ConnectionClosed:
            return

    async def upstream_to_client():
        with contextlib.suppress(websockets.ConnectionClosed):
            async for message in upstream:  # ends once the app has closed
                if isinstance(message, bytes):
                    await ws.send_bytes(message)
                else:
                    await ws.send_text(message)
        # The app's close frame (its answer to the relay's 1009 for a message over the bound, too).
        closed["upstream"] = (upstream.close_code, upstream.close_reason or "")

    tasks = [asyncio.ensure_future(client_to_upstream()), asyncio.ensure_future(upstream_to_client())]
    _, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    code, reason = closed.get("client") or closed.get("upstream") or (1001, "")
    with contextlib.suppress(Exception):
        await upstream.close(code=_close_code(code), reason=reason)
    with contextlib.suppress(Exception):
        await ws.close(code=_close_code(code), reason=reason)


def _cors() -> list[tuple[str, str]]:
    """What lets a sandboxed page read its own app's answers: that origin, `null`, and no other."""
    return [
        ("access-control-allow-origin", SANDBOXED_ORIGIN),
        ("access-control-allow-credentials", "true"),  # none reach the app: Cookie is dropped
        ("vary", "origin"),
    ]


def _preflight(request: Request) -> Response:
    """A sandboxed page's preflight, answered here: the app it asks about is its own."""
    headers = dict(_cors())
    headers["access-control-allow-methods"] = request.headers["access-control-request-method"]
    if asked := request.headers.get("access-control-request-headers"):
        headers["access-control-allow-headers"] = asked
    headers["access-control-max-age"] = "600"
    return Response(status_code=204, headers=headers)


def _error(exc: IrisError) -> JSONResponse:
    codes = ((NotFound, 404), (Unauthenticated, 401), (InvalidArgument, 400))
    status = next((code for cls, code in codes if isinstance(exc, cls)), 403)
    return JSONResponse({"code": exc.code, "message": exc.message}, status_code=status, headers=dict([PAGE_SANDBOX]))


def routes(proxy: Proxy) -> list:
    return [
        Route(PREFIX + "{rest:path}", proxy.http, methods=METHODS),
        WebSocketRoute(PREFIX + "{rest:path}", proxy.websocket),
    ]
