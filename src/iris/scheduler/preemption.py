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

import heapq
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


LOWEST_BAND = int(max(Band))


def can_preempt_anything(band: Band) -> bool:
    """Every band above the lowest has something it may evict."""
    return int(band) < LOWEST_BAND


def victim_order_key(task: RunningTask) -> tuple:
    """Lowest band first, then youngest, then task id."""
    return (-int(task.band), -task.started_ms, task.task_id)


def victim_cost(victims: Iterable[RunningTask], now_ms: int) -> tuple:
    """(highest band reached, number of victims, milliseconds of work lost); lower is cheaper."""
    victims = tuple(victims)
    if not victims:
        return (-len(Band), 0, 0)
    return (
        -int(min(v.band for v in victims)),
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


def victim_set_on(ledger: Ledger, w: int, need: Vector, band: Band, now_ms: int) -> VictimSet | None:
    """The victim set on one worker that makes room for `need` at `band`, with its cost."""
    have, candidates = reclaimable(ledger, w, band)
    if not candidates or not fits(have, need):
        return None
    victims = victims_on_worker(ledger.free[w], need, sorted(candidates, key=victim_order_key))
    if victims is None:
        return None
    return VictimSet(w, victims, (*victim_cost(victims, now_ms), w))


def cheapest_victim_set(
    ledger: Ledger, workers: Iterable[int], need: Vector, band: Band, now_ms: int
) -> VictimSet | None:
    """The cheapest eviction, over `workers`, that makes room for `need` at `band`."""
    best: VictimSet | None = None
    for w in workers:
        found = victim_set_on(ledger, w, need, band, now_ms)
        if found is not None and (best is None or found.cost < best.cost):
            best = found
    return best


class VictimIndex:
    """The cheapest victim set over many workers for one request and band, across a tick.

    A heap of per-worker victim sets, each stamped with the worker's version; a stale entry that
    reaches the top is recomputed and pushed back. A worker's cost only grows during a tick (its
    free capacity and its evictable tasks only shrink), so a recorded cost is a lower bound and the
    fresh top is the cheapest. This turns thousands of preemptions over thousands of workers from
    a full scan each into a few heap operations each.
    """

    def __init__(self, ledger: Ledger, workers: Iterable[int], need: Vector, band: Band, now_ms: int) -> None:
        self._ledger, self._need, self._band, self._now_ms = ledger, need, band, now_ms
        self._heap: list[tuple[tuple, int, VictimSet]] = []
        for w in workers:
            self._push(w)
        heapq.heapify(self._heap)

    def _push(self, w: int, heap_push: bool = False) -> None:
        found = victim_set_on(self._ledger, w, self._need, self._band, self._now_ms)
        if found is not None:
            entry = (found.cost, self._ledger.version[w], found)
            if heap_push:
                heapq.heappush(self._heap, entry)
            else:
                self._heap.append(entry)

    def cheapest(self) -> VictimSet | None:
        heap, version = self._heap, self._ledger.version
        while heap:
            _, stamp, found = heap[0]
            if stamp == version[found.worker]:
                return found
            heapq.heappop(heap)
            self._push(found.worker, heap_push=True)
        return None


def apply_victim_set(ledger: Ledger, chosen: VictimSet, need: Vector) -> None:
    """Evicts the victims and places `need` on their worker; the remainder stays unused this tick."""
    freed = (0, 0, 0, 0)
    for task in chosen.victims:
        ledger.evict(chosen.worker, task.task_id)
        freed = add(freed, demand(task.resources))
    old = ledger.free[chosen.worker]
    ledger.set_free(chosen.worker, lower(old, subtract(add(old, freed), need)))
