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

Times are CPU milliseconds of this process (`time.process_time`), so other work on the machine
skews them less than wall time would; the time of a bare `python -c pass` is printed beside them.
To compare with another revision, measure it with this same driver and hand its figures back:

    .venv/bin/python bench/scheduler.py --src /work/wt/base/src --json /tmp/base.json ...
    .venv/bin/python bench/scheduler.py --baseline-json /tmp/base.json ...

The other revision's steady tick is its cold one when it has no index to carry; each row then
shows this revision's steady tick as a fraction of the baseline's.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path


def _source_tree() -> str:
    """The `src` folder to measure: this checkout's, or the one `--src` names (read before the imports)."""
    if "--src" in sys.argv[:-1]:
        return str(Path(sys.argv[sys.argv.index("--src") + 1]).resolve())
    return str(Path(__file__).resolve().parent.parent / "src")


sys.path.insert(0, _source_tree())

from iris.core.bands import Band  # noqa: E402
from iris.core.constraints import Constraint, Op  # noqa: E402
from iris.core.resources import Device, Resources  # noqa: E402
from iris.scheduler import PendingTask, RunningTask, SchedulingSnapshot, WorkerSnapshot, schedule  # noqa: E402

try:
    from iris.scheduler.index import ClusterIndex
except ImportError:  # a revision from before the index was carried across ticks
    ClusterIndex = None  # type: ignore[assignment,misc]

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
    """CPU seconds of one tick on `snap` with the index carried over from the tick before it (a
    cold tick where the measured revision has no index)."""
    if ClusterIndex is None:
        return cold_tick_s(snap)
    before = previous(snap, random.Random(3))
    index = ClusterIndex(before.workers, before.running)
    schedule(replace(before, index=index))  # the previous tick, which fills the index's caches
    start = time.process_time()
    schedule(replace(snap, index=index.advance(snap.workers, snap.running)))
    return time.process_time() - start


def cold_tick_s(snap: SchedulingSnapshot) -> float:
    """CPU seconds of one tick on `snap` with the index built from nothing."""
    start = time.process_time()
    schedule(snap)
    return time.process_time() - start


def bare_python_ms(runs: int = 5) -> float:
    """Median wall time of `python -c pass`: how loaded the machine is while the figures are taken."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def measure(pending: int, workers: int, repeat: int) -> dict:
    snap = build_snapshot(pending, workers)
    result = schedule(snap)
    tick = statistics.median(cold_tick_s(snap) for _ in range(repeat))
    steady = statistics.median(steady_tick_s(snap) for _ in range(repeat))
    return {
        "pending": pending,
        "workers": workers,
        "tick_ms": tick * 1000,
        "steady_tick_ms": steady * 1000,
        "decisions_per_s": pending / steady,
        "placements": len(result.assignments),
        "placements_per_s": len(result.assignments) / steady,
        "preemptions": len(result.preemptions),
        "unschedulable": len(result.unschedulable),
        "waiting_jobs": len(result.pending_reasons),
    }


def load_baseline(path: str | None) -> dict[tuple[int, int], float]:
    """(pending, workers) -> the baseline's steady tick in ms, from a `--json` file of another run."""
    if not path:
        return {}
    rows = json.loads(Path(path).read_text())["rows"]
    return {(r["pending"], r["workers"]): r["steady_tick_ms"] for r in rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pending", type=int, nargs="*", default=[1_000, 10_000, 100_000])
    parser.add_argument("--workers", type=int, nargs="*", default=[100, 1_000, 5_000])
    parser.add_argument("--repeat", type=int, default=3, help="ticks per size; the median is printed")
    parser.add_argument("--skip-largest", action="store_true", help="leave out 100k pending × 5,000 workers")
    parser.add_argument("--src", help="measure the iris source tree in this folder (another revision's src/)")
    parser.add_argument("--json", dest="json_out", help="also write the figures to this file, for --baseline-json")
    parser.add_argument("--baseline-json", help="a --json file of another revision: print steady ÷ its steady per row")
    args = parser.parse_args()
    baseline = load_baseline(args.baseline_json)
    bare_ms = bare_python_ms()
    print(f"measuring {args.src or 'this checkout'}; python -c pass takes {bare_ms:.0f} ms (wall) on this machine now")
    header = (
        f"{'pending':>8} {'workers':>8} {'cold ms':>9} {'steady ms':>10} {'decisions/s':>12} {'placed':>7} "
        f"{'placed/s':>10} {'preempt':>8} {'unsched':>8} {'waiting jobs':>13}"
    )
    print(header + (f" {'base ms':>9} {'÷ base':>7}" if baseline else ""))
    rows = []
    for pending in args.pending:
        for workers in args.workers:
            if args.skip_largest and pending >= 100_000 and workers >= 5_000:
                print(f"{pending:>8} {workers:>8}  skipped (--skip-largest)")
                continue
            row = measure(pending, workers, args.repeat)
            rows.append(row)
            line = (
                f"{row['pending']:>8} {row['workers']:>8} {row['tick_ms']:>9.1f} {row['steady_tick_ms']:>10.1f} "
                f"{row['decisions_per_s']:>12,.0f} "
                f"{row['placements']:>7} {row['placements_per_s']:>10,.0f} {row['preemptions']:>8} "
                f"{row['unschedulable']:>8} {row['waiting_jobs']:>13}"
            )
            base = baseline.get((pending, workers))
            if base:
                line += f" {base:>9.1f} {row['steady_tick_ms'] / base:>7.2f}"
            print(line, flush=True)
    print("times are CPU ms of one tick (median); target: 10,000 pending x 1,000 workers under 100 ms")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"python_c_pass_ms": bare_ms, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
