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
    since = {r.job_id: r.since_ms for r in result.reservations}  # as the tick shell carries it
    again = replace(snap, now_ms=snap.now_ms + 1, pending=tuple(snap.pending), index=carried, reserved_since=since)
    # The same decisions; the estimates count from each pass's own time.
    assert replace(schedule(again), estimates={}) == replace(result, estimates={})
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


def test_carried_requests_kept_for_jobs_still_waiting_when_others_come_and_go():
    workers = (cpu_worker("w0", cpu=1, memory=8 * G),)
    jobs = [job(f"/u/j{i}", cpu_request(1), insertion=i) for i in range(6)]
    snap = snapshot(workers, [t for tasks in jobs for t in tasks])
    first = ClusterIndex(snap.workers, snap.running)
    result = schedule(replace(snap, index=first))
    assert [a.task_id for a in result.assignments] == ["/u/j0/0"]
    # j0 placed, j3 cancelled, two submitted (one to go first by its earlier root submit time).
    started = running("/u/j0/0", "w0", cpu_request(1), job_id="/u/j0")
    came = [
        *job("/u/late", cpu_request(1), insertion=9),
        *job("/u/early", cpu_request(1), insertion=7, root_submitted_ms=-5),
    ]
    later = replace(
        snap,
        now_ms=snap.now_ms + 1,
        running=(started,),
        pending=tuple(t for t in snap.pending if t.job_id not in ("/u/j0", "/u/j3")) + tuple(came),
    )
    index = first.advance(later.workers, later.running)
    result = schedule(replace(later, index=index))
    assert result == schedule(later)
    order = [r.job_id for r in index.requests.ordered]
    assert order == ["/u/early", "/u/j1", "/u/j2", "/u/j4", "/u/j5", "/u/late"]
    kept = {r.job_id: r for r in first.requests.ordered}
    assert all(r is kept[r.job_id] for r in index.requests.ordered if r.job_id in kept)  # not made again


def _churned(snap: SchedulingSnapshot, rng: random.Random, serial: int) -> SchedulingSnapshot:
    """The next tick's snapshot with its decisions applied, some pending jobs cancelled, some
    submitted (after the others, or first by an earlier submit time), a task now and then read
    again as a new object, and the tasks in another order now and then (as a full reload gives)."""
    snap = _next(snap, rng)
    pending = list(snap.pending)
    jobs = sorted({t.job_id for t in pending})
    gone = {j for j in jobs if rng.random() < 0.2}
    pending = [t for t in pending if t.job_id not in gone]
    for k in range(rng.choice([0, 1, 1, 2, 4])):
        if not snap.pending:
            break
        template = rng.choice(snap.pending)
        job_id = f"/n/j{serial}-{k}"
        replicas = rng.choice([1, 1, 2, 3])
        fields = dict(
            job_id=job_id,
            band=rng.choice(list(Band)),
            user=rng.choice(["alice", "bob"]),
            depth=rng.choice([0, 1]),
            root_submitted_ms=rng.choice([-1, 3, 100]),
            insertion=100 + serial * 10 + k,
            replicas=replicas,
            coschedule=rng.random() < 0.3,
            scheduling_deadline_ms=None,
        )
        pending += [replace(template, task_id=f"{job_id}/{i}", index=i, **fields) for i in range(replicas)]
    if pending and rng.random() < 0.2:
        at = rng.randrange(len(pending))
        pending[at] = replace(pending[at])  # an equal task, but another object
    if rng.random() < 0.2:
        rng.shuffle(pending)
    return replace(snap, pending=tuple(pending))


@settings(PROPERTY_SETTINGS, max_examples=80)
@given(snapshots(), st.randoms(use_true_random=False), st.booleans())
def test_property_carried_requests_with_jobs_coming_and_going_decide_as_cold_ticks(
    snap, rng: random.Random, deadlines: bool
):
    if not deadlines:  # a deadline is judged anew each tick: no requests carried then
        snap = replace(snap, pending=tuple(replace(t, scheduling_deadline_ms=None) for t in snap.pending))
    index = ClusterIndex(snap.workers, snap.running)
    for serial in range(12):
        assert schedule(replace(snap, index=index)) == schedule(snap)
        snap = _churned(snap, rng, serial)
        index = index.advance(snap.workers, snap.running)
