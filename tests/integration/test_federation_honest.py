"""Federation that stays honest under faults: logs relayed to the last line across a parent crash,
and a cancel shown as stopping until the peer confirms it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from tests.conftest import wait_until
from tests.controller.helpers import client, logs, pid_alive, status, wait_state
from tests.integration.test_federation import gpu_job, on_peer, start_federation

FORTY = "for i in $(seq 1 20); do echo line-$i; done; sleep 2; for i in $(seq 21 40); do echo line-$i; done"


def test_logs_arrive_complete_in_order_and_once_after_the_parent_was_down_across_the_jobs_end(controller_factory):
    fed = start_federation(controller_factory)
    marin, h100 = fed.marin, fed.h100
    c = client(marin, fed.token)
    job = c.launch_job(gpu_job("chatty", "h100", command=("sh", "-c", FORTY))).job_id
    wait_until(lambda: len(logs(c, job)) >= 1, timeout=30, message="first lines relayed")
    marin.kill()
    peer = client(h100)
    wait_state(peer, on_peer(job), timeout=30)
    time.sleep(1.5)  # the parent stays down for a few more of the peer's sync intervals
    marin.start()
    marin.extra_env["IRIS_TOKEN"] = fed.token
    followed = marin.cli("job", "logs", "-f", job, timeout=60)
    assert followed.returncode == 0, followed.stderr
    expected = [f"line-{i}" for i in range(1, 41)]
    assert followed.stdout.splitlines() == expected
    assert logs(c, job) == expected
    assert status(c, job).job.state == "SUCCEEDED"


def test_stop_of_a_federated_job_shows_stopping_until_the_peer_confirms(controller_factory):
    fed = start_federation(controller_factory)
    marin, h100 = fed.marin, fed.h100
    c, p = client(marin, fed.token), client(h100)
    job = c.launch_job(gpu_job("long", "h100", command=("sleep", "300"))).job_id
    wait_until(lambda: status(c, job).job.state == "RUNNING", timeout=30, message="running on the peer")
    pid = wait_until(
        lambda: status(p, on_peer(job)).tasks[0].attempts[0].pid if status(p, on_peer(job)).tasks[0].attempts else 0,
        message="peer pid",
    )
    marin.extra_env["IRIS_TOKEN"] = fed.token
    os.kill(h100.proc.pid, signal.SIGSTOP)
    try:
        stopped = marin.cli("job", "stop", job, timeout=30)
        assert stopped.returncode == 0, stopped.stderr
        wait_until(lambda: status(c, job).job.stale, timeout=15, message="peer marked stale")
        now = status(c, job).job
        assert now.state == "RUNNING" and "stopping" in now.pending_reason and "cw-h100" in now.pending_reason
        assert pid_alive(pid)
        waiter = subprocess.Popen(
            [sys.executable, "-m", "iris.cli.main", "job", "stop", "--wait", job],
            env={**os.environ, "IRIS_CONTROLLER": marin.url, "IRIS_TOKEN": fed.token},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        # Its stop lands while the peer is still paused (the job still stopping), so it waits.
        assert waiter.stdout.readline().strip() == f"stopped {job}"
    finally:
        os.kill(h100.proc.pid, signal.SIGCONT)
    out, err = waiter.communicate(timeout=60)
    assert waiter.returncode == 0, err
    assert out.splitlines()[-1] == f"{job} KILLED"
    assert status(c, job).job.state == "KILLED"
    wait_until(lambda: not pid_alive(pid), timeout=20, message="peer process gone")
