"""Tracks the free capacity of every worker during one tick, indexed so that a best-fit lookup does
not scan the cluster.

Why an index (the worker-side part of it is `index.ClusterIndex`, kept across ticks): a tick with 10,000 pending tasks and 1,000 workers cannot afford to compare every
task with every worker. Workers with identical attributes and capacity form a *class*, so hard
constraints are evaluated once per class, not per worker. The workers a shape may use form a
*pool*, kept as a sorted list of keys that order its workers by (free devices, free cpu, free
memory, free disk, worker), each packed into one integer (`index.Packing`): the best fit is the
first entry at or after the request that fits in every dimension, found by bisection. Pools are shared by every shape with the same membership and are
repaired lazily, when next searched, after a worker's free capacity changes.

Free capacity only ever decreases during a tick (preemption keeps the victims' capacity for the
preemptor and does not hand the rest out until the next tick), so "this shape fitted nowhere" stays
true for the rest of the tick and the placement pass may remember it. Coscheduling tries a group
and may roll it back; a journal restores exactly the earlier state.

This object is mutable, but it never outlives the pure `schedule` call that creates it.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, KeysView, Mapping, Set
from functools import partial
from operator import itemgetter
from typing import NamedTuple

from iris.core.bands import Band
from iris.core.constraints import Constraint
from iris.scheduler.fit import Shape, Vector, add, demand, fits
from iris.scheduler.index import ClusterIndex, Keys, Packing, WorkerClass
from iris.scheduler.snapshot import RunningTask, SchedulingSnapshot

__all__ = ["Ledger", "Pool", "WorkerClass", "best_fit"]

_first = itemgetter(0)


class EvictionSummary(NamedTuple):
    """What the preemption bounds read of the tasks on a worker that a band outranks."""

    lowest: int  # the rank of the lowest band among them
    least_work: int  # the least work lost (ms) by evicting one of that band
    largest: Vector  # the most any one of them holds, per dimension
    of_lowest: tuple[tuple[int, Vector], ...]  # (work lost, demand) of each of that band, least work first


# Takes `times` tasks of a demand from a worker's free capacity, given what one task of it weighs
# in a packed key (`Ledger.take`).
Taker = Callable[[int, Vector, int, int], None]


class Pool:
    """The workers one or more shapes may use, sorted by free capacity for best-fit bisection.

    Updates are lazy: a change of free capacity only appends the worker to the pool's change log,
    and the sorted keys are repaired when the pool is next searched. Most pools are searched
    rarely, and several changes to one worker between two searches cost one repair.

    Each demand searched here keeps where its last search ended (`starts`): every worker ordered
    before that point could not hold the demand then, except the few it keeps as candidates (they
    changed and moved there while still holding it), and free capacity does not grow within a
    tick, so the next search starts there and looks again only at those candidates and at the
    workers the log names since. Searching a pool for a demand costs the entries stepped over once
    per tick, not once per task. A trial that is rolled back restores capacity through the same
    log, so those workers are looked at again too.
    """

    __slots__ = ("current", "keys", "log", "members", "owned", "packing", "placed", "repaired", "starts")

    def __init__(
        self,
        members: tuple[int, ...],
        keys: Keys,
        base: list[int],
        current: list[int],
        packing: Packing,
        log: list[int],
    ) -> None:
        self.members = members
        self.keys = keys  # the index's ordering before the tick, shared until this pool first changes
        # Every worker's key as the ordering holds it: the index's, shared until this pool first changes.
        self.placed = base
        self.current = current  # every worker's packed key as it stands now (the ledger's)
        self.packing = packing
        self.log = log  # every member whose free capacity changed, in order, repeats kept
        self.repaired = 0  # how much of the log the keys reflect
        # demand -> (where to search from, how much of the log was read, candidates before that,
        # the demand's own key)
        self.starts: dict[Vector, tuple[int, int, set[int] | None, int]] = {}
        self.owned = False

    def refresh(self) -> Keys:
        """The sorted keys, repaired for every worker whose free capacity changed."""
        log = self.log
        done = self.repaired
        if done < len(log):
            if not self.owned:
                self.keys, self.placed, self.owned = list(self.keys), list(self.placed), True
            keys, placed, current = self.keys, self.placed, self.current
            for w in (log[done],) if len(log) - done == 1 else set(log[done:]):
                new = current[w]
                old = placed[w]
                if old != new:
                    del keys[bisect_left(keys, old)]
                    insort(keys, new)
                    placed[w] = new
            self.repaired = len(log)
        return self.keys

    def best_fit(self, need: Vector, free: list[Vector]) -> int | None:
        """The member with the least free capacity that still fits `need` (see the class)."""
        found = self.fill(need, free, 0, None)
        return found[0][0] if found else None

    def fill(self, need: Vector, free: list[Vector], want: int, take: Taker | None) -> list[tuple[int, int]]:
        """Places up to `want` tasks of `need` through `take`, each on the best fit as it stands
        then, as many on one worker as it holds: [(worker, tasks)]. Without `take`, only finds
        the best fit: [(worker, 0)], or [] when no member holds `need`.

        The search after a worker is filled goes on where the last one stopped: the filled worker
        holds no more of `need`, nothing else changed, and the sorted keys are repaired for it at
        the next `refresh`, where the log names it. So the searches are those one `best_fit` per
        worker would make, from the same state, with the same answers.
        """
        keys = self.refresh()
        log = self.log
        n0, c, m, d = need
        known = self.starts.get(need)
        if known is None:
            # Entries before the demand's own key are short in their first differing dimension.
            probe = self.packing.probe(need)
            if probe is None:
                return []  # more than any worker has
            start, seen, held = probe, 0, None
        else:
            start, seen, held, probe = known
        i = bisect_left(keys, start)
        changes = len(log) - seen
        if changes and start != probe:
            if changes > _FEW and changes > i - (first := bisect_left(keys, probe)):
                start, held, i = probe, None, first  # stepping over what lies before start again costs less
            else:
                held = held.union(log[seen:]) if held else set(log[seen:])
        best = None
        kept: set[int] = _NONE
        current = self.current
        if held:
            # Workers that changed (or held the demand before start when last asked): those that
            # still hold it and sort before start are candidates the scan below would not reach.
            kept = set()
            for w in held:
                f = free[w]
                if f[0] >= n0 and f[1] >= c and f[2] >= m and f[3] >= d:
                    key = current[w]
                    if key < start:
                        kept.add(w)
                        if best is None or key < best:
                            best = key
        mask, end = self.packing.mask, self.packing.end
        step = probe - self.packing.zero  # what one task of `need` weighs in a key
        n = len(keys)
        found: list[tuple[int, int]] = []
        while True:
            # Entries at or after `start` have enough devices; one by one (measured on the
            # scheduler benchmark, stepping beats jumping ahead by bisection). The scan stops at
            # the first that fits, or where a candidate sorts first.
            if best is None:
                while i < n:
                    key = keys[i]
                    f = free[key & mask]
                    if f[1] >= c and f[2] >= m and f[3] >= d:
                        best = key
                        break
                    i += 1
                    if i < n and keys[i] <= (key := key | mask):
                        # The next entries hold the same free capacity (their keys differ only in
                        # the position): as short, so stepped over together.
                        i = bisect_left(keys, key + 1, i + 1)
            else:
                while i < n:
                    key = keys[i]
                    if key >= best:
                        break
                    f = free[key & mask]
                    if f[1] >= c and f[2] >= m and f[3] >= d:
                        best = key
                        break
                    i += 1
            # Every entry the scan passed is short of the demand: the next search starts after them
            # (kept when the search returns: none reads it while this one fills).
            at, read = keys[i] if i < n else end, len(log)
            if best is None:
                self.starts[need] = (at, read, kept or None, probe)
                return found
            w = best & mask
            if take is None:
                self.starts[need] = (at, read, kept or None, probe)
                found.append((w, 0))
                return found
            k = 1
            if want > 1:
                # `copies(free[w], need, want) or 1`, written out: a tick fills a worker for
                # every run of tasks it places.
                f = free[w]
                k = want
                if n0 > 0 and f[0] // n0 < k:
                    k = f[0] // n0
                if c > 0 and f[1] // c < k:
                    k = f[1] // c
                # Memory and disk are multi-digit integers, which divide far slower than they
                # multiply: `f // m < k` is `f < m * k` (m > 0), and the quotient is taken only then.
                if m > 0 and f[2] < m * k:
                    k = f[2] // m
                if d > 0 and f[3] < d * k:
                    k = f[3] // d
                if k < 1:
                    k = 1
            take(w, need, k, step)
            found.append((w, k))
            via_scan = w not in kept
            if via_scan:
                # The scan found `w` at `i`: its entry moves to its new key now, where its place is
                # known, rather than at the next `refresh`, which would bisect for it. The key only
                # shrank, so only entries before `i` move and those after it keep their places.
                new = current[w]
                if new < best:
                    if not self.owned:
                        keys = self.keys = list(keys)
                        self.placed = list(self.placed)
                        self.owned = True
                    j = bisect_left(keys, new, 0, i)
                    if j == i:
                        keys[i] = new
                    else:
                        del keys[i]
                        keys.insert(j, new)
                    self.placed[w] = new
            want -= k
            if want <= 0:
                self.starts[need] = (at, read, kept or None, probe)
                return found
            # `w` is full for `need` now: the next search looks at the other candidates and at
            # the entries after the one it stopped on (`w`'s, when the scan found it).
            if via_scan:
                i += 1
            else:
                kept.discard(w)
            best = min([current[x] for x in kept]) if kept else None


# Workers a shape may use (in all its levels, or within one group) up to which a best-fit search
# looks at each of them instead of keeping sorted pools: for a few workers the look costs less than
# making the pools, and than passing every later change of those workers on to them.
_SCANNED = 40
_NONE: set[int] = set()  # no candidates (never added to)
_RUN = 8  # entries after a run's second that a first bisection looks at (see `Pool.fill`)
_FEW = 16  # changes since a search below which they are looked at one by one


def _scanned(levels: list[tuple[int, ...]]) -> bool:
    """Whether a search over these levels scans them rather than keeping pools (see `_SCANNED`)."""
    return sum(map(len, levels)) <= _SCANNED


def best_fit(plan: list[Pool], need: Vector, free: list[Vector]) -> int | None:
    """The worker with the least free capacity that still fits `need`, from the first pool (the
    best preference level) that has one."""
    for pool in plan:
        w = pool.best_fit(need, free)
        if w is not None:
            return w
    return None


def scanned_best_fit(levels: list[tuple[int, ...]], need: Vector, free: list[Vector]) -> int | None:
    """`best_fit` as defined, by looking at every worker of each preference level in turn."""
    for members in levels:
        fitting = [(*free[w], w) for w in members if fits(free[w], need)]
        if fitting:
            return min(fitting)[4]
    return None


# Finds the best fit for a demand given the free capacity: `best_fit` over a plan, or the scan.
Finder = Callable[[Vector, list[Vector]], int | None]


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
        self.key: list[int] = list(ix.key)  # packed (see `index.Packing`), as `free` stands
        self._pack = ix.packing.key
        # Free capacity -> its key at position 0 (a worker's key adds its position): workers
        # left with the same free capacity are common, and packing is a Python call.
        self._packed: dict[Vector, int] = {}
        self.evicted: set[str] = set()
        self._changed: set[int] = set()  # workers whose free capacity changed this tick
        # A worker's stamp changes whenever its free capacity or victims do, to a value never used
        # before; undoing a trial restores the earlier stamps along with the earlier state.
        self.version = [0] * len(self.workers)
        self._stamp = 0
        self._pools: dict[tuple[int, ...], Pool] = {}
        # By the number of a worker set (`ClusterIndex.set_ids`), the logs of its workers whose free
        # capacity changed, in order, repeats kept: [every change (a pool's log), the changes kept]
        # (what the group counts read: they never look inside a trial, and a trial rolled back
        # leaves the state as it was, so only changes outside a trial and those of trials kept).
        # One list per set and kind, however many readers share it; None until one asks for it.
        self._logs: dict[int, list[list[int] | None]] = {}
        # Per worker changed this tick, the logs a change of it goes to: ([every change],
        # [changes kept]). Looked up in the worker's sets on its first change; a log made later is
        # added to the entries of its workers that have one. A worker belongs to many sets, few of
        # which have a log in one tick, and most workers do not change in a tick.
        self._sinks: dict[int, tuple[list[list[int]], list[list[int]]]] = {}
        self._plans: dict[tuple, list[Pool]] = {}
        self._group_levels: dict[tuple, dict[tuple[str, str], list[tuple[int, ...]]]] = {}
        self._group_plans: dict[tuple, list[Pool]] = {}
        # (shape, group) -> its finder: a shape hashes once (its constraints' hashes are
        # the cost of keying by what it may use), and a job asks for its finder on every placement.
        self._finders: dict[tuple, Finder] = {}
        self._evictable: dict[tuple[int, Band], tuple[Vector, tuple[RunningTask, ...]]] = {}
        # (worker, band) -> (now_ms, `eviction_summary`): dropped with the worker's evictable tasks
        self._summaries: dict[tuple[int, Band], tuple[int, EvictionSummary | None]] = {}
        self._journal: list[tuple] | None = None
        # Per demand (coscheduled requests, `gangs.GangSlots`): how many tasks of it each worker
        # held before the tick, and ((its stamp, how many) it holds) as last worked out, without
        # a limit per worker; every request of that demand reads them, whatever its constraints
        # and replica count.
        self._holding: dict[Vector, tuple[dict[int, int], dict[int, tuple[int, int]], set[int]]] = {}

    def log(self, number: int, members: Set[int] | KeysView[int], inside_trials: bool = True) -> list[int]:
        """The log of the workers of set `number` (`members`) whose free capacity changes from now
        on, in order, repeats kept (without `inside_trials`: changes outside a trial, and those of
        trials kept). Shared by every reader of the set: each keeps how far it has read."""
        entry = self._logs.get(number)
        if entry is None:
            entry = self._logs[number] = [None, None]
        kind = 0 if inside_trials else 1
        log = entry[kind]
        if log is None:
            log = entry[kind] = []
            sinks = self._sinks
            for w in sinks.keys() & members:
                sinks[w][kind].append(log)
        return log

    def _sinks_of(self, w: int) -> tuple[list[list[int]], list[list[int]]]:
        """The logs a change of worker `w` goes to: ([every change], [changes kept])."""
        found = self._sinks.get(w)
        if found is None:
            every, kept = [], []
            logs = self._logs
            for number in self.ix.member_of.get(w, ()):
                entry = logs.get(number)
                if entry is not None:
                    if entry[0] is not None:
                        every.append(entry[0])
                    if entry[1] is not None:
                        kept.append(entry[1])
            found = self._sinks[w] = (every, kept)
        return found

    def holding(self, need: Vector) -> tuple[dict[int, int], dict[int, tuple[int, int]], set[int]]:
        """For one demand: per worker, how many tasks of it the worker held before the tick,
        (its stamp, how many it holds then) as last worked out, and the workers known to have
        held none before the tick; filled by their readers. A stamp names one state of a worker
        (see `version`), so an entry whose stamp is the worker's own is current."""
        found = self._holding.get(need)
        if found is None:
            found = self._holding[need] = ({}, {}, set())
        return found

    def changed_among(self, workers: Mapping[int, object]) -> set[int]:
        """The workers among `workers` whose free capacity changed this tick."""
        return workers.keys() & self._changed

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
            ix = self.ix
            log = self.log(ix.register(members), ix.member_set(members))  # a set has one pool: its own log
            pool = self._pools[members] = Pool(members, ix.sorted_keys(members), ix.key, self.key, ix.packing, log)
            changed = self._changed
            if len(members) < len(changed):
                pool.log.extend(w for w in members if w in changed)
            else:
                inside = ix.member_set(members)
                pool.log.extend(w for w in changed if w in inside)
        return pool

    def plan(self, shape: Shape) -> list[Pool]:
        """The pools a shape searches, in preference order."""
        key = shape.where
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = [self.pool(m) for m in self.ix.search_sets(shape)]
        return plan

    def pools(self, shape: Shape) -> list[Pool] | None:
        """The pools a shape searches, in preference order, or None when it may use few workers
        (see `finder`)."""
        return None if _scanned(self.ix.levels(shape)) else self.plan(shape)

    def group_levels(self, shape: Shape) -> dict[tuple[str, str], list[tuple[int, ...]]]:
        """Per coscheduling group (shared `tpu-name`, `pool`, or backend), the workers a shape may
        use there, split into preference levels, in group order."""
        key = shape.where
        levels = self._group_levels.get(key)
        if levels is None:
            levels = self._group_levels[key] = dict(self.ix.group_levels(shape))
        return levels

    def group_plan(self, shape: Shape, group: tuple[str, str]) -> list[Pool]:
        """The pools a shape searches within one group, created only for groups searched this tick."""
        key = (shape.where, group)
        plan = self._group_plans.get(key)
        if plan is None:
            plan = self._group_plans[key] = [
                self.pool(m) for m in self.ix.group_search_sets(shape, group, self.group_levels(shape)[group])
            ]
        return plan

    def finder(self, shape: Shape, group: tuple[str, str] | None = None) -> Finder:
        """How to find the best fit for `shape` (within `group` when given): through the pools,
        or, where it may use few workers, by scanning its preference levels."""
        key = (shape, group)
        find = self._finders.get(key)
        if find is None:
            levels = self.ix.levels(shape) if group is None else self.group_levels(shape)[group]
            if _scanned(levels):
                find = partial(scanned_best_fit, levels)
            else:
                plan = self.plan(shape) if group is None else self.group_plan(shape, group)
                find = plan[0].best_fit if len(plan) == 1 else partial(best_fit, plan)
            self._finders[key] = find
        return find

    def group(self, w: int) -> tuple[str, str]:
        return self.ix.group_of[w]

    def preemptible_workers(self, shape: Shape) -> tuple[int, ...]:
        """Alive workers matching `shape` on which it may evict lower-band work (same device variant)."""
        return self.ix.preemptible_workers(shape)

    # -- changes ----------------------------------------------------------------------------

    def set_free(self, w: int, new: Vector, key: int | None = None) -> None:
        """Sets worker `w`'s free capacity to `new`; `key`, when the caller knows it, is the
        worker's packed key for `new` (see `take`), else it is packed here."""
        free = self.free
        old = free[w]
        if old == new:
            return
        journal = self._journal
        sinks = self._sinks.get(w)
        if sinks is None:
            sinks = self._sinks_of(w)
        for log in sinks[0]:
            log.append(w)
        if journal is None:
            for log in sinks[1]:
                log.append(w)
        else:
            journal.append(("free", w, old, self.version[w]))
        self._changed.add(w)
        free[w] = new
        if key is None:
            packed = self._packed.get(new)
            if packed is None:
                packed = self._packed[new] = self._pack(new, 0)
            key = packed | w
        self.key[w] = key
        self._stamp = stamp = self._stamp + 1
        self.version[w] = stamp

    def take(self, w: int, need: Vector, times: int = 1, step: int | None = None) -> None:
        """Takes `times` tasks of `need` from worker `w`; `step`, when given, is what one task of
        `need` weighs in a packed key (`Packing.zero`), so the worker's key moves without packing:
        the key's fields do not overlap, so it is a sum."""
        old = self.free[w]
        new = (old[0] - need[0] * times, old[1] - need[1] * times, old[2] - need[2] * times, old[3] - need[3] * times)
        self.set_free(w, new, None if step is None else self.key[w] - times * step)

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
            self._summaries.pop((w, band), None)

    def evictable(self, w: int, band: Band) -> tuple[Vector, tuple[RunningTask, ...]]:
        """The running tasks on a worker that `band` outranks (not yet chosen for eviction), and
        their summed demand; cached until the next eviction there."""
        found = self._evictable.get((w, band))
        if found is None:
            # `band < t.band` is `band.outranks(t.band)` (lower ranks outrank), compared in C.
            tasks = tuple(t for t in self.running_on[w] if t.task_id not in self.evicted and band < t.band)
            total = (0, 0, 0, 0)
            for task in tasks:
                total = add(total, demand(task.resources))
            found = self._evictable[(w, band)] = (total, tasks)
        return found

    def eviction_summary(self, w: int, band: Band, now_ms: int) -> EvictionSummary | None:
        """The summary of the tasks on a worker that `band` outranks (see `evictable`), work lost
        counted at `now_ms`; None when there are none. Kept until the next eviction there: the
        preemption bounds read it for every request that visits the worker."""
        known = self._summaries.get((w, band))
        if known is not None and known[0] == now_ms:
            return known[1]
        tasks = self.evictable(w, band)[1]
        found: EvictionSummary | None = None
        if tasks:
            low = max(int(t.band) for t in tasks)
            most = [0, 0, 0, 0]
            lows = []
            for task in tasks:
                held = demand(task.resources)
                for d in range(4):
                    if held[d] > most[d]:
                        most[d] = held[d]
                if int(task.band) == low:
                    lows.append((max(0, now_ms - task.started_ms), held))
            lows.sort(key=_first)
            found = EvictionSummary(low, lows[0][0], (most[0], most[1], most[2], most[3]), tuple(lows))
        self._summaries[(w, band)] = (now_ms, found)
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
            for log in self._sinks_of(w)[1]:
                log.append(w)

    def rollback_trial(self) -> None:
        journal, self._journal = self._journal or [], None
        for kind, w, what, version in reversed(journal):
            if kind == "free":
                self.set_free(w, what)
            else:
                self.evicted.discard(what)
                self._forget_evictable(w)
            self.version[w] = version  # the state is the earlier one again, and so is its stamp
