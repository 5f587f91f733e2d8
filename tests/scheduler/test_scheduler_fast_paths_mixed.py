"""The fast pass decides as the reference scheduler also where the seeded clusters of
`test_scheduler_fast_paths` do not reach: tasks of one job that differ in constraints or request
(with gaps in a job's indexes), jobs of equal requests in several bands and users, children of
running jobs, and crowded coscheduled preemption in every band against running work of every band
under a budget. Cheap enough to run many seeds: each snapshot is small."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from iris.core.bands import Band
from iris.core.constraints import Constraint, Op
from iris.scheduler import PendingTask, SchedulingSnapshot
from tests.scheduler.test_scheduler_fast_paths import (
    REGIONS,
    crowded_snapshot,
    fast,
    random_request,
    random_running,
    random_workers,
    reference,
)

pytestmark = pytest.mark.usefixtures("searches")


def mixed_snapshot(seed: int) -> SchedulingSnapshot:
    rng = random.Random(seed)
    workers = random_workers(rng, rng.randint(6, 30))
    running = random_running(rng, workers)
    palette = [random_request(rng) for _ in range(rng.randint(1, 3))]
    pending = []
    for j in range(rng.randint(3, 40)):
        replicas = rng.choice((1, 2, 3, 4, 6))
        resources, constraints, _ = rng.choice(palette)
        fields = dict(
            band=rng.choice(list(Band)),
            user=rng.choice(("alice", "bob")),
            depth=int(rng.random() < 0.2),
            root_submitted_ms=rng.randint(0, 5),
            insertion=j,
            replicas=replicas,
            coschedule=rng.random() < 0.5,
            scheduling_deadline_ms=rng.choice((None, 500)),
            parent_running=rng.random() < 0.2,
        )
        for i in range(replicas):
            res, cons, draw = resources, constraints, rng.random()
            if draw < 0.25:
                cons = (*cons, Constraint("region", Op.EQ, (rng.choice(REGIONS),)))
            elif draw < 0.35:
                cons = (*cons, Constraint("zone", Op.EQ, (f"{rng.choice(REGIONS)}-a",), preferred=True))
            elif draw < 0.45:
                res = rng.choice(palette)[0]
            elif draw < 0.55:
                res = replace(res)  # equal, not the same object
            if rng.random() < 0.9:  # some indexes missing, as when some replicas already ended
                pending.append(PendingTask(f"/p/m{j}/{i}", f"/p/m{j}", i, res, cons, **fields))
    budgets = rng.choice(({}, {"alice": 20_000}, {"bob": 0}))
    return SchedulingSnapshot(1_000, tuple(workers), tuple(running), tuple(pending), budgets)


def crowded_across_bands(seed: int) -> SchedulingSnapshot:
    snap = crowded_snapshot(seed)
    rng = random.Random(seed * 7 + 1)
    per_job: dict[str, tuple[Band, str]] = {}
    pending = []
    for task in snap.pending:
        band, user = per_job.setdefault(task.job_id, (rng.choice(list(Band)), rng.choice(("alice", "bob", "carol"))))
        pending.append(replace(task, band=band, user=user))
    running = [replace(t, band=rng.choice(list(Band)), user=rng.choice(("alice", "bob"))) for t in snap.running]
    budgets = rng.choice(({}, {"alice": 10_000}))
    return replace(snap, pending=tuple(pending), running=tuple(running), user_budgets=budgets)


def test_fast_pass_same_as_reference_with_tasks_of_one_job_unlike_each_other():
    seen = {"assignments": 0, "preemptions": 0, "reasons": 0}
    for seed in range(60):
        snap = mixed_snapshot(seed)
        expected = reference(snap)
        assert fast(snap) == expected, f"seed {seed}"
        seen["assignments"] += len(expected.assignments)
        seen["preemptions"] += len(expected.preemptions)
        seen["reasons"] += len(expected.waiting)
    assert all(count > 0 for count in seen.values()), seen


def test_fast_pass_same_as_reference_for_crowded_coscheduled_jobs_across_bands():
    preemptions = reasons = 0
    for seed in range(60):
        snap = crowded_across_bands(seed)
        expected = reference(snap)
        assert fast(snap) == expected, f"seed {seed}"
        preemptions += len(expected.preemptions)
        reasons += len(expected.waiting)
    assert preemptions > 20 and reasons > 20, (preemptions, reasons)


def spilling_snapshot(seed: int) -> SchedulingSnapshot:
    """Small workers and long runs of independent replicas from a few requests: a job's run spills
    over several workers in turn, later jobs resume searches the earlier ones left, and runs that
    find no room end in preemption or a wait."""
    rng = random.Random(seed)
    workers = random_workers(rng, rng.randint(10, 40))
    running = random_running(rng, workers)
    palette = [random_request(rng) for _ in range(rng.randint(1, 3))]
    pending = []
    for j in range(rng.randint(5, 30)):
        resources, constraints, _ = rng.choice(palette)
        replicas = rng.choice((1, 3, 7, 16))
        band = rng.choice(list(Band))
        pending += [
            PendingTask(
                f"/p/s{j}/{i}", f"/p/s{j}", i, resources, constraints, band, "alice", insertion=j, replicas=replicas
            )
            for i in range(replicas)
        ]
    return SchedulingSnapshot(1_000, tuple(workers), tuple(running), tuple(pending))


def test_fast_pass_same_as_reference_for_runs_spilling_over_many_workers():
    spilled = 0
    for seed in range(40):
        snap = spilling_snapshot(seed)
        expected = reference(snap)
        assert fast(snap) == expected, f"seed {seed}"
        per_job: dict[str, set[str]] = {}
        for task_id, worker_id in expected.assignments:
            per_job.setdefault(task_id.rsplit("/", 1)[0], set()).add(worker_id)
        spilled += sum(1 for used in per_job.values() if len(used) >= 3)
    assert spilled > 20, spilled  # jobs whose run took three workers or more
