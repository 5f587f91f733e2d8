"""State names as they appear in SQL text, built from the enums and never typed by hand.

Statements compare stored states with literals (`state = 'PENDING'`) rather than bound parameters
so that each statement's text, and its cached clause, stays fixed and SQLite can use the state
indexes. Writing those literals from the enums keeps a renamed or added state from silently
missing a query; `tests/controller/test_sql_literals.py` fails on any state word typed into SQL
under `src/`.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

from iris.core.states import ACTIVE_TASK_STATES, TERMINAL_JOB_STATES, TERMINAL_TASK_STATES, JobState, TaskState
from iris.federation.model import Direction, HandoffState


def quoted(state: enum.Enum) -> str:
    """A state as an SQL literal: 'RUNNING'."""
    return f"'{state.value}'"


def in_list(states: Iterable[enum.Enum]) -> str:
    """A set of states as an SQL `IN` list ('A','B'), in a stable order so the statement text is
    the same on every call."""
    return "(" + ",".join(sorted(quoted(s) for s in states)) + ")"


# Job and task states (a job's PENDING, RUNNING, … are spelled as its tasks' are).
PENDING = quoted(TaskState.PENDING)
ASSIGNED = quoted(TaskState.ASSIGNED)
RUNNING = quoted(TaskState.RUNNING)
FAILED = quoted(TaskState.FAILED)
KILLED = quoted(TaskState.KILLED)
UNSCHEDULABLE = quoted(TaskState.UNSCHEDULABLE)
JOB_PENDING = quoted(JobState.PENDING)
LIVE_TASKS = in_list(ACTIVE_TASK_STATES)
TERMINAL_TASKS = in_list(TERMINAL_TASK_STATES)
TERMINAL_JOBS = in_list(TERMINAL_JOB_STATES)

# Federation handles.
SENT = quoted(Direction.SENT)
RECEIVED = quoted(Direction.RECEIVED)
QUEUED_HANDOFF = quoted(HandoffState.QUEUED_HANDOFF)
PENDING_HANDOFF = quoted(HandoffState.PENDING_HANDOFF)
HANDED_OFF = quoted(HandoffState.HANDED_OFF)
HANDOFF_REJECTED = quoted(HandoffState.HANDOFF_REJECTED)
