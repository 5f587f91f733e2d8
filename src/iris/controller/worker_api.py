"""The calls worker daemons make, RegisterWorker, WorkerPoll and FetchBundle, routed to their backend.

They are async, unlike the other handlers (which run their database work on a thread): a worker's
long poll waits on an event for most of its life, and a thread per waiting daemon would exhaust the
thread pool long before a thousand workers. Neither call touches the database; the backend keeps
its members in memory and the tick commits what they report. FetchBundle hands a worker a layer of
the workspace of an attempt the backend placed on it (the backend says whether it did), read from
the database on a thread: a worker on another host has no other way to the job's files.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from connectrpc.errors import ConnectError

from iris.backends import staging
from iris.backends.protocol import WorkerHub
from iris.controller import workspace
from iris.controller.auth import Role, authorize
from iris.core.errors import InvalidArgument, IrisError, NotFound
from iris.rpc import controller_pb2 as pb
from iris.rpc.bounds import check_message
from iris.rpc.errors import to_connect

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
        from iris.controller.service import _internal_error

        try:
            identity = self._caller(ctx, "RegisterWorker")
            check_message(req)
            hub = worker_hub(self.c, req.backend_id)
            return hub.register_worker(req, identity.principal, identity.role is Role.ADMIN)
        except IrisError as exc:
            raise to_connect(exc) from None
        except ConnectError:
            raise
        except Exception as exc:
            raise _internal_error("RegisterWorker", exc) from None

    async def worker_poll(self, req: pb.WorkerPollRequest, ctx) -> pb.WorkerPollResponse:
        from iris.controller.service import _internal_error

        try:
            identity = self._caller(ctx, "WorkerPoll")
            check_message(req)
            hub = worker_hub(self.c, req.backend_id)
            return await hub.worker_poll(req, identity.principal, identity.role is Role.ADMIN)
        except IrisError as exc:
            raise to_connect(exc) from None
        except ConnectError:
            raise
        except Exception as exc:
            raise _internal_error("WorkerPoll", exc) from None

    async def fetch_bundle(self, req: pb.FetchBundleRequest, ctx) -> pb.FetchBundleResponse:
        from iris.controller.service import _internal_error

        try:
            identity = self._caller(ctx, "FetchBundle")
            check_message(req)
            hub = worker_hub(self.c, req.backend_id)
            job_id = hub.workspace_grant(req, identity.principal, identity.role is Role.ADMIN)
            return await asyncio.to_thread(self._workspace_layer, job_id, req.content_id)
        except IrisError as exc:
            raise to_connect(exc) from None
        except ConnectError:
            raise
        except Exception as exc:
            raise _internal_error("FetchBundle", exc) from None

    def _workspace_layer(self, job_id: str, content_id: str) -> pb.FetchBundleResponse:
        with self.c.db.read() as conn:
            data = workspace.load_bundle(conn, content_id)
            if data is not None:
                return pb.FetchBundleResponse(data=data)
            files = workspace.job_files(conn, job_id)
        if files and staging.files_id(files) == content_id:
            return pb.FetchBundleResponse(files=files)
        raise NotFound(f"the workspace layer {content_id} of job {job_id} is no longer stored on this cluster")
