"""What every API handler does before and after its own work: who is calling, whether that caller
may call this method, whether the request is within bounds, and which Connect error an exception
becomes.

One decorator serves the ControllerService and the worker calls alike, so no handler can skip a
step or map an error its own way. A handler's body runs on a worker thread (a slow query never
stalls the event loop), unless it is a coroutine, which brings its own threads or waits on events.
Typed errors become the Connect code they declare (`iris.rpc.errors`), message unchanged; any other
fault is logged here with a reference and answered INTERNAL without its text.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import secrets
import time

from connectrpc.code import Code
from connectrpc.errors import ConnectError

from iris.controller.auth import RELAYED_HEADER, authorize
from iris.core import metrics, spans
from iris.core.errors import IrisError
from iris.rpc.bounds import check_message
from iris.rpc.errors import to_connect

log = logging.getLogger("iris.api")


def internal_error(method: str, exc: BaseException) -> ConnectError:
    """An unexpected fault, logged in full here and answered without its text: a driver's message
    can carry SQL and values that are not the caller's to read."""
    ref = secrets.token_hex(4)
    log.error("%s failed (reference %s)", method, ref, exc_info=exc)
    return ConnectError(
        Code.INTERNAL, f"{method} failed inside the controller (reference {ref}); its log has the details"
    )


def rpc(fn):
    """Wraps `fn(self, request, identity)` as the Connect handler of the method named after it
    (`launch_job` → LaunchJob); `self.identities` resolves the caller."""
    method = "".join(part.title() for part in fn.__name__.split("_"))
    is_coroutine = inspect.iscoroutinefunction(fn)

    seconds = metrics.API_SECONDS.labels(method)
    ok = metrics.API_REQUESTS.labels(method, "ok")

    @functools.wraps(fn)
    async def handler(self, request, ctx):
        start = time.perf_counter()
        try:
            answer = await _handle(self, request, ctx)
        except ConnectError as exc:
            metrics.API_REQUESTS.labels(method, exc.code.name.lower()).inc()
            raise
        finally:
            seconds.observe(time.perf_counter() - start)
        ok.inc()
        return answer

    async def _handle(self, request, ctx):
        try:
            with spans.span(f"api.{method}.auth"):
                headers = ctx.request_headers
                identity = self.identities.identify(
                    headers.get("authorization"),
                    ctx.client_address,
                    RELAYED_HEADER in headers,
                    headers.get("host"),
                    headers.get("origin"),
                )
                authorize(identity, method)
                check_message(request)
            if is_coroutine:
                return await fn(self, request, identity)
            return await asyncio.to_thread(fn, self, request, identity)
        except IrisError as exc:
            retry_after_s = getattr(exc, "retry_after_s", None)  # a limit on pace: when to call again
            if retry_after_s is not None:
                ctx.response_headers["retry-after"] = str(retry_after_s)
            raise to_connect(exc) from None
        except ConnectError:
            raise
        except Exception as exc:
            raise internal_error(method, exc) from None

    return handler
