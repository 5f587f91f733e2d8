"""Tracks the free capacity of every worker during one tick, indexed so that a best-fit lookup does
not scan the cluster.

Why an index: a tick with 10,000 pending tasks and 1,000 workers cannot afford to compare every
task with every worker. Workers with identical attributes and capacity form a *class*, so hard
constraints are evaluated once per class, not per worker. The workers a shape may use form a
*pool*, kept as a list of (free devices, free cpu, free memory, free disk, worker) tuples in
sorted order: the best fit is the first entry at or after the request that fits in every
dimension, found by bisection. Pools are shared by every shape with the same membership and are
repaired lazily, when next searched, after a worker's free capacity changes.

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

from iris.core.bands import Band
from iris.core.constraints import Constraint, Op, matches
from iris.scheduler.fit import (
    Shape,
    Vector,
    add,
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
    any_alive: bool

    @property
    def group(self) -> tuple[str, str]:
        return group_of(self.attributes, self.backend_id)


class Pool:
    """The workers one or more shapes may use, sorted by free capacity for best-fit bisection.

    Updates are lazy: a change of free capacity only marks the worker dirty here, and the sorted
    keys are repaired when the pool is next searched. Most pools are searched rarely, and several
    changes to one worker between two searches cost one repair.
    """

    __slots__ = ("members", "keys", "key_of", "dirty")

    def __init__(self, members: tuple[int, ...], free: list[Vector]) -> None:
        self.members = members
        self.key_of = {w: (*free[w], w) for w in members}
        self.keys = sorted(self.key_of.values())
        self.dirty: set[int] = set()

    def refresh(self, free: list[Vector]) -> list[tuple]:
        """The sorted keys, repaired for every worker whose free capacity changed."""
        if self.dirty:
            keys, key_of = self.keys, self.key_of
            for w in self.dirty:
                old, new = key_of[w], (*free[w], w)
                if old != new:
                    del keys[bisect_left(keys, old)]
                    insort(keys, new)
                    key_of[w] = new
            self.dirty.clear()
        return self.keys


def best_fit(plan: list[Pool], need: Vector, free: list[Vector]) -> int | None:
    """The worker with the least free capacity that still fits `need`, from the first pool (the
    best preference level) that has one. Entries before the bisection point are short in their
    first differing dimension, so only the entries after it are checked."""
    probe = (need[0], need[1], need[2], need[3], -1)
    c, m, d = need[1], need[2], need[3]
    for pool in plan:
        keys = pool.refresh(free)
        for i in range(bisect_left(keys, probe), len(keys)):
            key = keys[i]
            if key[1] >= c and key[2] >= m and key[3] >= d:
                return key[4]
    return None


def _by_text(constraint: Constraint) -> bool:
    """True when `matches` reduces to comparing lower-cased text (IN, or EQ with a non-number),
    so the classes can be looked up by value instead of scanned."""
    if constraint.op is Op.IN:
        return True
    if constraint.op is not Op.EQ:
        return False
    try:
        float(constraint.values[0])
    except ValueError:
        return True
    return False


class Ledger:
    """Free capacity, running work and the indexes of one tick."""

    def __init__(self, snapshot: SchedulingSnapshot, per_worker: bool = False) -> None:
        """`per_worker` makes every worker its own class, for snapshots whose tasks pin a `worker`."""
        self.workers: list[WorkerSnapshot] = sorted(snapshot.workers, key=lambda w: (w.backend_id, w.worker_id))
        self.index = {w.worker_id: i for i, w in enumerate(self.workers)}
        self.alive = [w.alive for w in self.workers]
        self.attributes = [worker_attributes(w) for w in self.workers]
        if per_worker:
            for attrs, worker in zip(self.attributes, self.workers):
                attrs["worker"] = worker.worker_id
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
        self.version = [0] * len(self.workers)  # bumped whenever a worker's free capacity or victims change
        self.classes = self._classify()
        self.class_of = [0] * len(self.workers)
        for c, cls in enumerate(self.classes):
            for w in cls.members:
                self.class_of[w] = c
        self._group_of = [self.classes[c].group for c in self.class_of]
        self._pools_of: list[list[Pool]] = [[] for _ in self.workers]
        self._pools: dict[tuple[int, ...], Pool] = {}
        self._classes_matching: dict[Constraint, frozenset[int]] = {}
        self._matching_classes: dict[tuple, list[int]] = {}
        self._values: dict[str, dict[str, set[int]]] = {}
        self._scores: dict[tuple, list[int]] = {}
        self._matching: dict[tuple, list[int]] = {}
        self._plans: dict[tuple, list[Pool]] = {}
        self._group_plans: dict[tuple, list[tuple[tuple[str, str], list[Pool]]]] = {}
        self._preemptible: dict[tuple, tuple[int, ...]] = {}
        self._evictable: dict[tuple[int, Band], tuple[Vector, tuple[RunningTask, ...]]] = {}
        self._journal: list[tuple] | None = None

    def _classify(self) -> list[WorkerClass]:
        grouped: dict[tuple, list[int]] = defaultdict(list)
        for i, w in enumerate(self.workers):
            key = (w.backend_id, tuple(sorted(self.attributes[i].items())), self.capacity[i])
            grouped[key].append(i)
        return [
            WorkerClass(
                backend, self.attributes[members[0]], capacity, tuple(members), any(self.alive[w] for w in members)
            )
            for (backend, _, capacity), members in grouped.items()
        ]

    # -- which workers a shape may use ------------------------------------------------------

    def classes_matching(self, constraint: Constraint) -> frozenset[int]:
        """Indexes of the classes whose attributes satisfy one constraint (evaluated once per tick)."""
        found = self._classes_matching.get(constraint)
        if found is None:
            if _by_text(constraint):
                index = self._value_index(constraint.key)
                found = frozenset().union(*(index.get(v, ()) for v in constraint.values))
            else:
                found = frozenset(i for i, cls in enumerate(self.classes) if matches(constraint, cls.attributes))
            self._classes_matching[constraint] = found
        return found

    def _value_index(self, key: str) -> dict[str, set[int]]:
        """For one attribute key, the classes per lower-cased value."""
        index = self._values.get(key)
        if index is None:
            index = self._values[key] = defaultdict(set)
            for i, cls in enumerate(self.classes):
                value = cls.attributes.get(key)
                if value is not None:
                    index[str(value).lower()].add(i)
        return index

    def matching_classes(self, hard: tuple[Constraint, ...]) -> list[int]:
        """Indexes of the classes that satisfy every constraint in `hard`."""
        found = self._matching_classes.get(hard)
        if found is None:
            selected = set(range(len(self.classes)))
            for constraint in hard:
                selected &= self.classes_matching(constraint)
            found = self._matching_classes[hard] = sorted(selected)
        return found

    def matching(self, hard: tuple[Constraint, ...], alive_only: bool = True) -> list[int]:
        """The workers whose attributes satisfy every constraint in `hard`, in index order."""
        key = (hard, alive_only)
        found = self._matching.get(key)
        if found is None:
            found = sorted(
                w
                for c in self.matching_classes(hard)
                for w in self.classes[c].members
                if self.alive[w] or not alive_only
            )
            self._matching[key] = found
        return found

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
        class_scores = self._scores.get(shape.preferred)
        if class_scores is None:
            class_scores = self._scores[shape.preferred] = [
                preference_score(shape.preferred, cls.attributes) for cls in self.classes
            ]
        by_score: dict[int, list[int]] = defaultdict(list)
        for w in workers:
            by_score[class_scores[self.class_of[w]]].append(w)
        return [tuple(by_score[s]) for s in sorted(by_score, reverse=True)]

    def plan(self, shape: Shape) -> list[Pool]:
        """The pools a shape searches, in preference order."""
        key = shape.where
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = [self.pool(m) for m in self._levels(shape, self.matching(shape.hard))]
        return plan

    def group_plans(self, shape: Shape) -> list[tuple[tuple[str, str], list[Pool]]]:
        """Per coscheduling group (shared `tpu-name`, `pool`, or backend), the pools a shape searches there."""
        key = shape.where
        plans = self._group_plans.get(key)
        if plans is None:
            by_group: dict[tuple[str, str], list[int]] = defaultdict(list)
            for w in self.matching(shape.hard):
                by_group[self.group(w)].append(w)
            plans = self._group_plans[key] = [
                (g, [self.pool(m) for m in self._levels(shape, by_group[g])]) for g in sorted(by_group)
            ]
        return plans

    def group(self, w: int) -> tuple[str, str]:
        return self._group_of[w]

    def preemptible_workers(self, shape: Shape) -> tuple[int, ...]:
        """Alive workers matching `shape` on which it may evict lower-band work (same device variant)."""
        key = shape.evicts_among
        found = self._preemptible.get(key)
        if found is None:
            found = self._preemptible[key] = tuple(
                w for w in self.matching(shape.hard) if preemption_allowed_on(shape, self.workers[w])
            )
        return found

    # -- changes ----------------------------------------------------------------------------

    def set_free(self, w: int, new: Vector) -> None:
        old = self.free[w]
        if old == new:
            return
        for pool in self._pools_of[w]:
            pool.dirty.add(w)
        self.free[w] = new
        self.version[w] += 1
        if self._journal is not None:
            self._journal.append(("free", w, old))

    def take(self, w: int, need: Vector, times: int = 1) -> None:
        self.set_free(w, subtract(self.free[w], need, times))

    def evict(self, w: int, task_id: str) -> None:
        self.evicted.add(task_id)
        self.version[w] += 1
        self._forget_evictable(w)
        if self._journal is not None:
            self._journal.append(("evict", w, task_id))

    def _forget_evictable(self, w: int) -> None:
        for band in Band:
            self._evictable.pop((w, band), None)

    def evictable(self, w: int, band: Band) -> tuple[Vector, tuple[RunningTask, ...]]:
        """The running tasks on a worker that `band` outranks (not yet chosen for eviction), and
        their summed demand; cached until the next eviction there."""
        found = self._evictable.get((w, band))
        if found is None:
            tasks = tuple(t for t in self.running_on[w] if t.task_id not in self.evicted and band.outranks(t.band))
            total = (0, 0, 0, 0)
            for task in tasks:
                total = add(total, demand(task.resources))
            found = self._evictable[(w, band)] = (total, tasks)
        return found

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
                self.evicted.discard(entry[2])
                self.version[entry[1]] += 1
                self._forget_evictable(entry[1])
