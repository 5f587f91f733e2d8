"""Decides which groups of workers can hold every replica of a coscheduled job now, and which of
them is the tightest: the group-level best fit.

Why it is kept across the pass: a job's replicas start together inside one group (a shared
`tpu-name`, `pool` or backend), and a large cluster has hundreds of groups. Counting, for every
coscheduled job, how many replicas each group could take would cost groups × workers per job.
Jobs of one request (hard constraints, demand, replica count) ask the same question, and only the
few workers a placement touches change the answer, so the count per group is kept per request and
recounted only for groups with a worker whose free capacity changed since it was last asked (the
ledger marks them). The groups able to hold the whole job are kept sorted by (slots, group), so the
tightest is the first.
"""

from __future__ import annotations

from bisect import bisect_left, insort

from iris.scheduler.fit import Vector, copies
from iris.scheduler.ledger import Ledger, Pool

Group = tuple[str, str]


class GangSlots:
    """Per group, how many tasks of `need` its workers hold now, each worker counted up to `limit`."""

    __slots__ = ("need", "limit", "members", "group_of", "slots", "ready", "dirty")

    def __init__(self, ledger: Ledger, groups: list[tuple[Group, list[Pool]]], need: Vector, limit: int) -> None:
        self.need, self.limit = need, limit
        self.members = {g: [w for pool in plan for w in pool.members] for g, plan in groups}
        self.group_of = {w: g for g, members in self.members.items() for w in members}
        self.dirty: set[int] = set()
        ledger.watch(self.group_of, self.dirty)
        free = ledger.free
        self.slots = {g: sum(copies(free[w], need, limit) for w in members) for g, members in self.members.items()}
        self.ready = sorted((s, g) for g, s in self.slots.items() if s >= limit)

    def refresh(self, free: list[Vector]) -> dict[Group, int]:
        """The count per group, recounted where a worker changed since the last call."""
        if self.dirty:
            need, limit, slots, ready = self.need, self.limit, self.slots, self.ready
            for g in {self.group_of[w] for w in self.dirty}:
                old = slots[g]
                new = slots[g] = sum(copies(free[w], need, limit) for w in self.members[g])
                if old != new:
                    if old >= limit:
                        del ready[bisect_left(ready, (old, g))]
                    if new >= limit:
                        insort(ready, (new, g))
            self.dirty.clear()
        return self.slots

    def tightest(self) -> Group | None:
        """The group that holds all `limit` tasks with the fewest slots (then the lowest group)."""
        return self.ready[0][1] if self.ready else None
