"""Decides what a job not yet submitted would meet if it were submitted now (`iris job run
--dry-run`): where its tasks would start, what they would preempt, or why they would wait and
until when, and which band the job would compete in.

It is the control tick's own pass (`tick.run_tick`, then `joiners.wait_for_joiners` as the tick
applies it) over a snapshot of live state with the job's tasks added, read for that one job: no
second account of placement exists to drift from the first. Only the snapshot is hypothetical, so
the answer is what the next pass would decide were the job stored now, with everything else that
waits competing as it does.

The pass runs on a private copy of the loader's worker index (`ClusterIndex.advance`, which leaves
the original as it is): a pass keeps its requests on the index it ran on, for the next one to start
from, and the tick's must not start from a job that was never stored.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from iris.core.bands import Band
from iris.scheduler.index import ClusterIndex
from iris.scheduler.joiners import wait_for_joiners
from iris.scheduler.snapshot import Assignment, Estimate, PendingTask, Reservation, SchedulingSnapshot
from iris.scheduler.tick import cycles_uncollected, run_tick


@dataclass(frozen=True, slots=True)
class PlannedPreemption:
    """A running task the planned job would evict (`by_task_id` is the planned task placed there)."""

    task_id: str
    job_id: str
    worker_id: str
    band: Band
    by_task_id: str


@dataclass(frozen=True, slots=True)
class JobPlan:
    """What the next scheduling pass would decide for the planned job."""

    job_id: str
    tasks: int  # how many tasks it has
    placed: tuple[Assignment, ...]  # the tasks that would start now, and where
    preemptions: tuple[PlannedPreemption, ...]
    unschedulable: str | None  # why it can never be placed (None: it can)
    pending_reason: str | None  # why the tasks not placed would wait
    estimate: Estimate | None  # when those would start
    reservation: Reservation | None  # what it would hold while it waits
    band: Band  # the band it would compete in (batch when its owner is over budget)
    requested_band: Band

    @property
    def starts_now(self) -> bool:
        return self.unschedulable is None and len(self.placed) == self.tasks

    @property
    def backends(self) -> tuple[str, ...]:
        """The backends its placed tasks would start on, in the order of the tasks."""
        return tuple(dict.fromkeys(a.backend_id for a in self.placed))


def plan(snapshot: SchedulingSnapshot, tasks: Sequence[PendingTask], pools: tuple[str, ...] = ()) -> JobPlan:
    """The plan of the job of `tasks` (all of one job, none in `snapshot`): the tick's pass over
    `snapshot` with them added, read for that job. `pools`: the backends whose workers join while
    the cluster runs (see `joiners`)."""
    if not tasks:
        raise ValueError("a plan needs the tasks of the job it plans")
    job_id = tasks[0].job_id
    index = snapshot.index
    if isinstance(index, ClusterIndex):
        index = index.advance(snapshot.workers, snapshot.running)
    planned = replace(snapshot, pending=(*snapshot.pending, *tasks), index=index)
    with cycles_uncollected():
        tick = run_tick(planned)
    result = wait_for_joiners(tick.result(), planned, snapshot.now_ms, pools)
    mine = {t.task_id for t in tasks}
    running = {t.task_id: t for t in snapshot.running}
    preemptions = []
    for p in result.preemptions:
        victim = running.get(p.task_id)
        if p.by_task_id in mine and victim is not None:
            preemptions.append(PlannedPreemption(p.task_id, victim.job_id, p.worker_id, victim.band, p.by_task_id))
    outcome = tick.outcomes.get(job_id)
    return JobPlan(
        job_id=job_id,
        tasks=len(tasks),
        placed=tuple(a for a in result.assignments if a.task_id in mine),
        preemptions=tuple(preemptions),
        unschedulable=next((u.reason for u in result.unschedulable if u.task_id in mine), None),
        pending_reason=result.pending_reasons.get(job_id),
        estimate=result.estimates.get(job_id),
        reservation=next((r for r in result.reservations if r.job_id == job_id), None),
        band=outcome.request.band if outcome is not None else tasks[0].band,
        requested_band=tasks[0].band,
    )
