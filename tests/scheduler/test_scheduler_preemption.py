"""Preemption: strictly lower bands only, same device variant, cheapest victim set, same-tick placement."""

from __future__ import annotations

from iris.core.bands import Band
from iris.scheduler import schedule
from iris.scheduler.preemption import victim_cost, victims_on_worker
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


def evicted(result) -> dict[str, str]:
    """victim task id → preemptor task id."""
    return {p.task_id: p.by_task_id for p in result.preemptions}


def test_preempt_interactive_evicts_batch_and_places_same_tick():
    workers = [gpu_worker("g0")]
    held = [running("/b/train/0", "g0", gpu_request(8), band=Band.BATCH)]
    result = schedule(snapshot(workers, [job("/a/notebook", gpu_request(8))], held))
    assert evicted(result) == {"/b/train/0": "/a/notebook/0"}
    assert placements(result) == {"/a/notebook/0": "g0"}
    assert result.preemptions[0].worker_id == "g0"


def test_preempt_equal_band_never_evicted():
    workers = [gpu_worker("g0")]
    held = [running("/b/train/0", "g0", gpu_request(8), band=Band.INTERACTIVE)]
    result = schedule(snapshot(workers, [job("/a/notebook", gpu_request(8))], held))
    assert result.preemptions == ()
    assert result.assignments == ()


def test_preempt_batch_preemptor_evicts_nothing():
    workers = [cpu_worker("w0", cpu=1)]
    held = [running("/b/x/0", "w0", cpu_request(cpu=1), band=Band.BATCH)]
    result = schedule(snapshot(workers, [job("/a/j", cpu_request(cpu=1), band=Band.BATCH)], held))
    assert result.preemptions == ()


def test_preempt_higher_band_never_evicted_by_lower():
    workers = [cpu_worker("w0", cpu=1)]
    held = [running("/p/x/0", "w0", cpu_request(cpu=1), band=Band.PRODUCTION)]
    result = schedule(snapshot(workers, [job("/a/j", cpu_request(cpu=1))], held))
    assert result.preemptions == ()


def test_preempt_lowest_band_chosen_before_higher():
    workers = [cpu_worker("w0", cpu=2)]
    held = [
        running("/b/batch/0", "w0", cpu_request(cpu=1), band=Band.BATCH, started_ms=0),
        running("/i/inter/0", "w0", cpu_request(cpu=1), band=Band.INTERACTIVE, started_ms=10),
    ]
    result = schedule(snapshot(workers, [job("/p/prod", cpu_request(cpu=1), band=Band.PRODUCTION)], held))
    assert evicted(result) == {"/b/batch/0": "/p/prod/0"}


def test_preempt_youngest_chosen_within_band():
    workers = [cpu_worker("w0", cpu=2)]
    held = [
        running("/b/old/0", "w0", cpu_request(cpu=1), started_ms=100),
        running("/b/young/0", "w0", cpu_request(cpu=1), started_ms=900),
    ]
    result = schedule(snapshot(workers, [job("/a/j", cpu_request(cpu=1))], held))
    assert evicted(result) == {"/b/young/0": "/a/j/0"}


def test_preempt_cheapest_worker_evicts_fewest():
    workers = [cpu_worker("w-many", cpu=4), cpu_worker("w-one", cpu=4)]
    held = [running(f"/b/small/{i}", "w-many", cpu_request(cpu=1)) for i in range(4)]
    held.append(running("/b/big/0", "w-one", cpu_request(cpu=4)))
    result = schedule(snapshot(workers, [job("/a/j", cpu_request(cpu=4))], held))
    assert evicted(result) == {"/b/big/0": "/a/j/0"}


def test_preempt_prefers_batch_only_worker_over_evicting_interactive():
    workers = [cpu_worker("w-inter", cpu=1), cpu_worker("w-batch", cpu=2)]
    held = [
        running("/i/x/0", "w-inter", cpu_request(cpu=1), band=Band.INTERACTIVE),
        running("/b/y/0", "w-batch", cpu_request(cpu=1), band=Band.BATCH),
        running("/b/y/1", "w-batch", cpu_request(cpu=1), band=Band.BATCH),
    ]
    result = schedule(snapshot(workers, [job("/p/j", cpu_request(cpu=2), band=Band.PRODUCTION)], held))
    assert set(evicted(result)) == {"/b/y/0", "/b/y/1"}


def test_preempt_only_same_device_variant():
    workers = [gpu_worker("a100", variant="a100"), gpu_worker("h100", variant="h100")]
    held = [
        running("/b/a/0", "a100", gpu_request(8, "a100")),
        running("/b/h/0", "h100", gpu_request(8, "h100"), band=Band.INTERACTIVE),
    ]
    result = schedule(snapshot(workers, [job("/a/j", gpu_request(8, "h100"))], held))
    assert result.preemptions == ()


def test_preempt_cpu_task_never_evicts_on_gpu_hosts():
    workers = [gpu_worker("g0", cpu=1)]
    held = [running("/b/x/0", "g0", cpu_request(cpu=1))]
    result = schedule(snapshot(workers, [job("/a/j", cpu_request(cpu=1))], held))
    assert result.preemptions == ()
    assert "Waiting for 1 cpu" in result.pending_reasons["/a/j"]


def test_preempt_freed_remainder_not_reused_this_tick():
    workers = [gpu_worker("g0")]
    held = [running("/b/x/0", "g0", gpu_request(8))]
    pending = [
        job("/a/first", gpu_request(4), insertion=0),
        job("/a/second", gpu_request(4), band=Band.BATCH, insertion=1),
    ]
    result = schedule(snapshot(workers, pending, held))
    assert placements(result) == {"/a/first/0": "g0"}
    assert "/a/second" in result.pending_reasons


def test_preempt_each_task_evicts_its_own_victims():
    workers = [cpu_worker(f"w{i}", cpu=2) for i in range(3)]
    held = [running(f"/b/x/{i}", f"w{i}", cpu_request(cpu=2), started_ms=i) for i in range(3)]
    result = schedule(snapshot(workers, [job("/a/j", cpu_request(cpu=2), replicas=2)], held))
    assert evicted(result) == {"/b/x/2": "/a/j/0", "/b/x/1": "/a/j/1"}
    assert placements(result) == {"/a/j/0": "w2", "/a/j/1": "w1"}


def test_victims_on_worker_drops_unneeded_victims():
    small = running("/b/small/0", "w", cpu_request(cpu=1, memory=0), started_ms=9)
    big = running("/b/big/0", "w", cpu_request(cpu=4, memory=0), started_ms=1)
    assert victims_on_worker((0, 0, 0, 0), (0, 4000, 0, 0), [small, big]) == (big,)


def test_victims_on_worker_not_enough_returns_none():
    small = running("/b/small/0", "w", cpu_request(cpu=1, memory=0))
    assert victims_on_worker((0, 0, 0, 0), (0, 4000, 0, 0), [small]) is None


def test_victim_cost_orders_band_then_count_then_lost_work():
    batch = running("/b/x/0", "w", band=Band.BATCH, started_ms=0)
    inter = running("/i/x/0", "w", band=Band.INTERACTIVE, started_ms=0)
    young = running("/b/y/0", "w", band=Band.BATCH, started_ms=90)
    assert victim_cost([batch, batch], 100) < victim_cost([inter], 100)
    assert victim_cost([young], 100) < victim_cost([batch], 100)
