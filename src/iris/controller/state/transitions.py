"""What becomes of attempts, tasks and jobs when something happens to them: a pure function from
typed rows and one event to typed changes.

An attempt exits, its worker is lost, the scheduler preempts it, a user stops a job, or the
scheduler places a task: each is an event here, and the answer is a tuple of changes (an attempt
ended, a retry scheduled with its backoff, a task ended, a job's state rolled up with the culprit's
error, the tasks and descendant jobs an ended job takes with it). Nothing here reads a database, a
clock or a socket; `controller/state/applier.py` loads the rows, calls these functions and commits the
changes with guarded updates, refusing any that the rows no longer allow.

Keeping the policy here rather than inside SQL helpers means retry budgets, backoff, roll-up and
cascade kills can be read in one place, tested without a database, and replayed step by step from
a recorded file (tests/controller/golden/).
"""

from __future__ import annotations

from dataclasses import dataclass

from iris.backends.protocol import AttemptExit
from iris.core.states import (
    JobState,
    RetryBudget,
    TaskState,
    decide_retry,
    derive_job_state,
    retry_backoff_s,
)

# -- rows ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JobRow:
    job_id: str
    state: JobState
    started_ms: int | None = None
    error: str = ""
    cancel_requested: bool = False
    mirrored: bool = False  # handed to a peer: its state is mirrored from there, never derived here
    live_descendants: tuple[str, ...] = ()  # every unfinished job nested under it, parents first


@dataclass(frozen=True, slots=True)
class TaskRow:
    task_id: str
    job_id: str
    index: int
    state: TaskState
    attempt: int = -1  # the task's current attempt number; -1 before its first placement
    failure_count: int = 0
    preemption_count: int = 0
    error: str = ""


@dataclass(frozen=True, slots=True)
class AttemptRow:
    attempt_id: str
    task_id: str
    job_id: str
    attempt: int
    state: TaskState


# -- events --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AttemptExited:
    """An attempt ended on its backend (or was ended by the controller: a timeout, a failed start)."""

    attempt_id: str
    outcome: TaskState
    error: str = ""
    exit_code: int | None = None


@dataclass(frozen=True, slots=True)
class WorkerLost:
    """The attempt's worker or backend no longer runs it."""

    attempt_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class Preempted:
    """The scheduler evicts the attempt for a task of a higher band."""

    attempt_id: str
    by_task_id: str


@dataclass(frozen=True, slots=True)
class StopRequested:
    """A user (or a peer) stops a job and everything nested under it."""

    job_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class Placement:
    """The scheduler places a pending task on a worker."""

    task_id: str
    backend_id: str
    worker_id: str


AttemptEvent = AttemptExited | WorkerLost | Preempted


def exited(exit: AttemptExit) -> AttemptExited:
    """A backend's report of an ended attempt as an event: the backend's own outcome when it knows
    better than the exit code (a time limit), else lost without a code, success on 0, failure."""
    if exit.outcome is not None:
        return AttemptExited(exit.attempt_id, exit.outcome, exit.error, exit.exit_code)
    if exit.exit_code is None:
        return AttemptExited(exit.attempt_id, TaskState.WORKER_FAILED, exit.error or "the attempt was lost")
    if exit.exit_code == 0:
        return AttemptExited(exit.attempt_id, TaskState.SUCCEEDED, "", 0)
    return AttemptExited(exit.attempt_id, TaskState.FAILED, exit.error or f"exit code {exit.exit_code}", exit.exit_code)


def attempt_outcome(event: AttemptEvent) -> tuple[TaskState, str, int | None]:
    """The state an attempt-ending event gives the attempt, its error, and its exit code."""
    if isinstance(event, WorkerLost):
        return TaskState.WORKER_FAILED, event.reason, None
    if isinstance(event, Preempted):
        return TaskState.PREEMPTED, f"preempted by {event.by_task_id}", None
    return event.outcome, event.error, event.exit_code


# -- changes -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AttemptEnded:
    attempt_id: str
    state: TaskState
    exit_code: int | None
    error: str
    finished_ms: int


@dataclass(frozen=True, slots=True)
class ExitCodeRecorded:
    """An attempt already ended (stopped by a cancel, a timeout, a preemption) gains its exit code."""

    attempt_id: str
    exit_code: int


@dataclass(frozen=True, slots=True)
class TaskRetryScheduled:
    """The task goes back to PENDING; the loader keeps it out of placement for `backoff_s`."""

    task_id: str
    attempt: int  # the attempt that ended: the update applies only while it is still the task's
    failure_count: int
    preemption_count: int
    exit_code: int | None
    error: str
    backoff_s: float


@dataclass(frozen=True, slots=True)
class TaskEnded:
    """The task rests in `state` for good: its retry budget for that outcome is spent."""

    task_id: str
    attempt: int
    state: TaskState
    failure_count: int
    preemption_count: int
    exit_code: int | None
    error: str
    finished_ms: int


@dataclass(frozen=True, slots=True)
class JobRolledUp:
    """The job's stored state becomes what its tasks derive; applies only from `from_state`."""

    job_id: str
    from_state: JobState
    state: JobState
    started_ms: int | None
    finished_ms: int | None


@dataclass(frozen=True, slots=True)
class ErrorAttributed:
    """An unfinished job takes an error: its culprit task's when it ends without one, or the
    controller's own reason when it fails the job outright (`task_index` None)."""

    job_id: str
    task_index: int | None
    error: str


@dataclass(frozen=True, slots=True)
class TasksStopped:
    """Every unfinished task and live attempt of the job ends in `state` (KILLED, or FAILED for a
    job the controller cannot run) with `reason`; nothing is retried."""

    job_id: str
    state: TaskState
    reason: str
    finished_ms: int


@dataclass(frozen=True, slots=True)
class TaskUnschedulable:
    """The scheduler found no worker that could ever host the pending task."""

    task_id: str
    reason: str
    finished_ms: int


@dataclass(frozen=True, slots=True)
class ChildrenKilled:
    """The unfinished jobs nested under an ended (or stopped) job are killed and rolled up in turn."""

    parent_job_id: str
    children: tuple[str, ...]
    reason: str
    finished_ms: int


@dataclass(frozen=True, slots=True)
class CancelRecorded:
    job_id: str


@dataclass(frozen=True, slots=True)
class AttemptPlaced:
    """A pending task gets a new attempt on a worker; refused when the task is no longer pending
    or its job was cancelled since the snapshot the scheduler saw."""

    task_id: str
    backend_id: str
    worker_id: str
    created_ms: int


Change = (
    AttemptEnded
    | ExitCodeRecorded
    | TaskRetryScheduled
    | TaskEnded
    | JobRolledUp
    | ErrorAttributed
    | TasksStopped
    | TaskUnschedulable
    | ChildrenKilled
    | CancelRecorded
    | AttemptPlaced
)


# -- decisions -----------------------------------------------------------------------------------


def end_attempt(
    event: AttemptEvent, attempt: AttemptRow, task: TaskRow, budget: RetryBudget, now_ms: int
) -> tuple[Change, ...]:
    """Ends a live attempt and applies its task's retry budget.

    An attempt that already ended only gains its exit code. An attempt that is no longer its
    task's current one ends without touching the task (the task moved on to a newer attempt).
    """
    outcome, error, exit_code = attempt_outcome(event)
    if not attempt.state.is_active:
        return (ExitCodeRecorded(attempt.attempt_id, exit_code),) if exit_code is not None else ()
    ended = AttemptEnded(attempt.attempt_id, outcome, exit_code, error, now_ms)
    if task.attempt != attempt.attempt:
        return (ended,)
    decision = decide_retry(outcome, budget, task.failure_count, task.preemption_count)
    if decision.retried:
        why = f"retrying after {outcome.value.lower().replace('_', ' ')}" + (f": {error}" if error else "")
        return (
            ended,
            TaskRetryScheduled(
                task.task_id,
                attempt.attempt,
                decision.failure_count,
                decision.preemption_count,
                exit_code,
                why,
                retry_backoff_s(decision.failure_count),
            ),
        )
    return (
        ended,
        TaskEnded(
            task.task_id,
            attempt.attempt,
            decision.task_state,
            decision.failure_count,
            decision.preemption_count,
            exit_code,
            error,
            now_ms,
        ),
    )


def culprit_error(tasks: tuple[TaskRow, ...]) -> tuple[int, str] | None:
    """The task an ended job blames, and the error it reports: the first task that ended badly on
    its own, else the first task that was killed."""
    culprit = next((t for t in tasks if t.state is not TaskState.KILLED and _ended_badly(t.state)), None)
    culprit = culprit or next((t for t in tasks if t.state is TaskState.KILLED), None)
    if culprit is None:
        return None
    words = culprit.state.value.lower().replace("_", " ")
    return culprit.index, f"task {culprit.index} {words}" + (f": {culprit.error}" if culprit.error else "")


def _ended_badly(state: TaskState) -> bool:
    return state.is_terminal and state is not TaskState.SUCCEEDED


def roll_up(job: JobRow, tasks: tuple[TaskRow, ...], now_ms: int) -> tuple[Change, ...]:
    """The job's state derived from its tasks; a job that ends takes its unfinished tasks and every
    descendant job with it. A finished job, a job mirrored from a peer, and a job with no tasks yet
    (queued for a peer) never change here."""
    if job.state.is_terminal or job.mirrored or not tasks:
        return ()
    tasks = tuple(sorted(tasks, key=lambda t: t.index))
    state = derive_job_state(t.state for t in tasks)
    started = job.started_ms
    if started is None and state in (JobState.RUNNING, JobState.SUCCEEDED, JobState.FAILED):
        started = now_ms
    changes: list[Change] = []
    if state.is_terminal and state is not JobState.SUCCEEDED and not job.error:
        blamed = culprit_error(tasks)
        if blamed is not None:
            changes.append(ErrorAttributed(job.job_id, *blamed))
    changes.append(JobRolledUp(job.job_id, job.state, state, started, now_ms if state.is_terminal else None))
    if state.is_terminal:
        if any(not t.state.is_terminal for t in tasks):
            changes.append(TasksStopped(job.job_id, TaskState.KILLED, f"job {state.value.lower()}", now_ms))
        if job.live_descendants:
            reason = f"parent job {job.job_id} ended ({state.value})"
            changes.append(ChildrenKilled(job.job_id, job.live_descendants, reason, now_ms))
    return tuple(changes)


def stop_job(event: StopRequested, job: JobRow, now_ms: int) -> tuple[Change, ...]:
    """Stops an unfinished job and every unfinished job nested under it: each is marked cancelled
    and its unfinished tasks killed; the roll-up that follows ends them."""
    live = tuple(j for j in (job.job_id, *job.live_descendants) if j != job.job_id or not job.state.is_terminal)
    changes: list[Change] = [CancelRecorded(j) for j in live]
    changes += [TasksStopped(j, TaskState.KILLED, event.reason, now_ms) for j in live]
    return tuple(changes)


def fail_job(job_id: str, error: str, now_ms: int) -> tuple[Change, ...]:
    """Fails a job the controller itself cannot handle (a poison row) outright, with no retry, so
    that it stops taking part in every pass of the tick."""
    return (TasksStopped(job_id, TaskState.FAILED, error, now_ms), ErrorAttributed(job_id, None, error))


def place(event: Placement, now_ms: int) -> AttemptPlaced:
    """A placement the scheduler chose, as a change for the applier's guarded update."""
    return AttemptPlaced(event.task_id, event.backend_id, event.worker_id, now_ms)
