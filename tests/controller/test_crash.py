"""A crash at any point loses no job the API acknowledged; live attempts are re-adopted."""

from __future__ import annotations

import threading

from connectrpc.errors import ConnectError

from iris.rpc import controller_pb2 as pb
from tests.conftest import wait_until
from tests.controller.helpers import client, launch, logs, pid_alive, status, wait_state


def test_sigkill_during_a_burst_of_submissions_loses_no_acknowledged_job(controller):
    acknowledged: list[str] = []
    stop = threading.Event()

    def submit_loop(worker: int) -> None:
        c = client(controller)
        for i in range(2000):  # bounded: the loop ends by itself
            if stop.is_set():
                return
            try:
                acknowledged.append(
                    c.launch_job(pb.LaunchJobRequest(name=f"burst-{worker}-{i}", user="alice", command=["true"])).job_id
                )
            except (ConnectError, OSError):
                return

    threads = [threading.Thread(target=submit_loop, args=(w,)) for w in range(3)]
    for t in threads:
        t.start()
    wait_until(lambda: len(acknowledged) >= 60, message="some submissions acknowledged")
    controller.kill()
    stop.set()
    for t in threads:
        t.join(timeout=30)
    controller.start()
    c = client(controller)
    rows = c.execute_raw_query(pb.ExecuteRawQueryRequest(sql="SELECT job_id FROM jobs", limit=10000)).rows
    stored = [r.values[0].string_value for r in rows]
    assert len(stored) == len(set(stored)), "a job id stored twice"
    missing = set(acknowledged) - set(stored)
    assert not missing, f"{len(missing)} acknowledged jobs lost"
    tasks = c.execute_raw_query(
        pb.ExecuteRawQueryRequest(sql="SELECT COUNT(*), COUNT(DISTINCT job_id) FROM tasks")
    ).rows[0]
    assert tasks.values[0].number_value == tasks.values[1].number_value == len(stored)


def test_running_attempt_survives_a_controller_crash_and_is_readopted(controller):
    c = client(controller)
    job = launch(c, "survivor", ["sh", "-c", "for i in 1 2 3 4 5 6; do echo line $i; sleep 0.4; done"])
    wait_until(lambda: len(logs(c, job)) >= 1, message="first line")
    pid = status(c, job).tasks[0].attempts[0].pid
    controller.kill()
    assert pid_alive(pid), "the attempt must outlive its controller"
    controller.start()
    c = client(controller)
    final = wait_state(c, job, timeout=20)
    assert final.job.state == "SUCCEEDED"
    assert len(final.tasks[0].attempts) == 1
    assert logs(c, job) == [f"line {i}" for i in range(1, 7)]


def test_attempt_that_died_while_the_controller_was_down_is_retried(controller):
    c = client(controller)
    job = launch(c, "orphan", ["sh", "-c", "echo start $IRIS_ATTEMPT; sleep 300"])
    wait_until(
        lambda: status(c, job).tasks and status(c, job).tasks[0].attempts and status(c, job).tasks[0].attempts[0].pid,
        message="pid",
    )
    pid = status(c, job).tasks[0].attempts[0].pid
    controller.kill()
    import os
    import signal

    os.killpg(pid, signal.SIGKILL)
    wait_until(lambda: not pid_alive(pid), message="attempt gone")
    controller.start()
    c = client(controller)
    wait_until(lambda: len(status(c, job).tasks[0].attempts) == 2, timeout=20, message="a second attempt")
    first = status(c, job).tasks[0].attempts[0]
    assert first.state in ("FAILED", "WORKER_FAILED")
    c.terminate_job(pb.TerminateJobRequest(job_id=job))


def test_graceful_stop_retries_running_work_on_the_next_start(controller):
    c = client(controller)
    job = launch(c, "interrupted", ["sh", "-c", "echo run $IRIS_ATTEMPT; sleep 300"])
    wait_until(lambda: logs(c, job), message="first run")
    controller.stop()
    controller.start()
    c = client(controller)
    wait_until(lambda: "run 1" in logs(c, job), timeout=20, message="second run")
    attempts = status(c, job).tasks[0].attempts
    assert attempts[0].state == "WORKER_FAILED" and "controller stopped" in attempts[0].error
    c.terminate_job(pb.TerminateJobRequest(job_id=job))


def test_attempt_that_ends_while_the_controller_is_down_is_recorded_with_its_code(controller, tmp_path):
    go = tmp_path / "go"
    c = client(controller)
    job = launch(c, "ends-alone", ["sh", "-c", f"echo up; while [ ! -e {go} ]; do sleep 0.05; done; echo done; exit 3"])
    wait_until(lambda: logs(c, job) == ["up"], message="running")
    pid = status(c, job).tasks[0].attempts[0].pid
    controller.kill()
    go.touch()
    wait_until(lambda: not pid_alive(pid), message="attempt ended")
    controller.start()
    c = client(controller)
    final = wait_state(c, job, timeout=30)
    attempts = final.tasks[0].attempts
    assert final.job.state == "FAILED"  # its own exit, not the controller's absence: not retried
    assert len(attempts) == 1 and attempts[0].state == "FAILED" and attempts[0].exit_code == 3
    assert logs(c, job) == ["up", "done"]
