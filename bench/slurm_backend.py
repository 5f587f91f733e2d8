"""Iris on the Slurm backend against Slurm alone, on the same throw-away Slurm in one run.

Rows (each measured both ways, then the ratio Iris / Slurm):
  latency  submit → finished of `true`, one job at a time (p50, p90): Iris's LaunchJob until the
           job reads SUCCEEDED, against `sbatch --wrap true` until its line lands in Slurm's
           job-completion log;
  drain    a burst of tiny jobs (200 unless --jobs) submitted at once, until the last finishes;
  cpu      the controller's CPU seconds spent during the Iris drain, per job.

The Slurm is a single node with 2 CPUs (two one-CPU jobs at a time), started by
`iris.testing.slurm` and stopped by PID. The Iris controller runs as its own process on a free
loopback port with one `kind: slurm` backend on that partition.

    .venv/bin/python bench/slurm_backend.py              # needs root and slurm-wlm + munge
    .venv/bin/python bench/slurm_backend.py --jobs 50 --latency 5
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    PYTHON,
    Controller,
    cpu_seconds,
    percentile,
    print_table,
    revision,
    wait_until,
)

import iris.testing.slurm as slurm_mod  # noqa: E402
from iris.client import IrisClient  # noqa: E402

TERMINAL = {"SUCCEEDED", "FAILED", "KILLED", "UNSCHEDULABLE"}


def slurm_latency(cluster: slurm_mod.SlurmCluster, count: int) -> list[float]:
    out = []
    for _ in range(count):
        t0 = time.perf_counter()
        job = cluster.sbatch("true")
        wait_until(lambda j=job: j in cluster.finished(), timeout=60, interval=0.005, what=f"Slurm job {job}")
        out.append(time.perf_counter() - t0)
    return out


def slurm_drain(cluster: slurm_mod.SlurmCluster, jobs: int) -> float:
    t0 = time.perf_counter()
    ids = [cluster.sbatch("true") for _ in range(jobs)]
    wait_until(lambda: all(j in cluster.finished() for j in ids), timeout=60 + jobs * 2, what="the Slurm drain")
    return time.perf_counter() - t0


def iris_latency(client: IrisClient, count: int, tag: str) -> list[float]:
    out = []
    for i in range(count):
        t0 = time.perf_counter()
        job = client.submit("true", name=f"{tag}-{i}", user="bench", cpu=1)
        st = wait_until(
            lambda j=job: (s := client.status(j)).state in TERMINAL and s, timeout=60, interval=0.005, what=job
        )
        if st.state != "SUCCEEDED":
            raise RuntimeError(f"{job} ended {st.state}: {st.error}")
        out.append(time.perf_counter() - t0)
    return out


def iris_drain(client: IrisClient, ctl: Controller, jobs: int) -> tuple[float, float]:
    before = client.cluster_info().job_counts.get("SUCCEEDED", 0)
    cpu0 = cpu_seconds(ctl.pid)
    t0 = time.perf_counter()
    ids = [client.submit("true", name=f"drain-{i}", user="bench", cpu=1) for i in range(jobs)]

    def finished() -> bool:
        counts = client.cluster_info().job_counts
        return counts.get("SUCCEEDED", 0) >= jobs + before

    wait_until(finished, timeout=60 + jobs * 2, interval=0.05, what="the Iris drain")
    elapsed = time.perf_counter() - t0
    bad = [j for j in ids[:20] if client.status(j).state != "SUCCEEDED"]
    if bad:
        raise RuntimeError(f"drain jobs did not succeed: {bad}")
    return elapsed, cpu_seconds(ctl.pid) - cpu0


def python_startup_ms() -> float:
    runs = []
    for _ in range(5):
        t = time.perf_counter()
        subprocess.run([PYTHON, "-c", "pass"], check=True)
        runs.append(time.perf_counter() - t)
    return percentile(runs, 50) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=200, help="jobs in each drain (default 200)")
    parser.add_argument("--latency", type=int, default=10, help="one-at-a-time jobs for the latency row")
    parser.add_argument("--poll", default="0.2s", help="the Slurm backend's poll_interval (default 0.2s)")
    args = parser.parse_args()
    reason = slurm_mod.unavailable_reason()
    if reason:
        print(f"cannot compare with Slurm here: {reason}")
        return 0
    load = os.getloadavg()[0]
    base = Path(tempfile.mkdtemp(prefix="iris-bench-slurm-"))
    base.chmod(0o755)  # munged (the munge user) reaches its socket under it
    cluster = slurm_mod.SlurmCluster(base / "slurm")
    ctl = None
    try:
        cluster.start()
        first = cluster.sbatch("true")  # a cold Slurm holds its first job for a pass or two
        wait_until(lambda: first in cluster.finished(), timeout=60, what="the first Slurm job")
        backend = {
            "id": "slurm",
            "kind": "slurm",
            "partition": cluster.partition,
            "slurm_conf": str(cluster.conf),
            "poll_interval": args.poll,
        }
        ctl = Controller("iris-on-slurm", base, [backend]).start()
        client = IrisClient(ctl.url)
        iris_latency(client, 1, "warm")
        s_lat = slurm_latency(cluster, args.latency)
        i_lat = iris_latency(client, args.latency, "latency")
        s_drain = slurm_drain(cluster, args.jobs)
        i_drain, i_cpu = iris_drain(client, ctl, args.jobs)
        client.close()
    finally:
        if ctl is not None:
            ctl.stop()
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)

    def ratio(a: float, b: float) -> str:
        return f"{a / b:.2f}" if b else "-"

    rows = [
        (
            "latency p50 (s)",
            f"{percentile(i_lat, 50):.3f}",
            f"{percentile(s_lat, 50):.3f}",
            ratio(percentile(i_lat, 50), percentile(s_lat, 50)),
        ),
        (
            "latency p90 (s)",
            f"{percentile(i_lat, 90):.3f}",
            f"{percentile(s_lat, 90):.3f}",
            ratio(percentile(i_lat, 90), percentile(s_lat, 90)),
        ),
        (f"drain of {args.jobs} (s)", f"{i_drain:.2f}", f"{s_drain:.2f}", ratio(i_drain, s_drain)),
        ("drain rate (jobs/s)", f"{args.jobs / i_drain:.1f}", f"{args.jobs / s_drain:.1f}", ratio(s_drain, i_drain)),
        ("controller CPU per job (ms)", f"{i_cpu / args.jobs * 1000:.1f}", "-", "-"),
    ]
    print(
        f"\nIris ({revision()}) on the Slurm backend vs Slurm alone; single node, 2 CPUs; "
        f"{os.cpu_count()} cores, load average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end\n"
    )
    print_table(["row", "Iris on Slurm", "Slurm alone", "ratio"], rows)
    print(f"\na bare `python -c pass` takes {python_startup_ms():.1f} ms here")
    return 0


if __name__ == "__main__":
    sys.exit(main())
