"""The controller's HTTP front: the Connect API under /iris.v1.*, the dashboard at /, and a plain /health.

One ASGI callable dispatches on the path prefix, so the Connect application sees its own paths
unchanged and later surfaces (dashboard, /proxy) mount beside it without touching the API.
`/proxy/t/…` (capability URLs to serving endpoints) is `iris.controller.proxy`.
"""

from __future__ import annotations

import json

from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from iris.controller import dashboard, proxy
from iris.controller.app import Controller
from iris.controller.db.group_commit import current_announcement
from iris.controller.identity import Peer, calling_peer
from iris.controller.service import ControllerServiceImpl
from iris.controller.workspace import MAX_WORKSPACE_BYTES
from iris.core import spans
from iris.rpc import controller_pb2 as pb
from iris.rpc.controller_connect import ControllerServiceASGIApplication

API_PREFIX = "/iris.v1."
LAUNCH_PATH = f"{API_PREFIX}ControllerService/LaunchJob"
# The names spans count API calls under: any caller can send any path, so one name per path would
# let it grow the totals without bound.
_METHODS = frozenset(pb.DESCRIPTOR.services_by_name["ControllerService"].methods_by_name)


# The largest request body the API reads: a job's whole workspace (the documented limit; as base64,
# a third larger, when the request comes as Connect JSON, as `iris job run` sends it) plus room for
# the rest of its request. A larger body is refused before it is read.
MAX_REQUEST_BYTES = MAX_WORKSPACE_BYTES * 4 // 3 + 8 * 1024**2


async def _too_large(send, size: int) -> None:
    """Answers an oversize request as a Connect error (resource_exhausted) without reading it."""
    body = json.dumps(
        {
            "code": "resource_exhausted",
            "message": f"the request is {size} bytes; the controller reads at most {MAX_REQUEST_BYTES}"
            f" (a job's workspace may be at most {MAX_WORKSPACE_BYTES} bytes): send a smaller workspace",
        }
    ).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 429, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _declared_size(scope) -> int:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            return int(value) if value.isdigit() else 0
    return 0


async def _serve(api, scope, receive, send) -> None:
    if spans.enabled():
        started = spans.mark()
        await api(scope, receive, send)
        method = scope["path"].rpartition("/")[2]
        spans.add_since(f"api.{method if method in _METHODS else 'unknown'}", started)
    else:
        await api(scope, receive, send)


def build_app(controller: Controller):
    api = ControllerServiceASGIApplication(ControllerServiceImpl(controller), read_max_bytes=MAX_REQUEST_BYTES)

    async def health(_request):
        # 503 when unhealthy, so a load balancer or supervisor acts on the status code alone.
        h = controller.health()
        return JSONResponse({"cluster": controller.config.name, **h.as_dict()}, status_code=200 if h.ok else 503)

    relay = proxy.Proxy(controller)
    web = Starlette(routes=[Route("/health", health), *proxy.routes(relay), *dashboard.routes()])

    async def app(scope, receive, send):
        if scope["type"] == "http" and scope["path"].startswith(API_PREFIX):
            size = _declared_size(scope)
            if size > MAX_REQUEST_BYTES:
                await _too_large(send, size)
                return
            # The tick rests between passes only while calls are in flight (see ControlLoop._run);
            # this counter runs on the event loop's one thread, so it needs no lock.
            controller.tick.api_calls += 1
            peer = scope.get("client")
            calling_peer.set(peer if isinstance(peer, Peer) else None)  # this request's own task
            try:
                if scope["path"] == LAUNCH_PATH:
                    # Announced before its body is read: a submit group committing meanwhile waits
                    # for it (see iris.controller.db.group_commit), which a burst's clients share.
                    with controller.commits.announced() as note:
                        current_announcement.set(note)
                        await _serve(api, scope, receive, send)
                else:
                    await _serve(api, scope, receive, send)
            finally:
                controller.tick.api_calls -= 1
        else:
            await web(scope, receive, send)

    return app
