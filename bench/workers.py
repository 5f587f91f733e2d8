"""Worker daemons under load: dispatch latency, idle cost, and drain throughput.

Rows (a real controller process with one `kind: workers` backend on a free loopback port):

- submit → running with N real `iris worker start` processes: each job prints the wall time at
  which its process started (`date +%s%N`), compared with the time just before its LaunchJob call
  (the same host clock); jobs are submitted one at a time, each after the previous one finished;
  submit → succeeded is the time until the client, polling every 5 ms, sees the job succeeded;
- the controller's CPU share with M registered idle workers: lightweight in-process clients (one
  asyncio task per worker) register and hold long polls like daemons do; the controller's CPU
  seconds over a window divided by the window;
- drain: J tiny jobs (`true`) submitted at once over the N real workers, until all succeeded.

Usage: python bench/workers.py [--workers 50] [--idle 1000] [--drain 500] [--latency-jobs 40] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import (
    IRIS_CLI,
    Controller,
    dump_json,
    log,
    percentile,
    print_table,
    python_startup_ms,
    revision,
    wait_until,
)

from iris.backends.local.backend import kill_leftover_attempts
from iris.rpc import controller_pb2 as pb
from iris.rpc.controller_connect import ControllerServiceClient, ControllerServiceClientSync

POOL = [{"id": "pool", "kind": "workers"}]


def start_workers(ctl: Controller, base: Path, count: int) -> list[tuple[subprocess.Popen, Path]]:
    procs = []
    for i in range(count):
        work = base / "workers" / f"w{i}"
        work.mkdir(parents=True, exist_ok=True)
        out = open(base / "workers" / f"w{i}.log", "ab")
        cmd = [IRIS_CLI, "worker", "start", "--controller", ctl.url, "--backend", "pool", "--name", f"w{i}"]
        cmd += ["--work-dir", str(work), "--cpu", "1", "--memory", "2G", "--disk", "1G"]
        procs.append(
            (subprocess.Popen(cmd, stdout=out, stderr=out, stdin=subprocess.DEVNULL, start_new_session=True), work)
        )
        out.close()
    c = ControllerServiceClientSync(ctl.url)
    wait_until(
        lambda: sum(w.alive for w in c.list_workers(pb.ListWorkersRequest()).workers) >= count,
        timeout=60 + 3 * count,
        interval=0.5,
        what=f"{count} workers to join",
    )
    return procs


def stop_workers(procs: list[tuple[subprocess.Popen, Path]]) -> None:
    for proc, _ in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc, work in procs:
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        kill_leftover_attempts(work)


def wait_done(c: ControllerServiceClientSync, job_id: str, timeout: float = 60) -> pb.JobStatus:
    def done():
        job = c.get_job_status(pb.GetJobStatusRequest(job_id=job_id)).job
        return job if job.state in ("SUCCEEDED", "FAILED", "KILLED", "UNSCHEDULABLE") else None

    return wait_until(done, timeout, interval=0.005, what=f"{job_id} to finish")


def submit_to_running(ctl: Controller, jobs: int) -> dict:
    c = ControllerServiceClientSync(ctl.url)
    latencies, finished = [], []
    for i in range(jobs):
        t0 = time.time_ns()
        job_id = c.launch_job(
            pb.LaunchJobRequest(name=f"lat-{i}", user="bench", command=["sh", "-c", "date +%s%N"])
        ).job_id
        wait_done(c, job_id)
        finished.append((time.time_ns() - t0) / 1e6)
        lines = c.fetch_logs(pb.FetchLogsRequest(job_id=job_id, task_index=-1)).lines
        started = int(lines[0].text) if lines and lines[0].text.isdigit() else None
        if started is not None:
            latencies.append((started - t0) / 1e6)
    return {
        "jobs": jobs,
        "ms_p50": percentile(latencies, 50),
        "ms_p90": percentile(latencies, 90),
        "succeeded_ms_p50": percentile(finished, 50),
    }


def drain(ctl: Controller, jobs: int) -> dict:
    c = ControllerServiceClientSync(ctl.url)
    t0 = time.monotonic()
    ids = [c.launch_job(pb.LaunchJobRequest(name=f"d-{i}", user="bench", command=["true"])).job_id for i in range(jobs)]
    submitted = time.monotonic() - t0

    def all_done():
        resp = c.list_jobs(pb.ListJobsRequest(prefix="/bench/d-", state="SUCCEEDED", limit=1))
        return resp.total >= jobs

    wait_until(all_done, timeout=60 + jobs, interval=0.1, what=f"{jobs} jobs to drain")
    seconds = time.monotonic() - t0
    return {"jobs": len(ids), "seconds": seconds, "submit_seconds": submitted, "jobs_per_s": jobs / seconds}


async def _idle_clients(url: str, count: int, window: float, pid: int, from_common) -> dict:
    stop = asyncio.Event()
    client = ControllerServiceClient(url, timeout_ms=60_000)
    registered = 0
    polls = 0
    errors: list[str] = []

    async def one(i: int) -> None:
        nonlocal registered, polls
        resp = await client.register_worker(
            pb.RegisterWorkerRequest(
                backend_id="pool", name=f"idle-{i}", boot_id=secrets.token_hex(4), runtime="process",
                capacity=pb.Resources(cpu=8, memory_bytes=32 << 30),
            )
        )  # fmt: skip
        registered += 1
        while not stop.is_set():
            req = pb.WorkerPollRequest(backend_id="pool", session=resp.session, wait_ms=int(resp.poll_hold_s * 1000))
            try:
                await client.worker_poll(req)
                polls += 1
            except Exception as exc:  # counted and shown: an idle row that silently stopped polling lies
                if not stop.is_set():
                    errors.append(f"{type(exc).__name__}: {exc}")
                    await asyncio.sleep(1)

    tasks = [asyncio.create_task(one(i)) for i in range(count)]
    while registered < count:
        await asyncio.sleep(0.1)
    await asyncio.sleep(2)  # past the burst of registrations
    cpu0, t0, polls0 = from_common(pid), time.monotonic(), polls
    await asyncio.sleep(window)
    cpu = from_common(pid) - cpu0
    wall = time.monotonic() - t0
    polls_in_window = polls - polls0
    stop.set()
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return {
        "workers": count,
        "window_s": wall,
        "controller_cpu_share_pct": 100 * cpu / wall,
        "polls_per_s": polls_in_window / wall,
        "errors": len(errors),
        "first_error": errors[0] if errors else "",
    }


def idle_cost(base: Path, count: int, window: float) -> dict:
    from common import cpu_seconds

    with Controller("idle", base, POOL) as ctl:
        return asyncio.run(_idle_clients(ctl.url, count, window, ctl.pid, cpu_seconds))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=50)
    parser.add_argument("--idle", type=int, default=1000)
    parser.add_argument("--drain", type=int, default=500)
    parser.add_argument("--latency-jobs", type=int, default=40)
    parser.add_argument("--window", type=float, default=20.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results: dict = {
        "revision": revision(),
        "loadavg_start": os.getloadavg()[0],
        "python_startup_ms": python_startup_ms(),
    }
    with tempfile.TemporaryDirectory(prefix="iris-bench-workers-") as tmp:
        base = Path(tmp)
        ctl = Controller("pool", base, POOL)
        ctl.start()
        procs = []
        try:
            log(f"starting {args.workers} worker daemons …", args.json)
            procs = start_workers(ctl, base, args.workers)
            log("submit → running …", args.json)
            results["latency"] = submit_to_running(ctl, args.latency_jobs)
            log(f"drain of {args.drain} jobs …", args.json)
            results["drain"] = drain(ctl, args.drain)
        finally:
            stop_workers(procs)
            ctl.stop()
        log(f"{args.idle} idle in-process workers …", args.json)
        results["idle"] = idle_cost(base, args.idle, args.window)
    results["loadavg_end"] = os.getloadavg()[0]
    if args.json:
        dump_json(results)
        return
    lat, dr, idle = results["latency"], results["drain"], results["idle"]
    print(
        f"revision {results['revision']}; load average {results['loadavg_start']:.1f} at the start, "
        f"{results['loadavg_end']:.1f} at the end; a bare `python -c pass` takes {results['python_startup_ms']:.1f} ms"
    )
    if idle["errors"]:
        print(f"idle clients: {idle['errors']} errors (first: {idle['first_error']})")
    print_table(
        ["figure", "value", "target"],
        [
            (f"submit → running p50 ({args.workers} workers, ms)", lat["ms_p50"], "≤ 50"),
            (f"submit → running p90 ({args.workers} workers, ms)", lat["ms_p90"], ""),
            (f"submit → succeeded p50 ({args.workers} workers, ms)", lat["succeeded_ms_p50"], ""),
            (
                f"controller CPU with {idle['workers']:,} idle workers (% of a core)",
                idle["controller_cpu_share_pct"],
                "≤ 25",
            ),
            ("long polls answered per second by those idle workers", idle["polls_per_s"], ""),
            (f"drain {dr['jobs']} tiny jobs over {args.workers} workers (s)", dr["seconds"], ""),
            ("drain rate (jobs/s)", dr["jobs_per_s"], ""),
        ],
    )


if __name__ == "__main__":
    sys.exit(main())
