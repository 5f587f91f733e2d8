"""The benchmark's own clusters (`bench/scheduler.py`: cpu and gpu hosts in pools across regions,
half loaded, a queue of mixed sizes, bands, constraints and coscheduled jobs), scaled down: the fast
pass decides as the reference scheduler does, on a cold index and on one carried over from the tick before,
as the controller carries it."""

from __future__ import annotations

import importlib.util
import random
from dataclasses import replace
from types import ModuleType

import pytest

from iris.scheduler import SchedulingSnapshot
from iris.scheduler.index import ClusterIndex
from iris.scheduler.tick import run_tick
from tests.conftest import ROOT
from tests.scheduler.test_scheduler_fast_paths import fast, reference


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_scheduler", ROOT / "bench" / "scheduler.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench = _bench()
# (pending tasks, workers): small enough for the reference scheduler, full enough that gangs preempt and jobs wait.
SIZES = ((300, 40), (600, 60), (1_000, 90))


def carried(snap: SchedulingSnapshot) -> SchedulingSnapshot:
    """`snap` with an index carried from the tick before it, as the benchmark's steady tick has."""
    before = bench.previous(snap, random.Random(3))
    index = ClusterIndex(before.workers, before.running)
    run_tick(replace(before, index=index))
    return replace(snap, index=index.advance(snap.workers, snap.running))


@pytest.mark.parametrize("pending,workers", SIZES)
def test_fast_pass_same_as_reference_on_bench_clusters(pending, workers):
    seen = {"assignments": 0, "preemptions": 0, "reasons": 0}
    for seed in range(4):
        snap = bench.build_snapshot(pending, workers, seed)
        expected = reference(snap)
        assert fast(snap) == expected, f"seed {seed}, cold index"
        assert fast(carried(snap)) == expected, f"seed {seed}, carried index"
        seen["assignments"] += len(expected.assignments)
        seen["preemptions"] += len(expected.preemptions)
        seen["reasons"] += len(expected.waiting)
    assert all(count > 0 for count in seen.values()), seen
