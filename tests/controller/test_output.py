"""A job's output cannot hurt the controller: huge and endless lines stream in bounded memory,
output past the cap is cut with a marker, and other jobs run on meanwhile."""

from __future__ import annotations

import sqlite3
import sys

import psutil

from iris.rpc import controller_pb2 as pb
from tests.conftest import wait_until
from tests.controller.helpers import TERMINAL, client, launch, logs, status

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
    assert CAP - 1000 < size + count <= CAP + 1  # up to the cap, newlines included (the last line cut at it)
    tail = c.fetch_logs(pb.FetchLogsRequest(job_id=flood, task_index=-1, tail=1))
    assert "output truncated" in tail.lines[-1].text and tail.lines[-1].stream == "stdout"

    count, size = _log_stats(ctl, line)
    assert size == 50_000_000 and count == -(-50_000_000 // (64 * 1024))  # split, nothing lost

    # The spool files are gone once stored: output lives in the database only.
    assert not list((ctl.state_dir / "attempts").glob("*/stdout"))
