"""Decides which workers a request may use and how much each has free before a tick starts: the
worker-side half of a tick's state, kept from one tick to the next.

Why it outlives a tick: in a large cluster little changes between two ticks (a few tasks start or
end; workers come and go rarely), yet rebuilding the worker classes, the attribute indexes and the
best-fit orderings costs time in proportion to the number of workers. `advance` derives the next
tick's index from the last one, redoing only the workers whose running tasks changed, so the cost
of a tick follows what is pending and what changed rather than the size of the cluster.

An index answers only for the workers and running tasks it was built from; `SchedulingSnapshot`
carries the one made from its own workers and running tasks. The scheduler never writes into it
beyond filling its memo caches (every cached answer is a function of what the index was built
from), so the scheduler stays a pure function of its snapshot: with or without an index carried
over, the same snapshot yields the same decisions. `iris job explain` runs the pass over the same
index on a request thread while the tick may be running, so a cache holds an answer only once it
is whole.
"""

from __future__ import annotations

import threading
from bisect import bisect_left, insort
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import filterfalse

from iris.core.bands import Band
from iris.core.constraints import Constraint, Op, matches
from iris.scheduler.fit import (
    ZERO,
    Shape,
    ShapeCache,
    Vector,
    add,
    demand,
    group_of,
    preemption_allowed_on,
    preference_score,
    subtract,
    worker_attributes,
)
from iris.scheduler.gangs import Counts, count_all, recount
from iris.scheduler.gating import resource_value
from iris.scheduler.ordering import dominant_share
from iris.scheduler.snapshot import RunningTask, WorkerSnapshot

Keys = list[int]  # packed keys (see `Packing`), sorted
MAX_CACHED = 20_000  # per-request answers kept across ticks
_REGISTERING = threading.Lock()  # see ClusterIndex._register


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


_SHARED = (
    "per_worker",
    "workers",
    "index",
    "alive",
    "attributes",
    "capacity",
    "classes",
    "class_of",
    "group_of",
    "packing",
    "backend_capacity",
)
# Answers that depend on the workers alone, kept while they do not change.
_CACHES = (
    "_classes_matching",
    "_matching_classes",
    "_values",
    "_scores",
    "_matching",
    "_levels",
    "_member_sets",
    "_search",
    "_group_search",
    "_group_levels",
    "_preemptible",
    "_gang_groups",
    "never",
    "shapes",
    "member_of",
    "set_ids",
)


def _use(usage: dict[tuple[str, str], Vector], task: RunningTask, backend_id: str, sign: int) -> None:
    """Adds (or takes back) what a running task holds to its user's usage of its backend."""
    key = (task.user, backend_id)
    held = usage.get(key, ZERO)
    d0, d1, d2, d3 = demand(task.resources)
    held = (held[0] + sign * d0, held[1] + sign * d1, held[2] + sign * d2, held[3] + sign * d3)
    if held == ZERO:
        usage.pop(key, None)
    else:
        usage[key] = held


def _count(spend: dict[str, int], task: RunningTask, sign: int) -> None:
    if task.band is not Band.BATCH:
        spend[task.user] = spend.get(task.user, 0) + sign * resource_value(task.resources)
        if not spend[task.user]:
            del spend[task.user]


class Packing:
    """Packs a worker's free capacity and its position into one integer key that sorts as the
    tuple (devices, cpu, memory, disk, position) would.

    Why integers: a best-fit ordering is kept sorted while free capacity changes, and comparing
    two integers costs a fraction of comparing two tuples whose first fields are mostly equal (a
    tick compares keys tens of thousands of times). Each dimension gets a field wide enough for
    every value of the index it was made for, negative ones included (a worker whose running tasks
    exceed its capacity); `fits` tells when a value would not fit, and the index is then rebuilt
    with wider fields.
    """

    __slots__ = ("width", "offset", "wbits", "mask", "end", "key", "zero")

    def __init__(self, vectors: Iterable[Vector], positions: int) -> None:
        most = max((abs(v) for vector in vectors for v in vector), default=0)
        self.width = width = most.bit_length() + 2  # a sign bit, and room to spare
        self.offset = offset = 1 << (width - 1)
        self.wbits = wbits = max(1, positions.bit_length())
        self.mask = (1 << wbits) - 1
        self.end = 1 << (4 * width + wbits)  # sorts after every key

        def key(free: Vector, w: int, width: int = width, off: int = offset, wbits: int = wbits) -> int:
            """The key of worker position `w` with free capacity `free` (the fields are bound as
            locals: a tick packs a key on every change of free capacity)."""
            f0, f1, f2, f3 = free
            return ((((((f0 + off) << width) | (f1 + off)) << width | (f2 + off)) << width | (f3 + off)) << wbits) | w

        self.key = key
        # The fields do not overlap, so a key is a sum: taking `times` tasks of a demand from a
        # worker lowers its key by `times * (key(demand, 0) - zero)`.
        self.zero = key((0, 0, 0, 0), 0)

    def fits(self, vector: Vector) -> bool:
        """Whether every value of `vector` has room in its field."""
        off = self.offset
        return all(-off <= v < off for v in vector)

    def probe(self, need: Vector) -> int | None:
        """The key before which every worker is short of `need` in the first dimension where they
        differ; None when some value of `need` is beyond every worker's capacity."""
        if not self.fits(need):
            return None
        return self.key(need, 0)


def _static(worker: WorkerSnapshot) -> tuple:
    """What placement reads of a worker (its last contact time is not among it)."""
    return (worker.worker_id, worker.backend_id, worker.capacity, worker.attributes, worker.alive)


class ClusterIndex:
    """Workers sorted and classified, their free capacity after the running tasks, and per-request
    answers (matching workers, preference levels, best-fit orderings) computed on first use."""

    def __init__(self, workers: Sequence[WorkerSnapshot], running: Iterable[RunningTask], per_worker: bool = False):
        """`per_worker` makes every worker its own class, for snapshots whose tasks pin a `worker`."""
        self.per_worker = per_worker
        self.source = tuple(workers)
        self.workers: list[WorkerSnapshot] = sorted(workers, key=lambda w: (w.backend_id, w.worker_id))
        self.index = {w.worker_id: i for i, w in enumerate(self.workers)}
        self.alive = [w.alive for w in self.workers]
        self.attributes = [worker_attributes(w) for w in self.workers]
        if per_worker:
            for attrs, worker in zip(self.attributes, self.workers):
                attrs["worker"] = worker.worker_id
        self.capacity: list[Vector] = [demand(w.capacity) for w in self.workers]
        self.classes = self._classify()
        self.class_of = [0] * len(self.workers)
        for c, cls in enumerate(self.classes):
            for w in cls.members:
                self.class_of[w] = c
        self.group_of = [self.classes[c].group for c in self.class_of]
        self.running: dict[str, RunningTask] = {}
        self.running_on: list[list[RunningTask]] = [[] for _ in self.workers]
        self.spend: dict[str, int] = {}  # per user, the resource value of placed non-batch work
        self.job_workers: dict[str, dict[str, int | None]] = {}  # job -> its running tasks' workers
        # (user, backend) -> what the user's tasks hold on the backend's alive workers (fair share)
        self.usage: dict[tuple[str, str], Vector] = {}
        self.backend_capacity: dict[str, Vector] = {}  # what each backend's alive workers have in all
        for w, worker in enumerate(self.workers):
            if self.alive[w]:
                self.backend_capacity[worker.backend_id] = add(
                    self.backend_capacity.get(worker.backend_id, ZERO), self.capacity[w]
                )
        for task in running:
            self.running[task.task_id] = task
            slot = self.index.get(task.worker_id)
            _count(self.spend, task, 1)
            self.job_workers.setdefault(task.job_id, {})[task.task_id] = slot
            if slot is not None and self.alive[slot]:
                self.running_on[slot].append(task)
                _use(self.usage, task, self.workers[slot].backend_id, 1)
        self._shares: dict[str, int] | None = None
        self.free: list[Vector] = [self._free_of(w) for w in range(len(self.workers))]
        self.packing = Packing([*self.capacity, *self.free], len(self.workers))
        key = self.packing.key
        self.key: list[int] = [key(f, w) for w, f in enumerate(self.free)]  # packed, by position
        self._reset_caches()

    def _reset_caches(self) -> None:
        self._classes_matching: dict[Constraint, frozenset[int]] = {}
        self._matching_classes: dict[tuple, list[int]] = {}
        self._values: dict[str, dict[str, set[int]]] = {}
        self._scores: dict[tuple, list[int]] = {}
        self._matching: dict[tuple, list[int]] = {}
        self._levels: dict[tuple, list[tuple[int, ...]]] = {}
        self._member_sets: dict[tuple[int, ...], frozenset[int]] = {}
        self._search: dict[tuple, list[tuple[int, ...]]] = {}
        self._group_search: dict[tuple, list[tuple[int, ...]]] = {}
        self._group_levels: dict[tuple, list[tuple[tuple[str, str], list[tuple[int, ...]]]]] = {}
        self._preemptible: dict[tuple, tuple[int, ...]] = {}
        self._sorted: dict[tuple[int, ...], Keys] = {}  # members -> their keys, ordered by `free`
        self._carried: dict[tuple[int, ...], Keys] = {}  # the last index's, as of `_carried_key`
        self._carried_key: list[int] = []
        self._gang_groups: dict[
            tuple, tuple[dict[tuple[str, str], tuple[int, ...]], dict[int, tuple[str, str]], int]
        ] = {}
        self._gangs: dict[tuple, Counts] = {}
        self._carried_gangs: dict[tuple, Counts] = {}
        self._touched: dict[tuple, set[tuple[str, str]]] = {}  # hard -> groups with a worker moved since
        self._moved: set[int] = set()
        self.never: dict[tuple, str | None] = {}
        self.shapes = ShapeCache()  # compiled requests: a function of the request alone
        # The last tick's requests (`tick.Requests`, with its shapes from `shapes`): the next tick
        # takes them when its pending tasks and gating are the same, which it checks itself.
        self.requests: object | None = None
        # Worker sets that keep a change log in a tick (a pool's, a group count's) are numbered on
        # first use (`register`), and each worker lists the numbers of the sets it belongs to:
        # hashing a set of thousands of workers costs too much to do on every change of free
        # capacity.
        self.set_ids: dict[tuple[int, ...], int] = {}
        self.member_of: defaultdict[int, list[int]] = defaultdict(list)

    def _free_of(self, w: int) -> Vector:
        free = self.capacity[w]
        if not self.alive[w]:
            return free
        for task in self.running_on[w]:
            free = subtract(free, demand(task.resources))
        return free

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

    # -- the next tick -------------------------------------------------------------------------

    def advance(self, workers: Sequence[WorkerSnapshot], running: Iterable[RunningTask]) -> ClusterIndex:
        """The index for the next tick's workers and running tasks, reusing this one's work.

        Built from scratch when any worker came, went, or changed what placement reads of it;
        otherwise only the workers whose running tasks changed are recomputed, and the best-fit
        orderings this index handed out are carried over, repaired for those workers alone (one
        not asked for since is dropped). This index is left as it is.
        """
        workers = tuple(workers)
        same = workers is self.source or workers == self.source
        if not same and (
            len(workers) != len(self.source) or any(_static(a) != _static(b) for a, b in zip(workers, self.source))
        ):
            return ClusterIndex(workers, running, self.per_worker)
        nxt = object.__new__(ClusterIndex)
        for name in _SHARED:
            setattr(nxt, name, getattr(self, name))
        nxt.source = workers
        nxt.running = {t.task_id: t for t in running}
        old, new, index, alive = self.running, nxt.running, self.index, self.alive
        # Every running task is looked at on each tick: the tasks that went are found in C, and
        # those that came by the task's own id (read through its slot, not unpacked from items).
        gone = list(map(old.__getitem__, filterfalse(new.__contains__, old)))
        came = [t for t in new.values() if (was := old.get(t.task_id)) is not t and was != t]
        gone += [old[t.task_id] for t in came if t.task_id in old]
        nxt.spend = dict(self.spend)
        jobs = nxt.job_workers = dict(self.job_workers)
        touched = {t.job_id for t in gone} | {t.job_id for t in came}
        for job_id in touched:
            jobs[job_id] = dict(jobs.get(job_id, ()))  # copied before it changes: this index keeps its own
        usage = nxt.usage = dict(self.usage)
        nxt._shares = None
        for t in gone:
            _count(nxt.spend, t, -1)
            jobs[t.job_id].pop(t.task_id, None)
            w = index.get(t.worker_id)
            if w is not None and alive[w]:
                _use(usage, t, self.workers[w].backend_id, -1)
        for t in came:
            _count(nxt.spend, t, 1)
            jobs[t.job_id][t.task_id] = index.get(t.worker_id)
            w = index.get(t.worker_id)
            if w is not None and alive[w]:
                _use(usage, t, self.workers[w].backend_id, 1)
        for job_id in touched:
            if not jobs[job_id]:
                del jobs[job_id]
        changed: dict[int, list[RunningTask]] = {}
        for t in came:
            w = index.get(t.worker_id)
            if w is not None and alive[w]:
                changed.setdefault(w, []).append(t)
        removed = {t.task_id for t in gone}
        for t in gone:
            w = index.get(t.worker_id)
            if w is not None and alive[w]:
                changed.setdefault(w, [])
        nxt.running_on = list(self.running_on)
        nxt.free = list(self.free)
        nxt.key = list(self.key)
        packing = self.packing
        for w, added in changed.items():
            nxt.running_on[w] = [t for t in self.running_on[w] if t.task_id not in removed] + added
            free = nxt.free[w] = nxt._free_of(w)
            if not packing.fits(free):
                return ClusterIndex(workers, running, self.per_worker)  # wider fields needed
            nxt.key[w] = packing.key(free, w)
        if len(self._matching) + len(self.never) + len(self.shapes) > MAX_CACHED:
            nxt._reset_caches()  # requests come and go; start afresh rather than grow without end
        else:
            for name in _CACHES:
                setattr(nxt, name, getattr(self, name))
            nxt._sorted = {}
            nxt._gangs = {}
            nxt._carried_gangs = self._gangs
            nxt._touched = {}
            nxt.requests = self.requests
        nxt._carried = self._sorted
        nxt._carried_key = self.key
        nxt._moved = {w for w in changed if nxt.free[w] != self.free[w]}
        return nxt

    def shares(self) -> dict[str, int]:
        """Per user with running work, their dominant share (`ordering.dominant_share`): the
        largest of any backend's, over the backend's alive workers."""
        found = self._shares
        if found is None:
            found = {}
            for (user, backend_id), held in self.usage.items():
                share = dominant_share(held, self.backend_capacity[backend_id])
                if share > found.get(user, 0):
                    found[user] = share
            self._shares = found
        return found

    # -- which workers a request may use ---------------------------------------------------------

    def classes_matching(self, constraint: Constraint) -> frozenset[int]:
        """Indexes of the classes whose attributes satisfy one constraint."""
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
            index = defaultdict(set)
            for i, cls in enumerate(self.classes):
                value = cls.attributes.get(key)
                if value is not None:
                    index[str(value).lower()].add(i)
            self._values[key] = index  # only once whole: `explain` may read it from another thread
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

    def _split(self, shape: Shape, workers: list[int]) -> list[tuple[int, ...]]:
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

    def levels(self, shape: Shape) -> list[tuple[int, ...]]:
        """The alive workers a shape may use, split into preference levels, best first."""
        key = shape.where
        found = self._levels.get(key)
        if found is None:
            found = self._levels[key] = self._split(shape, self.matching(shape.hard))
        return found

    def search_sets(self, shape: Shape) -> list[tuple[int, ...]]:
        """The worker sets a best-fit search for `shape` visits in turn: its preference levels,
        each joined with the levels before it (see `cumulative`)."""
        key = shape.where
        found = self._search.get(key)
        if found is None:
            found = self._search[key] = self.cumulative(self.levels(shape))
        return found

    def group_search_sets(
        self, shape: Shape, group: tuple[str, str], levels: list[tuple[int, ...]]
    ) -> list[tuple[int, ...]]:
        """`search_sets` within one coscheduling group, given its levels (from `group_levels`)."""
        key = (shape.where, group)
        found = self._group_search.get(key)
        if found is None:
            found = self._group_search[key] = self.cumulative(levels)
        return found

    def cumulative(self, levels: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
        """Each level joined with every level before it, in index order.

        A search visits a level only when no worker of the levels before it fits, so the best fit
        among a level and those before it is the best fit of that level: the answers are the same,
        and the last set (every worker the shape may use) is one set shared by every shape with
        the same hard constraints, whatever it prefers. Fewer, shared sets are fewer orderings to
        keep when a worker's free capacity changes.
        """
        sets: list[tuple[int, ...]] = []
        joined: tuple[int, ...] = ()
        for level in levels:
            joined = level if not joined else tuple(sorted(joined + level))
            sets.append(joined)
        return sets

    def group_levels(self, shape: Shape) -> list[tuple[tuple[str, str], list[tuple[int, ...]]]]:
        """Per coscheduling group (shared `tpu-name`, `pool`, or backend), the levels a shape uses there."""
        key = shape.where
        found = self._group_levels.get(key)
        if found is None:
            by_group: dict[tuple[str, str], list[int]] = defaultdict(list)
            for w in self.matching(shape.hard):
                by_group[self.group_of[w]].append(w)
            found = self._group_levels[key] = [(g, self._split(shape, by_group[g])) for g in sorted(by_group)]
        return found

    def register(self, members: tuple[int, ...]) -> int:
        """The number of a worker set, given on its first use (see `set_ids`): only sets that
        keep a change log are numbered, so a worker lists only those."""
        number = self.set_ids.get(members)
        if number is None:
            # Under a lock, and a set's number is published only once its workers list it:
            # `explain` may number sets while the tick reads them, and a change log kept for a
            # number that some of its workers do not list yet would miss their changes.
            with _REGISTERING:
                number = self.set_ids.get(members)
                if number is None:
                    number = len(self.set_ids)
                    for w in members:
                        self.member_of[w].append(number)
                    self.set_ids[members] = number
        return number

    def preemptible_workers(self, shape: Shape) -> tuple[int, ...]:
        """Alive workers matching `shape` on which it may evict lower-band work (same device variant)."""
        key = shape.evicts_among
        found = self._preemptible.get(key)
        if found is None:
            found = self._preemptible[key] = tuple(
                w for w in self.matching(shape.hard) if preemption_allowed_on(shape, self.workers[w])
            )
        return found

    def gang_groups(
        self, hard: tuple[Constraint, ...]
    ) -> tuple[dict[tuple[str, str], tuple[int, ...]], dict[int, tuple[str, str]], int]:
        """The alive workers matching `hard` per coscheduling group, each worker's group, and the
        number of the whole set (see `register`)."""
        found = self._gang_groups.get(hard)
        if found is None:
            members = self.matching(hard)
            by_group: dict[tuple[str, str], list[int]] = defaultdict(list)
            for w in members:
                by_group[self.group_of[w]].append(w)
            groups = {g: tuple(ws) for g, ws in by_group.items()}
            found = self._gang_groups[hard] = (
                groups,
                {w: self.group_of[w] for w in members},
                self.register(tuple(members)),
            )
        return found

    def gang_counts(self, hard: tuple[Constraint, ...], need: Vector, limit: int) -> Counts:
        """Per group, how many tasks of `need` the workers matching `hard` hold before the tick,
        each counted up to `limit` (see `gangs`). Shared: a caller that changes them works on copies."""
        key = (hard, need, limit)
        found = self._gangs.get(key)
        if found is None:
            groups, group_of, _ = self.gang_groups(hard)
            carried = self._carried_gangs.get(key)
            if carried is None:
                found = count_all(self.free, groups, need, limit)
            else:
                touched = self._touched.get(hard)
                if touched is None:
                    touched = self._touched[hard] = {group_of[w] for w in self._moved if w in group_of}
                found = carried
                if touched:
                    found = (dict(carried[0]), list(carried[1]))
                    recount(found, self.free, groups, touched, need, limit)
            self._gangs[key] = found
        return found

    def member_set(self, members: tuple[int, ...]) -> frozenset[int]:
        """`members` as a set, for membership tests (kept while the workers are)."""
        found = self._member_sets.get(members)
        if found is None:
            found = self._member_sets[members] = frozenset(members)
        return found

    def sorted_keys(self, members: tuple[int, ...]) -> Keys:
        """The packed keys of `members` before the tick, sorted (by free capacity, then position).
        Shared: a caller that changes them works on a copy."""
        found = self._sorted.get(members)
        if found is None:
            carried = self._carried.get(members)
            if carried is not None:
                inside = self.member_set(members)
                touched = inside.intersection(self._moved)
                found = carried
                if touched:
                    found = list(carried)
                    before, key = self._carried_key, self.key
                    repair(found, [(before[w], key[w]) for w in touched])
            else:
                key = self.key
                found = sorted([key[w] for w in members])
            self._sorted[members] = found
        return found


def repair(keys: Keys, moves: Iterable[tuple[int, int]]) -> None:
    """Moves each key of `moves` (old, new) to where its new value sorts."""
    for old, new in moves:
        if old != new:
            del keys[bisect_left(keys, old)]
            insort(keys, new)
