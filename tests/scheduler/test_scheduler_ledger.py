"""Ledger indexes: best-fit pools, the class-level constraint index and the victim heap agree with
brute force over every worker."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from iris.core.bands import Band
from iris.core.constraints import Constraint, Op, matches
from iris.scheduler import schedule
from iris.scheduler.fit import compile_shape, fits
from iris.scheduler.ledger import Ledger, best_fit
from iris.scheduler.preemption import VictimIndex, apply_victim_set, cheapest_victim_set, victim_bounds
from tests.scheduler.scheduler_builders import cpu_request, cpu_worker, gpu_request, gpu_worker, job, running, snapshot

FAST = settings(max_examples=60, deadline=None)


def brute_best_fit(ledger: Ledger, workers: list[int], need) -> int | None:
    fitting = [w for w in workers if fits(ledger.free[w], need)]
    return min(fitting, key=lambda w: (*ledger.free[w], w)) if fitting else None


@FAST
@given(st.lists(st.tuples(st.integers(0, 7), st.sampled_from([1, 2, 3])), max_size=30), st.sampled_from([1, 2, 4]))
def test_best_fit_after_lazy_updates_matches_brute_force(takes, cpu):
    ledger = Ledger(snapshot([cpu_worker(f"w{i}", cpu=8) for i in range(8)]))
    shape = compile_shape(cpu_request(cpu=cpu, memory=0), ())
    plan = ledger.plan(shape)
    for w, amount in takes:
        need = compile_shape(cpu_request(cpu=amount, memory=0), ()).need
        if fits(ledger.free[w], need):
            ledger.take(w, need)
        assert best_fit(plan, shape.need, ledger.free) == brute_best_fit(
            ledger, ledger.matching(shape.hard), shape.need
        )


def test_best_fit_rolled_back_trial_restores_order():
    ledger = Ledger(snapshot([cpu_worker("a", cpu=4), cpu_worker("b", cpu=8)]))
    shape = compile_shape(cpu_request(cpu=4, memory=0), ())
    plan = ledger.plan(shape)
    ledger.begin_trial()
    ledger.take(ledger.index["a"], shape.need)
    assert best_fit(plan, shape.need, ledger.free) == ledger.index["b"]
    ledger.rollback_trial()
    assert best_fit(plan, shape.need, ledger.free) == ledger.index["a"]


@FAST
@given(
    st.lists(st.sampled_from(["us", "eu", "US", "8", "8.0", "asia"]), min_size=1, max_size=8),
    st.sampled_from([Op.EQ, Op.IN, Op.NE]),
    st.lists(st.sampled_from(["us", "eu", "8", "8.0"]), min_size=1, max_size=2),
)
def test_class_index_matches_constraint_semantics(regions, op, values):
    ledger = Ledger(snapshot([cpu_worker(f"w{i}", region=r) for i, r in enumerate(regions)]))
    constraint = Constraint("region", op, tuple(values if op is Op.IN else values[:1]))
    expected = {w for w in range(len(regions)) if matches(constraint, ledger.attributes[w])}
    assert set(ledger.matching((constraint,))) == expected


@FAST
@given(
    st.lists(st.tuples(st.integers(0, 3), st.sampled_from([1, 2, 4]), st.integers(0, 50)), max_size=12),
    st.integers(1, 4),
)
def test_victim_index_agrees_with_full_scan_across_preemptions(tasks, rounds):
    workers = [gpu_worker(f"g{i}") for i in range(4)]
    held, used = [], [0] * 4
    for n, (w, count, started) in enumerate(tasks):
        if used[w] + count <= 8:
            used[w] += count
            held.append(running(f"/b/x{n}/0", f"g{w}", gpu_request(count), started_ms=started))
    ledger = Ledger(snapshot(workers, (), held))
    shape = compile_shape(gpu_request(4), ())
    # The placement pass asks only when the request fits on none of the workers.
    workers_ok = tuple(w for w in ledger.preemptible_workers(shape) if not fits(ledger.free[w], shape.need))
    bounds = victim_bounds(ledger, workers_ok, Band.INTERACTIVE, 100)
    index = VictimIndex(ledger, bounds, shape.need, Band.INTERACTIVE, 100)
    for _ in range(rounds):
        expected = cheapest_victim_set(ledger, workers_ok, shape.need, Band.INTERACTIVE, 100)
        found = index.cheapest()
        assert (found and found.cost) == (expected and expected.cost)
        if found is None:
            break
        apply_victim_set(ledger, found, shape.need)


def test_per_worker_classes_when_a_task_pins_a_worker():
    workers = [cpu_worker("w0"), cpu_worker("w1")]
    result = schedule(snapshot(workers, [job("/a/j", constraints=(Constraint("worker", Op.NE, ("w0",)),))]))
    assert [a.worker_id for a in result.assignments] == ["w1"]
