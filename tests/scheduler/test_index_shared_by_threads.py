"""One worker index read by two passes at once (the tick, and `iris job explain` on a request
thread) gives each pass the decisions it would get alone: the index's memo caches publish an
answer only once it is whole."""

from __future__ import annotations

import sys
import threading
from dataclasses import replace

import pytest

from iris.scheduler.index import ClusterIndex
from iris.scheduler.tick import run_tick
from tests.scheduler.test_scheduler_fast_paths import random_snapshot

pytestmark = pytest.mark.usefixtures("searches")

SEEDS = range(40)  # enough clusters, coscheduled and constrained, that half-filled caches are met


@pytest.fixture
def eager_switching():
    """Lets threads take turns after almost every bytecode, so half-filled caches are seen."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def test_passes_sharing_a_cold_index_decide_as_one_pass_alone(eager_switching):
    for seed in SEEDS:
        snap = random_snapshot(seed)
        expected = run_tick(snap).result()  # one pass alone, on an index of its own
        for _ in range(3):
            shared = replace(snap, index=ClusterIndex(snap.workers, snap.running))
            results: list[object] = [None] * 3

            def one(i: int, shared=shared, results=results) -> None:
                results[i] = run_tick(shared).result()

            threads = [threading.Thread(target=one, args=(i,)) for i in range(3)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert results == [expected] * 3, f"seed {seed}"
            numbers = list(shared.index.set_ids.values())
            assert len(numbers) == len(set(numbers)), f"seed {seed}: two worker sets share a number"
