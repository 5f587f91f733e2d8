"""Tracks the free capacity of every worker during one tick, indexed so that a best-fit lookup does
not scan the cluster.

Why an index: a tick with 10,000 pending tasks and 1,000 workers cannot afford to compare every
task with every worker. Workers with identical attributes and capacity form a *class*, so hard
constraints are evaluated once per class, not per worker. The workers a shape may use form a
*pool*, kept as a list of (free devices, free cpu, free memory, free disk, worker) tuples in
sorted order: the best fit is the first entry at or after the request that fits in every
dimension, found by bisection. Pools are shared by every shape with the same membership and are
updated in place when a worker's free capacity changes.

Free capacity only ever decreases during a tick (preemption keeps the victims' capacity for the
preemptor and does not hand the rest out until the next tick), so "this shape fitted nowhere" stays
true for the rest of the tick and the placement pass may remember it. Coscheduling tries a group
and may roll it back; a journal restores exactly the earlier state.

This object is mutable, but it never outlives the pure `schedule` call that creates it.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import defaultdict
from dataclasses import dataclass

from iris.core.constraints import matches

from iris.scheduler.fit import (
    Shape,
    Vector,
    demand,
    group_of,
    preemption_allowed_on,
    preference_score,
    subtract,
    worker_attributes,
)
from iris.scheduler.snapshot import RunningTask, SchedulingSnapshot, WorkerSnapshot


@dataclass(frozen=True, slots=True)
class WorkerClass:
    """Workers of one backend with identical attributes and capacity: a group of identical workers."""

    backend_id: str
    attributes: dict[str, str]
    capacity: Vector
    members: tuple[int, ...]  # worker indexes, alive or not

    @property
    def group(self) -> tuple[str, str]:
        return group_of(self.attributes, self.backend_id)


class Pool:
    """The workers one or more shapes may use, sorted by free capacity for best-fit bisection."""

    __slots__ = ("members", "keys")

    def __init__(self, members: tuple[int, ...], free: list[Vector]) -> None:
        self.members = members
        self.keys = sorted((*free[w], w) for w in members)


def best_fit(plan: list[Pool], need: Vector) -> int | None:
    """The worker with the least free capacity that still fits `need`, from the first pool (the
    best preference level) that has one. Entries before the bisection point are short in their
    first differing dimension, so only the entries after it are checked."""
    probe = (need[0], need[1], need[2], need[3], -1)
    c, m, d = need[1], need[2], need[3]
    for pool in plan:
        keys = pool.keys
        for i in range(bisect_left(keys, probe), len(keys)):
            key = keys[i]
            if key[1] >= c and key[2] >= m and key[3] >= d:
                return key[4]
    return None


class Ledger:
    """Free capacity, running work and the indexes of one tick."""

    def __init__(self, snapshot: SchedulingSnapshot) -> None:
        self.workers: list[WorkerSnapshot] = sorted(snapshot.workers, key=lambda w: (w.backend_id, w.worker_id))
        self.index = {w.worker_id: i for i, w in enumerate(self.workers)}
        self.alive = [w.alive for w in self.workers]
        self.attributes = [worker_attributes(w) for w in self.workers]
        self.capacity: list[Vector] = [demand(w.capacity) for w in self.workers]
        self.free: list[Vector] = list(self.capacity)
        self.running_on: list[list[RunningTask]] = [[] for _ in self.workers]
        for task in snapshot.running:
            w = self.index.get(task.worker_id)
            if w is None or not self.alive[w]:
                continue
            self.free[w] = subtract(self.free[w], demand(task.resources))
            self.running_on[w].append(task)
        self.evicted: set[str] = set()
        self.classes = self._classify()
        self._pools_of: list[list[Pool]] = [[] for _ in self.workers]
        self._pools: dict[tuple[int, ...], Pool] = {}
        self._plans: dict[Shape, list[Pool]] = {}
        self._group_plans: dict[Shape, list[tuple[tuple[str, str], list[Pool]]]] = {}
        self._preemptible: dict[Shape, tuple[int, ...]] = {}
        self._journal: list[tuple] | None = None

    def _classify(self) -> list[WorkerClass]:
        grouped: dict[tuple, list[int]] = defaultdict(list)
        for i, w in enumerate(self.workers):
            key = (w.backend_id, tuple(sorted(self.attributes[i].items())), self.capacity[i])
            grouped[key].append(i)
        return [
            WorkerClass(backend, self.attributes[members[0]], capacity, tuple(members))
            for (backend, _, capacity), members in grouped.items()
        ]

    # -- which workers a shape may use ------------------------------------------------------

    def matching(self, shape: Shape, alive_only: bool = True) -> list[int]:
        """The workers whose attributes satisfy every hard constraint of `shape`, in index order."""
        per_worker = [c for c in shape.hard if c.key == "worker"]
        per_class = [c for c in shape.hard if c.key != "worker"]
        out: list[int] = []
        for cls in self.classes:
            if not all(matches(c, cls.attributes) for c in per_class):
                continue
            for w in cls.members:
                if alive_only and not self.alive[w]:
                    continue
                if per_worker and not all(matches(c, {"worker": self.workers[w].worker_id}) for c in per_worker):
                    continue
                out.append(w)
        out.sort()
        return out

    def pool(self, members: tuple[int, ...]) -> Pool:
        """The shared pool for exactly these workers, created and indexed on first use."""
        pool = self._pools.get(members)
        if pool is None:
            pool = self._pools[members] = Pool(members, self.free)
            for w in members:
                self._pools_of[w].append(pool)
        return pool

    def _levels(self, shape: Shape, workers: list[int]) -> list[tuple[int, ...]]:
        """Splits workers by preferred-constraint score, best score first."""
        if not shape.preferred:
            return [tuple(workers)] if workers else []
        by_score: dict[int, list[int]] = defaultdict(list)
        for w in workers:
            by_score[preference_score(shape.preferred, self.attributes[w])].append(w)
        return [tuple(by_score[s]) for s in sorted(by_score, reverse=True)]

    def plan(self, shape: Shape) -> list[Pool]:
        """The pools a shape searches, in preference order."""
        plan = self._plans.get(shape)
        if plan is None:
            plan = self._plans[shape] = [self.pool(m) for m in self._levels(shape, self.matching(shape))]
        return plan

    def group_plans(self, shape: Shape) -> list[tuple[tuple[str, str], list[Pool]]]:
        """Per coscheduling group (shared `tpu-name`, `pool`, or backend), the pools a shape searches there."""
        plans = self._group_plans.get(shape)
        if plans is None:
            by_group: dict[tuple[str, str], list[int]] = defaultdict(list)
            for w in self.matching(shape):
                by_group[self.group(w)].append(w)
            plans = self._group_plans[shape] = [
                (g, [self.pool(m) for m in self._levels(shape, by_group[g])]) for g in sorted(by_group)
            ]
        return plans

    def group(self, w: int) -> tuple[str, str]:
        return group_of(self.attributes[w], self.workers[w].backend_id)

    def preemptible_workers(self, shape: Shape) -> tuple[int, ...]:
        """Alive workers matching `shape` on which it may evict lower-band work (same device variant)."""
        found = self._preemptible.get(shape)
        if found is None:
            found = self._preemptible[shape] = tuple(
                w for w in self.matching(shape) if preemption_allowed_on(shape, self.workers[w])
            )
        return found

    # -- changes ----------------------------------------------------------------------------

    def set_free(self, w: int, new: Vector) -> None:
        old = self.free[w]
        if old == new:
            return
        old_key = (*old, w)
        new_key = (*new, w)
        for pool in self._pools_of[w]:
            keys = pool.keys
            del keys[bisect_left(keys, old_key)]
            insort(keys, new_key)
        self.free[w] = new
        if self._journal is not None:
            self._journal.append(("free", w, old))

    def take(self, w: int, need: Vector, times: int = 1) -> None:
        self.set_free(w, subtract(self.free[w], need, times))

    def evict(self, task_id: str) -> None:
        self.evicted.add(task_id)
        if self._journal is not None:
            self._journal.append(("evict", task_id))

    def victims_on(self, w: int) -> list[RunningTask]:
        """Running tasks on a worker not already chosen for eviction this tick."""
        return [t for t in self.running_on[w] if t.task_id not in self.evicted]

    # -- trials (coscheduling) --------------------------------------------------------------

    def begin_trial(self) -> None:
        self._journal = []

    def commit_trial(self) -> None:
        self._journal = None

    def rollback_trial(self) -> None:
        journal, self._journal = self._journal or [], None
        for entry in reversed(journal):
            if entry[0] == "free":
                self.set_free(entry[1], entry[2])
            else:
                self.evicted.discard(entry[1])

    @property
    def in_trial(self) -> bool:
        return self._journal is not None
