"""Log ingest: how fast one job's output reaches the controller's database, and what it costs in
controller memory.

Each row runs one job on a fresh real controller (`python -m iris.controller`, loopback port, own
SQLite file, `log_max_output: 0` so nothing is cut) that prints a fixed amount of output as fast as
it can, and times it from the moment the attempt is RUNNING until the job is SUCCEEDED: an exit is
reported only once every line of the attempt is stored, so that span covers reading, splitting and
committing all of it. Rows:

  short   2-byte lines (`yes`: one character and its newline): the worst case for per-line cost
  text    100-byte lines, like ordinary program output
  long    one line with no newline at all, stored as 64 KiB pieces

Each row also prints what the output took in the database (its pages, the write-ahead log folded
in) per byte of output, and how the controller's count of stored bytes (what the output caps
`controller.log_max_output`, `log_max_job_output` and `max_user_log_bytes` are held to) compares
with it: near 1, each cap is what a job's output takes on disk.

Printed per row: MB/s and lines/s stored, the time the same command takes writing to /dev/null
(the job alone), and the controller's RSS: idle before the job, the highest sample taken every
20 ms while it ran, and VmHWM. A bare `python -c pass` is timed beside, for scale. Figures are
printed, never asserted.

    .venv/bin/python bench/logs.py            # 200 MB per row (about a minute per row on 2 cores)
    .venv/bin/python bench/logs.py --quick    # 20 MB per row
    .venv/bin/python bench/logs.py --json
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    PYTHON,
    Controller,
    dump_json,
    local_backend,
    log,
    percentile,
    print_table,
    revision,
    rss_kb,
    wait_until,
)

from iris.client import IrisClient  # noqa: E402

USER = "bench"
ROWS = {
    "short": ("2-byte lines", lambda n: f"yes | head -c {n}", 2),
    "text": ("100-byte lines", lambda n: f"yes {'x' * 98} | head -c {n}", 100),
    "long": ("one endless line", lambda n: f"head -c {n} /dev/zero | tr '\\0' y", None),
}


def _stored(ctl: Controller, job: str) -> tuple[int, int, int]:
    """The job's stored lines, their text's bytes, and what the controller counts them as taking."""
    db = sqlite3.connect(f"file:{ctl.state_dir / 'controller.db'}?mode=ro", uri=True)
    try:
        row = db.execute(
            "SELECT COUNT(*), COALESCE(SUM(LENGTH(CAST(text AS BLOB))), 0) FROM logs WHERE job_id = ?", (job,)
        ).fetchone()
        counted = db.execute("SELECT log_chars FROM jobs WHERE job_id = ?", (job,)).fetchone()[0]
        return row[0], row[1], counted
    finally:
        db.close()


def _database_bytes(ctl: Controller) -> int:
    """The bytes the database's pages take, its write-ahead log folded in first."""
    db = sqlite3.connect(ctl.state_dir / "controller.db")
    try:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        pages, free = db.execute("PRAGMA page_count").fetchone()[0], db.execute("PRAGMA freelist_count").fetchone()[0]
        return (pages - free) * db.execute("PRAGMA page_size").fetchone()[0]
    finally:
        db.close()


def _job_alone(command: str) -> float:
    t = time.perf_counter()
    subprocess.run(["sh", "-c", f"{command} > /dev/null"], check=True)
    return time.perf_counter() - t


def run_row(base: Path, key: str, size: int, quiet: bool) -> dict:
    label, make, _ = ROWS[key]
    command = make(size)
    log(f"[{key}] {size / 1e6:.0f} MB of {label} …", quiet)
    ctl = Controller(
        f"logs-{key}",
        base,
        [local_backend("cpu", 1, 2)],
        settings={"tick_interval": "1s", "log_max_output": 0, "log_retention": 0},
    )
    with ctl:
        idle = rss_kb(ctl.pid)["VmRSS"]
        samples: list[int] = []
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(0.02):
                try:
                    samples.append(rss_kb(ctl.pid)["VmRSS"])
                except OSError:
                    return

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        before = _database_bytes(ctl)
        client = IrisClient(ctl.url)
        try:
            job = client.submit(["sh", "-c", command], name=f"flood-{key}", user=USER, cpu=1)
            wait_until(lambda: client.status(job).state in ("RUNNING", "SUCCEEDED"), 60, 0.005, "running")
            t0 = time.perf_counter()
            state = wait_until(
                lambda: s if (s := client.status(job).state) in ("SUCCEEDED", "FAILED") else None,
                3600,
                0.01,
                "stored",
            )
            elapsed = time.perf_counter() - t0
        finally:
            client.close()
            stop.set()
            sampler.join()
        lines, stored, counted = _stored(ctl, job)
        grown = _database_bytes(ctl) - before
        hwm = rss_kb(ctl.pid)["VmHWM"]
    return {
        "row": key,
        "output": label,
        "bytes": size,
        "state": state,
        "seconds": elapsed,
        "stored_bytes": stored,
        "database_bytes": grown,
        "counted_bytes": counted,
        "db_per_output_byte": grown / size,
        "counted_per_db_byte": counted / grown if grown else None,
        "lines": lines,
        "mb_per_s": size / 1e6 / elapsed,
        "lines_per_s": lines / elapsed,
        "job_alone_s": _job_alone(command),
        "rss_idle_mb": idle / 1024,
        "rss_peak_mb": max(samples, default=idle) / 1024,
        "rss_hwm_mb": hwm / 1024,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="20 MB per row instead of 200 MB")
    ap.add_argument("--mb", type=int, default=None, help="megabytes of output per row")
    ap.add_argument("--only", default="short,text,long", help="rows to run (default: all)")
    ap.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    args = ap.parse_args(argv)
    size = (args.mb or (20 if args.quick else 200)) * 1_000_000
    load = os.getloadavg()
    floor = []
    for _ in range(5):
        t = time.perf_counter()
        subprocess.run([PYTHON, "-c", "pass"], check=True)
        floor.append(time.perf_counter() - t)
    rows = []
    with tempfile.TemporaryDirectory(prefix="iris-bench-logs-") as tmp:
        for key in args.only.split(","):
            try:
                rows.append(run_row(Path(tmp), key.strip(), size, args.json))
            except Exception as exc:  # one failed row is reported beside the others
                rows.append({"row": key, "error": f"{type(exc).__name__}: {exc}"})
    result = {
        "revision": revision(),
        "cores": os.cpu_count(),
        "loadavg_start": load[0],
        "loadavg_end": os.getloadavg()[0],
        "python_startup_ms_p50": percentile(floor, 50) * 1000,
        "rows": rows,
    }
    if args.json:
        dump_json(result)
        return 0
    print(
        f"\nIris ({result['revision']}) log ingest of one job, {size / 1e6:.0f} MB per row, on "
        f"{result['cores']} cores (load average {load[0]:.1f} at the start, {result['loadavg_end']:.1f} at the end)\n"
    )
    print_table(
        [
            "row",
            "output",
            "MB/s",
            "lines/s",
            "stored s",
            "job alone s",
            "DB B / output B",
            "counted / DB",
            "RSS idle MB",
            "RSS peak MB",
            "VmHWM MB",
        ],
        [
            [
                r["row"],
                r.get("output", r.get("error", "")),
                r.get("mb_per_s"),
                r.get("lines_per_s"),
                r.get("seconds"),
                r.get("job_alone_s"),
                r.get("db_per_output_byte"),
                r.get("counted_per_db_byte"),
                r.get("rss_idle_mb"),
                r.get("rss_peak_mb"),
                r.get("rss_hwm_mb"),
            ]
            for r in rows
        ],
    )
    print(f"\na bare `python -c pass` takes {result['python_startup_ms_p50']:.1f} ms here")
    return 0


if __name__ == "__main__":
    sys.exit(main())
