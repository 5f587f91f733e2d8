"""How a worker daemon starts and stops attempts: through the spawner, as the local backend does;
and an attempt whose stop a crashed controller committed but never sent is stopped once the
controller is back and the worker registers again, its exit code and last output stored."""

from __future__ import annotations

import os

import pytest
from connectrpc.errors import ConnectError

from iris.controller.state.tick import DIE_BEFORE_STOP_ENV
from iris.rpc import controller_pb2 as pb
from tests.conftest import wait_until
from tests.controller.helpers import client, launch, logs, pid_alive, status, wait_state
from tests.workers.conftest import GRACE, workers_backends


def test_workers_stop_committed_before_a_crash_reaches_the_worker_after_the_restart(controller_factory, worker_factory):
    ctl = controller_factory(
        "pool",
        backends=workers_backends(),
        controller={"tick_interval": "1s", "worker_grace_period": GRACE},
        start=False,
    )
    ctl.env = {**os.environ, DIE_BEFORE_STOP_ENV: "1"}
    ctl.start()
    worker = worker_factory(ctl, "a")
    c = client(ctl)
    stoppable = "echo up; trap 'echo stopped; exit 7' TERM; while :; do sleep 0.05; done"
    job = launch(c, "doomed", ["sh", "-c", stoppable])
    pid = wait_until(worker.attempt_pids, message="the attempt to start")[0]
    wait_until(lambda: logs(c, job) == ["up"], message="the attempt's first line")
    with pytest.raises(ConnectError):  # the controller dies while the call waits for the tick
        c.terminate_job(pb.TerminateJobRequest(job_id=job))
    assert ctl.proc is not None and ctl.proc.wait(timeout=30) is not None
    assert pid_alive(pid), "the crash came before the worker was told"

    ctl.env = None
    ctl.start()
    wait_until(lambda: not pid_alive(pid), timeout=60, message="the worker to stop the attempt")
    c = client(ctl)
    # Stopped as any stop is: its exit code (SIGTERM ends its wrapper at once: 143) and the line
    # its shell prints on the way out are stored.
    final = wait_until(lambda: (s := status(c, job)).tasks[0].attempts[0].has_exit_code and s, message="the exit")
    assert final.job.state == "KILLED" and [a.state for a in final.tasks[0].attempts] == ["KILLED"]
    assert final.tasks[0].attempts[0].exit_code == 143, final
    assert "stopped" in logs(c, job), logs(c, job)
    marks = ctl.state_dir / "workers" / ".live"
    wait_until(lambda: not any(p.is_file() for p in marks.rglob("*")), message="the attempt's marker to go")
    assert worker.proc.poll() is None, "the worker serves on"


def test_workers_attempt_is_started_by_the_spawner_and_reports_its_code(pool, worker_factory):
    worker = worker_factory(pool, "a")
    c = client(pool)
    # $PPID is the wrapper; its parent started it: the spawner, not the daemon itself.
    script = (
        "pp=$(awk '/^PPid/ {print $2}' /proc/$PPID/status); echo $pp; tr '\\0' ' ' < /proc/$pp/cmdline; echo; exit 3"
    )
    job = launch(c, "born", ["sh", "-c", script])
    done = wait_state(c, job)
    assert done.job.state == "FAILED" and done.tasks[0].attempts[0].exit_code == 3, done
    parent, cmdline = logs(c, job)
    assert int(parent) != worker.proc.pid and "spawner.py" in cmdline, cmdline


def test_workers_attempt_keeps_what_left_its_process_group_and_ends_it_with_the_attempt(pool, worker_factory):
    worker_factory(pool, "a")
    c = client(pool)
    # `setsid` takes the sleep out of the attempt's process group: only the attempt's containment
    # (its cgroup, or its subreaper) still knows it belongs to the attempt.
    job = launch(c, "escape", ["sh", "-c", "setsid sleep 300 & echo $!"])
    done = wait_state(c, job)
    assert done.job.state == "SUCCEEDED", done
    escaped = int(logs(c, job)[0])
    try:
        wait_until(lambda: not pid_alive(escaped), message="the process that left the group to end with its attempt")
    finally:
        if pid_alive(escaped):
            os.kill(escaped, 9)


def test_workers_a_stopped_worker_leaves_at_once_and_its_attempt_runs_on_another(controller_factory, worker_factory):
    # A grace period far longer than the test's waits: only the daemon's own word can end it sooner.
    ctl = controller_factory(
        "leaving", backends=workers_backends(), controller={"tick_interval": "1s", "worker_grace_period": "300s"}
    )
    c = client(ctl)
    a = worker_factory(ctl, "a")
    job = launch(c, "long", ["sleep", "300"])
    wait_state(c, job, {"RUNNING"})
    assert status(c, job).tasks[0].attempts[-1].worker_id == "a"

    a.proc.terminate()
    a.proc.wait(timeout=60)

    def gone() -> bool:
        return any(w.worker_id == "a" and not w.alive for w in c.list_workers(pb.ListWorkersRequest()).workers)

    wait_until(gone, timeout=30, message="worker a shown as gone after its daemon stopped")
    first = wait_until(
        lambda: (s := status(c, job)).tasks[0].attempts[0].state not in ("ASSIGNED", "BUILDING", "RUNNING") and s,
        timeout=30,
        message="the stopped worker's attempt given up",
    )
    assert "worker a was stopped" in first.tasks[0].attempts[0].error, first
    assert status(c, job).job.state == "PENDING"  # nowhere to run until another worker joins

    worker_factory(ctl, "b")
    wait_until(
        lambda: (s := status(c, job)).job.state == "RUNNING" and s.tasks[0].attempts[-1].worker_id == "b",
        timeout=60,
        message="the job running again on worker b",
    )
