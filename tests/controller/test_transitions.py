"""The pure transitions, without a database: retry budgets with backoff, roll-up, cascade, stop."""

from __future__ import annotations

from iris.backends.protocol import AttemptExit
from iris.controller.state import transitions as tr
from iris.core.states import JobState, RetryBudget, TaskState


def _rows(state=TaskState.RUNNING, task_attempt=2, failures=0):
    attempt = tr.AttemptRow("/a/j/0:2", "/a/j/0", "/a/j", 2, state)
    task = tr.TaskRow("/a/j/0", "/a/j", 0, TaskState.RUNNING, task_attempt, failures, 0)
    return attempt, task


def test_transitions_failed_attempt_within_budget_schedules_retry_with_growing_backoff():
    attempt, task = _rows(failures=2)
    changes = tr.end_attempt(tr.exited(AttemptExit("/a/j/0:2", 1)), attempt, task, RetryBudget(5, 0), 10)
    assert changes == (
        tr.AttemptEnded("/a/j/0:2", TaskState.FAILED, 1, "exit code 1", 10),
        tr.TaskRetryScheduled("/a/j/0", 2, 3, 0, 1, "retrying after failed: exit code 1", 4.0),
    )


def test_transitions_exit_of_an_ended_attempt_only_records_its_code():
    attempt, task = _rows(state=TaskState.KILLED)
    assert tr.end_attempt(tr.exited(AttemptExit("/a/j/0:2", -15)), attempt, task, RetryBudget(), 10) == (
        tr.ExitCodeRecorded("/a/j/0:2", -15),
    )
    assert tr.end_attempt(tr.WorkerLost("/a/j/0:2", "gone"), attempt, task, RetryBudget(), 10) == ()


def test_transitions_stale_attempt_ends_without_touching_its_task():
    attempt, task = _rows(task_attempt=3)
    changes = tr.end_attempt(tr.Preempted("/a/j/0:2", "/b/p/0"), attempt, task, RetryBudget(), 10)
    assert changes == (tr.AttemptEnded("/a/j/0:2", TaskState.PREEMPTED, None, "preempted by /b/p/0", 10),)


def test_transitions_roll_up_of_a_failed_job_blames_the_culprit_and_kills_the_rest():
    job = tr.JobRow("/a/j", JobState.RUNNING, 5, live_descendants=("/a/j/c",))
    tasks = (
        tr.TaskRow("/a/j/1", "/a/j", 1, TaskState.RUNNING),
        tr.TaskRow("/a/j/0", "/a/j", 0, TaskState.FAILED, error="exit code 2"),
    )
    assert tr.roll_up(job, tasks, 9) == (
        tr.ErrorAttributed("/a/j", 0, "task 0 failed: exit code 2"),
        tr.JobRolledUp("/a/j", JobState.RUNNING, JobState.FAILED, 5, 9),
        tr.TasksStopped("/a/j", TaskState.KILLED, "job failed", 9),
        tr.ChildrenKilled("/a/j", ("/a/j/c",), "parent job /a/j ended (FAILED)", 9),
    )


def test_transitions_roll_up_leaves_finished_and_mirrored_jobs_alone():
    tasks = (tr.TaskRow("/a/j/0", "/a/j", 0, TaskState.RUNNING),)
    assert tr.roll_up(tr.JobRow("/a/j", JobState.KILLED), tasks, 9) == ()
    assert tr.roll_up(tr.JobRow("/a/j", JobState.PENDING, mirrored=True), tasks, 9) == ()
    assert tr.roll_up(tr.JobRow("/a/j", JobState.PENDING), (), 9) == ()


def test_transitions_stop_of_a_finished_job_stops_only_its_live_descendants():
    job = tr.JobRow("/a/j", JobState.SUCCEEDED, live_descendants=("/a/j/c",))
    assert tr.stop_job(tr.StopRequested("/a/j", "bye"), job, 3) == (
        tr.CancelRecorded("/a/j/c"),
        tr.TasksStopped("/a/j/c", TaskState.KILLED, "bye", 3),
    )
