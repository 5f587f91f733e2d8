"""Properties of `schedule` over generated clusters: never over-commits a worker, never preempts an
equal or higher band, places coscheduled jobs all or nothing, and is deterministic."""

from __future__ import annotations

import random
from collections import defaultdict

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from iris.core.bands import Band
from iris.core.constraints import Constraint, Op
from iris.core.resources import Device, Resources
from iris.scheduler import PendingTask, RunningTask, SchedulingSnapshot, WorkerSnapshot, explain, schedule
from iris.scheduler.fit import add, demand, fits, group_of, worker_attributes
from iris.scheduler.ordering import is_coscheduled

G = 1024**3
PROPERTY_SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def workers(draw) -> list[WorkerSnapshot]:
    out = []
    for i in range(draw(st.integers(1, 6))):
        gpu = draw(st.booleans())
        variant = draw(st.sampled_from(["h100", "a100"]))
        count = draw(st.sampled_from([4, 8])) if gpu else 0
        attrs = {"device-type": "gpu" if gpu else "cpu", "region": draw(st.sampled_from(["us", "eu"]))}
        if gpu:
            attrs |= {"device-variant": variant, "gpu-count": str(count)}
        pool = draw(st.sampled_from(["", "p1", "p2"]))
        if pool:
            attrs["pool"] = pool
        device = Device("gpu", variant, count) if gpu else Device()
        capacity = Resources(
            cpu=draw(st.sampled_from([2, 4, 8])), memory=draw(st.sampled_from([4, 16])) * G, device=device
        )
        out.append(
            WorkerSnapshot(f"w{i}", draw(st.sampled_from(["b1", "b2"])), capacity, attrs, draw(st.booleans()) or i == 0)
        )
    return out


def request(draw, worker_list) -> Resources:
    if draw(st.booleans()):
        variant = draw(st.sampled_from(["h100", "a100", ""]))
        return Resources(cpu=1, memory=G, device=Device("gpu", variant, draw(st.sampled_from([1, 2, 4, 8]))))
    return Resources(cpu=draw(st.sampled_from([0.5, 1, 2, 4])), memory=draw(st.sampled_from([1, 2, 8])) * G)


@st.composite
def snapshots(draw) -> SchedulingSnapshot:
    worker_list = draw(workers())
    free = {w.worker_id: demand(w.capacity) for w in worker_list}
    running = []
    for i in range(draw(st.integers(0, 10))):
        worker = draw(st.sampled_from(worker_list))
        resources = request(draw, worker_list)
        need = demand(resources)
        if not worker.alive or not fits(free[worker.worker_id], need):
            continue
        free[worker.worker_id] = tuple(a - b for a, b in zip(free[worker.worker_id], need))
        running.append(
            RunningTask(
                f"/r/j{i}/0",
                f"/r/j{i}",
                worker.worker_id,
                resources,
                draw(st.sampled_from(list(Band))),
                draw(st.integers(0, 100)),
                draw(st.sampled_from(["alice", "bob"])),
            )
        )
    pending = []
    for j in range(draw(st.integers(0, 8))):
        resources = request(draw, worker_list)
        replicas = draw(st.integers(1, 3))
        constraints = (Constraint("region", Op.EQ, ("us",)),) if draw(st.integers(0, 4)) == 0 else ()
        band = draw(st.sampled_from(list(Band)))
        fields = dict(
            band=band,
            user=draw(st.sampled_from(["alice", "bob"])),
            depth=draw(st.integers(0, 1)),
            root_submitted_ms=draw(st.integers(0, 5)),
            insertion=j,
            replicas=replicas,
            coschedule=draw(st.booleans()),
            scheduling_deadline_ms=draw(st.sampled_from([None, None, None, 50])),
        )
        for index in range(replicas):
            pending.append(PendingTask(f"/p/j{j}/{index}", f"/p/j{j}", index, resources, constraints, **fields))
    budgets = draw(st.sampled_from([{}, {"alice": 0}, {"alice": 1000, "bob": 5}]))
    return SchedulingSnapshot(100, tuple(worker_list), tuple(running), tuple(pending), budgets)


@PROPERTY_SETTINGS
@given(snapshots())
def test_property_worker_never_over_committed(snap):
    result = schedule(snap)
    evicted = {p.task_id for p in result.preemptions}
    pending = {t.task_id: t for t in snap.pending}
    used = defaultdict(lambda: (0, 0, 0, 0))
    for task in snap.running:
        if task.task_id not in evicted:
            used[task.worker_id] = add(used[task.worker_id], demand(task.resources))
    for assignment in result.assignments:
        used[assignment.worker_id] = add(used[assignment.worker_id], demand(pending[assignment.task_id].resources))
    by_id = {w.worker_id: w for w in snap.workers}
    for worker_id, vector in used.items():
        assert fits(demand(by_id[worker_id].capacity), vector), worker_id
    for assignment in result.assignments:
        assert by_id[assignment.worker_id].alive


@PROPERTY_SETTINGS
@given(snapshots())
def test_property_never_preempted_by_equal_or_lower_band(snap):
    result = schedule(snap)
    running = {t.task_id: t for t in snap.running}
    pending = {t.task_id: t for t in snap.pending}
    placed_on = {a.task_id: a.worker_id for a in result.assignments}
    assert len({p.task_id for p in result.preemptions}) == len(result.preemptions)
    for preemption in result.preemptions:
        victim, preemptor = running[preemption.task_id], pending[preemption.by_task_id]
        assert preemptor.band.outranks(victim.band)
        assert victim.worker_id == preemption.worker_id == placed_on[preemptor.task_id]


@PROPERTY_SETTINGS
@given(snapshots())
def test_property_coscheduled_job_all_or_nothing_in_one_group(snap):
    result = schedule(snap)
    placed = {a.task_id: a.worker_id for a in result.assignments}
    workers_by_id = {w.worker_id: w for w in snap.workers}
    by_job = defaultdict(list)
    for task in snap.pending:
        if task.scheduling_deadline_ms is None or snap.now_ms < task.scheduling_deadline_ms:
            by_job[task.job_id].append(task)
    for tasks in by_job.values():
        if not is_coscheduled(tasks[0]):
            continue
        count = sum(1 for t in tasks if t.task_id in placed)
        assert count in (0, len(tasks))
        groups = {
            group_of(worker_attributes(workers_by_id[placed[t.task_id]]), workers_by_id[placed[t.task_id]].backend_id)
            for t in tasks
            if t.task_id in placed
        }
        assert len(groups) <= 1


@PROPERTY_SETTINGS
@given(snapshots(), st.randoms(use_true_random=False))
def test_property_same_snapshot_same_decisions(snap, rng: random.Random):
    expected = schedule(snap)
    shuffled = [list(snap.workers), list(snap.running), list(snap.pending)]
    for items in shuffled:
        rng.shuffle(items)
    again = SchedulingSnapshot(
        snap.now_ms, tuple(shuffled[0]), tuple(shuffled[1]), tuple(shuffled[2]), snap.user_budgets
    )
    assert schedule(again) == expected
    assert schedule(snap) == expected


@PROPERTY_SETTINGS
@given(snapshots())
def test_property_every_pending_task_accounted_for(snap):
    result = schedule(snap)
    placed = {a.task_id for a in result.assignments}
    failed = {u.task_id for u in result.unschedulable}
    assert not placed & failed
    for task in snap.pending:
        assert task.task_id in placed or task.task_id in failed or task.job_id in result.pending_reasons


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots())
def test_property_explain_summary_is_the_pending_reason(snap):
    result = schedule(snap)
    for job_id, reason in list(result.pending_reasons.items())[:3]:
        assert explain(snap, job_id).summary == reason
