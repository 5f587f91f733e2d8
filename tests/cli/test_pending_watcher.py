"""The pending line of `iris job run` / `logs -f` never comes after the job's first output line:
a status call still out when the output begins prints nothing once it returns."""

from __future__ import annotations

import threading
from types import SimpleNamespace

from iris.cli.submit import PendingWatcher


class SlowStatus:
    """Answers PENDING with a new reason, once released: the status call that is out when output begins."""

    def __init__(self) -> None:
        self.asked = threading.Event()
        self.release = threading.Event()

    def status(self, _job_id):
        self.asked.set()
        self.release.wait(10)
        return SimpleNamespace(state="PENDING", pending_reason="Waiting for a slot")


def test_a_status_call_out_when_output_begins_prints_no_pending_line(capsys):
    client = SlowStatus()
    watcher = PendingWatcher(client, "/alice/j", "queued")
    assert client.asked.wait(10)
    watcher.stop()  # the first output line arrived
    client.release.set()
    watcher._thread.join(10)
    assert not watcher._thread.is_alive()
    assert "pending:" not in capsys.readouterr().err


def test_a_changed_reason_is_printed_while_the_job_waits(capsys):
    client = SlowStatus()
    client.release.set()
    watcher = PendingWatcher(client, "/alice/j", "queued")
    assert client.asked.wait(10)
    for _ in range(100):
        if "pending: Waiting for a slot" in capsys.readouterr().err:
            break
        threading.Event().wait(0.05)
    else:
        raise AssertionError("the changed reason was never printed")
    watcher.stop()
