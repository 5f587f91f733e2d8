"""Decides the order in which pending work is considered: band, then the user's dominant share
(fair share between users), then depth (children of running jobs first), then the root job's
submit time, then the submit sequence.

The order is a total order over job-level fields ending in the job id, so the same snapshot always
yields the same decisions. Tasks of a job share those fields, so the pass sorts jobs (far fewer
than tasks) and takes each job's tasks by replica index.

Why dominant share, and why in whole tenths of a percent: a user's share is the largest fraction
of any one resource of any one backend that their running tasks hold, so a user holding every GPU
but no CPU ranks as busy as one holding every CPU, and a job of a user who holds nothing goes
before the hundred-thousandth replica of someone else's. The share is read at the start of the
tick, from placed work only, so the order never depends on the pass itself. Rounded down to tenths
of a percent, it stays the same integer while tasks start and end at the margin, so a queue that
only waits keeps its order (and the kernel its carried requests) tick after tick; users within a
tenth of a percent of each other go by submit order.
"""

from __future__ import annotations

from operator import attrgetter
from typing import NamedTuple

from iris.core.bands import Band
from iris.scheduler.fit import Shape, Vector
from iris.scheduler.snapshot import PendingTask

SHARE_SCALE = 1000  # shares are counted in tenths of a percent


def dominant_share(held: Vector, total: Vector) -> int:
    """The largest share of any resource in `total` that `held` takes, in tenths of a percent
    (rounded down): what a user's running tasks hold of one backend."""
    return max((h * SHARE_SCALE // t for h, t in zip(held, total) if h > 0 and t > 0), default=0)


def job_order_key(first: PendingTask, band: Band, share: int) -> tuple:
    """Sort key of a job, from one of its tasks, its effective band and its user's dominant share.
    Within a band the user holding least goes first; deeper jobs go first within a user's share
    because their parents already hold capacity and are waiting on them. A band sorts by its rank
    (an integer enum compares as its value)."""
    return (band, share, -first.depth, first.root_submitted_ms, first.insertion, first.job_id)


# Sort key of a task within its job: (index, task id), read in C (a tick sorts every pending task).
task_order_key = attrgetter("index", "task_id")


class JobRequest(NamedTuple):
    """A pending job as the placement pass sees it: its tasks in replica order, its shape, and the
    band it competes in after gating.

    A named tuple rather than a frozen dataclass: a tick builds one per pending job, and a frozen
    dataclass's `__init__` sets each field through `object.__setattr__`.
    """

    job_id: str
    tasks: tuple[PendingTask, ...]  # still eligible this tick, in task order
    expired: tuple[PendingTask, ...]  # past their scheduling deadline
    shape: Shape
    band: Band  # effective band
    requested_band: Band
    user: str
    replicas: int
    coscheduled: bool
    pinned_group: tuple[str, str] | None = None  # where running replicas of a coscheduled job are
    task_ids: tuple[str, ...] = ()  # of `tasks`, read once when the request is made (kept across ticks)

    @property
    def downgraded(self) -> bool:
        return self.band is not self.requested_band


def is_coscheduled(task: PendingTask) -> bool:
    """Replicas start together when asked to, and always for multi-replica accelerator jobs."""
    return task.replicas > 1 and (task.coschedule or task.resources.device.is_accelerator)
