"""Decides which groups of workers can hold every replica of a coscheduled job now, and which of
them is the tightest: the group-level best fit.

Why the counts are kept rather than recounted: a job's replicas start together inside one group (a
shared `tpu-name`, `pool` or backend), and a large cluster has hundreds of groups. Counting, for
every coscheduled job, how many replicas each group could take would cost groups × workers per
job. Jobs of one request (hard constraints, demand, replica count) ask the same question, and only
the few workers a placement touches change the answer. So the count per group is kept per request:
by the worker index as it stands before a tick (carried to the next tick and recounted there only
for groups whose workers' running tasks changed), and by the tick's copy of it, recounted only for
groups with a worker whose free capacity changed since it was last asked (the ledger marks them).
The groups able to hold the whole job are kept sorted by (slots, group), so the tightest is first.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from iris.scheduler.fit import Vector, copies

if TYPE_CHECKING:
    from iris.scheduler.ledger import Ledger

Group = tuple[str, str]
# Slots per group; (slots, group) of the groups holding all, sorted; (-slots, group) of all, sorted.
Counts = tuple[dict[Group, int], list[tuple[int, Group]], list[tuple[int, Group]]]


def count(free: list[Vector], members: Iterable[int], need: Vector, limit: int) -> int:
    """How many tasks of `need` the workers hold, each worker counted up to `limit`."""
    return sum(copies(free[w], need, limit) for w in members)


def count_all(free: list[Vector], groups: Mapping[Group, tuple[int, ...]], need: Vector, limit: int) -> Counts:
    slots = {g: count(free, members, need, limit) for g, members in groups.items()}
    return slots, sorted((s, g) for g, s in slots.items() if s >= limit), sorted((-s, g) for g, s in slots.items())


def recount(
    counts: Counts,
    free: list[Vector],
    groups: Mapping[Group, tuple[int, ...]],
    changed: Iterable[Group],
    need: Vector,
    limit: int,
) -> None:
    """Recounts the `changed` groups in place, keeping the sorted list of those holding all."""
    slots, ready, ranked = counts
    for g in changed:
        old = slots[g]
        new = slots[g] = count(free, groups[g], need, limit)
        if old != new:
            if old >= limit:
                del ready[bisect_left(ready, (old, g))]
            if new >= limit:
                insort(ready, (new, g))
            del ranked[bisect_left(ranked, (-old, g))]
            insort(ranked, (-new, g))


class GangSlots:
    """The tick's counts for one request: per group, how many tasks of `need` its workers hold
    now, each worker counted up to `limit` (the number of replicas)."""

    __slots__ = ("need", "limit", "groups", "group_of", "counts", "dirty")

    def __init__(self, ledger: Ledger, hard: tuple, need: Vector, limit: int) -> None:
        ix = ledger.ix
        self.need, self.limit = need, limit
        self.groups, self.group_of, number = ix.gang_groups(hard)
        slots, ready, ranked = ix.gang_counts(hard, need, limit)
        self.counts: Counts = (dict(slots), list(ready), list(ranked))  # the index's are shared with later ticks
        self.dirty = ledger.changed_among(self.group_of)
        ledger.subscribe(number, self.dirty.add, inside_trials=False)

    def refresh(self, free: list[Vector]) -> dict[Group, int]:
        """The count per group, recounted where a worker changed since the last call."""
        if self.dirty:
            group_of = self.group_of
            recount(self.counts, free, self.groups, {group_of[w] for w in self.dirty}, self.need, self.limit)
            self.dirty.clear()
        return self.counts[0]

    def roomiest(self) -> list[tuple[int, Group]]:
        """Every group as (-slots, group), the most slots first."""
        return self.counts[2]

    def tightest(self) -> Group | None:
        """The group that holds all `limit` tasks with the fewest slots (then the lowest group)."""
        ready = self.counts[1]
        return ready[0][1] if ready else None
