"""On the scheduler benchmark's own clusters (`bench/scheduler.py`, small sizes, several seeds),
the steady tick (the index carried over from the tick before and advanced) decides exactly what
the plain pass, which scans every worker, decides on the same snapshot."""

from __future__ import annotations

import importlib.util
import random
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import pytest

from iris.scheduler.index import ClusterIndex
from iris.scheduler.tick import run_tick

BENCH = Path(__file__).resolve().parents[2] / "bench" / "scheduler.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_scheduler", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("seed", range(8))
def test_steady_tick_on_bench_cluster_same_decisions_as_plain_pass(bench: ModuleType, seed: int) -> None:
    rng = random.Random(seed)
    snap = bench.build_snapshot(rng.choice((500, 800)), rng.choice((30, 50)), seed=seed)
    before = bench.previous(snap, random.Random(seed))
    index = ClusterIndex(before.workers, before.running)
    run_tick(replace(before, index=index))  # the tick before, which fills the index's caches
    steady = run_tick(replace(snap, index=index.advance(snap.workers, snap.running))).result()
    plain = run_tick(replace(snap, index=None), plain=True).result()
    assert steady == plain
    assert steady.assignments and steady.pending_reasons, "the cluster places some work and leaves some waiting"
