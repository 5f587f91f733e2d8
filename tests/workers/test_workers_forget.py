"""A dead worker is forgotten once it has been dead longer than its pool's `forget_dead_after`:
`worker list` and the scheduler no longer carry it, while the attempts that ran on it keep its
name; a daemon that comes back afterwards registers anew and is told to kill what it still runs."""

from __future__ import annotations

import signal

import pytest

from iris.core.config import parse_config
from iris.core.errors import InvalidArgument
from tests.conftest import wait_until
from tests.controller.helpers import client, launch, pb, pid_alive, status, user_token
from tests.workers.conftest import GRACE


def _workers(c) -> dict[str, bool]:
    return {w.worker_id: w.alive for w in c.list_workers(pb.ListWorkersRequest()).workers}


def test_workers_dead_worker_is_forgotten_after_the_retention_and_its_attempts_keep_its_name(
    controller_factory, worker_factory
):
    ctl = controller_factory(
        "churn",
        backends=[{"id": "pool", "kind": "workers", "forget_dead_after": "3s"}],
        controller={"tick_interval": "1s", "worker_grace_period": GRACE},
    )
    c = client(ctl)
    gone = worker_factory(ctl, "gone")
    job = launch(c, "long", ["sleep", "300"])
    pid = wait_until(gone.attempt_pids, message="the attempt to start")[0]
    gone.signal(signal.SIGSTOP)  # silent, as a host that lost its network
    # Declared dead first: listed as dead, its attempt failed as WORKER_FAILED and the task queued again.
    wait_until(lambda: _workers(c) == {"gone": False}, message="the worker to be declared dead")
    lost = wait_until(lambda: (s := status(c, job)).tasks[0].attempts[0].state == "WORKER_FAILED" and s)
    assert lost.tasks[0].attempts[0].worker_id == "gone", lost
    # Then forgotten: no longer listed, and the job's history still says where its attempt ran.
    wait_until(lambda: _workers(c) == {}, message="the dead worker to be forgotten")
    assert ctl.cli("worker", "list").returncode == 0
    after = status(c, job)
    assert [(a.state, a.worker_id) for a in after.tasks[0].attempts][:1] == [("WORKER_FAILED", "gone")], after
    assert after.job.state == "PENDING", after
    # The same daemon comes back: it registers anew under its name and is told to kill its attempt,
    # and the queued task runs there as a new attempt.
    gone.signal(signal.SIGCONT)
    wait_until(lambda: not pid_alive(pid), timeout=60, message="the forgotten attempt to be killed")
    wait_until(lambda: _workers(c) == {"gone": True}, message="the worker to register again")
    rerun = wait_until(lambda: len((s := status(c, job)).tasks[0].attempts) == 2 and s, message="a second attempt")
    assert rerun.tasks[0].attempts[1].worker_id == "gone", rerun
    c.terminate_job(pb.TerminateJobRequest(job_id=job))


@pytest.mark.parametrize(("value", "words"), [(0, "greater than 0"), ("soon", "not understood"), (-5, "negative")])
def test_workers_forget_dead_after_must_be_a_positive_duration(value, words):
    config = {"name": "c", "backends": [{"id": "pool", "kind": "workers", "forget_dead_after": value}]}
    with pytest.raises(InvalidArgument) as err:
        parse_config(config)
    assert "forget_dead_after" in err.value.message and words in err.value.message, err.value.message
    assert (
        parse_config({**config, "backends": [{"id": "pool", "kind": "workers"}]}).backends[0].forget_dead_after == 3600
    )


def test_workers_forgotten_name_stays_its_owners_and_another_principal_is_refused(controller_factory, worker_factory):
    ctl = controller_factory(
        "names",
        backends=[{"id": "pool", "kind": "workers", "forget_dead_after": "3s"}],
        controller={"tick_interval": "1s", "worker_grace_period": GRACE},
    )
    c = client(ctl)
    host1 = worker_factory(ctl, "host-1", env={"IRIS_TOKEN": user_token(ctl, "host-1", role="worker")})
    job = launch(c, "ran-there", ["sleep", "300"])
    wait_until(host1.attempt_pids, message="the attempt to start")
    host1.signal(signal.SIGSTOP)
    wait_until(lambda: _workers(c) == {}, message="the dead worker to be forgotten")
    assert status(c, job).tasks[0].attempts[0].worker_id == "host-1"

    # Another principal's daemon asks for the forgotten name: refused, since the history names it.
    intruder = worker_factory(
        ctl, "host-1", env={"IRIS_TOKEN": user_token(ctl, "host-2", role="worker")}, wait=False, label="intruder"
    )
    assert intruder.proc.wait(timeout=60) != 0
    said = intruder.log.read_text()
    assert "belongs to host-1" in said and "forgotten" in said and "Pick another --name" in said, said
    assert _workers(c) == {}
    # Its owner's daemon comes back and takes its name again.
    host1.signal(signal.SIGCONT)
    wait_until(lambda: _workers(c) == {"host-1": True}, timeout=60, message="host-1 to register again")
    c.terminate_job(pb.TerminateJobRequest(job_id=job))


def test_workers_name_stays_its_owners_across_a_controller_restart_before_its_daemon_reconnects(
    controller_factory, worker_factory
):
    # A grace long enough that the stopped daemon's lease (three quarters of it) outlasts the restart
    # and the intruder's try even on a loaded machine: its fence would end the attempt otherwise.
    ctl = controller_factory(
        "restarts",
        backends=[{"id": "pool", "kind": "workers"}],
        controller={"tick_interval": "1s", "worker_grace_period": "30s"},
    )
    c = client(ctl)
    host1 = worker_factory(ctl, "host-1", env={"IRIS_TOKEN": user_token(ctl, "host-1", role="worker")})
    job = launch(c, "runs-there", ["sleep", "300"])
    pid = wait_until(host1.attempt_pids, message="the attempt to start")[0]
    host1.signal(signal.SIGSTOP)  # its daemon cannot reconnect before the intruder asks
    try:
        ctl.kill()
        ctl.start()
        c = client(ctl)
        # A daemon of another principal asks for the name before its owner is back: refused, so it is
        # never handed the attempt the restarted controller holds for host-1.
        intruder = worker_factory(
            ctl, "host-1", env={"IRIS_TOKEN": user_token(ctl, "host-2", role="worker")}, wait=False, label="intruder"
        )
        assert intruder.proc.wait(timeout=60) != 0
        said = intruder.log.read_text()
        assert "belongs to host-1" in said and "Pick another --name" in said, said
    finally:
        host1.signal(signal.SIGCONT)
    # Its owner reconnects and keeps its attempt.
    wait_until(lambda: _workers(c) == {"host-1": True}, timeout=60, message="host-1 to register again")
    assert pid_alive(pid)
    assert [a.state for a in status(c, job).tasks[0].attempts] == ["RUNNING"]
    c.terminate_job(pb.TerminateJobRequest(job_id=job))
