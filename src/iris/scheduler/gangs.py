"""Decides which groups of workers can hold every replica of a coscheduled job now, and which of
them is the tightest: the group-level best fit.

Why the counts are kept rather than recounted: a job's replicas start together inside one group (a
shared `tpu-name`, `pool` or backend), and a large cluster has hundreds of groups. Counting, for
every coscheduled job, how many replicas each group could take would cost groups × workers per
job. Jobs of one request (hard constraints, demand, replica count) ask the same question, and only
the few workers a placement touches change the answer. So the count per group is kept per request:
by the worker index as it stands before a tick (carried to the next tick and recounted there only
for groups whose workers' running tasks changed), and by the tick's copy of it, moved by each worker
whose free capacity changed since it was last asked (the ledger marks them) by what that worker
holds now less what it held.
The groups able to hold the whole job are kept in a heap by (slots, group), so the tightest is
on top; the ranking of every group by free slots, which only a job that must preempt walks, is
sorted when asked.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping
from operator import neg
from typing import TYPE_CHECKING

from iris.scheduler.fit import Vector, copies

if TYPE_CHECKING:
    from iris.scheduler.ledger import Ledger

Group = tuple[str, str]
# Slots per group, and a heap of (slots, group) for the groups holding all. The heap may hold
# entries a recount has since made stale: an entry counts only while its slots are the group's.
Counts = tuple[dict[Group, int], list[tuple[int, Group]]]
# A limit no worker reaches: what a worker holds of a demand before each request's own limit caps it.
_UNCAPPED = 1 << 62


def count(free: list[Vector], members: Iterable[int], need: Vector, limit: int) -> int:
    """How many tasks of `need` the workers hold, each worker counted up to `limit`."""
    return sum(copies(free[w], need, limit) for w in members)


def counter(need: Vector, limit: int) -> Callable[[Vector], int]:
    """`copies` of `need` up to `limit` as a function of free capacity alone, reading only the
    dimensions `need` asks for (a group count asks it of every worker that changes)."""
    dims = [(d, want) for d, want in enumerate(need) if want > 0]
    if len(dims) == 3:
        (a, x), (b, y), (c, z) = dims
        (e,) = {0, 1, 2, 3} - {a, b, c}  # the dimension it does not ask for: short there if below zero

        def three(f: Vector) -> int:
            # Compared one by one: `min` and `max` parse their arguments by keyword, a cost per call.
            if f[e] < 0:
                return 0
            n = f[a] // x
            if n > limit:
                n = limit
            k = f[b] // y
            if k < n:
                n = k
            k = f[c] // z
            if k < n:
                n = k
            return n if n > 0 else 0

        return three
    if len(dims) == 2:
        (a, x), (b, y) = dims
        (e, g) = sorted({0, 1, 2, 3} - {a, b})

        def two(f: Vector) -> int:
            if f[e] < 0 or f[g] < 0:
                return 0
            n = f[a] // x
            if n > limit:
                n = limit
            k = f[b] // y
            if k < n:
                n = k
            return n if n > 0 else 0

        return two
    return lambda f: copies(f, need, limit)


def count_all(free: list[Vector], groups: Mapping[Group, tuple[int, ...]], need: Vector, limit: int) -> Counts:
    slots = {g: count(free, members, need, limit) for g, members in groups.items()}
    ready = [(s, g) for g, s in slots.items() if s >= limit]
    heapq.heapify(ready)
    return slots, ready


def recount(
    counts: Counts,
    free: list[Vector],
    groups: Mapping[Group, tuple[int, ...]],
    changed: Iterable[Group],
    need: Vector,
    limit: int,
) -> bool:
    """Recounts the `changed` groups in place; True when a count changed."""
    slots = counts[0]
    moved = []
    for g in changed:
        new = count(free, groups[g], need, limit)
        if new != slots[g]:
            slots[g] = new
            moved.append(g)
    _push_ready(counts, moved, limit)
    return bool(moved)


def _push_ready(counts: Counts, moved: Iterable[Group], limit: int) -> None:
    """Gives each group in `moved` that now holds all a fresh heap entry; its old entry, if any,
    goes stale and is dropped when it reaches the top (`tightest`). Pushing is cheaper than
    keeping a sorted list, which moves every later entry on each change."""
    slots, ready = counts
    for g in moved:
        if slots[g] >= limit:
            heapq.heappush(ready, (slots[g], g))
    if len(ready) > 2 * len(slots) + 16:
        ready[:] = [(s, g) for s, g in ready if slots[g] == s]  # drop what went stale, keep it small
        heapq.heapify(ready)


def tightest(counts: Counts) -> Group | None:
    """The group that holds all with the fewest slots (then the lowest group), dropping stale entries."""
    slots, ready = counts
    while ready:
        s, g = ready[0]
        if slots[g] == s:
            return g
        heapq.heappop(ready)
    return None


class GangSlots:
    """The tick's counts for one request: per group, how many tasks of `need` its workers hold
    now, each worker counted up to `limit` (the number of replicas).

    A group's count is the sum of its workers' own counts, so a worker whose free capacity changed
    moves its group's count by the difference between what it holds now and what it held when last
    counted (before the tick, for a worker not counted since): a change costs one worker, not a
    recount of its group. A worker that held none is passed over: the changes counted here (those
    outside a trial, and those of trials kept) only ever shrink free capacity."""

    __slots__ = (
        "need",
        "limit",
        "holds",
        "dims",
        "group_of",
        "counts",
        "dirty",
        "log",
        "read",
        "base",
        "held",
        "before",
        "now",
        "empty",
        "version",
        "_ranked",
        "_roomiest",
    )

    def __init__(self, ledger: Ledger, hard: tuple, need: Vector, limit: int) -> None:
        ix = ledger.ix
        self.need, self.limit = need, limit
        self.holds = counter(need, limit)
        dims = [(d, want) for d, want in enumerate(need) if want > 0]
        # (dimension, demand) of each of three dimensions the demand asks for, and the fourth
        # (short there when below zero), else None
        self.dims: tuple[int, ...] | None = None
        if len(dims) == 3:
            (other,) = {0, 1, 2, 3} - {d for d, _ in dims}
            self.dims = (*(v for pair in dims for v in pair), other)
        _, self.group_of, number = ix.gang_groups(hard)
        slots, ready = ix.gang_counts(hard, need, limit)
        self.counts: Counts = (dict(slots), list(ready))  # the index's are shared with later ticks
        self.base = ix.free  # the free capacity the index's counts reflect
        self.held: dict[int, int] = {}  # per worker changed this tick, what it holds as counted
        self.before, self.now, self.empty = ledger.holding(need)
        self.version = ledger.version
        self.dirty = ledger.changed_among(self.group_of)  # changed before now, not yet counted
        self.log = ledger.log(number, self.group_of.keys(), inside_trials=False)  # changed from now on
        self.read = len(self.log)
        self._ranked: list[tuple[int, Group]] | None = None
        self._roomiest: tuple[int, Group] | None = None

    def refresh(self, free: list[Vector]) -> dict[Group, int]:
        """The count per group, moved by every worker that changed since the last call."""
        dirty, log = self.dirty, self.log
        if self.read < len(log):
            dirty.update(log[self.read :])
            self.read = len(log)
        empty = self.empty
        if dirty and empty:
            # A worker that held none before the tick holds none now (what is counted here only
            # shrinks): every request of the demand passes over it, in one step.
            dirty.difference_update(empty)
        if dirty:
            slots = self.counts[0]
            held, base, group_of, holds = self.held, self.base, self.group_of, self.holds
            moved = set()
            dims = self.dims
            if dims is not None:
                # `holds` written out for a demand of three dimensions (most are): a call per
                # worker is a good part of the cost of a count.
                # What a worker holds without a limit is shared by every request of the demand
                # (see `Ledger.holding`); each request's limit caps it.
                a, x, b, y, c, z, e = dims
                limit = self.limit
                before, now, version, need = self.before, self.now, self.version, self.need
                for w in dirty:
                    old = held.get(w)
                    if old is None:
                        held_then = before.get(w)
                        if held_then is None:  # once per worker and demand in a tick: a call will do
                            held_then = before[w] = copies(base[w], need, _UNCAPPED)
                            if held_then == 0:
                                empty.add(w)
                        old = held[w] = held_then if held_then < limit else limit
                    if old == 0:
                        continue  # it held none, and what is kept outside trials only shrinks
                    stamp = version[w]
                    known = now.get(w)
                    if known is not None and known[0] == stamp:
                        holds_now = known[1]
                    else:
                        f = free[w]
                        holds_now = f[a] // x if f[e] >= 0 else 0
                        k = f[b] // y
                        if k < holds_now:
                            holds_now = k
                        if f[c] < z * holds_now:  # `f[c] // z < holds_now`, without dividing
                            holds_now = f[c] // z
                        if holds_now < 0:
                            holds_now = 0
                        now[w] = (stamp, holds_now)
                    new = held[w] = holds_now if holds_now < limit else limit
                    if new != old:
                        g = group_of[w]
                        slots[g] += new - old
                        moved.add(g)
            else:
                for w in dirty:
                    old = held.get(w)
                    if old is None:
                        old = held[w] = holds(base[w])
                    if old == 0:
                        continue  # it held none, and what is kept outside trials only shrinks
                    new = held[w] = holds(free[w])
                    if new != old:
                        g = group_of[w]
                        slots[g] += new - old
                        moved.add(g)
            dirty.clear()
            if moved:
                self._ranked = self._roomiest = None
                _push_ready(self.counts, moved, self.limit)
        return self.counts[0]

    def roomiest(self) -> list[tuple[int, Group]]:
        """Every group as (-slots, group), the most slots first (sorted when asked, as only a job
        that must preempt walks it)."""
        if self._ranked is None:
            self._ranked = sorted((-s, g) for g, s in self.counts[0].items())
        return self._ranked

    def roomiest_group(self) -> tuple[int, Group]:
        """(the most slots of any group, the lowest group with that many), as of the last
        `refresh`; kept until a count moves."""
        found = self._roomiest
        if found is None:
            slots = self.counts[0]
            if self._ranked is not None:
                negative, group = self._ranked[0]
            else:
                negative, group = min(zip(map(neg, slots.values()), slots))
            found = self._roomiest = (-negative, group)
        return found

    def tightest(self) -> Group | None:
        """The group that holds all `limit` tasks with the fewest slots (then the lowest group)."""
        return tightest(self.counts)
