"""A dry run's plan is the tick's own decision for the planned job: the same placement, preemption,
reservation and reason `schedule` gives when the job's tasks are in the snapshot, and the worker
index the tick carries from pass to pass is left as it was."""

from __future__ import annotations

from dataclasses import replace

from iris.core.bands import Band
from iris.scheduler import RunningTask, SchedulingSnapshot, plan, schedule
from iris.scheduler.index import ClusterIndex
from tests.scheduler.scheduler_builders import cpu_request, cpu_worker, gpu_request, gpu_worker, job

NOW = 1_000_000


def _snapshot(running, pending=(), workers=None) -> SchedulingSnapshot:
    workers = tuple(workers or [cpu_worker("c1", cpu=4), cpu_worker("c2", cpu=4)])
    return SchedulingSnapshot(NOW, workers, tuple(running), tuple(pending), index=ClusterIndex(workers, running))


def test_plan_free_capacity_places_where_schedule_does():
    snapshot = _snapshot([], job("queued", cpu_request(4), insertion=1))
    tasks = job("new", cpu_request(2), insertion=2)
    planned = plan(snapshot, tasks)
    decided = schedule(replace(snapshot, pending=(*snapshot.pending, *tasks), index=None))
    assert planned.starts_now and planned.backends == ("cpu",)
    assert planned.placed == tuple(a for a in decided.assignments if a.task_id == "new/0")
    assert planned.band is Band.INTERACTIVE and planned.unschedulable is None


def test_plan_full_worker_waits_with_reservation_and_estimate_of_the_running_limit():
    gpu = [gpu_worker("g1")]
    running = [RunningTask("r/0", "r", "g1", gpu_request(8), Band.INTERACTIVE, NOW - 1000, "bob", NOW + 20_000)]
    planned = plan(_snapshot(running, workers=gpu), job("big", gpu_request(8), user="alice", insertion=1))
    assert not planned.starts_now and planned.placed == ()
    assert planned.reservation is not None and planned.reservation.worker_ids == ("g1",)
    assert planned.estimate is not None and planned.estimate.latest_ms == NOW + 20_000
    assert "Holds a reservation on g1" in (planned.pending_reason or "")


def test_plan_higher_band_names_the_task_it_preempts():
    running = [
        RunningTask("old/0", "old", "c1", cpu_request(4), Band.BATCH, NOW - 5000, "bob"),
        RunningTask("young/0", "young", "c2", cpu_request(4), Band.BATCH, NOW - 1000, "bob"),
    ]
    snapshot = _snapshot(running)
    tasks = job("urgent", cpu_request(4), band=Band.PRODUCTION, insertion=3)
    planned = plan(snapshot, tasks)
    decided = schedule(replace(snapshot, pending=tasks, index=None))
    assert [(p.job_id, p.task_id) for p in planned.preemptions] == [
        (p.task_id.split("/")[0], p.task_id) for p in decided.preemptions
    ]
    assert [p.job_id for p in planned.preemptions] == ["young"]  # the youngest victim goes first
    assert planned.starts_now


def test_plan_never_fits_says_why():
    planned = plan(_snapshot([]), job("huge", cpu_request(64), insertion=1))
    assert planned.unschedulable and not planned.starts_now


def test_plan_leaves_the_carried_index_as_it_was():
    snapshot = _snapshot([], job("queued", cpu_request(4), insertion=1))
    schedule(snapshot)  # the tick's pass: it keeps its requests on the index for the next one
    index = snapshot.index
    assert isinstance(index, ClusterIndex)
    carried = index.requests
    plan(snapshot, job("new", cpu_request(1), insertion=2))
    assert index.requests is carried
