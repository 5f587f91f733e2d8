"""The pure scheduler: decides, from a frozen snapshot, where pending tasks go, what is preempted
for them, what can never run, and why the rest waits.

The control tick calls `schedule` (and `compute_availability` for what backends advertise) every
tick; `explain` answers `iris job explain`, and `plan` a dry run of a submit (`iris job run
--dry-run`). None of them does I/O or reads a clock.
"""

from iris.scheduler.availability import compute_availability
from iris.scheduler.explain import BackendExplanation, Explanation, GroupExplanation, explain
from iris.scheduler.gating import resource_value
from iris.scheduler.joiners import wait_for_joiners
from iris.scheduler.plan import JobPlan, PlannedPreemption, plan
from iris.scheduler.snapshot import (
    Assignment,
    PendingTask,
    Preemption,
    RunningTask,
    ScheduleResult,
    SchedulingSnapshot,
    Unschedulable,
    WorkerSnapshot,
)
from iris.scheduler.tick import schedule

__all__ = [
    "Assignment",
    "BackendExplanation",
    "Explanation",
    "GroupExplanation",
    "JobPlan",
    "PendingTask",
    "PlannedPreemption",
    "Preemption",
    "RunningTask",
    "ScheduleResult",
    "SchedulingSnapshot",
    "Unschedulable",
    "WorkerSnapshot",
    "compute_availability",
    "explain",
    "plan",
    "resource_value",
    "schedule",
    "wait_for_joiners",
]
