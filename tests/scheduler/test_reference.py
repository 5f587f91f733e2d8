"""The fast kernel decides what the plain reference scheduler (`iris.scheduler.reference`) decides:
the same placements, preemptions, unschedulable and timed-out tasks and waiting jobs, on generated
small clusters (one tick, with the kernel's best-fit pools forced on or left as tuned) and on
chains of ticks where the controller's carried index and requests are handed from tick to tick."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from functools import cache

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from iris.core.bands import Band
from iris.core.constraints import Constraint, Op
from iris.core.resources import Device, Resources
from iris.scheduler import PendingTask, RunningTask, ScheduleResult, SchedulingSnapshot, WorkerSnapshot, schedule
from iris.scheduler import ledger as ledger_module
from iris.scheduler.index import ClusterIndex
from iris.scheduler.reference import Decisions, decide
from tests.scheduler.scheduler_builders import decisions_of

G = 1024**3
NOW = 10_000
USERS = ("alice", "bob", "carol")
ONE_TICK = settings(
    max_examples=500, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck), database=None
)
CHAINS = settings(
    max_examples=200, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck), database=None
)


@cache
def _choice(values: tuple) -> st.SearchStrategy:
    return st.sampled_from(values)


@cache
def _number(low: int, high: int) -> st.SearchStrategy:
    return st.integers(low, high)


def pick(draw, *values):
    """One of `values` (each strategy made once: making strategies is most of a case's cost)."""
    return draw(_choice(values))


def number(draw, low: int, high: int) -> int:
    return draw(_number(low, high))


@contextmanager
def pools_forced(on: bool) -> Iterator[None]:
    """With `on`, every best-fit search goes through the sorted pools, as in a large cluster
    (a shape that may use a few workers is otherwise searched by scanning them)."""
    saved = ledger_module._SCANNED
    if on:
        ledger_module._SCANNED = 0
    try:
        yield
    finally:
        ledger_module._SCANNED = saved


@st.composite
def workers(draw) -> list[WorkerSnapshot]:
    out = []
    for i in range(number(draw, 1, 7)):
        gpu = pick(draw, False, True)
        attrs = {"device-type": "gpu" if gpu else "cpu", "region": pick(draw, "us", "eu")}
        device = Device()
        if gpu:
            variant = pick(draw, "h100", "a100")
            count = pick(draw, 2, 4, 8)
            attrs |= {"device-variant": variant, "gpu-count": str(count)}
            device = Device("gpu", variant, count)
        group = pick(draw, "", "", "pool", "tpu-name")
        if group:
            attrs[group] = pick(draw, "p1", "p2")
        if pick(draw, False, True):
            attrs["zone"] = pick(draw, "a", "b")
        capacity = Resources(
            cpu=pick(draw, 2, 4, 8),
            memory=pick(draw, 4, 16) * G,
            disk=pick(draw, 0, 100) * G,
            device=device,
        )
        backend = pick(draw, "b1", "b2", "gpu") if gpu else pick(draw, "b1", "b2")
        alive = i == 0 or number(draw, 0, 9) > 0
        out.append(WorkerSnapshot(f"w{i}", backend, capacity, attrs, alive))
    return out


def resources(draw) -> Resources:
    if number(draw, 0, 2) == 0:
        variant = pick(draw, "h100", "a100", "")
        return Resources(cpu=1, memory=G, device=Device("gpu", variant, pick(draw, 1, 2, 4)))
    return Resources(
        cpu=pick(draw, 0.5, 1, 2, 4),
        memory=pick(draw, 1, 2, 8) * G,
        disk=pick(draw, 0, 0, 10) * G,
    )


CONSTRAINTS = (
    Constraint("region", Op.EQ, ("us",)),
    Constraint("region", Op.IN, ("eu", "asia")),
    Constraint("region", Op.NE, ("eu",)),
    Constraint("zone", Op.EXISTS),
    Constraint("backend", Op.EQ, ("b1",)),
    Constraint("worker", Op.EQ, ("w1",)),
    Constraint("gpu-count", Op.GE, ("4",)),
    Constraint("cluster", Op.EQ, ("elsewhere",)),  # read only by federation routing
    Constraint("zone", Op.EQ, ("a",), preferred=True),
    Constraint("region", Op.EQ, ("eu",), preferred=True),
    Constraint("pool", Op.EQ, ("P2",), preferred=True),
)


BUDGETS = ({}, {"alice": 0, "bob": 0}, {"bob": 3_000, "carol": 10})
PEER_SPEND = ({}, {"carol": 2_000})


def running_task(draw, worker_list: list[WorkerSnapshot], n: int) -> RunningTask:
    worker = worker_list[number(draw, 0, len(worker_list) - 1)]
    worker_id = worker.worker_id if number(draw, 0, 19) else "gone"  # a worker no longer reported
    device = worker.capacity.device
    if device.count:
        need = Resources(cpu=1, memory=G, device=Device("gpu", device.variant, pick(draw, 1, 2, 4)))
    else:
        need = Resources(cpu=pick(draw, 0.5, 1, 2), memory=pick(draw, 1, 4) * G)
    band = pick(draw, *list(Band))
    started = number(draw, 0, NOW)
    ends = pick(draw, None, 0, 2_000, 5_000)  # when its time limit ends, from now (None: it has none)
    return RunningTask(
        f"/r/{n}/0", f"/r/{n}", worker_id, need, band, started, pick(draw, *USERS), None if ends is None else NOW + ends
    )


def pending_job(
    draw, j: int, running: list[RunningTask], worker_list: list[WorkerSnapshot], now: int, deadlines: bool = True
):
    """One job's pending tasks; some coscheduled jobs have a replica running already."""
    need = resources(draw)
    replicas = number(draw, 1, 4)
    constraints = tuple({pick(draw, *CONSTRAINTS): None for _ in range(number(draw, 0, 2))})
    job_id = f"/{pick(draw, *USERS)}/j{j}"
    late = pick(draw, None, None, None, -1, 0, 5) if deadlines else None  # passed, reached now, or to come
    deadline = None if late is None else now + late
    fields = dict(
        band=pick(draw, *list(Band)),
        user=job_id.split("/")[1],
        depth=number(draw, 0, 1),
        root_submitted_ms=number(draw, 0, 3),
        insertion=j,
        replicas=replicas,
        coschedule=pick(draw, False, True),
        scheduling_deadline_ms=deadline,
        limit_ms=pick(draw, None, None, 1_000, 4_000),  # its time limit: only a limited task backfills
    )
    first = 0
    if replicas > 1 and number(draw, 0, 4) == 0:
        first = 1
        worker = worker_list[number(draw, 0, len(worker_list) - 1)]
        running.append(RunningTask(f"{job_id}/0", job_id, worker.worker_id, need, fields["band"], 0, fields["user"]))
    return [PendingTask(f"{job_id}/{i}", job_id, i, need, constraints, **fields) for i in range(first, replicas)]


@st.composite
def snapshots(draw, deadlines: bool = True) -> SchedulingSnapshot:
    """A small cluster and its queue. Without `deadlines`, no task has a scheduling deadline (the
    kernel then keeps its requests across ticks; with one, it judges them afresh each tick)."""
    worker_list = draw(workers())
    running = [running_task(draw, worker_list, n) for n in range(number(draw, 0, 10))]
    pending = []
    for j in range(number(draw, 0, 8)):
        pending += pending_job(draw, j, running, worker_list, NOW, deadlines)
    budgets = BUDGETS[number(draw, 0, len(BUDGETS) - 1)]
    default = pick(draw, None, 0, 1_500)
    peers = PEER_SPEND[number(draw, 0, len(PEER_SPEND) - 1)]
    return SchedulingSnapshot(NOW, tuple(worker_list), tuple(running), tuple(pending), budgets, default, peers)


def kinds(expected: Decisions) -> Counter[str]:
    return Counter({name: len(getattr(expected, name)) for name in Decisions.__slots__})


def test_kernel_decides_as_reference_on_random_clusters():
    seen: Counter[str] = Counter()

    @ONE_TICK
    @given(snapshots(), st.booleans())
    def check(snap: SchedulingSnapshot, pools: bool) -> None:
        expected = decide(snap)
        with pools_forced(pools):
            assert decisions_of(schedule(snap)) == expected
        seen.update(kinds(expected))
        seen["cases"] += 1

    check()
    # The generator reaches every kind of decision, or the comparison proves little.
    assert seen["cases"] >= 500 and all(seen[name] > 10 for name in Decisions.__slots__), seen


def next_tick(draw, snap: SchedulingSnapshot, result: ScheduleResult, tick: int, deadlines: bool) -> SchedulingSnapshot:
    """The snapshot after `result` is applied: placed tasks run, victims go back to pending, some
    running tasks end, a job or two arrive; tasks that did not change stay the same objects."""
    now = snap.now_ms + 1_000
    placed = {a.task_id: a.worker_id for a in result.assignments}
    evicted = {p.task_id for p in result.preemptions}
    dropped = placed.keys() | {u.task_id for u in result.unschedulable}
    pending = [t for t in snap.pending if t.task_id not in dropped]
    running = [t for t in snap.running if t.task_id not in evicted]
    for task in snap.pending:
        if task.task_id in placed:
            running.append(
                RunningTask(
                    task.task_id,
                    task.job_id,
                    placed[task.task_id],
                    task.resources,
                    task.band,
                    now,
                    task.user,
                    now + task.limit_ms if task.limit_ms else None,
                )
            )
    ending = {number(draw, 0, len(running) - 1) for _ in range(number(draw, 0, 3 if running else 0))}
    running = [t for i, t in enumerate(running) if i not in ending]
    worker_list = list(snap.workers)
    for j in range(number(draw, 0, 2)):
        pending += pending_job(draw, 100 * tick + j, running, worker_list, now, deadlines)
    return replace(snap, now_ms=now, running=tuple(running), pending=tuple(pending), index=None)


def test_kernel_decides_as_reference_over_chains_of_ticks():
    seen: Counter[str] = Counter()

    @CHAINS
    @given(st.booleans(), st.booleans(), st.data())
    def check(deadlines: bool, pools: bool, data: st.DataObject) -> None:
        snap = data.draw(snapshots(deadlines))
        index = ClusterIndex(snap.workers, snap.running)
        with pools_forced(pools):
            for tick in range(1, 5):
                carried = replace(snap, index=index)
                expected = decide(snap)
                result = schedule(carried)
                assert decisions_of(result) == expected, f"tick {tick}"
                seen.update(kinds(expected))
                snap = next_tick(data.draw, snap, result, tick, deadlines)
                index = index.advance(snap.workers, snap.running)
        seen["chains"] += 1

    check()
    assert seen["chains"] >= 200 and all(seen[name] > 10 for name in Decisions.__slots__), seen
