"""The calls worker daemons make, RegisterWorker, WorkerPoll and FetchBundle, routed to their backend.

They are async, unlike the other handlers (which run their database work on a thread): a worker's
long poll waits on an event for most of its life, and a thread per waiting daemon would exhaust the
thread pool long before a thousand workers. Neither call touches the database; the backend keeps
its members in memory and the tick commits what they report. FetchBundle hands a worker a layer of
the workspace of an attempt the backend placed on it (the backend says whether it did), read from
the database on a thread: a worker on another host has no other way to the job's files. Every
string field of the three calls is checked first (`iris.rpc.worker_text`): the API is open to any
holder of a worker token, not only to `iris worker start`.

Registrations are limited per token (`REGISTRATION_BURST` at once, then `REGISTRATIONS_PER_S`): a
daemon registers once per life and again after a controller restart, and a stolen token that
registered names by the thousand slowed every scheduling pass. Past it a registration is refused
as `resource_exhausted` with a retry hint, which `iris worker start` waits out; other tokens'
daemons register as usual. The operator's (admin) daemons are not limited.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING

from iris.backends import staging
from iris.backends.protocol import Backend, WorkerHub
from iris.controller.api.handler import rpc
from iris.controller.api.submit_rate import SubmitRate
from iris.controller.auth import Identity, Role
from iris.controller.auth.callers import calling_peer
from iris.controller.db import workspace
from iris.controller.db.database import Database
from iris.core.errors import InvalidArgument, NotFound
from iris.rpc import controller_pb2 as pb
from iris.rpc.worker_text import check_fetch, check_poll, check_registration

if TYPE_CHECKING:
    from iris.controller.auth.callers import Identities

REGISTRATION_BURST = 10
REGISTRATIONS_PER_S = 0.5


def worker_hub(backends: Mapping[str, Backend], backend_id: str) -> WorkerHub:
    """The backend a worker names, which must be of a kind that workers join."""
    backend = backends.get(backend_id)
    if backend is None:
        known = ", ".join(b.id for b in backends.values() if isinstance(b, WorkerHub)) or "none"
        raise InvalidArgument(f"backend {backend_id!r} does not exist on this cluster; backends workers join: {known}")
    if not isinstance(backend, WorkerHub):
        raise InvalidArgument(
            f"backend {backend_id!r} is of kind {backend.kind}; workers join only a backend of kind workers"
        )
    return backend


def _caller_address() -> str:
    """The address the current call came from: where a worker's attempts run, and so the only
    host an endpoint of theirs may be relayed to (see `iris.controller.api.endpoint_hosts`)."""
    peer = calling_peer.get()
    if peer is not None and peer.uid is not None:
        return "127.0.0.1"  # the controller's Unix socket: a caller on its own host
    return peer[0] if peer else ""


class WorkerCalls:
    """Mixed into the ControllerService implementation, which provides the database and backends."""

    db: Database
    backends: Mapping[str, Backend]
    identities: Identities
    registrations: SubmitRate

    def _joined(self, backend_id: str, identity: Identity) -> tuple[WorkerHub, str, bool]:
        """The backend a worker's call names, the caller, and whether it is an admin: what every
        worker call starts from once `rpc` has authenticated and authorised it."""
        return worker_hub(self.backends, backend_id), identity.principal, identity.role is Role.ADMIN

    @rpc
    async def register_worker(self, req: pb.RegisterWorkerRequest, identity: Identity) -> pb.RegisterWorkerResponse:
        check_registration(req)
        hub, principal, admin = self._joined(req.backend_id, identity)
        if not admin:
            key = identity.token_id or principal
            self.registrations.spend(
                key,
                1,
                lambda wait_s: (
                    f"worker {req.name!r} registers too often: this token registered more than "
                    f"{REGISTRATION_BURST} times in a row ({REGISTRATIONS_PER_S:g} a second after that); "
                    f"try again in {wait_s:.1f}s"
                ),
            )
        return hub.register_worker(
            req, principal, admin, _caller_address(), token_id=identity.token_id or "", bound=identity.worker
        )

    @rpc
    async def worker_poll(self, req: pb.WorkerPollRequest, identity: Identity) -> pb.WorkerPollResponse:
        check_poll(req)
        hub, principal, admin = self._joined(req.backend_id, identity)
        return await hub.worker_poll(req, principal, admin, _caller_address())

    @rpc
    async def fetch_bundle(self, req: pb.FetchBundleRequest, identity: Identity) -> pb.FetchBundleResponse:
        check_fetch(req)
        hub, principal, admin = self._joined(req.backend_id, identity)
        job_id = hub.workspace_grant(req, principal, admin)
        return await asyncio.to_thread(self._workspace_layer, job_id, req.content_id)

    def _workspace_layer(self, job_id: str, content_id: str) -> pb.FetchBundleResponse:
        with self.db.read() as conn:
            data = workspace.load_bundle(conn, content_id)
            if data is not None:
                return pb.FetchBundleResponse(data=data)
            files = workspace.job_files(conn, job_id)
        if files and staging.files_id(files) == content_id:
            return pb.FetchBundleResponse(files=files)
        raise NotFound(f"the workspace layer {content_id} of job {job_id} is no longer stored on this cluster")
