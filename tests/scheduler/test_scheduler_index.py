"""The worker index kept across ticks: carrying it over never changes a decision, and it redoes
only the workers whose running tasks changed."""

from __future__ import annotations

import random
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from iris.scheduler import RunningTask, SchedulingSnapshot, schedule
from iris.scheduler.index import ClusterIndex, Packing
from tests.scheduler.scheduler_builders import G, cpu_request, cpu_worker, job, running
from tests.scheduler.test_scheduler_properties import PROPERTY_SETTINGS, snapshots


def next_tick(snap: SchedulingSnapshot, rng: random.Random) -> SchedulingSnapshot:
    """What the next tick sees: the placed tasks running, some running tasks ended, the rest pending."""
    result = schedule(snap)
    placed = {a.task_id: a for a in result.assignments}
    evicted = {p.task_id for p in result.preemptions}
    kept = [t for t in snap.running if t.task_id not in evicted and rng.random() < 0.7]
    started = [
        RunningTask(t.task_id, t.job_id, placed[t.task_id].worker_id, t.resources, t.band, snap.now_ms, t.user)
        for t in snap.pending
        if t.task_id in placed
    ]
    waiting = tuple(t for t in snap.pending if t.task_id not in placed)
    return replace(snap, now_ms=snap.now_ms + 1, running=tuple(kept + started), pending=waiting, index=None)


@PROPERTY_SETTINGS
@given(snapshots(), st.randoms(use_true_random=False))
def test_property_index_carried_over_same_decisions(snap, rng: random.Random):
    first = ClusterIndex(snap.workers, snap.running)
    schedule(replace(snap, index=first))  # fills the index's caches, as a real tick does
    later = next_tick(snap, rng)
    carried = first.advance(later.workers, later.running)
    assert schedule(replace(later, index=carried)) == schedule(later)
    assert carried.free == ClusterIndex(later.workers, later.running).free


@PROPERTY_SETTINGS
@given(snapshots())
def test_property_index_rebuilt_when_a_worker_changes(snap):
    first = ClusterIndex(snap.workers, snap.running)
    schedule(replace(snap, index=first))
    flipped = (replace(snap.workers[0], alive=not snap.workers[0].alive), *snap.workers[1:])
    later = replace(snap, workers=flipped)
    carried = first.advance(later.workers, later.running)
    assert carried.alive != first.alive
    assert schedule(replace(later, index=carried)) == schedule(later)


def test_index_advance_recomputes_only_changed_workers():
    workers = tuple(cpu_worker(f"w{i}", cpu=8, memory=32 * G) for i in range(4))
    before = (running("/a/0", "w0", cpu_request(2)), running("/b/0", "w1", cpu_request(4)))
    first = ClusterIndex(workers, before)
    after = (before[0], running("/c/0", "w2", cpu_request(1)))
    carried = first.advance(workers, after)
    w = carried.index
    assert carried.running_on[w["w0"]] is first.running_on[w["w0"]]  # untouched: shared
    assert carried.free[w["w1"]] == carried.capacity[w["w1"]]  # its task ended
    assert carried.free[w["w2"]][1] == 7000  # millicores left after the new task
    assert carried.classes is first.classes
    assert first.free[w["w1"]][1] == 4000  # the earlier index is left as it was


def test_index_carried_over_orders_pools_by_new_free_capacity():
    workers = tuple(cpu_worker(f"w{i}", cpu=8, memory=32 * G) for i in range(3))
    first = ClusterIndex(workers, (running("/a/0", "w0", cpu_request(6)),))
    one = job("/u/j", cpu_request(2))
    snap = SchedulingSnapshot(0, workers, (running("/a/0", "w0", cpu_request(6)),), one, index=first)
    assert [a.worker_id for a in schedule(snap).assignments] == ["w0"]  # best fit: the fullest
    later = SchedulingSnapshot(1, workers, (running("/b/0", "w2", cpu_request(7)),), one)
    carried = first.advance(later.workers, later.running)
    assert [a.worker_id for a in schedule(replace(later, index=carried)).assignments] == ["w0"]
    fuller = SchedulingSnapshot(2, workers, (running("/b/0", "w2", cpu_request(5)),), one)
    again = carried.advance(fuller.workers, fuller.running)
    assert [a.worker_id for a in schedule(replace(fuller, index=again)).assignments] == ["w2"]


def test_packed_keys_sort_as_tuples_negative_values_included():
    rng = random.Random(5)
    vectors = [tuple(rng.randint(-(2**40), 2**40) for _ in range(4)) for _ in range(300)]
    packing = Packing(vectors, len(vectors))
    keyed = sorted(range(len(vectors)), key=lambda w: packing.key(vectors[w], w))
    assert keyed == sorted(range(len(vectors)), key=lambda w: (*vectors[w], w))
    assert all(packing.key(v, w) < packing.end for w, v in enumerate(vectors))
    assert packing.probe((2**45, 0, 0, 0)) is None  # beyond every field: nothing can hold it


def test_carried_index_rebuilt_when_a_worker_runs_far_over_its_capacity():
    workers = (cpu_worker("w0", cpu=8, memory=32 * G), cpu_worker("w1", cpu=8, memory=32 * G))
    first = ClusterIndex(workers, ())
    # Tasks holding far more memory than the worker has push its free memory below any value
    # the first index's packed keys have room for.
    over = tuple(running(f"/x/{i}", "w0", cpu_request(1, memory=2**50)) for i in range(4))
    carried = first.advance(workers, over)
    assert carried.packing.width > first.packing.width
    assert carried.free[carried.index["w0"]][2] == 32 * G - 4 * 2**50
    one = job("/u/j", cpu_request(2))
    snap = SchedulingSnapshot(0, workers, over, one)
    result = schedule(replace(snap, index=carried))
    assert [a.worker_id for a in result.assignments] == ["w1"]
    assert result == schedule(snap)
