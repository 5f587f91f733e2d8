"""Tracks the free capacity of every worker during one tick, indexed so that a best-fit lookup does
not scan the cluster.

Why an index (the worker-side part of it is `index.ClusterIndex`, kept across ticks): a tick with 10,000 pending tasks and 1,000 workers cannot afford to compare every
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

from bisect import bisect_left
from collections.abc import Mapping

from iris.core.bands import Band
from iris.core.constraints import Constraint
from iris.scheduler.fit import Shape, Vector, add, demand, subtract
from iris.scheduler.index import ClusterIndex, WorkerClass, repair
from iris.scheduler.snapshot import RunningTask, SchedulingSnapshot

__all__ = ["Ledger", "Pool", "WorkerClass", "best_fit"]


class Pool:
    """The workers one or more shapes may use, sorted by free capacity for best-fit bisection.

    Updates are lazy: a change of free capacity only marks the worker dirty here, and the sorted
    keys are repaired when the pool is next searched. Most pools are searched rarely, and several
    changes to one worker between two searches cost one repair.
    """

    __slots__ = ("members", "keys", "key_of", "dirty", "owned")

    def __init__(self, members: tuple[int, ...], keys: list[tuple], key_of: dict[int, tuple]) -> None:
        self.members = members
        self.keys = keys  # the index's ordering before the tick, shared until this pool first changes
        self.key_of = key_of
        self.dirty: set[int] = set()
        self.owned = False

    def refresh(self, free: list[Vector]) -> list[tuple]:
        """The sorted keys, repaired for every worker whose free capacity changed."""
        if self.dirty:
            if not self.owned:
                self.keys, self.key_of, self.owned = list(self.keys), dict(self.key_of), True
            repair(self.keys, self.key_of, self.dirty, free)
            self.dirty.clear()
        return self.keys


def best_fit(plan: list[Pool], need: Vector, free: list[Vector]) -> int | None:
    """The worker with the least free capacity that still fits `need`, from the first pool (the
    best preference level) that has one. Entries before the bisection point are short in their
    first differing dimension, so only the entries after it are checked (one by one: measured on
    the scheduler benchmark, stepping beats jumping ahead by bisection, whose keys cost more to
    build than the entries they skip)."""
    probe = (need[0], need[1], need[2], need[3], -1)
    c, m, d = need[1], need[2], need[3]
    for pool in plan:
        keys = pool.refresh(free)
        for i in range(bisect_left(keys, probe), len(keys)):
            key = keys[i]
            if key[1] >= c and key[2] >= m and key[3] >= d:
                return key[4]
    return None


class Ledger:
    """Free capacity, running work and the indexes of one tick."""

    def __init__(self, snapshot: SchedulingSnapshot, per_worker: bool = False) -> None:
        """`per_worker` makes every worker its own class, for snapshots whose tasks pin a `worker`."""
        ix = snapshot.index
        if not isinstance(ix, ClusterIndex) or ix.per_worker != per_worker:
            ix = ClusterIndex(snapshot.workers, snapshot.running, per_worker)
        self.ix = ix
        self.workers = ix.workers
        self.index = ix.index
        self.alive = ix.alive
        self.attributes = ix.attributes
        self.capacity = ix.capacity
        self.classes = ix.classes
        self.class_of = ix.class_of
        self.running_on = ix.running_on  # read only: evictions are kept in `evicted`
        self.free: list[Vector] = list(ix.free)
        self.evicted: set[str] = set()
        self._changed: set[int] = set()  # workers whose free capacity changed this tick
        # A worker's stamp changes whenever its free capacity or victims do, to a value never used
        # before; undoing a trial restores the earlier stamps along with the earlier state.
        self.version = [0] * len(self.workers)
        self._stamp = 0
        self._pools: dict[tuple[int, ...], Pool] = {}
        # By the number of a worker set (`ClusterIndex.set_ids`), the dirty sets to mark when the
        # free capacity of one of its workers changes: the pools' and the group counts'.
        self._subscribers: dict[int, list[set[int]]] = {}
        # The same for readers that never look inside a trial (the group counts): a trial rolled
        # back leaves the state as it was, so they are told only of trials that are kept.
        self._outside_trials: dict[int, list[set[int]]] = {}
        self._plans: dict[tuple, list[Pool]] = {}
        self._group_plans: dict[tuple, list[tuple[tuple[str, str], list[Pool]]]] = {}
        self._evictable: dict[tuple[int, Band], tuple[Vector, tuple[RunningTask, ...]]] = {}
        self._journal: list[tuple] | None = None

    def subscribe(self, number: int, dirty: set[int], inside_trials: bool = True) -> set[int]:
        """Adds a worker of set `number` to `dirty` whenever its free capacity changes from now on
        (without `inside_trials`: when a change is made outside a trial or a trial is kept)."""
        (self._subscribers if inside_trials else self._outside_trials).setdefault(number, []).append(dirty)
        return dirty

    def _mark(self, subscribers: dict[int, list[set[int]]], w: int) -> None:
        for number in self.ix.member_of.get(w, ()):
            for dirty in subscribers.get(number, ()):
                dirty.add(w)

    def changed_among(self, workers: Mapping[int, object]) -> set[int]:
        """The workers among `workers` whose free capacity changed this tick."""
        return {w for w in self._changed if w in workers}

    # -- which workers a shape may use ------------------------------------------------------

    def classes_matching(self, constraint: Constraint) -> frozenset[int]:
        """Indexes of the classes whose attributes satisfy one constraint."""
        return self.ix.classes_matching(constraint)

    def matching_classes(self, hard: tuple[Constraint, ...]) -> list[int]:
        """Indexes of the classes that satisfy every constraint in `hard`."""
        return self.ix.matching_classes(hard)

    def matching(self, hard: tuple[Constraint, ...], alive_only: bool = True) -> list[int]:
        """The workers whose attributes satisfy every constraint in `hard`, in index order."""
        return self.ix.matching(hard, alive_only)

    def pool(self, members: tuple[int, ...]) -> Pool:
        """The shared pool for exactly these workers, created on first use this tick."""
        pool = self._pools.get(members)
        if pool is None:
            pool = self._pools[members] = Pool(members, *self.ix.sorted_keys(members))
            self.subscribe(self.ix.set_ids[members], pool.dirty)
            pool.dirty.update(pool.key_of.keys() & self._changed)
        return pool

    def plan(self, shape: Shape) -> list[Pool]:
        """The pools a shape searches, in preference order."""
        key = shape.where
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = [self.pool(m) for m in self.ix.levels(shape)]
        return plan

    def group_plans(self, shape: Shape) -> list[tuple[tuple[str, str], list[Pool]]]:
        """Per coscheduling group (shared `tpu-name`, `pool`, or backend), the pools a shape searches there."""
        key = shape.where
        plans = self._group_plans.get(key)
        if plans is None:
            plans = self._group_plans[key] = [
                (g, [self.pool(m) for m in levels]) for g, levels in self.ix.group_levels(shape)
            ]
        return plans

    def group(self, w: int) -> tuple[str, str]:
        return self.ix.group_of[w]

    def preemptible_workers(self, shape: Shape) -> tuple[int, ...]:
        """Alive workers matching `shape` on which it may evict lower-band work (same device variant)."""
        return self.ix.preemptible_workers(shape)

    # -- changes ----------------------------------------------------------------------------

    def set_free(self, w: int, new: Vector) -> None:
        old = self.free[w]
        if old == new:
            return
        subscribers, journal = self._subscribers, self._journal
        outside = self._outside_trials if journal is None else None
        for number in self.ix.member_of.get(w, ()):
            for dirty in subscribers.get(number, ()):
                dirty.add(w)
            if outside:
                for dirty in outside.get(number, ()):
                    dirty.add(w)
        self._changed.add(w)
        self.free[w] = new
        if journal is not None:
            journal.append(("free", w, old, self.version[w]))
        self._stamp += 1
        self.version[w] = self._stamp

    def take(self, w: int, need: Vector, times: int = 1) -> None:
        self.set_free(w, subtract(self.free[w], need, times))

    def evict(self, w: int, task_id: str) -> None:
        self.evicted.add(task_id)
        if self._journal is not None:
            self._journal.append(("evict", w, task_id, self.version[w]))
        self._stamp += 1
        self.version[w] = self._stamp
        self._forget_evictable(w)

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
        journal, self._journal = self._journal or [], None
        for w in {entry[1] for entry in journal if entry[0] == "free"}:
            self._mark(self._outside_trials, w)

    def rollback_trial(self) -> None:
        journal, self._journal = self._journal or [], None
        for kind, w, what, version in reversed(journal):
            if kind == "free":
                self.set_free(w, what)
            else:
                self.evicted.discard(what)
                self._forget_evictable(w)
            self.version[w] = version  # the state is the earlier one again, and so is its stamp
