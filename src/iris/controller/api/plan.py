"""A dry run of a submit (PlanJob, `iris job run --dry-run`): what a LaunchJob of the same request
would meet now, writing nothing.

The request passes the submit's own checks (`Submits.admission`, `Submits.spec_of`,
`Submits.classify`, and `check_new_job`, the function `insert_job` decides a duplicate id by), so
a request LaunchJob would refuse is refused here with the same error. Then, by where the router
sends it:

- here: the scheduler's pass over a snapshot of live state with the job's tasks added
  (`iris.scheduler.plan`), which says where they would start, what they would preempt, or why
  they would wait, until when, and what they would hold meanwhile;
- to a peer: the federation step's pass over the queued jobs with this one added
  (`FederationManager.preview`), which says which peer and backend it would be handed to now;
- nowhere: the router's reason, which the submit would fail the job with.

The snapshot is taken as `iris job explain` takes it: the loader's load, under the loader's own
lock and one read transaction (milliseconds; the tick waits for it only if it loads at that very
moment), then the pass runs on this API thread outside any lock, on a private copy of the worker
index. No row, reservation, ledger charge or handoff is written, and nothing the tick carries from
one pass to the next is changed, so a dry run never changes what the tick decides.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from iris import scheduler
from iris.controller.api.submit_rate import SubmitRate
from iris.controller.auth import Identity, Role
from iris.controller.db.database import run
from iris.controller.db.jobs import check_new_job
from iris.controller.state.snapshot import planned_tasks
from iris.core.bands import Band
from iris.core.errors import InvalidArgument
from iris.core.job import JobSpec
from iris.federation.model import Disposition, DispositionKind, HandoffState, QueuedJob
from iris.federation.reasons import unknown_start
from iris.rpc import controller_pb2 as pb
from iris.scheduler.gating import budget_of, effective_band, over_budget, user_spend

# A dry run costs a whole scheduling pass (a submit, one insert): a user's plans are limited to a
# burst of PLAN_BURST, then PLANS_PER_S a second (admins and the operator are not), so that a
# script asking in a loop cannot take the interpreter from the tick.
PLAN_BURST = 20
PLANS_PER_S = 5.0

if TYPE_CHECKING:
    from iris.controller.api.launch import Submits
    from iris.controller.app import Controller
    from iris.scheduler.snapshot import RunningTask


class Planner:
    """Answers PlanJob, holding the parts of the controller it reads."""

    def __init__(self, controller: Controller, submits: Submits):
        self.db = controller.db
        self.tick = controller.tick
        self.backends = controller.backends
        self.federation = controller.federation
        self.budgets = controller.config.budgets
        self.submits = submits
        self.rate = SubmitRate(PLANS_PER_S, PLAN_BURST)

    def plan(self, req: pb.LaunchJobRequest, identity: Identity) -> pb.PlanJobResponse:
        """What LaunchJob of `req` by `identity` would meet now; raises what LaunchJob would raise."""
        if req.HasField("handoff"):
            raise InvalidArgument(
                "a handoff is admitted or refused, not planned: PlanJob plans this cluster's own submits"
            )
        if not (identity.local_admin or identity.role is Role.ADMIN):
            self.rate.spend(
                identity.principal,
                1,
                lambda wait_s: (
                    f"{identity.principal} asks for dry runs faster than this cluster answers one user"
                    f" ({PLANS_PER_S:g} a second after a burst of {PLAN_BURST}); try again in {wait_s:.1f}s"
                ),
            )
        name, now, submitter = self.submits.admission(req, identity)
        if req.workspace_bundle or req.workdir_files:
            self.submits.check_workspace(req, dict(req.workdir_files))
        with self.db.read() as conn:
            spec, parent = self.submits.spec_of(conn, req, name, submitter)
            disposition = self.submits.classify(spec, submitter)
            met = check_new_job(conn, spec, req.existing_job_policy or "error", parent)
            insertion = run(conn, "SELECT COALESCE(MAX(insertion), 0) + 1 FROM jobs").fetchone()[0]
        resp = pb.PlanJobResponse(
            job_id=spec.job_id,
            requested_band=spec.band.label,
            band=spec.band.label,
            timeout_s=spec.timeout_s,
            tasks=spec.replicas,
        )
        if met.kept is not None:  # --existing keep: the submit answers with the job as it is
            resp.disposition, resp.state = "existing", met.kept
            return resp
        resp.message = disposition.reason
        if disposition.kind is DispositionKind.REJECT:
            resp.disposition, resp.state = "rejected", "UNSCHEDULABLE"
            resp.unschedulable = disposition.reason
            return resp
        resp.state = "PENDING"
        if disposition.kind is DispositionKind.QUEUE:
            self._plan_handoff(resp, spec, disposition, now)
        else:
            self._plan_here(resp, spec, parent, insertion, now)
        return resp

    def _plan_here(
        self, resp: pb.PlanJobResponse, spec: JobSpec, parent: dict | None, insertion: int, now: int
    ) -> None:
        """The scheduler's answer for a job that would run on this cluster."""
        resp.disposition = "local"
        workers = tuple(w for b in self.backends.values() for w in b.workers())
        snapshot = self.tick.loader.load(now, workers)
        if self.tick.reserved_since:
            snapshot = replace(snapshot, reserved_since=self.tick.reserved_since)
        planned = scheduler.plan(snapshot, planned_tasks(spec, now, insertion, parent), self.tick.pools)
        self._budget(resp, spec.user, snapshot.running, snapshot.peer_spend)
        resp.band = planned.band.label
        resp.backend_ids.extend(planned.backends)
        resp.worker_ids.extend(a.worker_id for a in planned.placed)
        resp.tasks_placed = len(planned.placed)
        resp.starts_now = planned.starts_now
        for p in planned.preemptions:
            resp.preemptions.add(job_id=p.job_id, task_id=p.task_id, worker_id=p.worker_id, band=p.band.label)
        if planned.unschedulable is not None:
            resp.unschedulable = planned.unschedulable
            return
        if planned.starts_now:
            resp.start_earliest_ms = resp.start_latest_ms = now
            return
        resp.pending_reason = planned.pending_reason or ""
        if planned.estimate is not None:
            resp.start_earliest_ms = planned.estimate.earliest_ms
            resp.start_latest_ms = planned.estimate.latest_ms or 0
            resp.start_basis = planned.estimate.basis
        if planned.reservation is not None:
            resp.reserved_backend_id = planned.reservation.backend_id
            resp.reserved_workers.extend(planned.reservation.worker_ids)

    def _plan_handoff(self, resp: pb.PlanJobResponse, spec: JobSpec, disposition: Disposition, now: int) -> None:
        """The federation step's answer for a job that would be queued for a peer."""
        assert self.federation is not None  # the router queues only for a configured peer
        resp.disposition = "queued"
        resp.pending_reason = disposition.reason
        resp.pinned_peer = disposition.peer_id or ""
        if disposition.peer_id:
            resp.route = f"it is pinned to {disposition.peer_id} (--target-cluster {disposition.peer_id})"
        else:
            resp.route = f"no local backend can host {spec.resources.describe()}"
        resp.candidate_peers.extend(disposition.candidate_peers)
        running, peer_spend = self.tick.loader.load_spend_inputs()
        self._budget(resp, spec.user, running, peer_spend)
        job = QueuedJob(
            spec.job_id,
            spec.band,
            now,
            spec.resources,
            spec.replicas,
            spec.constraints,
            pinned_peer=disposition.peer_id,
        )
        band_of = self.tick.queued_band_of
        if band_of is not None:
            resp.band = band_of(job).label
        promotion = self.federation.preview(job, band_of)
        stage = HandoffState.QUEUED_HANDOFF
        if promotion is not None:
            stage = HandoffState.PENDING_HANDOFF
            resp.peer_id = promotion.peer_id
            resp.peer_backend_id = promotion.backend_id
            resp.peer_reclaims = promotion.reclaimed
        resp.start_basis = unknown_start(stage.value, resp.peer_id) or ""

    def _budget(
        self, resp: pb.PlanJobResponse, user: str, running: tuple[RunningTask, ...], peer_spend: Mapping[str, int]
    ) -> None:
        """The owner's spend against their budget, and the band it puts the job in."""
        spend = user_spend(running, peer_spend)
        users, default = self.budgets.users, self.budgets.default
        resp.spend = spend.get(user, 0)
        budget = budget_of(user, users, default)
        if budget is not None:
            resp.budget = budget
        resp.over_budget = over_budget(user, spend, users, default)
        resp.band = effective_band(Band.parse(resp.requested_band), user, spend, users, default).label
