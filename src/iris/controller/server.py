"""The controller's HTTP front: the Connect API under /iris.v1.*, the dashboard at /, and a plain /health.

One ASGI callable dispatches on the path prefix, so the Connect application sees its own paths
unchanged and later surfaces (dashboard, /proxy) mount beside it without touching the API.
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from iris.controller import dashboard
from iris.controller.app import Controller
from iris.controller.service import ControllerServiceImpl
from iris.rpc.controller_connect import ControllerServiceASGIApplication

API_PREFIX = "/iris.v1."


def build_app(controller: Controller):
    api = ControllerServiceASGIApplication(ControllerServiceImpl(controller))

    async def health(_request):
        # 503 when unhealthy, so a load balancer or supervisor acts on the status code alone.
        h = controller.health()
        return JSONResponse({"cluster": controller.config.name, **h.as_dict()}, status_code=200 if h.ok else 503)

    web = Starlette(routes=[Route("/health", health), *dashboard.routes()])

    async def app(scope, receive, send):
        if scope["type"] == "http" and scope["path"].startswith(API_PREFIX):
            await api(scope, receive, send)
        else:
            await web(scope, receive, send)

    return app
