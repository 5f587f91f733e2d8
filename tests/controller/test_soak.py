"""Soak: a job printing as fast as it can, over and over, beside a stream of ordinary jobs. The
controller's memory stays bounded and every ordinary job finishes within its deadline.

The default run lasts SOAK_S seconds; IRIS_SOAK=1 makes it five minutes.
"""

from __future__ import annotations

import os
import time

import psutil

from tests.conftest import wait_until
from tests.controller.helpers import TERMINAL, client, launch, logs, status

SOAK_S = 300.0 if os.environ.get("IRIS_SOAK") == "1" else 20.0
RSS_BOUND = 400 * 1024**2  # the controller idles near 100 MB
ORDINARY_DEADLINE_S = 30.0  # submit → SUCCEEDED for an `echo`, on a loaded 2-core machine
# 100-byte lines as fast as `yes` prints them; each flood passes the 8 MB cap and ends.
FLOOD = f"yes {'x' * 98} | head -c 9000000"


def test_soak_flooding_job_beside_ordinary_jobs_keeps_memory_bounded(controller_factory):
    ctl = controller_factory(controller={"tick_interval": "1s", "log_max_output": "8M", "log_retention": "5s"})
    c = client(ctl)
    proc = psutil.Process(ctl.proc.pid)
    peak = proc.memory_info().rss
    flood = launch(c, "flood-0", ["sh", "-c", FLOOD])
    floods, ordinary = 1, []
    end = time.monotonic() + SOAK_S
    while time.monotonic() < end:
        peak = max(peak, proc.memory_info().rss)
        if status(c, flood).job.state in TERMINAL:
            assert status(c, flood).job.state == "SUCCEEDED"
            flood = launch(c, f"flood-{floods}", ["sh", "-c", FLOOD])
            floods += 1
        job = launch(c, f"ordinary-{len(ordinary)}", ["sh", "-c", f"echo ordinary {len(ordinary)}"])
        ordinary.append(job)

        def finished(j=job):
            s = status(c, j)
            return s if s.job.state in TERMINAL else None

        done = wait_until(finished, timeout=ORDINARY_DEADLINE_S, interval=0.05, message=f"{job} on time")
        assert done.job.state == "SUCCEEDED" and logs(c, job) == [f"ordinary {len(ordinary) - 1}"]
        peak = max(peak, proc.memory_info().rss)
    print(
        f"soak {SOAK_S:.0f}s: {floods} floods, {len(ordinary)} ordinary jobs, controller RSS peak {peak / 1024**2:.0f} MB"
    )
    assert floods >= 2  # the flood really went through the cap and was replaced
    assert peak < RSS_BOUND, f"controller RSS peaked at {peak / 1024**2:.0f} MB"
