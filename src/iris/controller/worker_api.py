"""The two calls worker daemons make, RegisterWorker and WorkerPoll, routed to their backend.

They are async, unlike the other handlers (which run their database work on a thread): a worker's
long poll waits on an event for most of its life, and a thread per waiting daemon would exhaust the
thread pool long before a thousand workers. Neither call touches the database; the backend keeps
its members in memory and the tick commits what they report.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from connectrpc.errors import ConnectError

from iris.backends.protocol import WorkerHub
from iris.controller.auth import Role, authorize
from iris.core.errors import InvalidArgument, IrisError
from iris.rpc import controller_pb2 as pb
from iris.rpc.bounds import check_message

if TYPE_CHECKING:
    from iris.controller.app import Controller


def worker_hub(controller: Controller, backend_id: str) -> WorkerHub:
    """The backend a worker names, which must be of a kind that workers join."""
    backend = controller.backends.get(backend_id)
    if backend is None:
        known = ", ".join(b.id for b in controller.backends.values() if isinstance(b, WorkerHub)) or "none"
        raise InvalidArgument(f"backend {backend_id!r} does not exist on this cluster; backends workers join: {known}")
    if not isinstance(backend, WorkerHub):
        raise InvalidArgument(
            f"backend {backend_id!r} is of kind {backend.kind}; workers join only a backend of kind workers"
        )
    return backend


class WorkerCalls:
    """Mixed into the ControllerService implementation (which provides `c`, the controller)."""

    c: Controller

    def _caller(self, ctx, method: str):
        identity = self.c.identify(ctx.request_headers.get("authorization"), ctx.client_address)
        authorize(identity, method)
        return identity

    async def register_worker(self, req: pb.RegisterWorkerRequest, ctx) -> pb.RegisterWorkerResponse:
        from iris.controller.service import _connect_error, _internal_error

        try:
            identity = self._caller(ctx, "RegisterWorker")
            check_message(req)
            hub = worker_hub(self.c, req.backend_id)
            return hub.register_worker(req, identity.principal, identity.role is Role.ADMIN)
        except IrisError as exc:
            raise _connect_error(exc) from None
        except ConnectError:
            raise
        except Exception as exc:
            raise _internal_error("RegisterWorker", exc) from None

    async def worker_poll(self, req: pb.WorkerPollRequest, ctx) -> pb.WorkerPollResponse:
        from iris.controller.service import _connect_error, _internal_error

        try:
            identity = self._caller(ctx, "WorkerPoll")
            check_message(req)
            hub = worker_hub(self.c, req.backend_id)
            return await hub.worker_poll(req, identity.principal, identity.role is Role.ADMIN)
        except IrisError as exc:
            raise _connect_error(exc) from None
        except ConnectError:
            raise
        except Exception as exc:
            raise _internal_error("WorkerPoll", exc) from None
