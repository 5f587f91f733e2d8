"""The controller's HTTP front: the Connect API under /iris.v1.*, the dashboard at /, and a plain /health.

One ASGI callable dispatches on the path prefix, so the Connect application sees its own paths
unchanged and later surfaces (dashboard, /proxy) mount beside it without touching the API.
`/proxy/t/…` (capability URLs to serving endpoints) is `iris.controller.http.proxy`.

An API answer leaves in one write to the socket, head and body together, framed by its length:
the Connect handler sends its head and its body as two ASGI messages and uvicorn writes each as
it comes, chunked, so every answer cost two sends on the event loop (a loopback send runs the
receiver's side of TCP too, holding the GIL) and the client two reads and a chunked parse. The
API's `send` (`_whole_answer`) gives a one-part body its Content-Length, and the connection's
transport (`JoinedWrites`) holds a response head until the body's first write in the same turn of
the loop, so both go out as one. That write goes to the socket itself (`os.write`), which lets go
of the interpreter lock for the system call where the event loop's own write holds it: a loopback
send runs the receiving side's TCP work and wakes the client, often taking the core, and with 4
clients submitting the lock held through it was about a quarter of the event loop's lock time.
"""

from __future__ import annotations

import asyncio
import contextlib
import os

from starlette.applications import Starlette
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from iris.controller import dashboard
from iris.controller.api.service import ControllerServiceImpl
from iris.controller.app import Controller
from iris.controller.auth import RELAYED_HEADER, Role
from iris.controller.auth.callers import Peer, calling_peer
from iris.controller.db.group_commit import Announcement, GroupCommit, current_announcement
from iris.controller.db.workspace import MAX_WORKSPACE_BYTES
from iris.controller.http import proxy, request_bodies
from iris.controller.http.body_budget import BodyBudget
from iris.controller.http.connections import caller_of
from iris.core import metrics, spans
from iris.core.errors import IrisError
from iris.rpc import controller_pb2 as pb
from iris.rpc.controller_connect import ControllerServiceASGIApplication
from iris.rpc.request_codecs import PREDECODED, BoundedJSONCodec, BoundedProtoCodec

API_PREFIX = "/iris.v1."
LAUNCH_PATH = f"{API_PREFIX}ControllerService/LaunchJob"
# The names spans count API calls under: any caller can send any path, so one name per path would
# let it grow the totals without bound.
_METHODS = frozenset(pb.DESCRIPTOR.services_by_name["ControllerService"].methods_by_name)


# The largest request body the API reads: a job's whole workspace (the documented limit; as base64,
# a third larger, when the request comes as Connect JSON, as `iris job run` sends it) plus room for
# the rest of its request. A larger body is refused before it is read.
MAX_REQUEST_BYTES = MAX_WORKSPACE_BYTES * 4 // 3 + 8 * 1024**2
# Bytes of large request bodies held at once (see iris.controller.http.body_budget): six of the largest
# requests, about 1.4 GB of the controller's memory at the peak.
LARGE_BODIES_HELD = 6 * MAX_REQUEST_BYTES


def _large_body_size(scope) -> int:
    """What a call's body may hold in memory when it may be large (0 when it is small): its declared
    size (times what a gzip body may unpack to), or the most a request may be when it declares none.
    A header sent twice counts by its first value, as the body is then read and decoded by."""
    if scope.get("method") != "POST":
        return 0
    encoding: bytes | None = None
    declared: bytes | None = None
    for name, value in scope.get("headers", ()):
        if name == b"content-encoding" and encoding is None:
            encoding = value.strip().lower()
        elif name == b"content-length" and declared is None:
            declared = value.strip()
    if declared is None or not declared.isdigit():
        return MAX_REQUEST_BYTES
    size = int(declared) * (1 if encoding in (None, b"", b"identity") else request_bodies.GZIP_MAX_RATIO)
    return min(size, MAX_REQUEST_BYTES) if size > request_bodies.SMALL_BODY else 0


def _declared_size(scope) -> int:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            return int(value) if value.isdigit() else 0
    return 0


class JoinedWrites:
    """A connection's transport that holds a response head (a write starting `HTTP/1.1 2…`-`5…`)
    until the next write, then sends both in one; a head nothing follows within the same turn of
    the event loop (a stream's first part is slow to come) goes out alone at the end of that turn.
    Writes keep their order whatever they hold."""

    __slots__ = ("_transport", "_loop", "_held", "_fd")

    def __init__(self, transport, loop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None
        sock = transport.get_extra_info("socket")
        # Only a plain connection's bytes may go to its socket as they are (never under TLS).
        plain = sock is not None and transport.get_extra_info("sslcontext") is None
        self._fd: int | None = sock.fileno() if plain else None

    def write(self, data: bytes) -> None:
        if self._transport.is_closing():
            # The controller closed the connection (a caller past a limit) while an answer was on
            # its way; uvloop raises for a write to a closed transport where asyncio drops it.
            self._held = None
            return
        if self._held is not None:
            data, self._held = self._held + data, None
        elif data.startswith(b"HTTP/1.1 ") and data[9:10] in b"2345":  # not an interim 100 Continue
            self._held = data
            self._loop.call_soon(self.flush)
            return
        self._send(data)

    def _send(self, data) -> None:
        """Writes `data` to the socket itself while nothing is queued before it, letting go of the
        interpreter lock for the system call (the event loop's own write holds it); what the socket
        does not take now, or an error, goes to the transport, which queues it or closes."""
        if self._fd is not None and not self._transport.get_write_buffer_size():
            try:
                sent = os.write(self._fd, data)
            except OSError:  # full (EAGAIN) or broken: the transport meets the same and acts
                sent = 0
            if sent >= len(data):
                return
            data = memoryview(data)[sent:]
        self._transport.write(data)

    def writelines(self, lines) -> None:
        self.write(b"".join(lines))

    def flush(self) -> None:
        if self._held is not None and not self._transport.is_closing():
            data, self._held = self._held, None
            self._send(data)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str):
        return getattr(self._transport, name)


def _whole_answer(send):
    """The API's `send`: an answer whose body comes in one message gets a Content-Length, so it is
    not chunked; its head is held until then (see the module docstring)."""
    held = None

    async def whole(message) -> None:
        nonlocal held
        if message["type"] == "http.response.start":
            held = message
            return
        if held is not None:
            start, held = held, None
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                headers = list(start.get("headers", ()))
                if not any(k.lower() in (b"content-length", b"transfer-encoding") for k, _ in headers):
                    headers.append((b"content-length", str(len(message.get("body", b""))).encode()))
                    start = {**start, "headers": headers}
            await send(start)
        await send(message)

    return whole


async def _serve(api, scope, receive, send) -> None:
    if spans.enabled():
        started = spans.mark()
        await api(scope, receive, send)
        method = scope["path"].rpartition("/")[2]
        spans.add_since(f"api.{method if method in _METHODS else 'unknown'}", started)
    else:
        await api(scope, receive, send)


def _announcing(receive, commits: GroupCommit, note: Announcement):
    """A LaunchJob's `receive`, announcing `note` once the request's body has come whole: a submit
    group committing meanwhile waits for it (see iris.controller.db.group_commit), which a burst's
    clients share. Not before: a body sent slowly, or never finished, would hold every group."""

    async def whole():
        message = await receive()
        if message["type"] == "http.request" and not message.get("more_body", False):
            commits.announce(note)
        return message

    return whole


def _metrics_refusal(controller: Controller, request) -> Response | None:
    """None when the caller of `/metrics` may read it (`controller.metrics_require_token`): the
    operator, or an admin or dashboard token (what Prometheus sends from its credentials file)."""
    peer = request.scope.get("client")
    calling_peer.set(peer if isinstance(peer, Peer) else None)
    try:
        identity = controller.identities.identify(
            request.headers.get("authorization"),
            f"{request.client.host}:{request.client.port}" if request.client else None,
            RELAYED_HEADER in request.headers,
            request.headers.get("host"),
            request.headers.get("origin"),
        )
    except IrisError as exc:
        return PlainTextResponse(f"{exc.message}\n", status_code=401)
    if identity.local_admin or identity.role in (Role.ADMIN, Role.DASHBOARD):
        return None
    return PlainTextResponse(
        f"/metrics needs an admin or dashboard token here (controller.metrics_require_token); {identity.principal}"
        f" holds a {identity.role.value} token\n",
        status_code=403,
    )


def build_app(controller: Controller):
    service = ControllerServiceImpl(controller)
    api = ControllerServiceASGIApplication(
        service,
        read_max_bytes=MAX_REQUEST_BYTES,
        # A body is bounded in values before a message is decoded from it.
        codecs=[BoundedProtoCodec(), BoundedJSONCodec()],
    )

    async def health(_request):
        # 503 when unhealthy, so a load balancer or supervisor acts on the status code alone.
        h = controller.health()
        return JSONResponse({"cluster": controller.config.name, **h.as_dict()}, status_code=200 if h.ok else 503)

    async def metrics_page(request):
        if controller.config.controller.metrics_require_token:
            refusal = _metrics_refusal(controller, request)
            if refusal is not None:
                return refusal
        body = await asyncio.to_thread(metrics.render)  # the gauges walk the tick's kept tasks
        return Response(body, media_type=metrics.CONTENT_TYPE)

    relay = proxy.Proxy(controller)
    bodies = BodyBudget(LARGE_BODIES_HELD, LARGE_BODIES_HELD // 2)
    web = Starlette(
        routes=[Route("/health", health), Route("/metrics", metrics_page), *proxy.routes(relay), *dashboard.routes()]
    )

    @contextlib.contextmanager
    def in_flight(scope):
        """One API call. It counts as in flight: the tick rests between passes only
        while calls are (see ControlLoop._run); the counter runs on the event loop's one thread, so
        it needs no lock. Its own task is the calling peer. And it starts with no decoded message:
        a request pipelined behind another on its connection runs in a copy of the context of the
        request before it (uvicorn starts its task from the one that sent the last answer), so a
        message decoded off the event loop for a request refused before it took it (a protocol
        version not served, say) would be taken in place of its own body, under its identity."""
        controller.tick.api_calls += 1
        peer = scope.get("client")
        calling_peer.set(peer if isinstance(peer, Peer) else None)
        PREDECODED.set(None)
        try:
            yield
        finally:
            controller.tick.api_calls -= 1

    @contextlib.contextmanager
    def announced_submit(receive):
        """A LaunchJob's `receive`, which announces it to the submit groups once its body has come
        whole (see `_announcing`), settled when the call ends."""
        with controller.commits.announced(note := Announcement(pending=False)):
            current_announcement.set(note)
            yield _announcing(receive, controller.commits, note)

    async def app(scope, receive, send):
        if scope["type"] == "http" and scope["path"].startswith(API_PREFIX):
            size = _declared_size(scope)
            if size > MAX_REQUEST_BYTES:
                # Answered as a Connect error (resource_exhausted) without reading it.
                await request_bodies.answer_error(
                    send,
                    429,
                    "resource_exhausted",
                    f"the request is {size} bytes; the controller reads at most {MAX_REQUEST_BYTES}"
                    f" (a job's workspace may be at most {MAX_WORKSPACE_BYTES} bytes): send a smaller workspace",
                )
                return
            reserved = _large_body_size(scope)
            client = caller_of(scope) if reserved else None
            if reserved and not bodies.take(client, reserved):
                # The body budget has no room for it (see body_budget): told to retry, not read.
                await request_bodies.answer_error(
                    send,
                    429,
                    "resource_exhausted",
                    f"the controller is already receiving {bodies.held} bytes of large requests (the most it"
                    " holds at once, or the most one client may); try again in a moment (iris and the SDK retry"
                    " by themselves)",
                    retry_after_s=1,
                )
                return
            send = _whole_answer(send)
            held = reserved  # of the body budget, until the answer; an unpacked body may add to it

            def hold(unpacked: int) -> bool:
                """Whether a message decoded from a compressed body that unpacked to `unpacked`
                bytes may be held until it is answered: what a large one came to beyond its body's
                reservation is taken too (a small gzip body reserves nothing as it arrives, and may
                unpack to GZIP_FLOOR bytes)."""
                nonlocal held, client
                if unpacked <= max(held, request_bodies.SMALL_BODY):
                    return True
                if client is None:
                    client = caller_of(scope)
                if not bodies.take(client, unpacked - held):
                    return False
                held = unpacked
                return True

            try:
                with in_flight(scope):
                    # A large or compressed body is decoded off the event loop (iris.controller.http.request_bodies).
                    receive = await request_bodies.prepare(scope, receive, send, MAX_REQUEST_BYTES, hold)
                    if receive is None:
                        return
                    if scope["path"] == LAUNCH_PATH:
                        with announced_submit(receive) as receive:
                            await _serve(api, scope, receive, send)
                    else:
                        await _serve(api, scope, receive, send)
            finally:
                if held:
                    bodies.give_back(client, held)
        else:
            await web(scope, receive, send)

    return app
