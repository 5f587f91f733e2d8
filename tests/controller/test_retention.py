"""Finished jobs' logs and attempt folders are deleted once the retention has passed; running and
recently finished jobs keep theirs."""

from __future__ import annotations

from iris.backends.staging import safe_dirname
from tests.conftest import wait_until
from tests.controller.helpers import client, launch, logs, wait_state


def test_retention_deletes_old_logs_and_attempt_folders_but_not_live_ones(controller_factory):
    # Long enough to see the finished job's logs before they expire, even on a loaded machine.
    ctl = controller_factory(controller={"tick_interval": "1s", "log_retention": "8s"})
    c = client(ctl)
    done = launch(c, "done", ["sh", "-c", "echo finished; echo more"])
    live = launch(c, "live", ["sh", "-c", "echo still here; sleep 300"])
    assert wait_state(c, done).job.state == "SUCCEEDED"
    assert logs(c, done) == ["finished", "more"]
    folder = ctl.state_dir / "attempts" / safe_dirname(f"{done}/0:0")
    assert folder.is_dir()
    wait_until(lambda: logs(c, live) == ["still here"], message="live job's line")

    wait_until(lambda: not logs(c, done) and not folder.exists(), timeout=60, message="expired logs deleted")
    assert wait_state(c, done).job.state == "SUCCEEDED"  # the job itself is kept
    assert logs(c, live) == ["still here"]
    assert (ctl.state_dir / "attempts" / safe_dirname(f"{live}/0:0")).is_dir()
