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


def user_spend(running: Iterable[RunningTask], elsewhere: Mapping[str, int] | None = None) -> dict[str, int]:
    """Per user, the resource value of their placed work outside the batch band: the tasks running
    here plus `elsewhere` (what their handed-off root jobs hold on federation peers)."""
    spend: dict[str, int] = defaultdict(int)
    for task in running:
        if task.band is not Band.BATCH:
            spend[task.user] += resource_value(task.resources)
    return with_peer_spend(spend, elsewhere or {})


def with_peer_spend(here: Mapping[str, int], on_peers: Mapping[str, int]) -> dict[str, int]:
    """Per user, spend here plus what their handed-off root jobs hold on federation peers."""
    if not on_peers:
        return dict(here)
    return {user: here.get(user, 0) + on_peers.get(user, 0) for user in here.keys() | on_peers.keys()}


def budget_of(user: str, budgets: Mapping[str, float], default: float | None = None) -> float | None:
    """The user's own budget, else the default; None means unlimited."""
    return budgets.get(user, default)


def over_budget(
    user: str, spend: Mapping[str, int], budgets: Mapping[str, float], default: float | None = None
) -> bool:
    """True when the user has a budget (their own or the default) and spends more than it."""
    budget = budget_of(user, budgets, default)
    return budget is not None and spend.get(user, 0) > budget


def effective_band(
    band: Band, user: str, spend: Mapping[str, int], budgets: Mapping[str, float], default: float | None = None
) -> Band:
    """The band a job competes in this tick: its own, or batch when its user is over budget."""
    if band is Band.PRODUCTION or band is Band.BATCH:
        return band
    return Band.BATCH if over_budget(user, spend, budgets, default) else band


def over_budget_note(user: str) -> str:
    """What a waiting job's reason adds when its user is over budget (here or queued for a peer)."""
    return f"; user {user} is over budget, so it competes as batch"


def deadline_passed(task: PendingTask, now_ms: int) -> bool:
    """True when the task's scheduling deadline has been reached without a placement."""
    return task.scheduling_deadline_ms is not None and now_ms >= task.scheduling_deadline_ms
