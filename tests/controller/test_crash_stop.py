"""A controller killed after it committed a stop and before it signalled the attempt stops that
attempt after its restart, and records its end; another backend's attempts are left alone."""

from __future__ import annotations

import os
import sqlite3

import pytest
from connectrpc.errors import ConnectError

from iris.backends.marks import LiveMarks
from iris.controller.state.tick import DIE_BEFORE_STOP_ENV
from iris.rpc import controller_pb2 as pb
from iris.testing import local_backend
from tests.conftest import wait_until
from tests.controller.helpers import client, launch, logs, pid_alive, status, wait_state

# Prints a line when stopped, so the test sees that output written after the stop is still stored.
STOPPABLE = "echo up; trap 'echo stopped; exit 7' TERM; while :; do sleep 0.05; done"


def _pin(backend: str) -> list[pb.Constraint]:
    return [pb.Constraint(key="backend", op="EQ", values=[backend])]


def _attempt(c, job: str) -> pb.AttemptStatus:
    return wait_until(
        lambda: (a := status(c, job).tasks[0].attempts) and a[0].pid and logs(c, job) and a[0],
        timeout=60,
        message=f"{job} to run",
    )


def test_stop_committed_before_a_crash_reaches_the_attempt_after_the_restart(controller_factory, tmp_path):
    go = tmp_path / "go"
    ctl = controller_factory("orphan", backends=[local_backend("a"), local_backend("b")], start=False)
    ctl.env = {**os.environ, DIE_BEFORE_STOP_ENV: "1"}
    ctl.start()
    c = client(ctl)
    doomed = launch(c, "doomed", ["sh", "-c", STOPPABLE], constraints=_pin("a"))
    kept = launch(
        c, "kept", ["sh", "-c", f"echo up; while [ ! -e {go} ]; do sleep 0.05; done; echo done"], constraints=_pin("b")
    )
    doomed_pid = _attempt(c, doomed).pid
    kept_attempt = _attempt(c, kept)
    with pytest.raises(ConnectError):  # the controller dies while the call waits for the tick
        c.terminate_job(pb.TerminateJobRequest(job_id=doomed))
    assert ctl.proc is not None and ctl.proc.wait(timeout=30) is not None
    with sqlite3.connect(f"file:{ctl.state_dir / 'controller.db'}?mode=ro", uri=True) as db:
        (state,) = db.execute("SELECT state FROM attempts WHERE job_id = ?", (doomed,)).fetchone()
    assert state == "KILLED", "the stop was committed before the crash"
    assert pid_alive(doomed_pid), "the crash came before the attempt was signalled"

    ctl.env = None
    ctl.start()
    c = client(ctl)
    wait_until(lambda: not pid_alive(doomed_pid), timeout=30, message="the stopped attempt to end")
    wait_until(lambda: "stopped" in logs(c, doomed), message="the attempt's last line to be stored")
    final = status(c, doomed)
    assert final.job.state == "KILLED" and [a.state for a in final.tasks[0].attempts] == ["KILLED"]
    # The shell may report its killed sleep ("Terminated", on stderr, read apart from stdout) on either side.
    assert [ln for ln in logs(c, doomed) if ln != "Terminated"][:2] == ["up", "stopped"]

    # The other backend's attempt was re-adopted, not stopped: it runs to its end.
    assert pid_alive(kept_attempt.pid)
    go.touch()
    done = wait_state(c, kept)
    assert done.job.state == "SUCCEEDED" and logs(c, kept) == ["up", "done"]
    assert not any((ctl.state_dir / "attempts" / ".live").rglob("*-*")), "every marker is gone once ended"


def test_preemption_committed_before_a_crash_stops_the_victim_and_runs_the_preemptor(controller_factory):
    ctl = controller_factory("preempt", backends=[local_backend("h100", gpu="h100")], start=False)
    ctl.env = {**os.environ, DIE_BEFORE_STOP_ENV: "1"}
    ctl.start()
    c = client(ctl)
    gpu = pb.Resources(device=pb.Device(kind="gpu", variant="h100", count=8))
    batch = launch(c, "sweep", ["sh", "-c", STOPPABLE], user="bob", resources=gpu, priority="batch")
    victim = _attempt(c, batch).pid
    # The tick woken by this submit commits the preemption, then dies before it signals the victim.
    urgent = "/alice/debug"
    try:
        launch(c, "debug", ["sh", "-c", "echo got $CUDA_VISIBLE_DEVICES"], resources=gpu)
    except ConnectError:  # committed, and the tick that placed it died before the answer was sent
        pass
    assert ctl.proc is not None and ctl.proc.wait(timeout=30) is not None
    assert pid_alive(victim), "the crash came before the victim was signalled"

    ctl.env = None
    ctl.start()
    c = client(ctl)
    done = wait_state(c, urgent, timeout=60)
    assert done.job.state == "SUCCEEDED" and logs(c, urgent) == ["got 0,1,2,3,4,5,6,7"], done
    assert not pid_alive(victim), "the victim is stopped"
    attempts = status(c, batch).tasks[0].attempts
    assert attempts[0].state == "PREEMPTED" and "stopped" in logs(c, batch)
    c.terminate_job(pb.TerminateJobRequest(job_id=batch))


def test_an_attempt_whose_end_was_stored_before_a_crash_is_not_taken_back_to_stop(controller_factory):
    ctl = controller_factory("settled", backends=[local_backend("a")])
    c = client(ctl)
    job = launch(c, "done", ["sh", "-c", "echo hi"])
    assert wait_state(c, job).job.state == "SUCCEEDED"
    (attempt,) = status(c, job).tasks[0].attempts
    ctl.stop()
    # What a crash between storing the attempt's end and dropping its marker leaves behind.
    marks = LiveMarks(ctl.state_dir / "attempts" / ".live" / "a")
    marks.put(attempt.attempt_id)
    ctl.start()
    assert marks.read() == {}, "its marker is dropped while the controller starts"
    assert "taking back" not in ctl.log.read_text(), "nothing is taken back to be stopped"
    again = status(client(ctl), job)
    assert again.job.state == "SUCCEEDED" and [(a.attempt_id, a.state) for a in again.tasks[0].attempts] == [
        (attempt.attempt_id, "SUCCEEDED")
    ]
