"""Decides the order in which pending work is considered: band, then depth (children of running
jobs first), then the root job's submit time, then the submit sequence.

The order is a total order over job-level fields ending in the job id, so the same snapshot always
yields the same decisions. Tasks of a job share those fields, so the pass sorts jobs (far fewer
than tasks) and takes each job's tasks by replica index.
"""

from __future__ import annotations

from iris.core.bands import Band

from iris.scheduler.snapshot import PendingTask


def job_order_key(first: PendingTask, band: Band) -> tuple:
    """Sort key of a job, from one of its tasks and its effective band. Deeper jobs go first
    within a band because their parents already hold capacity and are waiting on them."""
    return (band.value, -first.depth, first.root_submitted_ms, first.insertion, first.job_id)


def task_order_key(task: PendingTask) -> tuple:
    """Sort key of a task within its job."""
    return (task.index, task.task_id)
