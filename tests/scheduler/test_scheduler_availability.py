"""compute_availability: per device token free, total and held by band, from placed work only."""

from __future__ import annotations

from iris.core.bands import Band
from iris.scheduler import compute_availability
from tests.scheduler.scheduler_builders import cpu_request, cpu_worker, gpu_request, gpu_worker, running


def test_availability_free_total_and_held_by_band():
    workers = [gpu_worker("g0"), gpu_worker("g1")]
    held = [
        running("/b/x/0", "g0", gpu_request(8), band=Band.BATCH),
        running("/i/y/0", "g1", gpu_request(2), band=Band.INTERACTIVE),
        running("/b/z/0", "g1", gpu_request(1), band=Band.BATCH),
    ]
    block = compute_availability(workers, held, now_ms=42)["gpu"]
    assert block.observation_epoch_ms == 42
    assert dict(block.amounts) == {"h100": 5}
    assert dict(block.total_amounts) == {"h100": 16}
    assert block.held(Band.BATCH, "h100") == 9
    assert block.held(Band.INTERACTIVE, "h100") == 2
    assert block.held_below(Band.INTERACTIVE, "h100") == 9
    assert [h.band for h in block.held_by_band] == [Band.INTERACTIVE, Band.BATCH]


def test_availability_dead_workers_and_their_tasks_excluded():
    workers = [gpu_worker("g0"), gpu_worker("g1", alive=False)]
    held = [running("/b/x/0", "g1", gpu_request(8))]
    block = compute_availability(workers, held, 0)["gpu"]
    assert dict(block.amounts) == {"h100": 8}
    assert dict(block.total_amounts) == {"h100": 8}
    assert block.held_by_band == ()


def test_availability_cpu_backend_present_with_no_tokens():
    blocks = compute_availability([cpu_worker("c0")], [running("/a/x/0", "c0", cpu_request())], 0)
    assert dict(blocks["cpu"].amounts) == {}
    assert blocks["cpu"].held_by_band == ()


def test_availability_any_variant_task_holds_its_workers_variant():
    block = compute_availability([gpu_worker("g0", variant="a100")], [running("/a/x/0", "g0", gpu_request(3, ""))], 0)[
        "gpu"
    ]
    assert dict(block.amounts) == {"a100": 5}
    assert block.held(Band.BATCH, "a100") == 3


def test_availability_over_committed_worker_never_negative():
    held = [running(f"/b/x/{i}", "g0", gpu_request(8)) for i in range(2)]
    block = compute_availability([gpu_worker("g0")], held, 0)["gpu"]
    assert dict(block.amounts) == {"h100": 0}


def test_availability_to_json_matches_wire_shape():
    block = compute_availability([gpu_worker("g0")], [running("/b/x/0", "g0", gpu_request(4))], 7)["gpu"]
    assert block.to_json() == {
        "version": 1,
        "observation_epoch_ms": 7,
        "amounts": {"h100": 4},
        "total_amounts": {"h100": 8},
        "held_by_band": [{"band": "batch", "amounts": {"h100": 4}}],
    }
