"""Task and job states, and the pure rules that move between them.

A job's state is never stored independently of its tasks' states: it is derived by
`derive_job_state`, so the two can never disagree. Retry decisions live here too, so the tick,
the federation sync and the tests all apply the same budget rules.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass


class TaskState(str, enum.Enum):
    PENDING = "PENDING"
    ASSIGNED = "ASSIGNED"
    BUILDING = "BUILDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    KILLED = "KILLED"
    WORKER_FAILED = "WORKER_FAILED"
    PREEMPTED = "PREEMPTED"
    UNSCHEDULABLE = "UNSCHEDULABLE"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_TASK_STATES

    @property
    def is_active(self) -> bool:
        return self in ACTIVE_TASK_STATES


class JobState(str, enum.Enum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    KILLED = "KILLED"
    UNSCHEDULABLE = "UNSCHEDULABLE"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_JOB_STATES


# Attempt outcomes that end an attempt but may be retried. A task is terminal in these states only
# once its budget is spent.
ACTIVE_TASK_STATES = frozenset({TaskState.ASSIGNED, TaskState.BUILDING, TaskState.RUNNING})
TERMINAL_TASK_STATES = frozenset(
    {
        TaskState.SUCCEEDED,
        TaskState.FAILED,
        TaskState.KILLED,
        TaskState.WORKER_FAILED,
        TaskState.PREEMPTED,
        TaskState.UNSCHEDULABLE,
    }
)
TERMINAL_JOB_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.KILLED, JobState.UNSCHEDULABLE})
PREEMPTION_LIKE = frozenset({TaskState.PREEMPTED, TaskState.WORKER_FAILED})


def derive_job_state(task_states: Iterable[TaskState]) -> JobState:
    """Derives a job's state from its tasks' states (DESIGN §3), in the documented precedence."""
    states = list(task_states)
    if not states:
        return JobState.PENDING
    if all(s is TaskState.SUCCEEDED for s in states):
        return JobState.SUCCEEDED
    if any(s in (TaskState.FAILED, TaskState.WORKER_FAILED, TaskState.PREEMPTED) for s in states):
        # A task only rests in these states once its retries are spent: the job has failed.
        return JobState.FAILED
    if any(s is TaskState.UNSCHEDULABLE for s in states):
        return JobState.UNSCHEDULABLE
    if any(s is TaskState.KILLED for s in states):
        return JobState.KILLED
    if any(s in (TaskState.BUILDING, TaskState.RUNNING) for s in states):
        return JobState.RUNNING
    # Placed but not yet started (waiting in a backend's own queue, such as Slurm's) is still
    # pending: the job shows why it waits rather than claiming to run.
    return JobState.PENDING


@dataclass(frozen=True, slots=True)
class RetryBudget:
    max_retries_failure: int = 0
    max_retries_preemption: int = 100


@dataclass(frozen=True, slots=True)
class RetryDecision:
    """What becomes of a task whose attempt ended in `outcome`."""

    task_state: TaskState  # PENDING when retried, else the outcome itself (terminal)
    failure_count: int
    preemption_count: int

    @property
    def retried(self) -> bool:
        return self.task_state is TaskState.PENDING


def decide_retry(outcome: TaskState, budget: RetryBudget, failure_count: int, preemption_count: int) -> RetryDecision:
    """Applies the failure and preemption budgets to an attempt that ended in `outcome`.

    FAILED counts against `max_retries_failure`; PREEMPTED and WORKER_FAILED count against
    `max_retries_preemption`. Other outcomes are final.
    """
    if outcome is TaskState.FAILED:
        failure_count += 1
        retry = failure_count <= budget.max_retries_failure
    elif outcome in PREEMPTION_LIKE:
        preemption_count += 1
        retry = preemption_count <= budget.max_retries_preemption
    else:
        retry = False
    return RetryDecision(TaskState.PENDING if retry else outcome, failure_count, preemption_count)


# A task whose command keeps failing is retried ever more slowly: 1s, 2s, 4s, … up to a minute
# between attempts, so a large retry budget cannot turn into a crash loop of many attempts a second.
RETRY_BACKOFF_BASE_S = 1.0
RETRY_BACKOFF_MAX_S = 60.0


def retry_backoff_s(failure_count: int) -> float:
    """How long a task waits after its last attempt ended before it is placed again, given how
    many of its attempts have FAILED (preemptions and lost workers are retried at once)."""
    if failure_count <= 0:
        return 0.0
    return min(RETRY_BACKOFF_MAX_S, RETRY_BACKOFF_BASE_S * 2 ** min(failure_count - 1, 16))
