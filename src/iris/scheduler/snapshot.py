"""The frozen inputs and outputs of one scheduling decision: the contract between the control tick
(which loads a snapshot from the database and commits the result) and the pure kernels.

Nothing here does I/O. The tick builds a `SchedulingSnapshot`, calls `iris.scheduler.schedule`,
and applies the returned `ScheduleResult` in one transaction. Workers are described by the
backends' own `WorkerSnapshot`, re-exported here for the kernels.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import product, repeat
from typing import NamedTuple

from iris.backends.protocol import WorkerSnapshot
from iris.core.bands import Band
from iris.core.constraints import Constraint
from iris.core.resources import Resources

__all__ = [
    "Assignment",
    "PendingTask",
    "Preemption",
    "Reservation",
    "RunningTask",
    "ScheduleResult",
    "SchedulingSnapshot",
    "Unschedulable",
    "WorkerSnapshot",
]


@dataclass(frozen=True, slots=True)
class RunningTask:
    """A task holding capacity on a worker (ASSIGNED, BUILDING or RUNNING)."""

    task_id: str
    job_id: str
    worker_id: str
    resources: Resources
    band: Band
    started_ms: int  # when it was placed; the youngest victims are chosen first
    user: str = ""
    ends_ms: int | None = None  # when its time limit ends (None: it has none); reservations plan with it


@dataclass(frozen=True, slots=True)
class PendingTask:
    """A task waiting for placement."""

    task_id: str
    job_id: str
    index: int
    resources: Resources
    constraints: tuple[Constraint, ...]
    band: Band
    user: str
    depth: int = 0  # 0 for root jobs; children of running jobs go first within a band
    root_submitted_ms: int = 0
    insertion: int = 0  # a monotonically increasing submit sequence: the final tie-break
    replicas: int = 1
    coschedule: bool = False  # place all replicas of the job at once or none
    scheduling_deadline_ms: int | None = None  # fail UNSCHEDULABLE after this
    parent_running: bool = False
    limit_ms: int | None = None  # its wall-clock time limit (None: none); only a limited task backfills


@dataclass(frozen=True, slots=True)
class SchedulingSnapshot:
    now_ms: int
    workers: tuple[WorkerSnapshot, ...]
    running: tuple[RunningTask, ...]
    pending: tuple[PendingTask, ...]
    # user -> budget (a resource value summed over active non-batch tasks); absent = `default_budget`
    user_budgets: Mapping[str, float] = field(default_factory=dict)
    default_budget: float | None = None  # for users without their own; None = unlimited
    # user -> the resource value of their work placed on federation peers (charged here too)
    peer_spend: Mapping[str, int] = field(default_factory=dict)
    # job -> when it first held the reservation it holds now (the last result's, carried by the shell)
    reserved_since: Mapping[str, int] = field(default_factory=dict)
    # An `index.ClusterIndex` built from exactly these workers and running tasks (typically
    # advanced from the last tick's), or None: the scheduler then builds its own. It saves work
    # and never changes a decision.
    index: object | None = field(default=None, compare=False, repr=False)


class Assignment(NamedTuple):
    """Start task `task_id` on worker `worker_id` of backend `backend_id`.

    A named tuple rather than a frozen dataclass: a tick decides tens of thousands of these, and
    `assignments` builds them in C, at about a third of what a frozen dataclass's `__init__` costs
    (measured: 2.0 against 6.0 ms per 10,000).
    """

    task_id: str
    worker_id: str
    backend_id: str


_tuple_new = tuple.__new__
_ASSIGNMENT = repeat(Assignment)  # repeats forever and holds no state: shared by every call


def assignments(task_ids: Iterable[str], worker_id: str, backend_id: str) -> Iterator[Assignment]:
    """One `Assignment` per task of `task_ids`, all to the same worker."""
    # `tuple.__new__(Assignment, fields)` per task, called by `map` itself (no `partial` between);
    # the fields come from `product`, as a `repeat` takes keyword parsing to make.
    return map(_tuple_new, _ASSIGNMENT, product(task_ids, (worker_id,), (backend_id,)))


@dataclass(frozen=True, slots=True)
class Preemption:
    """Evict `task_id` from `worker_id` so that `by_task_id` can be placed there this tick."""

    task_id: str
    worker_id: str
    by_task_id: str


@dataclass(frozen=True, slots=True)
class Unschedulable:
    """A task that can never be placed (or whose scheduling deadline passed), with why."""

    task_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class Reservation:
    """The workers a waiting job will start on once they free up, and when that is expected."""

    job_id: str
    band: Band
    worker_ids: tuple[str, ...]
    backend_id: str
    start_ms: int | None  # expected start; None when it rests on a task without a time limit
    since_ms: int  # when the job first held it

    def where(self) -> str:
        return ", ".join(self.worker_ids)


@dataclass(frozen=True, slots=True)
class ScheduleResult:
    assignments: tuple[Assignment, ...] = ()
    preemptions: tuple[Preemption, ...] = ()
    unschedulable: tuple[Unschedulable, ...] = ()
    # job_id -> one human sentence on why its still-pending tasks wait
    pending_reasons: Mapping[str, str] = field(default_factory=dict)
    reservations: tuple[Reservation, ...] = ()
