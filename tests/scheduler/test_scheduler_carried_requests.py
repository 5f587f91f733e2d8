"""The pending jobs as placement takes them, kept in the worker index for the next tick: taken as
they are only while the same tasks wait and gating decides the same, so a carried index never
changes a decision."""

from __future__ import annotations

import random
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from iris.core.bands import Band
from iris.core.constraints import Constraint, Op
from iris.scheduler import RunningTask, SchedulingSnapshot, schedule
from iris.scheduler.index import ClusterIndex
from tests.scheduler.scheduler_builders import G, cpu_request, cpu_worker, job, running, snapshot
from tests.scheduler.test_scheduler_properties import PROPERTY_SETTINGS, snapshots


def test_carried_requests_taken_when_the_same_tasks_wait():
    workers = (cpu_worker("w0", cpu=2, memory=8 * G),)
    snap = snapshot(workers, [job("/u/a", cpu_request(1), replicas=4), job("/u/b", cpu_request(1))])
    first = ClusterIndex(snap.workers, snap.running)
    result = schedule(replace(snap, index=first))
    carried = first.advance(snap.workers, snap.running)
    again = replace(snap, now_ms=snap.now_ms + 1, pending=tuple(snap.pending), index=carried)
    assert schedule(again) == result
    assert carried.requests is first.requests is not None


def test_carried_requests_keep_a_job_pinned_to_its_worker():
    workers = (cpu_worker("w0", cpu=2, memory=8 * G), cpu_worker("w1", cpu=4, memory=8 * G))
    pinned = job("/u/pinned", cpu_request(1), constraints=(Constraint("worker", Op.EQ, ("w1",)),))
    snap = snapshot(workers, [*pinned, *job("/u/free", cpu_request(1), replicas=2)])
    first = ClusterIndex(snap.workers, snap.running)
    result = schedule(replace(snap, index=first))
    assert ("/u/pinned/0", "w1") in {(a.task_id, a.worker_id) for a in result.assignments}
    # The same tasks wait (the decisions not applied yet): the pin still holds each worker apart.
    again = replace(snap, now_ms=snap.now_ms + 1, index=first.advance(snap.workers, snap.running))
    assert schedule(again) == result
    assert again.index.requests is first.requests


def test_carried_requests_follow_a_user_going_over_budget():
    workers = (cpu_worker("w0", cpu=4, memory=16 * G),)
    busy = running("/bob/r/0", "w0", cpu_request(1), Band.INTERACTIVE)  # the same band: not evicted
    waiting = job("/alice/j", cpu_request(4), band=Band.INTERACTIVE, user="alice")
    snap = snapshot(workers, [waiting], [busy], budgets={"alice": 10})
    first = ClusterIndex(snap.workers, snap.running)
    assert "over budget" not in schedule(replace(snap, index=first)).pending_reasons["/alice/j"]
    # Her own interactive task now spends past her budget: the same job waits as batch.
    spending = running("/alice/r/0", "w0", cpu_request(1, memory=8 * G), Band.INTERACTIVE, user="alice")
    later = replace(snap, now_ms=snap.now_ms + 1, running=(busy, spending))
    result = schedule(replace(later, index=first.advance(later.workers, later.running)))
    assert "over budget" in result.pending_reasons["/alice/j"]
    assert result == schedule(later)


def test_carried_requests_follow_a_coscheduled_job_whose_running_replica_ended():
    workers = (cpu_worker("w0", pool="a", cpu=2), cpu_worker("w1", pool="b", cpu=2))
    _, second = job("/u/gang", cpu_request(1), replicas=2, coschedule=True)
    other = running("/v/other/0", "w0", cpu_request(1), Band.PRODUCTION)  # not evicted
    snap = snapshot(
        workers, [second], [other, running("/u/gang/0", "w0", cpu_request(1), Band.PRODUCTION, job_id="/u/gang")]
    )
    first = ClusterIndex(snap.workers, snap.running)
    assert schedule(replace(snap, index=first)).assignments == ()  # held to pool a, which is full
    # The running replica ended and other work took its place: the replica left may go to pool b.
    later = replace(
        snap, now_ms=snap.now_ms + 1, running=(other, running("/v/more/0", "w0", cpu_request(1), Band.PRODUCTION))
    )
    result = schedule(replace(later, index=first.advance(later.workers, later.running)))
    assert [a.worker_id for a in result.assignments] == ["w1"]
    assert result == schedule(later)


def _next(snap: SchedulingSnapshot, rng: random.Random) -> SchedulingSnapshot:
    """The next tick's snapshot: either the decisions not applied yet (the very same tasks wait,
    perhaps under other budgets) or applied (placed tasks run, some running tasks end)."""
    budgets = rng.choice([snap.user_budgets, {}, {"alice": 0}, {"alice": 1000, "bob": 5}])
    if rng.random() < 0.5:
        return replace(snap, now_ms=snap.now_ms + 25, user_budgets=budgets, index=None)
    result = schedule(snap)
    placed = {a.task_id: a.worker_id for a in result.assignments}
    evicted = {p.task_id for p in result.preemptions}
    kept = [t for t in snap.running if t.task_id not in evicted and rng.random() < 0.8]
    started = [
        RunningTask(t.task_id, t.job_id, placed[t.task_id], t.resources, t.band, snap.now_ms, t.user)
        for t in snap.pending
        if t.task_id in placed
    ]
    waiting = tuple(t for t in snap.pending if t.task_id not in placed)
    return replace(
        snap, now_ms=snap.now_ms + 25, running=tuple(kept + started), pending=waiting, user_budgets=budgets, index=None
    )


@settings(PROPERTY_SETTINGS, max_examples=60)
@given(snapshots(), st.randoms(use_true_random=False))
def test_property_chain_of_carried_ticks_decides_as_cold_ticks(snap, rng: random.Random):
    index = ClusterIndex(snap.workers, snap.running)
    for _ in range(12):
        assert schedule(replace(snap, index=index)) == schedule(snap)
        snap = _next(snap, rng)
        index = index.advance(snap.workers, snap.running)
