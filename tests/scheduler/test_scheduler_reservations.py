"""Reservations and backfill: the first job of a band that waits holds the capacity it will start
on, later jobs start there only when their time limit ends before it is needed, and no start ever
delays a reservation's expected start."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from iris.core.bands import Band
from iris.core.resources import Resources
from iris.scheduler import RunningTask, SchedulingSnapshot, WorkerSnapshot, schedule
from iris.scheduler.fit import demand, fits
from iris.scheduler.tick import run_tick
from tests.scheduler.scheduler_builders import G, gpu_request, gpu_worker, job

NOW = 1_000_000


def _running(i: int, worker: str, devices: int, ends_ms: int | None, band: Band = Band.INTERACTIVE) -> RunningTask:
    return RunningTask(f"r{i}/0", f"r{i}", worker, gpu_request(devices), band, NOW - 1000, "bob", ends_ms)


def _wave(worker: str = "w1", ends_ms: int | None = NOW + 4000) -> tuple[RunningTask, ...]:
    return tuple(_running(i, worker, 1, ends_ms) for i in range(8))


def _snapshot(running, pending, workers=None, since=None) -> SchedulingSnapshot:
    return SchedulingSnapshot(
        NOW, tuple(workers or [gpu_worker("w1")]), tuple(running), tuple(pending), reserved_since=since or {}
    )


def test_reservation_big_job_behind_full_worker_holds_it_and_blocks_unlimited_small_jobs():
    # Two of the eight first-wave tasks have ended: two devices free, the big job needs eight.
    running = _wave()[:6]
    pending = [*job("big", gpu_request(8), insertion=1), *job("small", gpu_request(1), insertion=2)]
    result = schedule(_snapshot(running, pending))
    assert result.assignments == ()
    (reservation,) = result.reservations
    assert reservation.job_id == "big" and reservation.worker_ids == ("w1",)
    assert reservation.start_ms == NOW + 4000 and reservation.since_ms == NOW
    assert "Holds a reservation on w1 since" in result.pending_reasons["big"]
    assert "Waits behind the reservation of job big on w1" in result.pending_reasons["small"]


def test_reservation_small_job_whose_limit_ends_first_backfills():
    running = _wave()[:6]
    short = job("short", gpu_request(1), insertion=2, limit_ms=3000)
    long = job("long", gpu_request(1), insertion=3, limit_ms=5000)
    result = schedule(_snapshot(running, [*job("big", gpu_request(8), insertion=1), *short, *long]))
    assert [a.task_id for a in result.assignments] == ["short/0"]
    assert "long" in result.pending_reasons and "big" in result.pending_reasons


def test_reservation_since_is_carried_from_the_snapshot():
    running = _wave()[:6]
    result = schedule(_snapshot(running, job("big", gpu_request(8)), since={"big": NOW - 60_000}))
    assert result.reservations[0].since_ms == NOW - 60_000


def test_reservation_unknown_start_without_limits_still_holds_and_never_backfills():
    running = _wave(ends_ms=None)[:6]
    short = job("short", gpu_request(1), insertion=2, limit_ms=1000)
    result = schedule(_snapshot(running, [*job("big", gpu_request(8), insertion=1), *short]))
    assert result.assignments == ()
    assert result.reservations[0].start_ms is None
    assert "expected start unknown" in result.pending_reasons["big"]


def test_reservation_higher_band_still_preempts_on_reserved_worker():
    running = tuple(_running(i, "w1", 1, NOW + 4000, Band.BATCH) for i in range(8))
    pending = [
        *job("prod", gpu_request(8), band=Band.PRODUCTION, insertion=2),
        *job("big", gpu_request(8), band=Band.BATCH, insertion=1),
    ]
    result = schedule(_snapshot(running, pending))
    assert {a.task_id for a in result.assignments} == {"prod/0"}
    assert len(result.preemptions) == 8


def test_reservation_coscheduled_group_waits_for_soonest_group():
    workers = [gpu_worker("a1", pool="a"), gpu_worker("a2", pool="a"), gpu_worker("b1", pool="b")]
    running = [
        *(_running(i, "a1", 1, NOW + 9000) for i in range(8)),
        *(_running(10 + i, "a2", 1, NOW + 2000) for i in range(8)),
        *(_running(20 + i, "b1", 1, NOW + 3000) for i in range(8)),
    ]
    gang = job("gang", gpu_request(8), replicas=2, coschedule=True)
    result = schedule(_snapshot(running, gang, workers))
    (reservation,) = result.reservations
    assert set(reservation.worker_ids) == {"a1", "a2"} and reservation.start_ms == NOW + 9000


# -- property: no start delays a reservation's expected start ---------------------------------


@st.composite
def _scenarios(draw):
    workers = [gpu_worker(f"w{i}", count=draw(st.sampled_from([4, 8]))) for i in range(draw(st.integers(1, 3)))]
    running = []
    for i in range(draw(st.integers(0, 12))):
        w = draw(st.sampled_from(workers))
        ends = draw(st.one_of(st.none(), st.integers(NOW + 1, NOW + 20_000)))
        running.append(_running(i, w.worker_id, draw(st.sampled_from([1, 2, 4])), ends))
    pending = []
    for i in range(draw(st.integers(1, 10))):
        devices = draw(st.sampled_from([1, 2, 4, 8]))
        limit = draw(st.one_of(st.none(), st.integers(500, 20_000)))
        pending += job(f"p{i}", gpu_request(devices), insertion=i, limit_ms=limit)
    return workers, running, pending


def _fitting(workers: list[WorkerSnapshot], running: list[RunningTask]) -> list[RunningTask]:
    used: dict[str, tuple[int, ...]] = {}
    kept = []
    for task in running:
        cap = next(demand(w.capacity) for w in workers if w.worker_id == task.worker_id)
        have = used.get(task.worker_id, (0, 0, 0, 0))
        after = tuple(a + b for a, b in zip(have, demand(task.resources)))
        if fits(cap, after):  # type: ignore[arg-type]
            used[task.worker_id] = after
            kept.append(task)
    return kept


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_scenarios())
def test_property_no_start_delays_a_reservation(scenario):
    workers, running, pending = scenario
    running = _fitting(workers, running)
    snapshot = _snapshot(running, pending, workers)
    tick = run_tick(snapshot)
    limits = {t.task_id: t.limit_ms for t in pending}
    need_of = {t.task_id: demand(t.resources) for t in pending}
    for hold in tick.reservations.holds:
        r = hold.reservation
        if r.start_ms is None:
            continue
        big = next(t for t in pending if t.job_id == r.job_id)
        for worker_id in r.worker_ids:
            cap = next(demand(w.capacity) for w in workers if w.worker_id == worker_id)
            # What still holds capacity on the worker at the expected start.
            busy = [
                demand(t.resources) for t in running if t.worker_id == worker_id and (t.ends_ms or 1 << 62) > r.start_ms
            ]
            for a in tick.assignments:
                if a.worker_id == worker_id:
                    limit = limits[a.task_id]
                    if limit is None or NOW + limit > r.start_ms:
                        busy.append(need_of[a.task_id])
            left = tuple(cap[d] - sum(b[d] for b in busy) for d in range(4))
            assert fits(left, demand(big.resources)), (r, left)  # type: ignore[arg-type]


def test_reservation_cpu_only_cluster_unaffected_when_everything_fits():
    workers = [WorkerSnapshot("c1", "cpu", Resources(cpu=8, memory=32 * G), {"device-type": "cpu"})]
    pending = job("a", Resources(cpu=1, memory=G), replicas=4)
    result = schedule(_snapshot((), pending, workers))
    assert len(result.assignments) == 4 and result.reservations == ()
