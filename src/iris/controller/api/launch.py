"""A LaunchJob of this cluster's own (not a peer's handoff), from its checks to its answer: who may
create the job, the request's workspace, the write that stores the job (or queues it for a peer,
or refuses it), and the wake-up of the tick.

A plain submit (no workspace to check, unpack or look up) is checked on the event loop, which is
pure work of tens of microseconds, and its write goes to the submit group's writer thread
(`GroupCommit.run_async`), so the API answers it without a worker thread of its own. A submit
that carries or names a workspace does disk and database work before its write and runs on a
thread as any blocking handler does. Both share one set of checks and one write.
"""

from __future__ import annotations

import asyncio
import errno
from dataclasses import replace
from typing import TYPE_CHECKING

from iris.controller.api.job_spec import (
    apply_time_limit,
    build_spec,
    check_client_freshness,
    parent_context,
    resolve_job_id,
)
from iris.controller.auth import Identity, Role
from iris.controller.auth.policy import check_may_create
from iris.controller.db import federation as fed
from iris.controller.db import workspace
from iris.controller.db.group_commit import Announcement, current_announcement
from iris.controller.db.jobs import insert_job
from iris.core import spans
from iris.core.constraints import Constraint
from iris.core.errors import InvalidArgument
from iris.core.images import check_image
from iris.core.job import JobSpec
from iris.core.names import JobName
from iris.core.printable import check_launch_request
from iris.federation.ids import reserved_for
from iris.federation.model import Disposition, DispositionKind, SubmittedJob, Submitter
from iris.rpc import controller_pb2 as pb

if TYPE_CHECKING:
    from collections.abc import Callable

    from sqlalchemy.engine import Connection

    from iris.controller.app import Controller

MISSING = object()  # the request names a bundle this cluster does not hold
# What a submit's write returns: (spec, state, created, kind, peer, disposition).
_Written = tuple[JobSpec, str, bool, str, str, "Disposition | None"]


class Submits:
    """The submit path, holding the parts of the controller it uses."""

    def __init__(self, controller: Controller):
        self.config = controller.config
        self.db = controller.db
        self.commits = controller.commits
        self.identities = controller.identities
        self.backends = controller.backends
        self.federation = controller.federation
        self.router = controller.router
        self.tick = controller.tick
        self.now_ms = controller.now_ms
        self.layer_pins = controller.layer_pins

    async def launch(self, req: pb.LaunchJobRequest, identity: Identity) -> pb.LaunchJobResponse:
        """Admits one job of this cluster's own; its answer once its rows are committed."""
        if req.workspace_bundle or req.bundle_id or req.workdir_files:
            # A workspace to check, unpack or look up: disk and database work, on a thread.
            return await asyncio.to_thread(self._on_thread, req, identity)
        # Settled once answered (refused, or without an insert): no group waits for it any longer.
        with self.commits.announced(current_announcement.get()) as note:
            return await self._plain(req, identity, note)

    async def _plain(self, req: pb.LaunchJobRequest, identity: Identity, note: Announcement) -> pb.LaunchJobResponse:
        if spans.enabled():
            return await self._plain_measured(req, identity, note)
        name, now, submitter = self.admission(req, identity)
        write = self._writer(req, name, submitter, now, None, "", {})
        return self._answer(*await self.commits.run_async(write, note))

    async def _plain_measured(
        self, req: pb.LaunchJobRequest, identity: Identity, note: Announcement
    ) -> pb.LaunchJobResponse:
        """`_plain` adding up its stages (IRIS_SPANS): "submit" is this call's own CPU, its
        parts on the loop and its insert on the writer thread, not what the loop ran for other calls
        while this one awaited its commit."""
        started = spans.mark()
        name, now, submitter = self.admission(req, identity)
        write = self._writer(req, name, submitter, now, None, "", {})
        spans.add_since("submit.validate", started)
        checked = spans.mark()
        insert_cpu = 0.0

        def measured(conn: Connection) -> _Written:
            nonlocal insert_cpu
            mark = spans.mark()
            try:
                return write(conn)
            finally:
                spans.add_since("submit.insert", mark)
                insert_cpu = spans.mark()[1] - mark[1]

        outcome = await self.commits.run_async(measured, note)
        resumed = spans.mark()
        answer = self._answer(*outcome)
        ended = spans.mark()
        spans.add("submit", ended[0] - started[0], checked[1] - started[1] + ended[1] - resumed[1] + insert_cpu)
        return answer

    def _on_thread(self, req: pb.LaunchJobRequest, identity: Identity) -> pb.LaunchJobResponse:
        with spans.span("submit"):
            return self._submit(req, identity)

    def _submit(self, req: pb.LaunchJobRequest, identity: Identity) -> pb.LaunchJobResponse:
        # Announced (by the API front as the request arrived, or here), so that a group being
        # committed meanwhile may wait for this one to join it.
        with self.commits.announced(current_announcement.get()) as note:
            return self._submit_announced(req, identity, note)

    def _submit_announced(
        self, req: pb.LaunchJobRequest, identity: Identity, note: Announcement
    ) -> pb.LaunchJobResponse:
        """A submit that carries or names a workspace (on a thread of its own)."""
        started = spans.mark()
        name, now, submitter = self.admission(req, identity)
        files = dict(req.workdir_files)
        info, bundle_id = self.check_workspace(req, files)
        with self.layer_pins.hold(bundle_id, workspace.files_id(files) if files else ""):
            received = self.receive_workspace(req, files, info)
            if received is MISSING:
                return pb.LaunchJobResponse(job_id=str(name), bundle_missing=True)
            bundle, files_id = received
            spans.add_since("submit.validate", started)
            write = self._writer(req, name, submitter, now, bundle, files_id, files)
            # Shared with the submits that arrive meanwhile: one transaction and one commit for all.
            with spans.span("submit.insert"):
                outcome = self.commits.run(write, note)
        return self._answer(*outcome)

    def admission(self, req: pb.LaunchJobRequest, identity: Identity) -> tuple[JobName, int, Submitter]:
        """The checks a submit passes before anything is unpacked or written: its names printable,
        the job's id, whether the caller may create it, its name, the client's age, its image. Returns (the job's id, now in
        ms, who is accountable for it)."""
        check_launch_request(req)
        name = resolve_job_id(req)
        check_may_create(identity, str(name), name.user)
        if name.is_root:
            # An admin may (to replace a received job with one of this cluster's own); no one else.
            requester = reserved_for(name.parts[0], self.config.auth.federation_peers)
            if requester and identity.role is not Role.ADMIN:
                raise InvalidArgument(
                    f"job name {name.parts[0]!r} is kept for jobs cluster {requester!r} hands to this cluster"
                    f" (it files them as <cluster>.<name>); choose a name that does not start with '{requester}.'"
                )
            check_client_freshness(req.client_revision_date, self.config.controller.client_max_age_days)
        now = self.now_ms()
        submitter = self.identities.submitter(req, identity)
        if req.image:
            check_image(req.image)  # a bad reference is said to be one, whatever the backends
        if req.image and not any(getattr(b, "runs_images", False) for b in self.backends.values()):
            raise InvalidArgument(
                f"the job names image {req.image!r}, but no backend of cluster {self.config.name} runs images: "
                "add a workers backend with workers started with --runtime docker, or drop --image"
            )
        return name, now, submitter

    def _writer(
        self,
        req: pb.LaunchJobRequest,
        name: JobName,
        submitter: Submitter,
        now: int,
        bundle,
        files_id: str,
        files: dict[str, bytes],
    ) -> Callable[[Connection], _Written]:
        """The write of one submit, run inside the submit group's transaction: the spec (which may
        need the parent's row), the disposition, the rows, the workspace's."""
        policy = req.existing_job_policy or "error"

        def write(conn: Connection) -> _Written:
            spec, parent = self.spec_of(conn, req, name, submitter)
            if files_id:
                spec = replace(spec, files_id=files_id)
            if parent is not None and not spec.bundle_id:
                spec = replace(spec, bundle_id=workspace.job_bundle_id(conn, str(name.parent)))
            disposition = self.classify(spec, submitter)
            if disposition.kind is DispositionKind.LOCAL:
                state, created = insert_job(conn, spec, now, policy)
                kind, peer = "local", ""
            elif disposition.kind is DispositionKind.QUEUE:
                created = fed.queue_job(conn, spec, disposition.peer_id, submitter.principal, now, policy)
                state, kind, peer = "PENDING", "queued", disposition.peer_id or ""
            else:
                created = fed.reject_job(conn, spec, disposition.reason, now, policy)
                state, kind, peer = "UNSCHEDULABLE", "rejected", ""
            if created and kind != "rejected":
                if bundle is not None:
                    workspace.store_bundle(conn, bundle, req.workspace_bundle, now)
                workspace.store_files(conn, spec.job_id, files)
            return spec, state, created, kind, peer, disposition

        return write

    def spec_of(
        self, conn: Connection, req: pb.LaunchJobRequest, name: JobName, submitter: Submitter
    ) -> tuple[JobSpec, dict | None]:
        """The job a submit of `req` stores (before its workspace), and its parent's row (None for
        a root job): read inside the submit's transaction, or a dry run's read."""
        parent: dict | None = None
        parent_constraints: tuple[Constraint, ...] = ()
        parent_env: dict[str, str] = {}
        if name.parent is not None:
            parent, parent_constraints, parent_env = parent_context(conn, str(name.parent))
        spec = build_spec(req, parent, parent_constraints, parent_env, owner=submitter.principal)
        spec = apply_time_limit(spec, self.config.controller.time_limits)
        if submitter.credential:
            spec = replace(spec, credential=submitter.credential)
        return spec, parent

    def classify(self, spec: JobSpec, submitter: Submitter) -> Disposition:
        """Where the job goes: here, queued for a peer, or refused (`PeerRouter.classify`)."""
        submitted = SubmittedJob(spec.job_id, spec.resources, spec.constraints, spec.replicas)
        if self.federation is not None:
            return self.federation.classify(submitted, submitter)
        return self.router.classify(submitted, (), submitter)

    def _answer(
        self, spec: JobSpec, state: str, created: bool, kind: str, peer: str, disposition: Disposition | None
    ) -> pb.LaunchJobResponse:
        """The answer to a committed submit; wakes the tick for a job it may place."""
        if not created:
            return pb.LaunchJobResponse(job_id=spec.job_id, state=state, disposition="existing")
        if kind == "queued":
            # Only the tick's federation step has work for it, and none while every peer is at its
            # cap: then only an answer can free a slot, and the answer wakes the tick.
            if self.federation is not None and not self.federation.saturated:
                self.tick.wake_federation()
        else:
            with spans.span("submit.wake"):
                self.tick.submitted()
        message = disposition.reason if disposition is not None else ""
        return pb.LaunchJobResponse(job_id=spec.job_id, state=state, disposition=kind, peer_id=peer, message=message)

    def check_workspace(self, req: pb.LaunchJobRequest, files: dict[str, bytes]):
        """Checks the request's workspace before anything is unpacked or written. Returns the
        BundleInfo of the bytes it carries (None when it carries none) and the id of the bundle the
        job names ("" for none)."""
        workspace.validate_files(req.workspace_bundle, files)
        if req.workspace_bundle:
            info = workspace.inspect_bundle(req.workspace_bundle, req.bundle_id)
            return info, info.content_id
        return None, req.bundle_id

    def receive_workspace(self, req: pb.LaunchJobRequest, files: dict[str, bytes], info):
        """Unpacks the checked workspace before anything is written (on this handler's thread,
        never the tick's), while the caller holds its layers against retention. Returns (the
        BundleInfo of bytes to store or None, the files' id), or MISSING when the request names a
        bundle this cluster does not hold. Sets the request's bundle_id, which build_spec copies
        into the job.
        """
        state = self.config.state_path
        try:
            if info is not None:
                workspace.unpack_bundle(state, info.content_id, req.workspace_bundle)
                req.bundle_id = info.content_id
            elif req.bundle_id:
                with self.db.read() as conn:
                    data = workspace.load_bundle(conn, req.bundle_id)
                if data is None:
                    return MISSING
                workspace.unpack_bundle(state, req.bundle_id, data)
            return info, workspace.write_files(state, files)
        except OSError as exc:
            # The state folder's disk (the database's) is full: refused as a full database refuses
            # a write, which the caller retries, not as a fault of the controller.
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise self.db.disk_full() from None
            raise
