"""Draining a queue through few slots: a freed slot is refilled by the exit's own wake-up, every
job runs once, and no slot holds two attempts at a time."""

from __future__ import annotations

from iris.controller.state.tick import BURST_REST_FACTOR, rest_before_pass
from iris.rpc import controller_pb2 as pb
from tests.conftest import wait_until
from tests.controller.helpers import client, launch, pid_alive, wait_state

ONE_SLOT = [{"id": "cpu", "kind": "local", "workers": 1, "capacity": {"cpu": 1, "memory": "1G", "disk": "1G"}}]


def test_rest_before_pass_only_while_submits_wait_behind_a_backlog():
    # (API calls in flight, submits since the last pass began, backlog, last cost, since it ended, cap)
    assert rest_before_pass(0, 5, 50, 0.5, 0.0, 9.0) == 0.0  # an exit's wake-up refills the slot at once
    assert rest_before_pass(1, 1, 0, 0.5, 0.0, 9.0) == 0.0  # a submit to an idle cluster starts at once
    assert rest_before_pass(3, 0, 50, 0.5, 0.0, 9.0) == 0.0  # status calls and reports alone: no rest
    assert rest_before_pass(2, 7, 50, 0.5, 0.1, 9.0) == BURST_REST_FACTOR * 0.5 - 0.1  # a burst: rest
    assert rest_before_pass(2, 7, 50, 0.5, 0.1, 0.3) == 0.3 - 0.1  # never past the timed interval
    assert rest_before_pass(1, 7, 50, 0.5, 9.0, 9.0) == 0.0  # already rested long enough


def test_a_burst_behind_a_backlog_leaves_the_tick_at_most_a_sixth_of_the_time():
    cost = 0.04  # a pass over a large backlog
    rest = rest_before_pass(4, 100, 4000, cost, 0.0, 9.0)
    assert cost / (cost + rest) <= 1 / 6


def test_queue_drains_through_one_slot_on_exit_wakeups_alone(controller_factory):
    # An hour between timed passes: only submits and exits wake the tick.
    ctl = controller_factory("drain", backends=ONE_SLOT, controller={"tick_interval": "1h"})
    c = client(ctl)
    jobs = [launch(c, f"d{i}", ["true"], resources=pb.Resources(cpu=1)) for i in range(12)]

    def finished() -> list | None:
        rows = c.execute_raw_query(
            pb.ExecuteRawQueryRequest(
                sql="SELECT job_id, state, started_ms, finished_ms FROM tasks ORDER BY started_ms", limit=100
            )
        ).rows
        values = [[v.string_value or v.number_value for v in r.values] for r in rows]
        return values if all(v[1] == "SUCCEEDED" for v in values) and len(values) == len(jobs) else None

    tasks = wait_until(finished, timeout=60, message="every job to finish with the timer out of play")
    assert sorted(t[0] for t in tasks) == sorted(jobs)
    for before, after in zip(tasks, tasks[1:]):
        assert after[2] >= before[3], f"{after[0]} started before {before[0]} freed the only slot"
    attempts = c.execute_raw_query(pb.ExecuteRawQueryRequest(sql="SELECT COUNT(*) FROM attempts")).rows
    assert attempts[0].values[0].number_value == len(jobs)  # each job ran exactly once


def test_crash_mid_drain_runs_every_acknowledged_job_and_reruns_only_as_a_recorded_retry(controller_factory, tmp_path):
    ctl = controller_factory("crashdrain", backends=ONE_SLOT, controller={"tick_interval": "1h"})
    c = client(ctl)
    runs = tmp_path / "runs"
    command = ["sh", "-c", f'echo "$IRIS_JOB_ID" >> {runs}']
    jobs = [launch(c, f"k{i}", command, resources=pb.Resources(cpu=1)) for i in range(10)]

    def succeeded() -> int:
        rows = c.execute_raw_query(pb.ExecuteRawQueryRequest(sql="SELECT COUNT(*) FROM jobs WHERE state = 'SUCCEEDED'"))
        return int(rows.rows[0].values[0].number_value)

    wait_until(lambda: succeeded() >= 3, timeout=60, message="a few jobs through the slot")
    ctl.kill()  # mid-drain: the rest are queued, one may be placed or running
    ctl.start()
    c = client(ctl)
    wait_until(lambda: succeeded() == len(jobs), timeout=60, message="every job to finish after the restart")
    ran = runs.read_text().split()
    assert set(ran) == set(jobs), "an acknowledged job never ran"
    # A crash between a process's start and its first record may make the restart retry it; a job
    # runs twice only as a second attempt the database shows, never silently.
    rows = c.execute_raw_query(
        pb.ExecuteRawQueryRequest(sql="SELECT job_id, COUNT(*) FROM attempts GROUP BY job_id", limit=100)
    ).rows
    attempts = {r.values[0].string_value: int(r.values[1].number_value) for r in rows}
    for job in jobs:
        assert ran.count(job) <= attempts[job], f"{job} ran {ran.count(job)} times in {attempts[job]} attempt(s)"


def test_a_started_attempt_is_stored_running_with_its_pid_before_it_ends_with_the_timer_out_of_play(
    controller_factory, tmp_path
):
    # The local backend learns a pid after its start returned; with no timed pass in play, only the
    # backend's own note of it can bring the tick back to store it while the process still runs.
    ctl = controller_factory("running", backends=ONE_SLOT, controller={"tick_interval": "1h"})
    c = client(ctl)
    go = tmp_path / "go"
    job = launch(c, "held", ["sh", "-c", f"while [ ! -e {go} ]; do sleep 0.02; done"], resources=pb.Resources(cpu=1))
    running = wait_state(c, job, states={"RUNNING"})
    attempt = running.tasks[0].attempts[0]
    assert attempt.state == "RUNNING" and attempt.pid > 0
    assert pid_alive(attempt.pid), "the stored pid is the attempt's running wrapper"
    go.touch()
    done = wait_state(c, job)
    assert done.job.state == "SUCCEEDED"
    assert done.tasks[0].attempts[0].pid == attempt.pid
