"""The pass's indexes (victim bounds, group counts, best-fit shortcuts) never change a decision: on
seeded random clusters with constrained, coscheduled and preempting work, of sizes beyond the
generated ones of `test_reference`, the kernel gives the same placements, preemptions,
unschedulable tasks and waiting jobs as the reference scheduler, which scans every worker, both on
a cold index and on one carried over from the tick before."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from iris.core.bands import Band
from iris.core.constraints import Constraint, Op
from iris.core.resources import Device, Resources
from iris.scheduler import PendingTask, RunningTask, SchedulingSnapshot, WorkerSnapshot
from iris.scheduler.index import ClusterIndex
from iris.scheduler.reference import Decisions, decide
from iris.scheduler.tick import run_tick
from tests.scheduler.scheduler_builders import decisions_of

pytestmark = pytest.mark.usefixtures("searches")

G = 1024**3
REGIONS = ("us", "eu", "asia")
CPU_SHAPES = [Resources(cpu=c, memory=m * G) for c in (0.5, 1, 2, 4) for m in (1, 4, 16)]
GPU_SHAPES = [
    Resources(cpu=4, memory=16 * G, device=Device("gpu", v, n)) for v in ("h100", "a100", "") for n in (1, 2, 4)
]


def random_workers(rng: random.Random, count: int) -> list[WorkerSnapshot]:
    workers = []
    for i in range(count):
        region = rng.choice(REGIONS)
        attrs = {"region": region, "zone": f"{region}-{rng.choice('ab')}"}
        if rng.random() < 0.6:
            capacity = Resources(cpu=rng.choice((4, 8, 16)), memory=rng.choice((16, 64)) * G, disk=100 * G)
            attrs["device-type"] = "cpu"
            backend = rng.choice(("cpu-a", "cpu-b"))
        else:
            variant = rng.choice(("h100", "a100"))
            count_gpus = rng.choice((4, 8))
            capacity = Resources(cpu=32, memory=256 * G, disk=500 * G, device=Device("gpu", variant, count_gpus))
            attrs |= {"device-type": "gpu", "device-variant": variant, "gpu-count": str(count_gpus)}
            attrs["pool"] = f"{variant}-{rng.randint(0, 3)}"
            backend = f"gpu-{variant}"
        workers.append(WorkerSnapshot(f"w{i:03d}", backend, capacity, attrs, alive=rng.random() > 0.05))
    return workers


def random_running(rng: random.Random, workers: list[WorkerSnapshot]) -> list[RunningTask]:
    running = []
    for worker in workers:
        device = worker.capacity.device
        for j in range(rng.randint(0, 3)):
            if device.count:
                resources = Resources(cpu=4, memory=16 * G, device=Device("gpu", device.variant, rng.choice((1, 2))))
            else:
                resources = Resources(cpu=rng.choice((0.5, 1, 2)), memory=rng.choice((1, 4)) * G)
            job_id = f"/r/{worker.worker_id}-{j}"
            band = rng.choices(list(Band), weights=(1, 3, 6))[0]
            user = rng.choice(("alice", "bob", "carol"))
            running.append(
                RunningTask(f"{job_id}/0", job_id, worker.worker_id, resources, band, rng.randint(0, 1000), user)
            )
        if rng.random() < 0.05:
            # A worker running more than it has (its capacity shrank under its tasks): free capacity
            # below zero, which every ordering must still sort right.
            job_id = f"/r/{worker.worker_id}-over"
            over = Resources(cpu=worker.capacity.cpu * 2, memory=worker.capacity.memory * 3)
            running.append(RunningTask(f"{job_id}/0", job_id, worker.worker_id, over, Band.BATCH, 0, "alice"))
    return running


def random_request(rng: random.Random) -> tuple[Resources, tuple[Constraint, ...], bool]:
    """One job's resources and constraints, and whether it asks for an accelerator."""
    gpu = rng.random() < 0.35
    resources = rng.choice(GPU_SHAPES if gpu else CPU_SHAPES)
    constraints: tuple[Constraint, ...] = ()
    draw = rng.random()
    if draw < 0.2:
        constraints += (Constraint("region", Op.EQ, (rng.choice(REGIONS),)),)
    elif draw < 0.3:
        constraints += (Constraint("region", Op.IN, tuple(rng.sample(REGIONS, 2))),)
    if rng.random() < 0.2:
        constraints += (Constraint("zone", Op.EQ, (f"{rng.choice(REGIONS)}-a",), preferred=True),)
    if rng.random() < 0.1:
        # A second preference: up to three levels, searched best first.
        constraints += (Constraint("region", Op.EQ, (rng.choice(REGIONS),), preferred=True),)
    return resources, constraints, gpu


def random_pending(rng: random.Random, jobs: int, running: list[RunningTask]) -> list[PendingTask]:
    pending: list[PendingTask] = []
    # Half the queues draw every job from a few requests, as a queue of many similar jobs does:
    # later jobs then meet pools and searches the earlier ones of the same shape left behind.
    palette = [random_request(rng) for _ in range(rng.randint(1, 3))] if rng.random() < 0.5 else None
    for j in range(jobs):
        resources, constraints, gpu = rng.choice(palette) if palette else random_request(rng)
        replicas = rng.choice((1, 1, 2, 3, 4)) if gpu else rng.choice((1, 1, 2, 5, 12))
        job_id = f"/p/j{j}"
        fields = dict(
            band=rng.choices(list(Band), weights=(2, 5, 3))[0],
            user=rng.choice(("alice", "bob", "carol")),
            depth=int(rng.random() < 0.1),
            root_submitted_ms=rng.randint(0, 50),
            insertion=j,
            replicas=replicas,
            coschedule=gpu or rng.random() < 0.1,
            scheduling_deadline_ms=rng.choice((None, None, None, None, 500)),
        )
        first = 0
        if replicas > 1 and rng.random() < 0.15 and running:
            # Some replicas already run: the rest must join their group.
            first = 1
            host = rng.choice(running)
            running.append(replace(host, task_id=f"{job_id}/0", job_id=job_id, resources=resources))
        if rng.random() < 0.3:
            # Equal requests need not be the same objects (each job parses its own config).
            resources, constraints = replace(resources), tuple(replace(c) for c in constraints)
        for index in range(first, replicas):
            pending.append(PendingTask(f"{job_id}/{index}", job_id, index, resources, constraints, **fields))
    return pending


def random_snapshot(seed: int) -> SchedulingSnapshot:
    rng = random.Random(seed)
    workers = random_workers(rng, rng.randint(8, 60))
    running = random_running(rng, workers)
    pending = random_pending(rng, rng.randint(10, 120), running)
    budgets = rng.choice(({}, {"alice": 20_000}, {"bob": 0}))
    return SchedulingSnapshot(1_000, tuple(workers), tuple(running), tuple(pending), budgets)


def fast(snap: SchedulingSnapshot) -> Decisions:
    return decisions_of(run_tick(snap).result())


def reference(snap: SchedulingSnapshot) -> Decisions:
    """The decisions of the reference scheduler."""
    return decide(snap)


SEEDS = range(120)


@pytest.mark.parametrize("chunk", range(4))
def test_fast_pass_same_decisions_as_reference(chunk):
    seen = {"assignments": 0, "preemptions": 0, "reasons": 0, "unschedulable": 0}
    for seed in SEEDS[chunk::4]:
        snap = random_snapshot(seed)
        expected = reference(snap)
        assert fast(snap) == expected, f"seed {seed}"
        seen["assignments"] += len(expected.assignments)
        seen["preemptions"] += len(expected.preemptions)
        seen["reasons"] += len(expected.waiting)
        seen["unschedulable"] += len(expected.never) + len(expected.timed_out)
    # The generator must reach every kind of decision, or the comparison proves little.
    assert all(count > 0 for count in seen.values()), seen


@pytest.mark.parametrize("chunk", range(2))
def test_fast_pass_with_carried_index_same_decisions_as_reference(chunk):
    for seed in SEEDS[chunk::8]:
        snap = random_snapshot(seed)
        rng = random.Random(seed)
        # The tick before: a tenth of the running tasks had not started, and the index it filled
        # is advanced to this tick's running tasks.
        earlier = tuple(t for t in snap.running if rng.random() > 0.1)
        index = ClusterIndex(snap.workers, earlier)
        run_tick(replace(snap, running=earlier, index=index))
        carried = replace(snap, index=index.advance(snap.workers, snap.running))
        assert fast(carried) == reference(snap), f"seed {seed}"


def crowded_snapshot(seed: int) -> SchedulingSnapshot:
    """A GPU cluster of small pools, mostly full of lower-band work, and a queue of coscheduled jobs
    from a few requests: most must preempt, across bands, some need more replicas than any pool
    holds, and the pools fill while the pass runs."""
    rng = random.Random(seed)
    workers: list[WorkerSnapshot] = []
    for pool in range(rng.randint(3, 8)):
        variant = rng.choice(("h100", "a100"))
        for i in range(rng.randint(1, 4)):
            capacity = Resources(cpu=32, memory=256 * G, device=Device("gpu", variant, rng.choice((4, 8))))
            attrs = {"device-type": "gpu", "device-variant": variant, "pool": f"p{pool}"}
            workers.append(WorkerSnapshot(f"p{pool}-{i}", f"gpu-{variant}", capacity, attrs))
    running = []
    for worker in workers:
        left = worker.capacity.device.count
        j = 0
        while left > 0 and rng.random() < 0.85:
            gpus = min(left, rng.choice((1, 1, 2, 4)))
            left -= gpus
            resources = Resources(cpu=2, memory=8 * G, device=Device("gpu", worker.capacity.device.variant, gpus))
            band = rng.choice((Band.BATCH, Band.BATCH, Band.INTERACTIVE))
            job_id = f"/r/{worker.worker_id}-{j}"
            running.append(
                RunningTask(f"{job_id}/0", job_id, worker.worker_id, resources, band, rng.randint(0, 900), "bob")
            )
            j += 1
    palette = [
        Resources(cpu=2, memory=8 * G, device=Device("gpu", rng.choice(("h100", "a100", "")), rng.choice((1, 2, 4, 8))))
        for _ in range(rng.randint(1, 3))
    ]
    pending = []
    for j in range(rng.randint(4, 20)):
        resources = rng.choice(palette)
        replicas = rng.choice((2, 2, 3, 4, 6, 9))
        band = rng.choice((Band.PRODUCTION, Band.INTERACTIVE, Band.INTERACTIVE, Band.BATCH))
        pending += [
            PendingTask(
                f"/p/c{j}/{i}",
                f"/p/c{j}",
                i,
                resources,
                (),
                band,
                "alice",
                insertion=j,
                replicas=replicas,
                coschedule=True,
            )
            for i in range(replicas)
        ]
    return SchedulingSnapshot(1_000, tuple(workers), tuple(running), tuple(pending))


def test_fast_pass_crowded_coscheduled_preemption_same_as_reference():
    preempting_jobs = waiting_jobs = 0
    for seed in range(60):
        snap = crowded_snapshot(seed)
        expected = reference(snap)
        assert fast(snap) == expected, f"seed {seed}"
        preemptors = {by.rsplit("/", 1)[0] for _, _, by in expected.preemptions}
        preempting_jobs += len(preemptors)
        waiting_jobs += len(expected.waiting)
    assert preempting_jobs > 20 and waiting_jobs > 20, (preempting_jobs, waiting_jobs)


def full_cpu_snapshot(seed: int) -> SchedulingSnapshot:
    """CPU workers full of lower-band tasks of mixed sizes, and independent jobs that must preempt:
    some fit by evicting one task, some only by evicting several, some not at all."""
    rng = random.Random(seed)
    workers = [
        WorkerSnapshot(f"c{i}", "cpu", Resources(cpu=8, memory=32 * G), {"device-type": "cpu"})
        for i in range(rng.randint(4, 24))
    ]
    running = []
    for worker in workers:
        cpu = 8.0
        j = 0
        while cpu > 0 and rng.random() < 0.9:
            size = min(cpu, rng.choice((0.5, 1, 2, 4)))
            cpu -= size
            band = rng.choice((Band.BATCH, Band.BATCH, Band.INTERACTIVE))
            job_id = f"/r/{worker.worker_id}-{j}"
            resources = Resources(cpu=size, memory=int(size * 4) * G)
            running.append(
                RunningTask(f"{job_id}/0", job_id, worker.worker_id, resources, band, rng.randint(0, 900), "bob")
            )
            j += 1
    pending = []
    for j in range(rng.randint(4, 30)):
        resources = Resources(cpu=rng.choice((1, 2, 3, 6)), memory=rng.choice((2, 8, 20)) * G)
        band = rng.choice((Band.PRODUCTION, Band.INTERACTIVE, Band.INTERACTIVE))
        pending += [
            PendingTask(f"/p/i{j}/{i}", f"/p/i{j}", i, resources, (), band, "alice", insertion=j, replicas=3)
            for i in range(rng.choice((1, 3)))
        ]
    return SchedulingSnapshot(1_000, tuple(workers), tuple(running), tuple(pending))


def test_fast_pass_preempting_on_full_workers_same_as_reference():
    several = 0
    for seed in range(80):
        snap = full_cpu_snapshot(seed)
        expected = reference(snap)
        assert fast(snap) == expected, f"seed {seed}"
        per_preemptor: dict[str, int] = {}
        for _, _, by in expected.preemptions:
            per_preemptor[by] = per_preemptor.get(by, 0) + 1
        several += sum(1 for count in per_preemptor.values() if count > 1)
    assert several > 10, several  # tasks that evict more than one task each


def test_fast_pass_coscheduled_pinned_to_running_group_same_as_reference():
    gpus = [
        WorkerSnapshot(
            f"g{i}",
            "gpu",
            Resources(cpu=32, memory=256 * G, device=Device("gpu", "h100", 8)),
            {"device-type": "gpu", "device-variant": "h100", "pool": f"p{i % 2}"},
        )
        for i in range(4)
    ]
    need = Resources(cpu=4, memory=16 * G, device=Device("gpu", "h100", 4))
    batch = [RunningTask(f"/b/{i}/0", f"/b/{i}", f"g{i}", need, Band.BATCH, i, "bob") for i in range(4)]
    started = RunningTask("/a/j/0", "/a/j", "g1", need, Band.PRODUCTION, 5, "alice")
    pending = tuple(
        PendingTask(f"/a/j/{i}", "/a/j", i, need, (), Band.PRODUCTION, "alice", replicas=4, coschedule=True)
        for i in (1, 2, 3)
    )
    snap = SchedulingSnapshot(100, tuple(gpus), (*batch, started), pending)
    result = fast(snap)
    assert result == reference(snap)
    assert {worker for _, worker in result.assignments} <= {"g1", "g3"}  # pool p1, where replica 0 runs
    assert len(result.assignments) == 3 and result.preemptions
