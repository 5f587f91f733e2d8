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
from iris.scheduler.fit import DIMENSIONS, ZERO, Vector, add, copies, demand, fits, lower, subtract
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
    return preemptor < victim  # `preemptor.outranks(victim)`, compared in C


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
    total, candidates = ledger.evictable(w, band)
    return _victim_set(w, ledger.free[w], total, candidates, need, now_ms)


def _victim_set(
    w: int, free: Vector, total: Vector, candidates: Iterable[RunningTask], need: Vector, now_ms: int
) -> VictimSet | None:
    """`victim_set_on` for a worker with `free` capacity and these evictable `candidates`
    (summing to `total`)."""
    if not candidates or not fits(add(free, total), need):
        return None
    victims = victims_on_worker(free, need, sorted(candidates, key=victim_order_key))
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


def victim_bounds(ledger: Ledger, workers: Iterable[int], band: Band, now_ms: int) -> list[tuple]:
    """Workers with something `band` may evict, each as a lower bound of what evicting there costs
    any request that does not fit its free capacity, sorted cheapest first.

    Such a request evicts at least one task; if every victim is of the lowest band the worker
    holds, the cheapest of them loses the least work, and any other choice reaches a higher band.
    So (that band, 1 victim, the least work lost in it, worker) is at most the real cost.
    """
    bounds = []
    summary_of = ledger.eviction_summary
    for w in workers:
        summary = summary_of(w, band, now_ms)
        if summary is not None:
            bounds.append((-summary.lowest, 1, summary.least_work, w))
    bounds.sort()
    return bounds


class VictimIndex:
    """The cheapest victim set over many workers for one request and band, across a tick.

    For a request that fits on none of the workers (the placement pass asks only then). Workers are
    visited in the order of `victim_bounds`, a lower bound of their cost shared by every request
    of the same band over the same workers. A visited worker first gets a bound of its own for
    this request (`_floor`: how many victims its shortfall needs at least, at no less than the
    cheapest work of its lowest band), which costs a pass over its tasks, and only a worker whose
    bound reaches the top of the heap gets its exact victim set: usually a handful, not the whole
    cluster. Exact sets are stamped with the worker's version; a stale one that reaches the top is
    recomputed. A worker's cost only grows during a tick (its free capacity and its evictable tasks
    only shrink), so a recorded cost or an early bound stays a lower bound and the fresh exact top
    below every unvisited bound is the cheapest.
    """

    def __init__(self, ledger: Ledger, bounds: list[tuple], need: Vector, band: Band, now_ms: int) -> None:
        self._ledger, self._need, self._band, self._now_ms = ledger, need, band, now_ms
        self._bounds = bounds
        self._next = 0  # the first worker of `bounds` not yet visited
        # (cost or bound, stamp, worker, the exact set or None for a bound): one entry per worker
        self._heap: list[tuple[tuple, int, int, VictimSet | None]] = []

    def _exact(self, w: int) -> None:
        found = victim_set_on(self._ledger, w, self._need, self._band, self._now_ms)
        if found is not None:
            heapq.heappush(self._heap, (found.cost, self._ledger.version[w], w, found))

    def _visit(self, w: int) -> None:
        floor = _floor(self._ledger, w, self._need, self._band, self._now_ms)
        if floor is None:
            self._exact(w)  # it needs no victim, or bounds nothing better than the exact set
        elif floor:
            heapq.heappush(self._heap, (floor, -1, w, None))

    def cheapest(self) -> VictimSet | None:
        heap, version, bounds = self._heap, self._ledger.version, self._bounds
        while True:
            bound = bounds[self._next] if self._next < len(bounds) else None
            if heap:
                cost, stamp, w, found = heap[0]
                if bound is None or cost < bound:
                    if found is not None and stamp == version[w]:
                        return found
                    heapq.heappop(heap)
                    self._exact(w)
                    continue
            elif bound is None:
                return None
            self._next += 1
            self._visit(bound[3])


def _floor(ledger: Ledger, w: int, need: Vector, band: Band, now_ms: int) -> tuple | None:
    """A lower bound of what the victim set on worker `w` costs a request of `need` at `band`;
    () when there is none, None when only the exact set will do (`need` fits already).

    Every victim frees at most the most any one candidate holds in each dimension, so the
    shortfall needs at least so many victims. If one victim is enough, it holds the whole
    shortfall itself; the cheapest such task of the lowest band bounds its work, and when there
    is none, a set evicts two tasks or reaches a higher band. Any set reaching a higher band than
    the lowest one held costs more than every bound of that band.
    """
    total, candidates = ledger.evictable(w, band)
    free = ledger.free[w]
    if not candidates or not fits(add(free, total), need):
        return ()
    short = subtract(need, free)
    if short[0] <= 0 and short[1] <= 0 and short[2] <= 0 and short[3] <= 0:
        return None
    summary = ledger.eviction_summary(w, band, now_ms)
    if summary is None:
        return ()
    low, work, most, lows = summary.lowest, summary.least_work, summary.largest, summary.of_lowest
    victims = max(-(-short[d] // most[d]) for d in DIMENSIONS if short[d] > 0)
    if victims <= 1:
        s0, s1, s2, s3 = short
        for lost, held in lows:  # least work lost first: the first that covers it is the cheapest
            if held[0] >= s0 and held[1] >= s1 and held[2] >= s2 and held[3] >= s3:
                return (-low, 1, lost, w)
        return (-low, 2, work, w)
    return (-low, victims, work, w)


def apply_victim_set(ledger: Ledger, chosen: VictimSet, need: Vector) -> None:
    """Evicts the victims and places `need` on their worker; the remainder stays unused this tick."""
    freed = (0, 0, 0, 0)
    for task in chosen.victims:
        ledger.evict(chosen.worker, task.task_id)
        freed = add(freed, demand(task.resources))
    old = ledger.free[chosen.worker]
    ledger.set_free(chosen.worker, lower(old, subtract(add(old, freed), need)))


class EvictionRun:
    """What it costs to place 1, 2, 3 … tasks of one demand on a group's workers by preemption,
    each on the cheapest victim set left after the ones before: the trial of a coscheduled job,
    measured without touching the ledger.

    A coscheduled job that must preempt fills the group's free slots first, which leaves every
    worker holding none of its tasks (the same state whatever the job's replica count), and then
    evicts for one task after another, each time the cheapest set over the group's workers. Only
    the worker just evicted on changes, so each step recomputes one worker's set, not the group's;
    and the costs of the first k steps answer every job of that demand and band with k tasks
    beyond the free slots, however many replicas it has, for as long as the group is unchanged.
    """

    __slots__ = ("_need", "_now_ms", "_free", "_left", "_heap", "_costs", "_top", "_count", "_work")

    def __init__(self, ledger: Ledger, members: Iterable[int], need: Vector, band: Band, now_ms: int) -> None:
        self._need, self._now_ms = need, now_ms
        self._free: dict[int, Vector] = {}
        self._left: dict[int, tuple[Vector, list[RunningTask]]] = {}  # evictable, not yet chosen
        self._heap: list[tuple[tuple, VictimSet]] = []
        for w in members:
            free = ledger.free[w]
            filled = copies(free, need, _UNBOUNDED)
            if filled:
                free = subtract(free, need, filled)
            total, candidates = ledger.evictable(w, band)
            self._free[w] = free
            self._left[w] = (total, list(candidates))
            self._offer(w)
        self._costs: list[tuple] = []  # the cost of the first k + 1 steps together, by k
        self._top, self._count, self._work = -len(Band), 0, 0

    def _offer(self, w: int) -> None:
        total, candidates = self._left[w]
        found = _victim_set(w, self._free[w], total, candidates, self._need, self._now_ms)
        if found is not None:
            heapq.heappush(self._heap, (found.cost, found))

    def cost(self, steps: int) -> tuple | None:
        """The `victim_cost` of the victims of the first `steps` steps, or None when the group's
        workers cannot hold that many tasks even by evicting everything the band outranks."""
        costs, heap = self._costs, self._heap
        while len(costs) < steps:
            if not heap:
                return None
            _, chosen = heapq.heappop(heap)
            w = chosen.worker
            total, candidates = self._left[w]
            freed = ZERO
            for task in chosen.victims:
                candidates.remove(task)
                freed = add(freed, demand(task.resources))
                self._top = max(self._top, -int(task.band))
                self._count += 1
                self._work += max(0, self._now_ms - task.started_ms)
            self._left[w] = (subtract(total, freed), candidates)
            old = self._free[w]
            self._free[w] = lower(old, subtract(add(old, freed), self._need))
            self._offer(w)
            costs.append((self._top, self._count, self._work))
        return costs[steps - 1] if steps > 0 else victim_cost((), self._now_ms)


_UNBOUNDED = 1 << 62
