"""A job's output cannot hurt the controller: huge and endless lines stream in bounded memory,
output past an attempt's cap or its job's (over all attempts) is cut with a marker, and other jobs
run on meanwhile."""

from __future__ import annotations

import sqlite3
import sys

import psutil

from iris.controller.db.attempts import stored_size
from iris.rpc import controller_pb2 as pb
from tests.conftest import wait_until
from tests.controller.helpers import TERMINAL, client, launch, logs, status, wait_state

RSS_BOUND = 400 * 1024**2  # the controller idles near 100 MB; unbounded reading took GBs
CAP = 60 * 1024**2  # above the 50 MB line, below the 200 MB flood

# 200 MB of 1000-byte lines, written as fast as Python can.
FLOOD = f"{sys.executable} -c \"import sys; w=sys.stdout.buffer.write; line=b'x'*999+b'\\n'; [w(line) for _ in range(200_000)]\""
# One 50 MB line that never ends with a newline.
ONE_LINE = "head -c 50000000 /dev/zero | tr '\\0' y"


def _log_stats(ctl, job: str) -> tuple[int, int]:
    """The stored stdout lines of `job` (marker excluded) and the bytes they came from."""
    db = sqlite3.connect(f"file:{ctl.state_dir / 'controller.db'}?mode=ro", uri=True)
    try:
        row = db.execute(
            "SELECT COUNT(*), COALESCE(SUM(LENGTH(CAST(text AS BLOB))), 0) FROM logs"
            " WHERE job_id = ? AND stream = 'stdout' AND text NOT LIKE '[iris] output truncated%'",
            (job,),
        ).fetchone()
        return row[0], row[1]
    finally:
        db.close()


def test_flood_and_endless_line_stream_in_bounded_memory_while_other_jobs_finish(controller_factory):
    ctl = controller_factory(controller={"tick_interval": "1s", "log_max_output": CAP})
    c = client(ctl)
    proc = psutil.Process(ctl.proc.pid)
    peak = [proc.memory_info().rss]

    def sample():
        peak[0] = max(peak[0], proc.memory_info().rss)

    flood = launch(c, "flood", ["sh", "-c", FLOOD])
    line = launch(c, "oneline", ["sh", "-c", ONE_LINE])

    def finished(job: str, timeout: float):
        def check():
            sample()
            s = status(c, job)
            return s if s.job.state in TERMINAL else None

        return wait_until(check, timeout=timeout, interval=0.05, message=f"{job} to finish")

    for i in range(3):
        job = launch(c, f"ordinary-{i}", ["sh", "-c", f"echo ordinary {i}"])
        assert finished(job, 60).job.state == "SUCCEEDED" and logs(c, job) == [f"ordinary {i}"]
    for job in (flood, line):
        assert finished(job, 120).job.state == "SUCCEEDED"
    print(f"controller RSS peak {peak[0] / 1024**2:.0f} MB")
    assert peak[0] < RSS_BOUND, f"controller RSS peaked at {peak[0] / 1024**2:.0f} MB"

    count, size = _log_stats(ctl, flood)
    # Up to the cap in bytes of the database: each 999-byte line with its row's overhead.
    per_line = stored_size(flood, "x" * 999)
    assert CAP - per_line < count * per_line <= CAP and size == count * 999
    tail = c.fetch_logs(pb.FetchLogsRequest(job_id=flood, task_index=-1, tail=1))
    assert "output truncated" in tail.lines[-1].text and tail.lines[-1].stream == "stdout"

    count, size = _log_stats(ctl, line)
    assert size == 50_000_000 and count == -(-50_000_000 // (64 * 1024))  # split, nothing lost

    # The spool files are gone once stored: output lives in the database only.
    assert not list((ctl.state_dir / "attempts").glob("*/stdout"))


def test_job_output_is_capped_over_all_its_attempts(controller_factory):
    ctl = controller_factory(controller={"tick_interval": "1s", "log_max_output": "200K", "log_max_job_output": "300K"})
    c = client(ctl)
    # 240 KB of 100-byte lines, then a failure: three attempts (two retries) of 240 KB each.
    job = launch(
        c, "chatty", ["sh", "-c", "head -c 240000 /dev/zero | tr '\\0' x | fold -w 99; exit 1"], max_retries_failure=2
    )
    assert wait_state(c, job, timeout=90).job.state == "FAILED"
    db = sqlite3.connect(f"file:{ctl.state_dir / 'controller.db'}?mode=ro", uri=True)
    try:
        rows = db.execute("SELECT attempt, text FROM logs WHERE job_id = ? ORDER BY seq", (job,)).fetchall()
    finally:
        db.close()
    by_attempt = {a: [t for at, t in rows if at == a] for a in (0, 1, 2)}
    assert "this attempt's output takes more than" in by_attempt[0][-1]  # the attempt's own cap first
    assert "this job's output over all its attempts takes more than" in by_attempt[1][-1]  # then the job's, once
    assert by_attempt[2] == [] and sum("output truncated" in t for _, t in rows) == 2
    # Both caps count what the lines take in the database (99 bytes of text, and the row's overhead).
    per_line = stored_size(job, "x" * 99)
    first = [t for t in by_attempt[0] if "output truncated" not in t]
    assert 200 * 1024 - per_line < len(first) * per_line <= 200 * 1024
    stored = sum(stored_size(job, t) for _, t in rows if "output truncated" not in t)
    assert 300 * 1024 - per_line < stored <= 300 * 1024
