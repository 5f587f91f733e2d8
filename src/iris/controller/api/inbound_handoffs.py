"""Peer admission: the jobs another cluster hands this one (HandOffJobs, or LaunchJob with a
handoff record, from a parent that predates HandOffJobs), from each job's checks to the answer.

Each job is checked on its own (the caller may hand it, its workspace is sound, its spec is valid)
and admitted on its own, so a refusal of one leaves the others; all the jobs of one call are written
in one transaction, a savepoint each, and the answer goes back once that transaction has committed
(DESIGN §6, peer admission: an acknowledged handoff survives a crash of this cluster).

Why the write joins the submit group (`GroupCommit.run_async`) and the checks run on the event
loop: a handoff without a workspace needs no disk before its write, and its checks are pure work
of tens of microseconds per job. Run as a blocking handler on a worker thread, each call paid a hop
to the thread and a hop back onto the loop, and on a busy peer the hop back waited for the GIL
while the tick, woken by the admission itself, placed and started the jobs just admitted: traced
through a burst of `bench/federation_e2e.py`, the parent had a peer's answer a median 9 ms after
the peer's handler was done with it (3 ms now), which held that many ms longer the slots of the
per-peer cap the answer frees. Now the write goes to the group's writer thread (shared with the
submits and other handoffs arriving meanwhile), the loop is woken once it is committed, and the
tick only after the answer has been handed to the server (`loop.call_soon`). A handoff that carries
a workspace unpacks it first, which is disk work, and runs on a thread as any blocking handler
does, through the same checks and the same write.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from iris.controller.api.job_spec import build_spec, resolve_job_id
from iris.controller.api.launch import MISSING, Submits
from iris.controller.db import federation as fed
from iris.controller.db import workspace
from iris.controller.db.database import savepoint
from iris.controller.db.group_commit import current_announcement
from iris.core.errors import FailedPrecondition, InvalidArgument, IrisError, Unavailable
from iris.core.job import JobSpec
from iris.core.names import JobName
from iris.core.printable import check_launch_request
from iris.federation.ids import received_job_id
from iris.rpc import controller_pb2 as pb

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

    from iris.controller.app import Controller
    from iris.controller.auth import Identity

log = logging.getLogger(__name__)

MAX_HANDOFFS_PER_CALL = 256  # jobs one HandOffJobs call may carry (the parent sends far fewer)
# Test-only: seconds each handoff call waits before it admits anything (a peer slower than its
# parent's call timeout). Read from the environment tests start a controller with; unset in use.
HANDOFF_DELAY_ENV = "IRIS_TEST_HANDOFF_DELAY_S"

# What one job of a call came to: its answer, or the refusal it gets.
Outcome = pb.LaunchJobResponse | IrisError


@dataclass(frozen=True, slots=True)
class _Prepared:
    """One handoff checked and ready for its insert."""

    index: int  # its place in the call
    spec: JobSpec
    request: pb.LaunchJobRequest
    files: dict[str, bytes]
    bundle: workspace.BundleInfo | None  # the workspace bytes to store with the job, if any


def _carries_workspace(req: pb.LaunchJobRequest) -> bool:
    return bool(req.workspace_bundle or req.bundle_id or req.workdir_files)


class Handoffs:
    """Peer admission, holding the parts of the controller it uses."""

    def __init__(self, controller: Controller, submits: Submits):
        self.config = controller.config
        self.commits = controller.commits
        self.auth = controller.auth
        self.tick = controller.tick
        self.now_ms = controller.now_ms
        self.layer_pins = controller.layer_pins
        self.submits = submits
        self.delay_s = float(os.environ.get(HANDOFF_DELAY_ENV) or 0)
        self._running: set[asyncio.Task] = set()  # admissions under way (held until done)

    async def hand_off_jobs(self, req: pb.HandOffJobsRequest, identity: Identity) -> pb.HandOffJobsResponse:
        """Admits or refuses each job of one call; the answer once every admission is committed."""
        if len(req.jobs) > MAX_HANDOFFS_PER_CALL:
            raise InvalidArgument(
                f"HandOffJobs carries {len(req.jobs)} jobs; send at most {MAX_HANDOFFS_PER_CALL} per call"
            )
        names = [job.name for job in req.jobs]  # as the parent sent them (admission renames each)
        outcomes = []
        for name, result in zip(names, await self.admit(req.jobs, identity), strict=True):
            outcome = pb.HandOffOutcome(job_id=name)
            if isinstance(result, IrisError):
                outcome.error_code, outcome.error_message = result.code, result.message
            else:
                outcome.accepted.CopyFrom(result)
            outcomes.append(outcome)
        return pb.HandOffJobsResponse(outcomes=outcomes)

    async def launch_job(self, req: pb.LaunchJobRequest, identity: Identity) -> pb.LaunchJobResponse:
        """One handoff by LaunchJob (a parent without HandOffJobs): its answer, or its refusal raised."""
        (result,) = await self.admit([req], identity)
        if isinstance(result, IrisError):
            raise result
        return result

    async def admit(self, jobs: Sequence[pb.LaunchJobRequest], identity: Identity) -> list[Outcome]:
        """Each job's outcome, in order; raises Unavailable (the whole call is retried) when this
        cluster cannot write now. Wakes the tick, after the answer, when a job was created.

        A call whose parent hangs up (its timeout) is admitted all the same, as a blocking handler
        would go on to admit it: the parent re-drives it under the same nonce, which is then a
        replay, and a stop the parent sent meanwhile is found by the admission (`handoff_stops`)."""
        task = asyncio.ensure_future(self._admit(jobs, identity))
        self._running.add(task)
        task.add_done_callback(self._forget)
        return await asyncio.shield(task)

    def _forget(self, task: asyncio.Task) -> None:
        self._running.discard(task)
        if not task.cancelled():
            task.exception()  # seen here: a caller that hung up no longer awaits it

    async def _admit(self, jobs: Sequence[pb.LaunchJobRequest], identity: Identity) -> list[Outcome]:
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if any(_carries_workspace(job) for job in jobs):
            results, created = await asyncio.to_thread(self._admit_on_thread, jobs, identity)
        else:
            with ExitStack() as pins:  # holds nothing: no job names a workspace
                results, prepared = self._prepare_all(jobs, identity, pins)
                created = bool(prepared) and await self.commits.run_async(
                    self._writer(prepared, results), current_announcement.get()
                )
        if created:
            # After this task has handed its answer to the server: the tick's pass would otherwise
            # take the GIL from the loop that sends it.
            asyncio.get_running_loop().call_soon(self.tick.wake)
        return results

    def _admit_on_thread(self, jobs: Sequence[pb.LaunchJobRequest], identity: Identity) -> tuple[list[Outcome], bool]:
        """`admit` for a call whose jobs carry workspaces (unpacked before the write, held until it)."""
        with ExitStack() as pins:
            results, prepared = self._prepare_all(jobs, identity, pins)
            created = bool(prepared) and self.commits.run(self._writer(prepared, results))
        return results, created

    def _prepare_all(
        self, jobs: Sequence[pb.LaunchJobRequest], identity: Identity, pins: ExitStack
    ) -> tuple[list[Outcome], list[_Prepared]]:
        """Checks every job; a refused one gets its error in the outcomes, the others are returned
        ready for their insert."""
        results: list[Outcome] = [pb.LaunchJobResponse() for _ in jobs]
        prepared = []
        for index, job in enumerate(jobs):
            try:
                prepared.append(self._prepare(index, job, identity, pins))
            except Unavailable:
                raise  # this cluster cannot serve now: the whole call is retried
            except IrisError as exc:
                results[index] = exc
        return results, prepared

    def _prepare(self, index: int, req: pb.LaunchJobRequest, identity: Identity, pins: ExitStack) -> _Prepared:
        """Everything about one handoff that comes before its insert: the caller may hand it, its
        workspace is sound and unpacked (its layers held by `pins` until the insert is committed)."""
        check_launch_request(req)
        handoff = req.handoff
        if not handoff.requester_cluster or not handoff.nonce:
            raise InvalidArgument("a handoff needs the requesting cluster and a nonce")
        self.auth.check_handoff(identity, handoff.requester_cluster, handoff.owner_principal)
        # Filed under the requester's namespace, so two parents' /u1/train never collide here.
        req.name, req.user = received_job_id(handoff.requester_cluster, str(resolve_job_id(req))), ""
        files = dict(req.workdir_files)
        info, bundle_id = self.submits.check_workspace(req, files)
        pins.enter_context(self.layer_pins.hold(bundle_id, workspace.files_id(files) if files else ""))
        received = self.submits.receive_workspace(req, files, info)
        if received is MISSING:
            raise InvalidArgument(f"the handoff names bundle {req.bundle_id} but does not carry its bytes")
        bundle, files_id = received
        spec = replace(
            build_spec(req, None, (), {}, owner=handoff.owner_principal or JobName.parse(req.name).user),
            files_id=files_id,
        )
        return _Prepared(index, spec, req, files, bundle)

    def _writer(self, prepared: list[_Prepared], results: list[Outcome]) -> Callable[[Connection], bool]:
        """The write of one call's checked jobs, run in the submit group's transaction: each in its
        own savepoint, its outcome set in `results`; returns whether any job was created."""

        def write(conn: Connection) -> bool:
            created = False
            for job in prepared:
                try:
                    with savepoint(conn):
                        outcome = self._insert(conn, job)
                except Unavailable:
                    raise
                except IrisError as exc:
                    results[job.index] = exc
                else:
                    results[job.index] = pb.LaunchJobResponse(
                        job_id=job.spec.job_id,
                        state="PENDING",
                        disposition="local" if outcome == "created" else "existing",
                    )
                    created = created or outcome == "created"
            return created

        return write

    def _insert(self, conn: Connection, job: _Prepared) -> str:
        """Admits one checked handoff in the caller's transaction: 'created' or 'existing'."""
        now = self.now_ms()
        try:
            outcome = fed.admit_received(conn, job.spec, job.request.handoff, job.files, now)
        except FailedPrecondition as exc:
            log.info("refused a handoff: %s", exc.message)
            raise
        if outcome == "created" and job.bundle is not None:
            workspace.store_bundle(conn, job.bundle, job.request.workspace_bundle, now)
        return outcome
