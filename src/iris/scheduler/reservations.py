"""Decides reservations and backfill: which workers the first job of a band that does not fit
will start on as soon as they free up, what of their free capacity is held for it meanwhile, and
which later jobs may still start on that held capacity because they end before it is needed.

Why: placement in order alone starves a large job behind a stream of small ones — each time a
device frees, the next small job takes it, and eight free devices never meet on one worker. So
within a band the first job that waits gets a reservation (Slurm's backfill idea): from the time
limits of the tasks on each worker the shape may use (those already running and those placed
earlier this tick), the worker or coscheduling group where it could start soonest, and when. Of
that worker's free capacity the part it needs at that time and that nothing due to end by then
will give back is *held*: taken out of the ledger before later jobs are placed, so no later job
can take it, and capacity only ever shrinks within the tick, as the placement pass requires. A
later job whose own time limit ends before the expected start may still use held capacity
(backfill, `backfill`): it is gone by the time the reservation needs it. A job without a limit
never backfills, and where the expected start rests on a task without a limit it is unknown and
the hold stands with no backfill at all, so a big job is never starved either way.

The kernel is pure: the time a reservation was first held comes from the snapshot
(`SchedulingSnapshot.reserved_since`), which the tick shell carries from one result to the next.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from iris.scheduler.fit import Shape, Vector, copies, demand, fits
from iris.scheduler.ledger import Ledger
from iris.scheduler.ordering import JobRequest
from iris.scheduler.snapshot import Assignment, PendingTask, Reservation, assignments

__all__ = ["Hold", "Reservations", "clock", "reserve"]


@dataclass(slots=True)
class Hold:
    """One reservation and the free capacity held for it, per worker position."""

    reservation: Reservation
    held: dict[int, Vector]


@dataclass(slots=True)
class Reservations:
    """The holds a tick made, by the band of the job holding each (one per band)."""

    by_band: dict[object, Hold] = field(default_factory=dict)
    # job -> what it waits for, said before its hold was taken (its reason, after the reservation)
    sentences: dict[str, str] = field(default_factory=dict)

    @property
    def holds(self) -> list[Hold]:
        return list(self.by_band.values())

    def holder(self, job_id: str) -> Hold | None:
        for hold in self.by_band.values():
            if hold.reservation.job_id == job_id:
                return hold
        return None


def clock(ms: int) -> str:
    """A time of day as reasons give it (UTC, to the second)."""
    return time.strftime("%H:%M:%S UTC", time.gmtime(ms / 1000))


def _timelines(
    ledger: Ledger, workers: set[int], pending: Sequence[PendingTask], placed: Sequence[Assignment], now_ms: int
) -> dict[int, list[tuple[int | None, Vector]]]:
    """Per worker of `workers`: (end or None, demand) of what holds capacity there now."""
    out: dict[int, list[tuple[int | None, Vector]]] = {w: [] for w in workers}
    for w in workers:
        for running in ledger.running_on[w]:
            if running.task_id not in ledger.evicted:
                out[w].append((running.ends_ms, demand(running.resources)))
    index = ledger.index
    by_id: dict[str, PendingTask] | None = None  # made only when a task placed this tick is there
    for a in placed:
        at = index.get(a.worker_id)
        if at is not None and at in out:
            if by_id is None:
                by_id = {t.task_id: t for t in pending}
            task = by_id[a.task_id]
            end = now_ms + task.limit_ms if task.limit_ms else None
            out[at].append((end, demand(task.resources)))
    return out


def _released_by(line: list[tuple[int | None, Vector]], t: int) -> Vector:
    got = [0, 0, 0, 0]
    for end, need in line:
        if end is not None and end <= t:
            for d in range(4):
                got[d] += need[d]
    return (got[0], got[1], got[2], got[3])


def _at(free: Vector, line: list[tuple[int | None, Vector]], t: int) -> Vector:
    r = _released_by(line, t)
    return (free[0] + r[0], free[1] + r[1], free[2] + r[2], free[3] + r[3])


def _earliest(
    ledger: Ledger, levels: list[tuple[int, ...]], lines: dict, need: Vector, n: int, now_ms: int
) -> tuple[int, dict[int, int]] | None:
    """The earliest time at which the workers of `levels` hold `n` tasks of `need` together, and
    how many each then holds (best preference level first), or None when no known end gets there."""
    members = [w for level in levels for w in level]
    times = sorted({max(end, now_ms) for w in members for end, _ in lines[w] if end is not None})
    for t in times:
        counts: dict[int, int] = {}
        left = n
        for w in members:
            k = copies(_at(ledger.free[w], lines[w], t), need, left)
            if k:
                counts[w] = k
                left -= k
                if left == 0:
                    return t, counts
    return None


def _closest(ledger: Ledger, levels: list[tuple[int, ...]], need: Vector, n: int) -> dict[int, int] | None:
    """Where a reservation whose start is unknown goes: the workers that could hold `n` tasks of
    `need` with the most free now, best level first; None when their capacity cannot."""
    members = [w for level in levels for w in level]
    able = [w for w in members if copies(ledger.capacity[w], need, n)]
    able.sort(key=lambda w: tuple(-x for x in ledger.free[w]))
    counts: dict[int, int] = {}
    left = n
    for w in able:
        k = copies(ledger.capacity[w], need, left)
        counts[w] = k
        left -= k
        if left <= 0:
            return counts
    return None


def reserve(
    ledger: Ledger,
    state: Reservations,
    request: JobRequest,
    waiting: int,
    snapshot_pending: Sequence[PendingTask],
    placed: Sequence[Assignment],
    now_ms: int,
    since: int | None,
) -> Hold | None:
    """Makes the reservation of `request` (of which `waiting` tasks wait) and takes what it holds
    out of the ledger; None when no workers could ever hold it."""
    shape: Shape = request.shape
    need = shape.need
    n = waiting if request.coscheduled else 1
    if request.coscheduled:
        groups = ledger.group_levels(shape)
        candidates = [(g, lv) for g, lv in groups.items() if request.pinned_group in (None, g)]
    else:
        levels = ledger.ix.levels(shape)
        # A worker of a better preference level first; each worker is its own group.
        candidates = [((ledger.workers[w].worker_id, str(i)), [(w,)]) for i, level in enumerate(levels) for w in level]
    if not candidates:
        return None
    workers = {w for _, lv in candidates for level in lv for w in level}
    lines = _timelines(ledger, workers, snapshot_pending, placed, now_ms)
    best: tuple[int, int, dict[int, int]] | None = None
    for order, (_, lv) in enumerate(candidates):
        found = _earliest(ledger, lv, lines, need, n, now_ms)
        if found is not None and (best is None or (found[0], order) < (best[0], best[1])):
            best = (found[0], order, found[1])
    start: int | None = None
    counts: dict[int, int] | None = None
    if best is not None:
        start, counts = best[0], best[2]
    else:
        for _, lv in candidates:
            counts = _closest(ledger, lv, need, n)
            if counts is not None:
                break
    if counts is None:
        return None
    held: dict[int, Vector] = {}
    for w, k in counts.items():
        released = _released_by(lines[w], start) if start is not None else (0, 0, 0, 0)
        free = ledger.free[w]
        # Never below zero: a worker run over its capacity has nothing free to hold, and a negative
        # hold would hand capacity out that the placement pass already found short.
        hold = tuple(max(0, min(free[d], need[d] * k - released[d])) for d in range(4))
        held[w] = (hold[0], hold[1], hold[2], hold[3])
        ledger.set_free(w, (free[0] - hold[0], free[1] - hold[1], free[2] - hold[2], free[3] - hold[3]))
    names = tuple(ledger.workers[w].worker_id for w in sorted(counts))
    first = ledger.workers[min(counts)]
    reservation = Reservation(
        job_id=request.job_id,
        band=request.band,
        worker_ids=names,
        backend_id=first.backend_id,
        start_ms=start,
        since_ms=since if since is not None else now_ms,
    )
    hold_ = Hold(reservation, held)
    state.by_band[request.band] = hold_
    return hold_


def backfill(
    ledger: Ledger, holds: Sequence[Hold], shape: Shape, tasks: Sequence[PendingTask], now_ms: int
) -> list[Assignment]:
    """Places, in order, those of `tasks` (one job's, all with the same time limit) that fit on
    capacity held for a reservation whose expected start comes after they end; stops at the first
    that does not fit."""
    limit = tasks[0].limit_ms if tasks else None
    if not limit:
        return []
    end = now_ms + limit
    usable = [h for h in holds if h.reservation.start_ms is not None and end <= h.reservation.start_ms]
    if not usable:
        return []
    allowed = set(ledger.matching(shape.hard))
    need = shape.need
    out: list[Assignment] = []
    for task in tasks:
        spot = _spot(ledger, usable, allowed, need)
        if spot is None:
            break
        hold, w = spot
        held, free = hold.held[w], ledger.free[w]
        from_held = tuple(min(held[d], need[d]) for d in range(4))
        rest = tuple(need[d] - from_held[d] for d in range(4))
        hold.held[w] = (held[0] - from_held[0], held[1] - from_held[1], held[2] - from_held[2], held[3] - from_held[3])
        ledger.set_free(w, (free[0] - rest[0], free[1] - rest[1], free[2] - rest[2], free[3] - rest[3]))
        worker = ledger.workers[w]
        out.extend(assignments((task.task_id,), worker.worker_id, worker.backend_id))
    return out


def _spot(ledger: Ledger, usable: Sequence[Hold], allowed: set[int], need: Vector) -> tuple[Hold, int] | None:
    for hold in usable:
        for w in sorted(hold.held):
            if w in allowed:
                held, free = hold.held[w], ledger.free[w]
                if fits((held[0] + free[0], held[1] + free[1], held[2] + free[2], held[3] + free[3]), need):
                    return hold, w
    return None


def release(ledger: Ledger, holds: Sequence[Hold]) -> None:
    """Gives the capacity still held back to the ledger, once the pass decides nothing more."""
    for hold in holds:
        for w, held in hold.held.items():
            if any(held):
                free = ledger.free[w]
                ledger.set_free(w, (free[0] + held[0], free[1] + held[1], free[2] + held[2], free[3] + held[3]))


def blocked_by(ledger: Ledger, holds: Sequence[Hold], shape: Shape) -> Hold | None:
    """The reservation whose held capacity would let a task of `shape` start now, if any."""
    allowed = set(ledger.matching(shape.hard))
    for hold in holds:
        for w, held in hold.held.items():
            if w in allowed and any(held):
                free = ledger.free[w]
                if fits((held[0] + free[0], held[1] + free[1], held[2] + free[2], held[3] + free[3]), shape.need):
                    return hold
    return None
