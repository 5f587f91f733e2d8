"""Measures one scheduling tick on synthetic clusters: tick time and decisions per second for 1k,
10k and 100k pending tasks against 100, 1,000 and 5,000 workers.

The cluster mixes cpu hosts and h100/a100 hosts in pools across three regions, half loaded with
running batch and interactive work; the queue mixes job sizes (1 to 32 replicas), bands, region
constraints, zone preferences and coscheduled GPU jobs, so every stage of the pipeline (gating,
ordering, fit, best fit, coscheduling, preemption, reasons) runs. The figures are printed, not
asserted. Targets: 10,000 pending × 1,000 workers under 100 ms, and at least 5,000 decisions/s.

Two figures per size: a cold tick (the scheduler builds its worker index from nothing, as on the
first tick after a start) and a steady tick, as the controller runs them: the index is carried
over from the previous tick and advanced (`ClusterIndex.advance`) past what changed since (1 %
of the running tasks started, another 1 % ended); the same pending tasks wait in both, and the
advance is timed with the tick.

    .venv/bin/python bench/scheduler.py                 # the full matrix
    .venv/bin/python bench/scheduler.py --skip-largest  # leaves out 100k pending × 5,000 workers
    .venv/bin/python bench/scheduler.py --pending 10000 --workers 1000
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from iris.core.bands import Band  # noqa: E402
from iris.core.constraints import Constraint, Op  # noqa: E402
from iris.core.resources import Device, Resources  # noqa: E402
from iris.scheduler import PendingTask, RunningTask, SchedulingSnapshot, WorkerSnapshot, schedule  # noqa: E402
from iris.scheduler.index import ClusterIndex  # noqa: E402

G = 1024**3
REGIONS = ("us-east5", "us-central1", "eu-west4")
CPU_SHAPES = [Resources(cpu=c, memory=m * G) for c in (0.5, 1, 2, 4, 8) for m in (1, 4, 16)]
GPU_SHAPES = [
    Resources(cpu=8, memory=64 * G, device=Device("gpu", v, n)) for v in ("h100", "a100", "") for n in (1, 4, 8)
]


def build_workers(count: int, rng: random.Random) -> list[WorkerSnapshot]:
    workers = []
    for i in range(count):
        region = REGIONS[i % len(REGIONS)]
        zone = f"{region}-{'abc'[(i // 3) % 3]}"
        if i % 10 < 7:
            capacity = Resources(cpu=32, memory=128 * G, disk=500 * G)
            attrs = {"device-type": "cpu", "region": region, "zone": zone}
            backend = "cpu"
        else:
            variant = "h100" if i % 2 else "a100"
            capacity = Resources(cpu=96, memory=1024 * G, disk=2000 * G, device=Device("gpu", variant, 8))
            attrs = {
                "device-type": "gpu",
                "device-variant": variant,
                "gpu-count": "8",
                "region": region,
                "zone": zone,
                "pool": f"{variant}-{region}-{i // 64}",
            }
            backend = f"gpu-{variant}"
        workers.append(WorkerSnapshot(f"w{i:05d}", backend, capacity, attrs, alive=rng.random() > 0.01))
    return workers


def build_running(workers: list[WorkerSnapshot], rng: random.Random) -> list[RunningTask]:
    """Loads about half of every worker with batch and interactive tasks."""
    running = []
    for worker in workers:
        if not worker.alive:
            continue
        gpus = worker.capacity.device.count
        for j in range(rng.randint(0, 4)):
            if gpus:
                resources = Resources(cpu=8, memory=64 * G, device=Device("gpu", worker.capacity.device.variant, 1))
            else:
                resources = Resources(cpu=4, memory=16 * G)
            band = Band.BATCH if rng.random() < 0.7 else Band.INTERACTIVE
            running.append(
                RunningTask(
                    f"/r/{worker.worker_id}-{j}/0",
                    f"/r/{worker.worker_id}-{j}",
                    worker.worker_id,
                    resources,
                    band,
                    rng.randint(0, 10**6),
                    f"user{rng.randint(0, 19)}",
                )
            )
    return running


def build_pending(count: int, rng: random.Random) -> list[PendingTask]:
    pending: list[PendingTask] = []
    job = 0
    while len(pending) < count:
        gpu = rng.random() < 0.2
        resources = rng.choice(GPU_SHAPES if gpu else CPU_SHAPES)
        replicas = min(
            count - len(pending), rng.choice((1, 1, 2, 4, 8, 16, 32)) if not gpu else rng.choice((1, 1, 2, 4))
        )
        constraints: tuple[Constraint, ...] = ()
        if rng.random() < 0.3:
            constraints += (Constraint("region", Op.EQ, (rng.choice(REGIONS),)),)
        if rng.random() < 0.2:
            constraints += (Constraint("zone", Op.EQ, (f"{rng.choice(REGIONS)}-a",), preferred=True),)
        band = rng.choices(list(Band), weights=(1, 6, 3))[0]
        user = f"user{rng.randint(0, 19)}"
        job_id = f"/{user}/job-{job}"
        for index in range(replicas):
            pending.append(
                PendingTask(
                    f"{job_id}/{index}",
                    job_id,
                    index,
                    resources,
                    constraints,
                    band,
                    user,
                    depth=int(rng.random() < 0.1),
                    root_submitted_ms=job,
                    insertion=job,
                    replicas=replicas,
                    coschedule=gpu,
                )
            )
        job += 1
    return pending


def build_snapshot(pending: int, workers: int, seed: int = 7) -> SchedulingSnapshot:
    rng = random.Random(seed)
    worker_list = build_workers(workers, rng)
    budgets = {f"user{i}": 50_000 for i in range(0, 20, 5)}
    return SchedulingSnapshot(
        10**6, tuple(worker_list), tuple(build_running(worker_list, rng)), tuple(build_pending(pending, rng)), budgets
    )


def previous(snap: SchedulingSnapshot, rng: random.Random) -> SchedulingSnapshot:
    """The tick before `snap`: 1 % of its running tasks had not started yet, and another 1 %
    (tasks that have ended since) still ran."""
    running = [t for t in snap.running if rng.random() >= 0.01]
    ended = [replace(t, task_id=f"{t.task_id}-ended") for t in snap.running if rng.random() < 0.01]
    return replace(snap, now_ms=snap.now_ms - 1000, running=tuple(running + ended))


def steady_tick_s(snap: SchedulingSnapshot) -> float:
    """One tick on `snap` with the index carried over from the tick before it."""
    before = previous(snap, random.Random(3))
    index = ClusterIndex(before.workers, before.running)
    schedule(replace(before, index=index))  # the previous tick, which fills the index's caches
    start = time.perf_counter()
    schedule(replace(snap, index=index.advance(snap.workers, snap.running)))
    return time.perf_counter() - start


def measure(pending: int, workers: int, repeat: int) -> dict:
    snap = build_snapshot(pending, workers)
    times = []
    result = None
    for _ in range(repeat):
        start = time.perf_counter()
        result = schedule(snap)
        times.append(time.perf_counter() - start)
    tick = statistics.median(times)
    steady = statistics.median(steady_tick_s(snap) for _ in range(repeat))
    return {
        "pending": pending,
        "workers": workers,
        "tick_ms": tick * 1000,
        "steady_tick_ms": steady * 1000,
        "decisions_per_s": pending / tick,
        "placements": len(result.assignments),
        "placements_per_s": len(result.assignments) / tick,
        "preemptions": len(result.preemptions),
        "unschedulable": len(result.unschedulable),
        "waiting_jobs": len(result.pending_reasons),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pending", type=int, nargs="*", default=[1_000, 10_000, 100_000])
    parser.add_argument("--workers", type=int, nargs="*", default=[100, 1_000, 5_000])
    parser.add_argument("--repeat", type=int, default=3, help="ticks per size; the median is printed")
    parser.add_argument("--skip-largest", action="store_true", help="leave out 100k pending × 5,000 workers")
    args = parser.parse_args()
    header = (
        f"{'pending':>8} {'workers':>8} {'cold ms':>9} {'steady ms':>10} {'decisions/s':>12} {'placed':>7} "
        f"{'placed/s':>10} {'preempt':>8} {'unsched':>8} {'waiting jobs':>13}"
    )
    print(header)
    for pending in args.pending:
        for workers in args.workers:
            if args.skip_largest and pending >= 100_000 and workers >= 5_000:
                print(f"{pending:>8} {workers:>8}  skipped (--skip-largest)")
                continue
            row = measure(pending, workers, args.repeat)
            print(
                f"{row['pending']:>8} {row['workers']:>8} {row['tick_ms']:>9.1f} {row['steady_tick_ms']:>10.1f} "
                f"{row['decisions_per_s']:>12,.0f} "
                f"{row['placements']:>7} {row['placements_per_s']:>10,.0f} {row['preemptions']:>8} "
                f"{row['unschedulable']:>8} {row['waiting_jobs']:>13}",
                flush=True,
            )
    print("target: 10,000 pending x 1,000 workers under 100 ms and at least 5,000 decisions/s")


if __name__ == "__main__":
    main()
