"""Decides which running tasks to evict so that a task that fits nowhere can be placed now.

Rules: only strictly lower bands are evicted (`Band.outranks`), and only on workers of the
preemptor's device variant (`fit.preemption_allowed_on`). On each candidate worker the victims are
taken lowest band first, then youngest (least work lost), until the preemptor fits; victims that
turn out unnecessary are dropped again, most expensive first. Across workers the cheapest set
wins: one that evicts only lower bands beats one that reaches higher, then fewer victims, then
less work lost, then the worker order.

The preemptor is placed on the freed capacity in the same tick. The rest of what the victims free
is not handed out until the next tick: their processes are still stopping, and keeping free
capacity monotone within a tick is what lets the placement pass remember that a shape fits nowhere.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from iris.core.bands import Band

from iris.scheduler.fit import Vector, add, demand, fits, lower, subtract
from iris.scheduler.ledger import Ledger
from iris.scheduler.snapshot import RunningTask


@dataclass(frozen=True, slots=True)
class VictimSet:
    """The tasks to evict from one worker (by index) and what that costs (lower is cheaper)."""

    worker: int
    victims: tuple[RunningTask, ...]
    cost: tuple


def may_preempt(preemptor: Band, victim: Band) -> bool:
    """Only a strictly higher band evicts: never an equal or higher one."""
    return preemptor.outranks(victim)


def can_preempt_anything(band: Band) -> bool:
    return any(band.outranks(other) for other in Band)


def victim_order_key(task: RunningTask) -> tuple:
    """Lowest band first, then youngest, then task id."""
    return (-task.band.value, -task.started_ms, task.task_id)


def victim_cost(victims: Iterable[RunningTask], now_ms: int) -> tuple:
    """(highest band reached, number of victims, milliseconds of work lost); lower is cheaper."""
    victims = tuple(victims)
    if not victims:
        return (-len(Band), 0, 0)
    return (
        -min(v.band.value for v in victims),
        len(victims),
        sum(max(0, now_ms - v.started_ms) for v in victims),
    )


def victims_on_worker(free: Vector, need: Vector, candidates: list[RunningTask]) -> tuple[RunningTask, ...] | None:
    """The minimal victim set from `candidates` (already in victim order) after which `need`
    fits, or None when evicting all of them is not enough."""
    chosen: list[RunningTask] = []
    have = free
    for task in candidates:
        if fits(have, need):
            break
        chosen.append(task)
        have = add(have, demand(task.resources))
    if not fits(have, need):
        return None
    for task in reversed(list(chosen)):
        without = subtract(have, demand(task.resources))
        if fits(without, need):
            chosen.remove(task)
            have = without
    return tuple(chosen)


def reclaimable(ledger: Ledger, w: int, band: Band) -> tuple[Vector, tuple[RunningTask, ...]]:
    """What a worker would have free after evicting every task `band` outranks, and those tasks."""
    total, candidates = ledger.evictable(w, band)
    return add(ledger.free[w], total), candidates


def cheapest_victim_set(
    ledger: Ledger, workers: Iterable[int], need: Vector, band: Band, now_ms: int
) -> VictimSet | None:
    """The cheapest eviction, over `workers`, that makes room for `need` at `band`."""
    best: VictimSet | None = None
    for w in workers:
        have, candidates = reclaimable(ledger, w, band)
        if not candidates or not fits(have, need):
            continue
        victims = victims_on_worker(ledger.free[w], need, sorted(candidates, key=victim_order_key))
        if victims is None:
            continue
        cost = (*victim_cost(victims, now_ms), w)
        if best is None or cost < best.cost:
            best = VictimSet(w, victims, cost)
    return best


def apply_victim_set(ledger: Ledger, chosen: VictimSet, need: Vector) -> None:
    """Evicts the victims and places `need` on their worker; the remainder stays unused this tick."""
    freed = (0, 0, 0, 0)
    for task in chosen.victims:
        ledger.evict(chosen.worker, task.task_id)
        freed = add(freed, demand(task.resources))
    old = ledger.free[chosen.worker]
    ledger.set_free(chosen.worker, lower(old, subtract(add(old, freed), need)))
