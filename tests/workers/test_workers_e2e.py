"""Worker daemons end to end: a real controller and real `iris worker start` processes on loopback."""

from __future__ import annotations

import signal

from tests.conftest import wait_until
from tests.controller.helpers import client, launch, logs, pb, pid_alive, wait_state
from tests.workers.conftest import workers_backends

# The first attempt of a task hangs (until the test kills it); a retry finishes at once.
FIRST_ATTEMPT_HANGS = (
    'echo start on $IRIS_WORKER_ID; if [ "$IRIS_ATTEMPT" = 0 ]; then sleep 60; echo late; fi; echo done'
)


def test_workers_coscheduled_replicas_land_on_three_workers(pool, worker_factory):
    for name in ("w1", "w2", "w3"):
        worker_factory(pool, name, wait=False)
    for name in ("w1", "w2", "w3"):
        worker_factory.wait_joined(pool, name)
    c = client(pool)
    job = launch(
        c, "trio", ["sh", "-c", "echo task $IRIS_TASK_INDEX on $IRIS_WORKER_ID"], replicas=3, coschedule=True,
        resources=pb.Resources(cpu=2, memory_bytes=1 << 30),
    )  # fmt: skip
    done = wait_state(c, job)
    assert done.job.state == "SUCCEEDED", done
    history = {t.task_id: [(a.state, a.worker_id, a.error) for a in t.attempts] for t in done.tasks}
    assert sorted(t.worker_id for t in done.tasks) == ["w1", "w2", "w3"], history
    assert sorted(logs(c, job)) == sorted(f"task {t.index} on {t.worker_id}" for t in done.tasks)


def test_workers_sigkilled_worker_task_retried_on_another_and_succeeds(pool, worker_factory):
    first = worker_factory(pool, "a")
    c = client(pool)
    job = launch(c, "survivor", ["sh", "-c", FIRST_ATTEMPT_HANGS])
    wait_until(first.attempt_pids, message="the attempt to start on worker a")
    first.signal(signal.SIGKILL)
    worker_factory(pool, "b")
    done = wait_state(c, job, timeout=60)
    assert done.job.state == "SUCCEEDED", done
    attempts = done.tasks[0].attempts
    assert [(a.state, a.worker_id) for a in attempts] == [("WORKER_FAILED", "a"), ("SUCCEEDED", "b")]
    assert "stopped answering" in attempts[0].error


def test_workers_stopped_worker_is_replaced_and_its_attempt_killed_when_it_returns(pool, worker_factory):
    first = worker_factory(pool, "a")
    c = client(pool)
    job = launch(c, "frozen", ["sh", "-c", FIRST_ATTEMPT_HANGS])
    old_pid = wait_until(first.attempt_pids, message="the attempt to start on worker a")[0]
    worker_factory(pool, "b")
    first.signal(signal.SIGSTOP)
    done = wait_state(c, job, timeout=60)
    assert done.job.state == "SUCCEEDED", done
    first.signal(signal.SIGCONT)
    wait_until(lambda: not pid_alive(old_pid), timeout=30, message="the abandoned attempt to be killed")
    attempts = wait_state(c, job).tasks[0].attempts
    assert [a.state for a in attempts].count("SUCCEEDED") == 1
    assert [(a.state, a.worker_id) for a in attempts] == [("WORKER_FAILED", "a"), ("SUCCEEDED", "b")]
    assert "late" not in logs(c, job)
    worker_factory.wait_joined(pool, "a")  # it re-registered and serves again


def test_workers_controller_crash_task_finishes_once_with_all_output(controller_factory, worker_factory):
    # The default grace: the daemon's lease (three quarters of it) outlasts the restart however
    # loaded the machine, as in a real deployment; the pool fixture's short grace may not.
    pool = controller_factory("pool", backends=workers_backends(), controller={"tick_interval": "1s"})
    worker = worker_factory(pool, "a")
    c = client(pool)
    script = "for i in 1 2 3 4 5 6 7 8; do echo line $i; sleep 0.5; done"
    job = launch(c, "steady", ["sh", "-c", script])
    wait_until(lambda: "line 2" in logs(c, job), message="the first lines to arrive")
    pool.kill()
    pool.start()
    c = client(pool)
    done = wait_state(c, job, timeout=60)
    assert done.job.state == "SUCCEEDED", done
    assert [a.state for a in done.tasks[0].attempts] == ["SUCCEEDED"]
    assert logs(c, job) == [f"line {i}" for i in range(1, 9)]
    assert worker.proc.poll() is None


def test_workers_job_stop_kills_the_attempt_on_the_worker(pool, worker_factory):
    worker = worker_factory(pool, "a")
    c = client(pool)
    job = launch(c, "sleeper", ["sleep", "60"])
    pid = wait_until(worker.attempt_pids, message="the attempt to start")[0]
    result = pool.cli("job", "stop", job)
    assert result.returncode == 0, result.stderr
    wait_until(lambda: not pid_alive(pid), timeout=30, message="the attempt's process to be gone")
    assert wait_state(c, job).job.state == "KILLED"


def test_workers_gpu_job_gets_the_workers_devices(pool, worker_factory):
    worker_factory(pool, "gpu1", "--devices", "gpu:h100:2", "--attr", "zone=z1")
    c = client(pool)
    gpus = pb.Resources(cpu=1, memory_bytes=1 << 30, device=pb.Device(kind="gpu", variant="h100", count=2))
    job = launch(c, "cuda", ["sh", "-c", "echo devices=$CUDA_VISIBLE_DEVICES"], resources=gpus)
    done = wait_state(c, job)
    assert done.job.state == "SUCCEEDED", done
    assert logs(c, job) == ["devices=0,1"]
    listed = pool.cli("worker", "list", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    assert '"gpu1"' in listed.stdout and '"zone": "z1"' in listed.stdout


def test_workers_restarted_worker_kills_its_leftovers_and_the_task_is_retried(pool, worker_factory):
    first = worker_factory(pool, "a")
    c = client(pool)
    job = launch(c, "reborn", ["sh", "-c", FIRST_ATTEMPT_HANGS])
    old_pid = wait_until(first.attempt_pids, message="the attempt to start")[0]
    first.signal(signal.SIGKILL)
    first.proc.wait()
    assert pid_alive(old_pid)  # attempts outlive their daemon …
    worker_factory(pool, "a", wait=False)  # … until it comes back on the same work dir
    done = wait_state(c, job, timeout=60)
    assert done.job.state == "SUCCEEDED", done
    assert not pid_alive(old_pid)
    attempts = done.tasks[0].attempts
    assert [(a.state, a.worker_id) for a in attempts] == [("WORKER_FAILED", "a"), ("SUCCEEDED", "a")]
    assert "worker a" in attempts[0].error  # restarted, or silent past the grace period first
