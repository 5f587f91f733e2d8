"""At most one live attempt: a worker daemon's attempts end with it (its fence kills them when it
dies, or when its lease runs out while it is stopped), and the controller retries them only after.

Each attempt takes an exclusive lock on one file and keeps it for its whole life (its `sleep`
inherits the descriptor), and records whether it found the lock free: a retry that started while
the first attempt still ran would find it taken."""

from __future__ import annotations

import signal

import pytest

from tests.conftest import wait_until
from tests.controller.helpers import client, launch, pid_alive, wait_state
from tests.workers.conftest import GRACE, workers_backends

# The first attempt holds the lock and sleeps; a retry takes the lock (or says it could not) and ends.
SCRIPT = (
    'exec 9>>{d}/lock; if flock -n 9; then echo "$IRIS_ATTEMPT alone" >> {d}/log; '
    'else echo "$IRIS_ATTEMPT overlap" >> {d}/log; fi; echo $$ > {d}/pid.$IRIS_ATTEMPT; '
    'if [ "$IRIS_ATTEMPT" = 0 ]; then sleep 60; fi'
)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP], ids=["killed", "stopped"])
def test_workers_fence_lost_daemon_attempt_ends_before_its_retry(controller_factory, worker_factory, tmp_path, sig):
    # The retry waits for the grace period, the stopped daemon's fence only for its lease (three
    # quarters of it): the quarter between is the guard's time to kill, 1.5 s here so that a loaded
    # machine cannot stretch the guard's wake-up past it (30 s grace, 7.5 s by default).
    grace = GRACE if sig == signal.SIGKILL else "6s"
    pool = controller_factory(
        "pool", backends=workers_backends(), controller={"tick_interval": "1s", "worker_grace_period": grace}
    )
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)  # the attempts may run as another uid
    first = worker_factory(pool, "a")
    c = client(pool)
    job = launch(c, "once", ["sh", "-c", SCRIPT.format(d=shared)])
    pid_file = shared / "pid.0"
    wait_until(pid_file.exists, message="the first attempt to start on worker a")
    pid = int(wait_until(lambda: pid_file.read_text().strip(), message="the first attempt's pid"))
    worker_factory(pool, "b")  # where the retry goes the moment the controller gives up on a

    first.signal(sig)
    # Killed, the daemon's pipe closes and its fence kills the attempt at once; stopped, the
    # attempt is killed when the lease runs out (4.5 s after a's last call), the daemon still stopped.
    wait_until(lambda: not pid_alive(pid), timeout=15, message="the fence to kill the lost daemon's attempt")
    if sig == signal.SIGSTOP:
        assert first.proc.poll() is None
    done = wait_state(c, job, timeout=60)
    assert done.job.state == "SUCCEEDED", done
    attempts = done.tasks[0].attempts
    assert [(a.state, a.worker_id) for a in attempts] == [("WORKER_FAILED", "a"), ("SUCCEEDED", "b")], attempts
    assert "worker a lost" in attempts[0].error and "fenced at" in attempts[0].error, attempts[0].error
    assert (shared / "log").read_text().split("\n") == ["0 alone", "1 alone", ""]
    if sig == signal.SIGSTOP:
        first.signal(signal.SIGCONT)
        worker_factory.wait_joined(pool, "a")  # it registers again and serves, its lease renewed
        again = launch(c, "after", ["sh", "-c", "echo ran on $IRIS_WORKER_ID"])
        assert wait_state(c, again, timeout=60).job.state == "SUCCEEDED"


def test_workers_fence_graceful_stop_is_fast_and_leaves_no_guard(pool, worker_factory):
    worker = worker_factory(pool, "quick")
    launch(client(pool), "sleeper", ["sleep", "60"])
    wait_until(worker.attempt_pids, message="the attempt to start")
    guard = [p for p in _children_named(worker.proc.pid, "iris.worker.fence")]
    assert len(guard) == 1, guard
    worker.proc.terminate()
    assert worker.proc.wait(timeout=15) == 0
    wait_until(lambda: not pid_alive(guard[0]), timeout=15, message="the retired fence to leave")
    assert not [p for p in worker.attempt_pids() if pid_alive(p)]


def _children_named(pid: int, text: str) -> list[int]:
    import psutil

    return [p.pid for p in psutil.Process(pid).children() if text in " ".join(p.cmdline())]
