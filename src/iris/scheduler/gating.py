"""Decides, before placement, which band each pending job competes in and which jobs have waited
past their scheduling deadline.

Budgets are soft: a user whose spend is over budget keeps scheduling, but interactive work is
downgraded to batch, so it neither outranks nor preempts anyone else's batch work. Production is
exempt (it is granted by an operator, not spent from a budget). Spend is computed from placed work
only, once per tick, so the band a job competes in never depends on the order of the pass.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from iris.core.bands import Band
from iris.core.resources import Resources
from iris.scheduler.snapshot import PendingTask, RunningTask

GIB = 1024**3


def resource_value(resources: Resources) -> int:
    """One scalar per task for budgets: 1000 per accelerator + 1 per GiB of memory + 5 per core.

    Whole units only, so a user cannot slip under a budget with fractional requests.
    """
    device = resources.device
    accelerators = device.count if device.is_accelerator else 0
    return 1000 * accelerators + resources.memory // GIB + 5 * int(resources.cpu)


def user_spend(running: Iterable[RunningTask]) -> dict[str, int]:
    """Per user, the resource value of their placed work outside the batch band."""
    spend: dict[str, int] = defaultdict(int)
    for task in running:
        if task.band is not Band.BATCH:
            spend[task.user] += resource_value(task.resources)
    return dict(spend)


def over_budget(user: str, spend: Mapping[str, int], budgets: Mapping[str, float]) -> bool:
    """True when the user has a budget and spends more than it (no budget means unlimited)."""
    budget = budgets.get(user)
    return budget is not None and spend.get(user, 0) > budget


def effective_band(band: Band, user: str, spend: Mapping[str, int], budgets: Mapping[str, float]) -> Band:
    """The band a job competes in this tick: its own, or batch when its user is over budget."""
    if band is Band.PRODUCTION or band is Band.BATCH:
        return band
    return Band.BATCH if over_budget(user, spend, budgets) else band


def deadline_passed(task: PendingTask, now_ms: int) -> bool:
    """True when the task's scheduling deadline has been reached without a placement."""
    return task.scheduling_deadline_ms is not None and now_ms >= task.scheduling_deadline_ms
