"""Decides what becomes of the tasks the scheduler found no worker for on a cluster whose workers
join while it runs (a pool of worker daemons): they wait for a worker that can host them, until
their scheduling deadline.

Applied by the control tick to every scheduling result, and by a dry run (`iris.scheduler.plan`)
to its own, so that both say the same of such a task.
"""

from __future__ import annotations

from dataclasses import replace

from iris.scheduler.gating import deadline_passed
from iris.scheduler.snapshot import ScheduleResult, SchedulingSnapshot, Unschedulable


def wait_for_joiners(
    result: ScheduleResult, snapshot: SchedulingSnapshot, now: int, pools: tuple[str, ...]
) -> ScheduleResult:
    """`result` with its never-placeable tasks left pending: on a cluster with a pool of worker
    daemons, a task no worker joined now can host may be hosted by one that joins later, so it
    waits (with the reason the scheduler gave) until its scheduling deadline, if it has one.
    `pools`: the backends whose workers join while the cluster runs (none: `result` as it is)."""
    if not (result.unschedulable and pools):
        return result
    pending = {t.task_id: t for t in snapshot.pending}
    named = ", ".join(pools)
    ended: list[Unschedulable] = []
    reasons = dict(result.pending_reasons)
    for u in result.unschedulable:
        task = pending.get(u.task_id)
        if task is None or deadline_passed(task, now):
            timed_out = task is not None and not u.reason.startswith("Scheduling timeout")
            ended.append(
                Unschedulable(
                    u.task_id, f"Scheduling timeout reached before a worker that can host it joined: {u.reason}"
                )
                if timed_out
                else u
            )
            continue
        reasons.setdefault(task.job_id, f"Waiting for a worker that can host it to join {named}: {u.reason}")
    return replace(result, unschedulable=tuple(ended), pending_reasons=reasons)
