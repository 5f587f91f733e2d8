"""Single-cluster end-to-end figures against real local controllers, next to Slurm on the same machine.

Every figure comes from a real controller process (`python -m iris.controller`) on a free loopback
port with its own SQLite database in a temp directory, driven through the SDK (`IrisClient`) or the
`iris` CLI. Unless a row says otherwise the cluster has 2 job slots (a local backend with 2 workers
of 1 cpu each; jobs ask for 1 cpu), which is what the Slurm it is compared with has (one node with
2 CPUs). Rows:

  a. submit throughput through the SDK: 1 client process, then 4 client processes started together
     (each submits `true` jobs with explicit names back to back); total jobs / wall time from the
     first submit to the last answer. A fresh controller per client count; the jobs queue and run
     on the 2 slots while the submits go on, as they would on a real cluster. The controller's CPU
     (psutil) over the run is printed per submitted job, and so is the client processes' own CPU
     over their submit loops (user + system: building, encoding and sending each request).
  b. `iris job run --no-wait -- true` (IRIS_CONTROLLER set) as a fresh process per call: wall time
     per call, after one untimed warm-up call, and its ratio to a bare `python -c pass` timed just
     before each call (p50 over p50).
  c. submit → running → succeeded of one `true` job at a time on an idle cluster: the client waits
     with GetJobStatus's long poll (`wait_while_state`), as IrisClient.wait does; the controller's
     own timestamps are printed beside.
  d. drain: 200 `true` jobs submitted at once to the 2 slots; jobs / (last finish − first submit),
     and the controller's CPU time (psutil) over the same span, per job; and per slot the wall time
     from an attempt's exit (its exit file's mtime) to the start of the next one there (the
     `started_ms` the controller stored), p50 and p90.
  e. cancel → gone: a `sleep 300` job, once RUNNING with its pid known (GetJobStatus with attempts),
     is cancelled through the SDK; timed from the call until every process of its process group
     (the wrapper shell and `sleep`) is gone or a zombie.
  f. controller memory (VmRSS, and the peak VmHWM) with 10,000 finished jobs in its database: the
     jobs are real `true` jobs submitted through the SDK by 4 client processes to a cluster with 64
     slots and run to completion; RSS is read from /proc after they finish, and again after a
     restart of the controller on the same database.
  g. start-up: `iris cluster start --local --port P` (the embedded cluster, foreground) from the
     process's start until it answers GetClusterInfo, polled every 10 ms; the first run creates
     the state directory (database, signing key), the timed ones reuse it, as a restart does.
     Rows b and g run from a bytecode cache, as an installed package does; where
     PYTHONDONTWRITEBYTECODE is set, the figures without one are printed beside.
  h. controller CPU per job, submit to finish: jobs submitted back to back by one SDK client to the
     2 slots and run to completion; psutil's CPU time of the controller PID over the whole run, per
     job, and its split by stage (request decoding, validation, insert, tick wake-up, process start,
     exit and log handling) from the spans the controller adds up when IRIS_SPANS is set.

When Slurm is installed (sbatch, slurmctld, slurmd, munged; run as root) a throw-away single-node
Slurm (bench/slurm.py) is measured in the same run: sequential and 4-way concurrent `sbatch --wrap
true`, submit → finished of `sbatch --wrap true` (from its job-completion log), the same drain, and
`scancel` → the job's processes gone; the table prints Iris/Slurm per row. Figures are printed,
never asserted.

    .venv/bin/python bench/submit.py            # everything (a few minutes with Slurm)
    .venv/bin/python bench/submit.py --quick    # smaller counts (2,000 jobs for row f)
    .venv/bin/python bench/submit.py --json     # one JSON document on stdout
    .venv/bin/python bench/submit.py --only a,c --no-slurm
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    IRIS_CLI,
    PYTHON,
    BenchTimeout,
    Controller,
    cpu_seconds,
    dump_json,
    free_port,
    local_backend,
    log,
    percentile,
    pid_gone,
    print_table,
    process_group,
    revision,
    rss_kb,
    wait_until,
)

import iris.testing.slurm as slurm_mod  # noqa: E402
from iris.backends.staging import safe_dirname  # noqa: E402
from iris.client import IrisClient  # noqa: E402
from iris.core.errors import IrisError  # noqa: E402

TERMINAL = {"SUCCEEDED", "FAILED", "KILLED", "UNSCHEDULABLE"}
TWO_SLOTS = [local_backend("cpu", workers=2, cpu=1)]
MANY_SLOTS = [local_backend("cpu", workers=4, cpu=16, memory="64G")]
USER = "bench"

FULL = dict(a1=2000, a4=600, b=25, c=40, d=200, e=15, f=10_000, g=5, h=2000, s_a1=150, s_a4=50, s_c=10, s_d=200, s_e=6)
QUICK = dict(a1=400, a4=150, b=8, c=15, d=200, e=5, f=2_000, g=3, h=300, s_a1=40, s_a4=15, s_c=4, s_d=40, s_e=3)


# -- helpers ---------------------------------------------------------------------------------------


def _submit_worker(url: str, prefix: str, count: int, time_limit: float, barrier, results) -> None:
    """One client process: connect, wait for the others, submit `count` jobs back to back."""
    client = IrisClient(url)
    client.cluster_info()  # the connection is set up before the clock starts
    barrier.wait(timeout=120)
    start = time.monotonic()
    cpu0 = os.times()
    deadline = start + time_limit
    latencies: list[float] = []
    ends: list[float] = []
    errors, first_error = 0, ""
    for i in range(count):
        if time.monotonic() > deadline:
            break
        t = time.perf_counter()
        try:
            client.submit("true", name=f"{prefix}-{i}", user=USER, cpu=1)
        except IrisError as exc:
            errors += 1
            first_error = first_error or f"{type(exc).__name__}: {exc}"
            continue
        latencies.append(time.perf_counter() - t)
        ends.append(time.monotonic())
    end = time.monotonic()
    cpu1 = os.times()
    results.put(
        {
            "start": start,
            "end": end,
            "cpu_s": (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system),
            "submitted": len(latencies),
            "errors": errors,
            "first_error": first_error,
            "latencies": latencies,
            "ends": ends,
        }
    )
    client.close()


def submit_throughput(url: str, clients: int, per_client: int, time_limit: float, tag: str) -> dict:
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(clients)
    results = ctx.Queue()
    procs = [
        ctx.Process(target=_submit_worker, args=(url, f"{tag}-c{i}", per_client, time_limit, barrier, results))
        for i in range(clients)
    ]
    try:
        for p in procs:
            p.start()
        outs = [results.get(timeout=time_limit + 150) for _ in procs]
    finally:
        for p in procs:
            if p.pid is None:
                continue  # never started
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join()
    start = min(o["start"] for o in outs)
    end = max(o["end"] for o in outs)
    submitted = sum(o["submitted"] for o in outs)
    lat = [x for o in outs for x in o["latencies"]]
    # Rate over the first and the last quarter of the answers: the queue grows as the run goes on.
    ends = sorted(x for o in outs for x in o["ends"])
    q = len(ends) // 4
    first_q = q / (ends[q - 1] - start) if q and ends[q - 1] > start else 0.0
    last_q = q / (ends[-1] - ends[-q - 1]) if q and ends[-1] > ends[-q - 1] else 0.0
    return {
        "clients": clients,
        "submitted": submitted,
        "errors": sum(o["errors"] for o in outs),
        "client_cpu_s": sum(o["cpu_s"] for o in outs),
        "first_quarter_jobs_per_s": first_q,
        "last_quarter_jobs_per_s": last_q,
        "first_error": next((o["first_error"] for o in outs if o["first_error"]), ""),
        "seconds": end - start,
        "jobs_per_s": submitted / (end - start) if end > start else 0.0,
        "call_ms_p50": percentile(lat, 50) * 1000,
        "call_ms_p99": percentile(lat, 99) * 1000,
    }


def count_terminal(client: IrisClient) -> int:
    counts = client.cluster_info().job_counts
    return sum(n for state, n in counts.items() if state in TERMINAL)


# -- Iris rows -------------------------------------------------------------------------------------


def iris_throughput(base: Path, n: dict, out: dict, quiet: bool) -> None:
    for clients, key in ((1, "a1"), (4, "a4")):
        ctl = Controller(f"throughput-{clients}", base, TWO_SLOTS)
        try:
            ctl.start()
            log(f"[a] submitting {clients} × {n[key]} jobs through the SDK …", quiet)
            cpu0 = cpu_seconds(ctl.pid)
            r = submit_throughput(ctl.url, clients, n[key], time_limit=60, tag=f"a{clients}")
            r["controller_cpu_s"] = cpu_seconds(ctl.pid) - cpu0
            out[f"submit_{clients}_client"] = r
        finally:
            ctl.stop()


def iris_cli(ctl: Controller, count: int, out: dict, quiet: bool) -> None:
    log(f"[b] {count} × `iris job run --no-wait -- true` …", quiet)
    # An installed package runs from .pyc files. Where PYTHONDONTWRITEBYTECODE is set (some CI and
    # container images) every call would compile the sources again, so the CLI gets a bytecode
    # cache of its own under the bench's temp dir; the figure without one is printed beside.
    env = {**os.environ, "IRIS_CONTROLLER": ctl.url, "PYTHONPYCACHEPREFIX": str(ctl.dir / "pycache")}
    no_cache = env.pop("PYTHONDONTWRITEBYTECODE", None) is not None
    argv = [IRIS_CLI, "job", "run", "--no-wait", "--no-workspace", "--user", USER, "--", "true"]

    def once() -> float:
        t = time.perf_counter()
        res = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30)
        dt = time.perf_counter() - t
        if res.returncode != 0:
            raise RuntimeError(f"iris job run exited {res.returncode}: {res.stderr.strip()}")
        return dt

    once()  # warm the page cache and write the bytecode cache
    # Each call is paired with a bare `python -c pass` just before it, so that a machine whose load
    # changes during the run moves both figures alike and their ratio stays meaningful.
    samples, floor = [], []
    for _ in range(count):
        floor.extend(bare_python_s(1))
        samples.append(once())
    uncached = []
    if no_cache:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env.pop("PYTHONPYCACHEPREFIX")
        uncached = [once() for _ in range(max(3, count // 3))]
    out["cli_submit"] = {
        "calls": count,
        "ms_p50": percentile(samples, 50) * 1000,
        "ms_p90": percentile(samples, 90) * 1000,
        "ms_min": min(samples) * 1000,
        "python_startup_ms_p50": percentile(floor, 50) * 1000,
        "times_python_startup": percentile(samples, 50) / percentile(floor, 50),
        "without_bytecode_cache_ms_p50": percentile(uncached, 50) * 1000 if uncached else None,
    }


def bare_python_s(runs: int = 5) -> list[float]:
    """Wall times of a bare `python -c pass`, the floor rows b and g are read against."""
    floor = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run([PYTHON, "-c", "pass"], check=True)
        floor.append(time.perf_counter() - t)
    return floor


def iris_startup(base: Path, count: int, out: dict, quiet: bool) -> None:
    """Row g: how long `iris cluster start --local` takes to answer, from the process's start."""
    from iris.controller.process import probe

    log(f"[g] {count} × `iris cluster start --local` → answering …", quiet)
    home = base / "startup-home"
    # As in row b: an installed package starts from .pyc files, so the timed starts get a bytecode
    # cache even where PYTHONDONTWRITEBYTECODE is set; a few starts without one are printed beside.
    env = {**os.environ, "IRIS_HOME": str(home), "PYTHONPYCACHEPREFIX": str(base / "pycache")}
    env.pop("IRIS_CONTROLLER", None)
    no_cache = env.pop("PYTHONDONTWRITEBYTECODE", None) is not None

    def once() -> float:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        t = time.perf_counter()
        proc = subprocess.Popen(
            [IRIS_CLI, "cluster", "start", "--local", "--port", str(port)],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            while probe(url, timeout=0.2) is None:
                if proc.poll() is not None:
                    raise RuntimeError(f"iris cluster start --local exited {proc.returncode}")
                if time.perf_counter() - t > 60:
                    raise BenchTimeout("iris cluster start --local did not answer within 60 s")
                time.sleep(0.01)
            return time.perf_counter() - t
        finally:
            proc.terminate()
            proc.wait(timeout=30)

    first = once()  # creates the database and the key, and writes the bytecode cache
    samples = [once() for _ in range(count)]
    uncached = []
    if no_cache:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env.pop("PYTHONPYCACHEPREFIX")
        uncached = [once() for _ in range(max(2, count // 2))]
    out["startup"] = {
        "runs": count,
        "s_p50": percentile(samples, 50),
        "s_min": min(samples),
        "first_s": first,
        "python_startup_ms_p50": percentile(bare_python_s(), 50) * 1000,
        "without_bytecode_cache_s_p50": percentile(uncached, 50) if uncached else None,
    }


def iris_latency(ctl: Controller, count: int, out: dict, quiet: bool) -> None:
    log(f"[c] {count} × submit → succeeded of `true`, one at a time …", quiet)
    client = IrisClient(ctl.url)
    running, done, srv_start, srv_done = [], [], [], []
    try:
        for i in range(count):
            time.sleep(0.05)  # let the previous job's exit settle: an idle cluster
            t0 = time.perf_counter()
            job = client.submit("true", name=f"lat-{i}", user=USER, cpu=1)
            t_run = None
            deadline = time.monotonic() + 30
            st = client.status(job)
            while True:
                now = time.perf_counter()
                if t_run is None and st.state != "PENDING":
                    t_run = now
                if st.state in TERMINAL:
                    break
                if time.monotonic() > deadline:
                    raise BenchTimeout(f"job {job} still {st.state} after 30 s")
                # As the SDK's wait does: the controller answers once the job leaves the state seen.
                st = client.status(job, wait_while=st.state, wait_s=5)
            if st.state != "SUCCEEDED":
                raise RuntimeError(f"job {job} ended {st.state}: {st.error}")
            running.append(t_run - t0)
            done.append(now - t0)
            srv_start.append((st.started_ms - st.submitted_ms) / 1000)
            srv_done.append((st.finished_ms - st.submitted_ms) / 1000)
    finally:
        client.close()
    out["latency"] = {
        "samples": count,
        "to_running_p50_s": percentile(running, 50),
        "to_running_p90_s": percentile(running, 90),
        "to_succeeded_p50_s": percentile(done, 50),
        "to_succeeded_p90_s": percentile(done, 90),
        "server_to_started_p50_s": percentile(srv_start, 50),
        "server_to_finished_p50_s": percentile(srv_done, 50),
    }


def submit_and_finish(
    ctl: Controller, client: IrisClient, prefix: str, count: int, timeout: float, interval: float
) -> tuple[float, float, float]:
    """Submits `count` `true` jobs back to back and waits until all have ended: (seconds to submit,
    seconds until the last ended, controller CPU seconds over both), timed from the first submit."""
    before = count_terminal(client)
    cpu0 = cpu_seconds(ctl.pid)
    t0 = time.perf_counter()
    for i in range(count):
        client.submit("true", name=f"{prefix}-{i}", user=USER, cpu=1)
    submitted = time.perf_counter() - t0
    wait_until(
        lambda: count_terminal(client) - before >= count, timeout, interval=interval, what=f"the {count} {prefix} jobs"
    )
    return submitted, time.perf_counter() - t0, cpu_seconds(ctl.pid) - cpu0


def iris_drain(ctl: Controller, count: int, out: dict, quiet: bool) -> None:
    log(f"[d] draining {count} jobs on 2 slots …", quiet)
    client = IrisClient(ctl.url)
    try:
        submitted, total, cpu = submit_and_finish(ctl, client, "drain", count, 120, 0.02)
        failed = client.cluster_info().job_counts.get("FAILED", 0)
    finally:
        client.close()
    refills = refill_gaps_ms(ctl.state_dir, "drain-")
    out["drain"] = {
        "jobs": count,
        "submit_s": submitted,
        "seconds": total,
        "jobs_per_s": count / total,
        "failed": failed,
        "cpu_ms_per_job": cpu * 1000 / count,
        "refill_ms_p50": percentile(refills, 50) if refills else None,
        "refill_ms_p90": percentile(refills, 90) if refills else None,
    }


def refill_gaps_ms(state_dir: Path, prefix: str) -> list[float]:
    """For each slot, the wall time from an attempt's exit to the start of the next attempt placed
    there: the exit is when the attempt's wrapper wrote its exit file (its mtime), the start the
    `started_ms` the controller stored (when the process was known to exist)."""
    db = sqlite3.connect(f"file:{state_dir / 'controller.db'}?mode=ro", uri=True)
    try:
        rows = db.execute(
            "SELECT attempt_id, worker_id, started_ms FROM attempts WHERE job_id LIKE ? AND started_ms IS NOT NULL"
            " ORDER BY worker_id, started_ms",
            (f"/{USER}/{prefix}%",),
        ).fetchall()
    finally:
        db.close()
    gaps: list[float] = []
    for (attempt, worker, _), (_, next_worker, next_start) in zip(rows, rows[1:]):
        if worker != next_worker:
            continue
        try:
            exited_ms = (state_dir / "attempts" / safe_dirname(attempt) / "exit").stat().st_mtime_ns / 1e6
        except OSError:
            continue
        gaps.append(next_start - exited_ms)
    return gaps


def iris_cancel(ctl: Controller, count: int, out: dict, quiet: bool) -> None:
    log(f"[e] {count} × cancel of a running `sleep 300` …", quiet)
    client = IrisClient(ctl.url)
    call, gone = [], []
    try:
        for i in range(count):
            job = client.submit(["sleep", "300"], name=f"cancel-{i}", user=USER, cpu=1)

            def running_pid() -> int:
                resp = client.describe(job)
                for task in resp.tasks:
                    for a in task.attempts:
                        if a.state == "RUNNING" and a.pid:
                            return a.pid
                return 0

            pid = wait_until(running_pid, timeout=30, interval=0.01, what=f"{job} running")
            # The wrapper shell starts `sleep` just after it records its pid: wait for both.
            members = wait_until(
                lambda: m if len(m := process_group(pid)) >= 2 else None,
                timeout=5,
                interval=0.005,
                what=f"the processes of {job}",
            )
            time.sleep(0.05)
            t0 = time.perf_counter()
            client.cancel(job)
            t_call = time.perf_counter() - t0
            deadline = time.monotonic() + 30
            while not all(pid_gone(p) for p in members):
                if time.monotonic() > deadline:
                    raise BenchTimeout(f"processes {members} of {job} still alive 30 s after the cancel")
                time.sleep(0.0005)
            gone.append(time.perf_counter() - t0)
            call.append(t_call)
    finally:
        client.close()
    out["cancel"] = {
        "samples": count,
        "call_ms_p50": percentile(call, 50) * 1000,
        "gone_ms_p50": percentile(gone, 50) * 1000,
        "gone_ms_p90": percentile(gone, 90) * 1000,
    }


def iris_memory(base: Path, count: int, out: dict, quiet: bool) -> None:
    ctl = Controller("memory", base, MANY_SLOTS)
    try:
        ctl.start()
        time.sleep(1.0)
        idle = rss_kb(ctl.pid)
        log(f"[f] running {count:,} `true` jobs (4 SDK clients, 64 slots) to fill the database …", quiet)
        t0 = time.perf_counter()
        sub = submit_throughput(ctl.url, 4, count // 4, time_limit=300, tag="mem")
        client = IrisClient(ctl.url)
        try:
            wait_until(
                lambda: count_terminal(client) >= sub["submitted"],
                timeout=600,
                interval=0.5,
                what=f"{sub['submitted']:,} jobs to finish",
            )
            fill_s = time.perf_counter() - t0
            counts = dict(client.cluster_info().job_counts)
            time.sleep(1.0)
            after = rss_kb(ctl.pid)
        finally:
            client.close()
        db = ctl.state_dir / "controller.db"
        db_bytes = sum(p.stat().st_size for p in ctl.state_dir.glob("controller.db*"))
        ctl.restart()
        time.sleep(2.0)
        restarted = rss_kb(ctl.pid)
        out["memory"] = {
            "jobs": sub["submitted"],
            "job_counts": counts,
            "fill_s": fill_s,
            "how": f"{sub['submitted']:,} `true` jobs submitted through the SDK by 4 processes "
            f"({sub['jobs_per_s']:.0f}/s) to 4 workers × 16 cpu and run to completion in {fill_s:.1f} s",
            "idle_rss_mb": idle["VmRSS"] / 1024,
            "rss_mb": after["VmRSS"] / 1024,
            "peak_rss_mb": after["VmHWM"] / 1024,
            "rss_after_restart_mb": restarted["VmRSS"] / 1024,
            "db_mb": db_bytes / 2**20,
            "db": str(db),
        }
    finally:
        ctl.stop()


# -- Slurm rows ------------------------------------------------------------------------------------


def iris_cpu_split(base: Path, count: int, out: dict, quiet: bool) -> None:
    """h. Controller CPU per job, submit to finish, and where it goes: `count` `true` jobs submitted
    back to back by one SDK client to 2 slots and run to completion, with IRIS_SPANS set so the
    controller adds up its stages (iris.core.spans) and writes them when it stops."""
    spans_file = base / "spans.json"
    ctl = Controller("cpu-split", base, TWO_SLOTS, env={**os.environ, "IRIS_SPANS": str(spans_file)})
    try:
        ctl.start()
        log(f"[h] {count} jobs submitted and run, controller CPU and its split …", quiet)
        client = IrisClient(ctl.url)
        try:
            _, seconds, cpu = submit_and_finish(ctl, client, "h", count, 60 + count / 5, 0.2)
        finally:
            client.close()
    finally:
        ctl.stop()
    split = json.loads(spans_file.read_text()) if spans_file.exists() else {}
    out["cpu_split"] = {
        "jobs": count,
        "seconds": seconds,
        "controller_cpu_s": cpu,
        "cpu_ms_per_job": cpu * 1000 / count,
        "stages_cpu_ms_per_job": {name: v["cpu_s"] * 1000 / count for name, v in split.items()},
        "stages_wall_ms_per_job": {name: v["wall_s"] * 1000 / count for name, v in split.items()},
        "stages_count": {name: v["count"] for name, v in split.items()},
    }


def print_cpu_split(h: dict) -> None:
    print(
        f"h: controller CPU per job, submitted to finished ({h['jobs']} jobs, 2 slots): {h['cpu_ms_per_job']:.2f} ms"
        " (psutil on the controller PID); by stage, CPU ms per job (stages nest: a.b is inside a):"
    )
    cpu, wall, count = h["stages_cpu_ms_per_job"], h["stages_wall_ms_per_job"], h["stages_count"]
    for name in sorted(cpu):
        indent = "  " * name.count(".")
        print(f"   {indent}{name:<{34 - len(indent)}} {cpu[name]:7.3f} cpu  {wall[name]:7.3f} wall  ({count[name]:,}×)")


def slurm_rows(n: dict, only: set[str], out: dict, quiet: bool, keep: bool) -> None:
    # Its own folder: munged (running as the munge user) must be able to reach it.
    base = Path(tempfile.mkdtemp(prefix="iris-bench-slurm-"))
    cluster = slurm_mod.SlurmCluster(base)
    try:
        log("[slurm] starting slurmctld + slurmd …", quiet)
        cluster.start()
        # A cold Slurm leaves its first job pending for a scheduler pass or two: warm it up.
        first = cluster.sbatch("true")
        wait_until(lambda: first in cluster.finished(), timeout=60, interval=0.01, what="the first Slurm job")
        if "c" in only:
            log(f"[slurm c] {n['s_c']} × submit → finished of `sbatch --wrap true` …", quiet)
            done = []
            for _ in range(n["s_c"]):
                t0 = time.perf_counter()
                job = cluster.sbatch("true")
                wait_until(lambda: job in cluster.finished(), timeout=30, interval=0.005, what=f"Slurm job {job}")
                done.append(time.perf_counter() - t0)
            out["latency"] = {
                "samples": len(done),
                "to_finished_p50_s": percentile(done, 50),
                "to_finished_p90_s": percentile(done, 90),
            }
        if "e" in only:
            log(f"[slurm e] {n['s_e']} × scancel of a running `sleep 300` …", quiet)
            gone = []
            for _ in range(n["s_e"]):
                job = cluster.sbatch("sleep 300")
                pids = wait_until(
                    lambda: cluster.state(job) == "RUNNING" and (p := cluster.job_pids(job)) and len(p) >= 2 and p,
                    timeout=30,
                    interval=0.02,
                    what=f"Slurm job {job} running",
                )
                time.sleep(0.05)
                t0 = time.perf_counter()
                cluster.scancel(job)
                deadline = time.monotonic() + 30
                while not all(pid_gone(p) for p in pids):
                    if time.monotonic() > deadline:
                        raise BenchTimeout(f"Slurm job {job}'s processes still alive 30 s after scancel")
                    time.sleep(0.0005)
                gone.append(time.perf_counter() - t0)
            out["cancel"] = {
                "samples": len(gone),
                "gone_ms_p50": percentile(gone, 50) * 1000,
                "gone_ms_p90": percentile(gone, 90) * 1000,
            }
        if "a" in only or "b" in only:
            log(f"[slurm a] {n['s_a1']} sequential sbatch, then 4 × {n['s_a4']} concurrent …", quiet)
            lat = []
            t0 = time.perf_counter()
            for _ in range(n["s_a1"]):
                t = time.perf_counter()
                cluster.sbatch("true")
                lat.append(time.perf_counter() - t)
            seq = time.perf_counter() - t0
            errors: list[str] = []

            def loop() -> None:
                for _ in range(n["s_a4"]):
                    try:
                        cluster.sbatch("true")
                    except Exception as exc:  # noqa: BLE001
                        errors.append(str(exc))

            threads = [threading.Thread(target=loop) for _ in range(4)]
            t0 = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=120)
            par = time.perf_counter() - t0
            out["submit_1_client"] = {"submitted": n["s_a1"], "jobs_per_s": n["s_a1"] / seq}
            out["submit_4_client"] = {
                "submitted": 4 * n["s_a4"] - len(errors),
                "errors": len(errors),
                "jobs_per_s": (4 * n["s_a4"] - len(errors)) / par,
            }
            out["cli_submit"] = {"ms_p50": percentile(lat, 50) * 1000, "ms_p90": percentile(lat, 90) * 1000}
            cluster.cancel_all()
            wait_until(cluster.queue_empty, timeout=60, interval=0.2, what="the Slurm queue to empty")
        if "d" in only:
            count = n["s_d"]
            log(f"[slurm d] draining {count} jobs on 2 slots (about {count / 2:.0f} s at Slurm's pace) …", quiet)
            t0 = time.perf_counter()
            ids = [cluster.sbatch("true") for _ in range(count)]
            submitted = time.perf_counter() - t0
            wait_until(
                lambda: all(i in cluster.finished() for i in ids),
                timeout=count * 2 + 60,
                interval=0.05,
                what="the Slurm drain",
            )
            total = time.perf_counter() - t0
            out["drain"] = {"jobs": count, "submit_s": submitted, "seconds": total, "jobs_per_s": count / total}
    finally:
        cluster.stop()
        if keep:
            log(f"kept {base}", quiet)
        else:
            shutil.rmtree(base, ignore_errors=True)


# -- report ----------------------------------------------------------------------------------------


def print_startup_note(iris: dict) -> None:
    """Row g's footnote: the floor of a bare interpreter, and the start without a bytecode cache."""
    g = iris.get("startup")
    if not g:
        return
    print(
        f"g: {g['runs']} starts with a bytecode cache; min {g['s_min']:.2f} s; a bare `python -c pass` "
        f"takes {g['python_startup_ms_p50']:.1f} ms here"
        + (
            f"; without a bytecode cache (PYTHONDONTWRITEBYTECODE is set here) p50 "
            f"{g['without_bytecode_cache_s_p50']:.2f} s"
            if g.get("without_bytecode_cache_s_p50")
            else ""
        )
    )


def cpu_ms_per_job(run: dict | None, key: str = "controller_cpu_s") -> float | None:
    """Row a's controller CPU (psutil, over the whole run: the submits and the jobs that ran
    meanwhile) per submitted job, in ms; with key="client_cpu_s", the client processes' own CPU
    (user + system, over their submit loops: encoding, HTTP, decoding)."""
    if not run or not run.get("submitted") or run.get(key) is None:
        return None
    return run[key] * 1000 / run["submitted"]


def table_rows(iris: dict, slurm: dict) -> list[dict]:
    def g(d: dict, *path: str) -> Any:
        for p in path:
            if not isinstance(d, dict) or p not in d:
                return None
            d = d[p]
        return d

    def ms(v: float | None) -> float | None:
        return None if v is None else v * 1000

    rows = [
        (
            "a",
            "submit, 1 client, jobs/s (SDK; sbatch)",
            g(iris, "submit_1_client", "jobs_per_s"),
            "≥ 3× sbatch",
            g(slurm, "submit_1_client", "jobs_per_s"),
            True,
        ),
        (
            "a",
            "submit, 4 client processes, jobs/s",
            g(iris, "submit_4_client", "jobs_per_s"),
            "≥ 3× sbatch",
            g(slurm, "submit_4_client", "jobs_per_s"),
            True,
        ),
        (
            "a",
            "submit, 1 client, controller CPU ms per job",
            cpu_ms_per_job(g(iris, "submit_1_client")),
            "—",
            None,
            False,
        ),
        (
            "a",
            "submit, 4 clients, controller CPU ms per job",
            cpu_ms_per_job(g(iris, "submit_4_client")),
            "—",
            None,
            False,
        ),
        (
            "a",
            "submit, 1 client, client CPU ms per job",
            cpu_ms_per_job(g(iris, "submit_1_client"), "client_cpu_s"),
            "—",
            None,
            False,
        ),
        (
            "a",
            "submit, 4 clients, client CPU ms per job (all 4)",
            cpu_ms_per_job(g(iris, "submit_4_client"), "client_cpu_s"),
            "—",
            None,
            False,
        ),
        (
            "b",
            "CLI submit, no wait, ms per call (p50)",
            g(iris, "cli_submit", "ms_p50"),
            "—",
            g(slurm, "cli_submit", "ms_p50"),
            False,
        ),
        (
            "b",
            "CLI submit, no wait, ms per call (p90)",
            g(iris, "cli_submit", "ms_p90"),
            "—",
            g(slurm, "cli_submit", "ms_p90"),
            False,
        ),
        ("b", "  … ÷ a bare `python -c pass` (p50)", g(iris, "cli_submit", "times_python_startup"), "≤ 3", None, False),
        ("c", "submit → running `true`, ms (p50)", ms(g(iris, "latency", "to_running_p50_s")), "—", None, False),
        ("c", "submit → running `true`, ms (p90)", ms(g(iris, "latency", "to_running_p90_s")), "—", None, False),
        (
            "c",
            "submit → succeeded `true`, ms (p50)",
            ms(g(iris, "latency", "to_succeeded_p50_s")),
            "≤ 200",
            ms(g(slurm, "latency", "to_finished_p50_s")),
            False,
        ),
        (
            "c",
            "submit → succeeded `true`, ms (p90)",
            ms(g(iris, "latency", "to_succeeded_p90_s")),
            "—",
            ms(g(slurm, "latency", "to_finished_p90_s")),
            False,
        ),
        (
            "d",
            "drain tiny jobs on 2 slots, jobs/s",
            g(iris, "drain", "jobs_per_s"),
            "≥ 20",
            g(slurm, "drain", "jobs_per_s"),
            True,
        ),
        (
            "e",
            "cancel → processes gone, ms (p50)",
            g(iris, "cancel", "gone_ms_p50"),
            "≤ 16",
            g(slurm, "cancel", "gone_ms_p50"),
            False,
        ),
        (
            "e",
            "cancel → processes gone, ms (p90)",
            g(iris, "cancel", "gone_ms_p90"),
            "—",
            g(slurm, "cancel", "gone_ms_p90"),
            False,
        ),
        (
            "f",
            f"controller RSS, {g(iris, 'memory', 'jobs') or 0:,} finished jobs, MB",
            g(iris, "memory", "rss_mb"),
            "—",
            None,
            False,
        ),
        ("f", "  … peak RSS while running them, MB", g(iris, "memory", "peak_rss_mb"), "—", None, False),
        (
            "f",
            "  … RSS after a restart on that database, MB",
            g(iris, "memory", "rss_after_restart_mb"),
            "—",
            None,
            False,
        ),
        ("g", "`cluster start --local` → answering, s (p50)", g(iris, "startup", "s_p50"), "≤ 1", None, False),
        ("g", "  … first start (creates the state dir), s", g(iris, "startup", "first_s"), "—", None, False),
    ]
    out = []
    for key, figure, iv, target, sv, higher in rows:
        if iv is None and sv is None:
            continue
        ratio = iv / sv if iv is not None and sv else None
        out.append(
            {
                "row": key,
                "figure": figure,
                "iris": iv,
                "target": target,
                "slurm": sv,
                "iris_over_slurm": ratio,
                "higher_is_better": higher,
            }
        )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller counts (a minute or two)")
    ap.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    ap.add_argument("--no-slurm", action="store_true", help="skip the Slurm comparison even when it is installed")
    ap.add_argument("--only", default="abcdefgh", help="rows to run, e.g. a,c,e (default: all)")
    ap.add_argument("--memory-jobs", type=int, default=None, help="jobs for row f (default 10,000; 2,000 with --quick)")
    ap.add_argument("--keep", action="store_true", help="keep the temp directory (configs, logs, databases)")
    args = ap.parse_args(argv)
    only = set(args.only.replace(",", ""))
    n = dict(QUICK if args.quick else FULL)
    if args.memory_jobs:
        n["f"] = args.memory_jobs
    quiet = False
    base = Path(tempfile.mkdtemp(prefix="iris-bench-submit-"))
    iris: dict = {}
    slurm: dict = {}
    slurm_note = ""
    t_start = time.perf_counter()
    load = os.getloadavg()
    floor_ms = percentile(bare_python_s(), 50) * 1000  # how busy the machine is, beside the load average
    errors: list[str] = []

    def attempt(what: str, fn, *fn_args) -> None:
        """Runs one measurement; a failure is reported with the figures, not a lost run."""
        try:
            fn(*fn_args)
        except (BenchTimeout, RuntimeError, OSError, IrisError, slurm_mod.SlurmError) as exc:
            errors.append(f"{what}: {type(exc).__name__}: {exc}")
            log(f"!! {errors[-1]}", quiet)

    try:
        if "a" in only:
            attempt("a (submit throughput)", iris_throughput, base, n, iris, quiet)
        if only & set("bcde"):
            ctl = Controller("idle", base, TWO_SLOTS)
            try:
                ctl.start()
                time.sleep(0.5)
                for key, name, fn in (
                    ("c", "c (latency)", iris_latency),
                    ("e", "e (cancel)", iris_cancel),
                    ("b", "b (CLI)", iris_cli),
                    ("d", "d (drain)", iris_drain),
                ):
                    if key in only:
                        attempt(name, fn, ctl, n[key], iris, quiet)
            finally:
                ctl.stop()
        if "f" in only:
            attempt("f (memory)", iris_memory, base, n["f"], iris, quiet)
        if "g" in only:
            attempt("g (start-up)", iris_startup, base, n["g"], iris, quiet)
        if "h" in only:
            attempt("h (CPU split)", iris_cpu_split, base, n["h"], iris, quiet)
        if args.no_slurm:
            slurm_note = "Slurm comparison skipped (--no-slurm)"
        elif only & set("abcde"):
            reason = slurm_mod.unavailable_reason()
            if reason:
                slurm_note = reason
            else:
                slurm_note = "Slurm: single node, 2 CPUs (2 one-CPU slots), batch_sched_delay=0, measured in this run"
                attempt("Slurm", slurm_rows, n, only, slurm, quiet, args.keep)
    finally:
        if args.keep:
            log(f"kept {base}", quiet)
        else:
            shutil.rmtree(base, ignore_errors=True)
    rows = table_rows(iris, slurm)
    elapsed = time.perf_counter() - t_start
    if args.json:
        dump_json(
            {
                "bench": "submit",
                "quick": args.quick,
                "iris": iris,
                "slurm": slurm,
                "slurm_note": slurm_note,
                "rows": rows,
                "errors": errors,
                "elapsed_s": elapsed,
                "revision": revision(),
                "loadavg_start": load[0],
                "loadavg_end": os.getloadavg()[0],
                "python_pass_ms": floor_ms,
            }
        )
        return 1 if errors else 0
    print(
        f"\nIris ({revision()}) end to end on one machine ({os.cpu_count()} cores, load average {load[0]:.1f} at "
        f"the start, {os.getloadavg()[0]:.1f} at the end; a bare `python -c pass` {floor_ms:.0f} ms);"
        " Iris cluster: 2 slots unless noted\n"
    )
    print_table(
        ["", "figure", "Iris", "target", "Slurm", "Iris/Slurm"],
        [
            (
                r["row"],
                r["figure"],
                r["iris"],
                r["target"],
                r["slurm"],
                None if r["iris_over_slurm"] is None else f"{r['iris_over_slurm']:.2f}×",
            )
            for r in rows
        ],
    )
    print("\n(Iris/Slurm above 1 is better for jobs/s rows, below 1 is better for time rows.)")
    print(slurm_note)
    a1, a4 = iris.get("submit_1_client"), iris.get("submit_4_client")
    for r in (a1, a4):
        if r:
            print(
                f"a: {r['clients']} client(s): {r['submitted']:,} jobs in {r['seconds']:.2f} s "
                f"({r['first_quarter_jobs_per_s']:.0f}/s over the first quarter, "
                f"{r['last_quarter_jobs_per_s']:.0f}/s over the last), "
                f"call p50 {r['call_ms_p50']:.2f} ms p99 {r['call_ms_p99']:.2f} ms, "
                f"controller CPU {r['controller_cpu_s']:.1f} s, errors {r['errors']}"
                + (f" (first: {r['first_error']})" if r["errors"] else "")
            )
    if "cli_submit" in iris:
        b = iris["cli_submit"]
        print(
            f"b: {b['calls']} calls with a bytecode cache; min {b['ms_min']:.1f} ms; a bare `python -c pass` "
            f"takes {b['python_startup_ms_p50']:.1f} ms here"
            + (
                f"; without a bytecode cache (PYTHONDONTWRITEBYTECODE is set here) p50 "
                f"{b['without_bytecode_cache_ms_p50']:.1f} ms"
                if b.get("without_bytecode_cache_ms_p50")
                else ""
            )
        )
    print_startup_note(iris)
    if "latency" in iris:
        lat = iris["latency"]
        print(
            f"c: {lat['samples']} jobs; the controller's own timestamps: submitted → started "
            f"{lat['server_to_started_p50_s'] * 1000:.0f} ms, submitted → finished "
            f"{lat['server_to_finished_p50_s'] * 1000:.0f} ms (p50); the client long-polls as IrisClient.wait does"
        )
    if "drain" in iris:
        d = iris["drain"]
        print(
            f"d: {d['jobs']} jobs submitted in {d['submit_s']:.2f} s, all finished after {d['seconds']:.2f} s;"
            f" controller CPU {d['cpu_ms_per_job']:.2f} ms per job, submit to finish"
            + (
                f"; an exit to the next start on its slot {d['refill_ms_p50']:.1f} ms p50,"
                f" {d['refill_ms_p90']:.1f} ms p90"
                if d.get("refill_ms_p50") is not None
                else ""
            )
            + (
                f"; Slurm: {slurm['drain']['jobs']} jobs in {slurm['drain']['seconds']:.1f} s"
                if "drain" in slurm
                else ""
            )
        )
    if "cancel" in iris:
        print(
            f"e: {iris['cancel']['samples']} cancels; the TerminateJob call itself returned in "
            f"{iris['cancel']['call_ms_p50']:.1f} ms (p50); Slurm's figure includes starting `scancel`"
        )
    if "memory" in iris:
        m = iris["memory"]
        print(
            f"f: {m['how']}; idle RSS {m['idle_rss_mb']:.0f} MB before; database {m['db_mb']:.1f} MB; "
            f"final states {m['job_counts']}"
        )
    if "cpu_split" in iris:
        print_cpu_split(iris["cpu_split"])
    for e in errors:
        print(f"FAILED {e}")
    print(f"\n(total {elapsed:.0f} s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
