"""A pool's best-fit search, which resumes where the last search for the same demand ended and
keeps moved workers as candidates, answers exactly as a scan of every worker does, through
placements, trials rolled back and trials kept, on a fresh index and on one carried over."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from iris.core.constraints import Op
from iris.scheduler.fit import ShapeCache
from iris.scheduler.index import ClusterIndex
from iris.scheduler.ledger import _SCANNED, Ledger, Pool, best_fit, scanned_best_fit
from iris.scheduler.tick import run_tick

from .scheduler_builders import G, cpu_request, cpu_worker, decisions_of, job, prefer, snapshot
from .test_scheduler_fast_paths import random_snapshot, reference


def _check_pool_searches(ledger: Ledger, shapes: list, rng: random.Random) -> int:
    """Random searches and placements; returns how many searches found a worker."""
    found = 0
    for step in range(300):
        shape = rng.choice(shapes)
        if rng.random() < 0.1 and ledger._journal is None:
            ledger.begin_trial()
        w = best_fit(ledger.plan(shape), shape.need, ledger.free)
        assert w == scanned_best_fit(ledger.ix.levels(shape), shape.need, ledger.free), f"step {step}"
        if w is not None:
            found += 1
            ledger.take(w, shape.need)
        if ledger._journal is not None and rng.random() < 0.2:
            ledger.rollback_trial() if rng.random() < 0.5 else ledger.commit_trial()
    return found


@pytest.mark.parametrize("seed", range(12))
def test_pool_search_same_as_scan(seed):
    snap = random_snapshot(seed)
    rng = random.Random(seed)
    cache = ShapeCache()
    shapes = list({cache.of(t) for t in snap.pending})
    if not shapes:
        pytest.skip("no pending work drawn")
    earlier = tuple(t for t in snap.running if rng.random() > 0.2)
    carried = ClusterIndex(snap.workers, earlier)
    Ledger(replace(snap, running=earlier, index=carried)).plan(shapes[0])  # orderings to carry over
    for index in (None, carried.advance(snap.workers, snap.running)):
        ledger = Ledger(replace(snap, index=index))
        assert _check_pool_searches(ledger, shapes, rng) > 0


def test_pool_search_steps_over_workers_of_one_free_capacity_to_the_best_fit():
    # Many workers with the same free capacity, short of memory, sort before the few that fit.
    short = [cpu_worker(f"a{i:02}", cpu=2, memory=G // 2) for i in range(_SCANNED + 5)]
    roomy = [cpu_worker(f"b{i}", cpu=4) for i in range(3)]
    snap = snapshot(short + roomy, [job("/u/j", cpu_request(1), replicas=5)])
    ledger = Ledger(snap)
    shape = ShapeCache().of(snap.pending[0])
    (pool,) = ledger.plan(shape)
    placed = pool.fill(shape.need, ledger.free, 5, ledger.take)
    assert [(ledger.workers[w].worker_id, k) for w, k in placed] == [("b0", 4), ("b1", 1)]
    assert best_fit(ledger.plan(shape), shape.need, ledger.free) == scanned_best_fit(
        ledger.ix.levels(shape), shape.need, ledger.free
    )


def test_searches_over_few_workers_scan_them_without_pools():
    """A shape or group with few workers is searched by looking at each of them: the tick keeps no
    sorted pools for it (and passes no changes on to them), with the reference scheduler's decisions."""
    checked = 0
    for seed in range(40):
        snap = random_snapshot(seed)
        if len(snap.workers) > _SCANNED or not snap.pending:
            continue
        tick = run_tick(snap)
        assert tick.ledger._pools == {}, f"seed {seed}"
        assert decisions_of(tick.result()) == reference(snap), f"seed {seed}"
        checked += 1
    assert checked >= 10, checked


def test_run_spilling_to_a_later_preference_level_searches_each_level_once(monkeypatch):
    """An independent job whose run fills its preferred workers and goes on to the rest places
    with one search per preference level, not one per worker it fills, and as the reference scheduler."""
    workers = [cpu_worker(f"w{i:02d}", cpu=4, zone="a" if i % 3 == 0 else "b") for i in range(60)]
    tasks = job("/p/spill", cpu_request(cpu=1), replicas=120, constraints=(prefer("zone", Op.EQ, "a"),))
    snap = snapshot(workers, [tasks])
    searches = []
    fill = Pool.fill
    monkeypatch.setattr(Pool, "fill", lambda pool, *args: searches.append(pool) or fill(pool, *args))
    result = run_tick(snap).result()
    assert len(result.assignments) == 120
    assert len(searches) == 2
    assert decisions_of(result) == reference(snap)
