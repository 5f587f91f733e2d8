"""Coscheduling: all replicas at once within one group of workers (tpu-name, pool or backend), or none."""

from __future__ import annotations

from iris.core.bands import Band
from iris.scheduler import schedule
from tests.scheduler.scheduler_builders import (
    cpu_request,
    cpu_worker,
    gpu_request,
    gpu_worker,
    job,
    placements,
    running,
    snapshot,
)


def test_coschedule_gpu_replicas_placed_together_in_one_pool():
    workers = [gpu_worker("a0", pool="a"), gpu_worker("b0", pool="b"), gpu_worker("b1", pool="b")]
    result = schedule(snapshot(workers, [job("/a/train", gpu_request(8), replicas=2)]))
    assert placements(result) == {"/a/train/0": "b0", "/a/train/1": "b1"}


def test_coschedule_split_across_pools_places_none():
    workers = [
        gpu_worker("a0", pool="a"),
        gpu_worker("a1", pool="a"),
        gpu_worker("b0", pool="b"),
        gpu_worker("b1", pool="b"),
    ]
    held = [
        running("/i/x/0", "a1", gpu_request(8), band=Band.INTERACTIVE),
        running("/i/y/0", "b1", gpu_request(8), band=Band.INTERACTIVE),
    ]
    result = schedule(snapshot(workers, [job("/a/train", gpu_request(8), replicas=2)], held))
    assert result.assignments == ()
    assert result.pending_reasons["/a/train"].startswith(
        "Waiting for 2 replicas of 8 h100, 1 cpu, 1G memory to start together in one group of workers; "
        "at most 1 fit now (pool a). "
    )


def test_coschedule_best_fit_prefers_fuller_group():
    workers = [gpu_worker(f"a{i}", pool="a") for i in range(4)] + [gpu_worker(f"b{i}", pool="b") for i in range(3)]
    held = [running("/i/x/0", "b2", gpu_request(8), band=Band.INTERACTIVE)]
    result = schedule(snapshot(workers, [job("/a/train", gpu_request(8), replicas=2)], held))
    assert set(placements(result).values()) == {"b0", "b1"}


def test_coschedule_tpu_name_groups_before_pool():
    workers = [gpu_worker("s1-0", pool="p", tpu_name="s1"), gpu_worker("s2-0", pool="p", tpu_name="s2")]
    result = schedule(snapshot(workers, [job("/a/train", gpu_request(8), replicas=2)]))
    assert result.assignments == ()
    assert "needs 2 replicas" in result.unschedulable[0].reason


def test_coschedule_without_group_attributes_uses_backend():
    workers = [gpu_worker("x0", backend="x"), gpu_worker("y0", backend="y"), gpu_worker("y1", backend="y")]
    result = schedule(snapshot(workers, [job("/a/train", gpu_request(8), replicas=2)]))
    assert set(placements(result).values()) == {"y0", "y1"}


def test_coschedule_flag_applies_to_cpu_jobs():
    workers = [cpu_worker("a0", cpu=1, pool="a"), cpu_worker("b0", cpu=1, pool="b")]
    result = schedule(snapshot(workers, [job("/a/j", cpu_request(cpu=1), replicas=2, coschedule=True)]))
    assert result.assignments == ()
    assert len(result.unschedulable) == 2


def test_coschedule_not_requested_cpu_replicas_place_independently():
    workers = [cpu_worker("a0", cpu=1, pool="a"), cpu_worker("b0", cpu=1, pool="b")]
    result = schedule(snapshot(workers, [job("/a/j", cpu_request(cpu=1), replicas=3)]))
    assert len(result.assignments) == 2
    assert "/a/j" in result.pending_reasons


def test_coschedule_largest_group_too_small_unschedulable_with_reason():
    workers = [gpu_worker("a0", pool="a"), gpu_worker("a1", pool="a")]
    result = schedule(snapshot(workers, [job("/a/train", gpu_request(8), replicas=4)]))
    assert [u.reason for u in result.unschedulable] == [
        "needs 4 replicas of 8 h100, 1 cpu, 1G memory in one group of workers (same tpu-name, pool or backend); "
        "the largest group (pool a) holds 2"
    ] * 4


def test_coschedule_preempts_in_one_group_all_or_nothing():
    workers = [gpu_worker("a0", pool="a"), gpu_worker("a1", pool="a"), gpu_worker("b0", pool="b")]
    held = [
        running("/b/x/0", "a0", gpu_request(8)),
        running("/b/x/1", "a1", gpu_request(8)),
        running("/b/y/0", "b0", gpu_request(8)),
    ]
    result = schedule(snapshot(workers, [job("/a/train", gpu_request(8), replicas=2)], held))
    assert placements(result) == {"/a/train/0": "a0", "/a/train/1": "a1"}
    assert {p.task_id for p in result.preemptions} == {"/b/x/0", "/b/x/1"}


def test_coschedule_preemption_insufficient_evicts_nothing():
    workers = [gpu_worker("a0", pool="a"), gpu_worker("a1", pool="a")]
    held = [running("/b/x/0", "a0", gpu_request(8)), running("/i/y/0", "a1", gpu_request(8), band=Band.INTERACTIVE)]
    result = schedule(snapshot(workers, [job("/a/train", gpu_request(8), replicas=2)], held))
    assert result.preemptions == ()
    assert result.assignments == ()


def test_coschedule_pending_replicas_join_running_siblings_group():
    workers = [
        gpu_worker("a0", pool="a"),
        gpu_worker("a1", pool="a"),
        gpu_worker("b0", pool="b"),
        gpu_worker("b1", pool="b"),
    ]
    held = [running("/a/train/0", "b0", gpu_request(8), band=Band.INTERACTIVE, job_id="/a/train")]
    pending = [job("/a/train", gpu_request(8), replicas=2)[1]]
    result = schedule(snapshot(workers, pending, held))
    assert placements(result) == {"/a/train/1": "b1"}


def test_coschedule_smaller_job_fits_after_larger_job_failed_in_same_group():
    workers = [gpu_worker("a0", pool="a"), gpu_worker("a1", pool="a")]
    pending = [
        job("/a/big", gpu_request(8), replicas=3, insertion=0),
        job("/a/small", gpu_request(8), replicas=2, insertion=1),
    ]
    result = schedule(snapshot(workers, pending))
    assert set(placements(result)) == {"/a/small/0", "/a/small/1"}


def test_coschedule_later_job_uses_room_left_by_earlier_one():
    workers = [gpu_worker(f"a{i}", pool="a") for i in range(4)]
    pending = [
        job("/a/first", gpu_request(8), replicas=2, insertion=0),
        job("/a/second", gpu_request(8), replicas=2, insertion=1),
        job("/a/third", gpu_request(8), replicas=2, insertion=2),
    ]
    result = schedule(snapshot(workers, pending))
    assert len(result.assignments) == 4
    assert "/a/third" in result.pending_reasons
