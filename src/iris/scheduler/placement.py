"""Decides where a job's pending tasks go this tick: best fit for independent tasks, and all at
once within one group of workers (or not at all) for coscheduled ones, preempting lower bands when
nothing fits.

Why the pass can be fast: a job's tasks share one shape, so once one of them fits nowhere the rest
cannot fit either and the pass stops scanning the job. After a best-fit worker is found, as many of
the job's tasks as fit there go there in one step; the worker stays the best fit while it has room,
because every worker ordered before it was already short. Shapes that fitted nowhere (and bands
that found nothing to preempt) are remembered for the rest of the tick, which is sound because free
capacity and the set of evictable tasks only shrink during a tick.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from iris.core.bands import Band

from iris.scheduler.fit import CPU, DEVICES, Shape, copies
from iris.scheduler.ledger import Ledger, Pool, best_fit
from iris.scheduler.preemption import apply_victim_set, can_preempt_anything, cheapest_victim_set, victim_cost
from iris.scheduler.snapshot import Assignment, PendingTask, Preemption, RunningTask


@dataclass(slots=True)
class Memo:
    """What the tick has already learned cannot succeed."""

    no_fit: set[Shape] = field(default_factory=set)
    no_preempt: set[tuple[Shape, Band]] = field(default_factory=set)
    no_gang: set[tuple] = field(default_factory=set)


@dataclass(slots=True)
class Placed:
    """The decisions made for one job."""

    assignments: list[Assignment] = field(default_factory=list)
    preemptions: list[Preemption] = field(default_factory=list)
    victims: list[RunningTask] = field(default_factory=list)


def _assign(ledger: Ledger, placed: Placed, w: int, tasks: list[PendingTask]) -> None:
    worker = ledger.workers[w]
    for task in tasks:
        placed.assignments.append(Assignment(task.task_id, worker.worker_id, worker.backend_id))


def _preempt_one(
    ledger: Ledger, placed: Placed, shape: Shape, band: Band, task: PendingTask, workers: tuple[int, ...], now_ms: int
) -> bool:
    chosen = cheapest_victim_set(ledger, workers, shape.need, band, now_ms)
    if chosen is None:
        return False
    apply_victim_set(ledger, chosen, shape.need)
    worker_id = ledger.workers[chosen.worker].worker_id
    for victim in chosen.victims:
        placed.preemptions.append(Preemption(victim.task_id, worker_id, task.task_id))
        placed.victims.append(victim)
    _assign(ledger, placed, chosen.worker, [task])
    return True


def place_independent(
    ledger: Ledger, memo: Memo, shape: Shape, band: Band, tasks: list[PendingTask], now_ms: int
) -> Placed:
    """Places as many of `tasks` as fit, in order, each on its best-fit worker, preempting when
    allowed; stops at the first task that cannot be placed."""
    placed = Placed()
    plan = ledger.plan(shape)
    need = shape.need
    i, n = 0, len(tasks)
    while i < n:
        w = None if shape in memo.no_fit else best_fit(plan, need)
        if w is not None:
            k = max(1, copies(ledger.free[w], need, n - i))
            _assign(ledger, placed, w, tasks[i : i + k])
            ledger.take(w, need, k)
            i += k
            continue
        memo.no_fit.add(shape)
        if not can_preempt_anything(band) or (shape, band) in memo.no_preempt:
            break
        if not _preempt_one(ledger, placed, shape, band, tasks[i], ledger.preemptible_workers(shape), now_ms):
            memo.no_preempt.add((shape, band))
            break
        i += 1
    return placed


def _fill_group(
    ledger: Ledger,
    plan: list[Pool],
    shape: Shape,
    band: Band | None,
    tasks: list[PendingTask],
    preemptible: tuple[int, ...],
    now_ms: int,
) -> Placed | None:
    """Places every task within one group (preempting there when `band` is given), or returns None."""
    placed = Placed()
    i, n = 0, len(tasks)
    while i < n:
        w = best_fit(plan, shape.need)
        if w is not None:
            k = max(1, copies(ledger.free[w], shape.need, n - i))
            _assign(ledger, placed, w, tasks[i : i + k])
            ledger.take(w, shape.need, k)
            i += k
            continue
        if band is None or not _preempt_one(ledger, placed, shape, band, tasks[i], preemptible, now_ms):
            return None
        i += 1
    return placed


def _group_free(ledger: Ledger, plan: list[Pool], shape: Shape) -> int:
    dim = DEVICES if shape.accelerator else CPU
    return sum(ledger.free[w][dim] for pool in plan for w in pool.members)


def place_coscheduled(
    ledger: Ledger,
    memo: Memo,
    shape: Shape,
    band: Band,
    tasks: list[PendingTask],
    pinned_group: tuple[str, str] | None,
    now_ms: int,
) -> Placed | None:
    """Places all of `tasks` inside one group of workers, or none of them.

    Without preemption the group with the least free capacity that holds them all wins (best fit
    at the group level). Otherwise every group is tried with preemption and the cheapest victim set
    wins. `pinned_group` restricts the search to where the job's running replicas already are.
    """
    groups = ledger.group_plans(shape)
    if pinned_group is not None:
        groups = [(g, plan) for g, plan in groups if g == pinned_group]
    key = (shape, len(tasks), pinned_group)
    if key not in memo.no_gang:
        ordered = sorted(groups, key=lambda item: (_group_free(ledger, item[1], shape), item[0]))
        for _, plan in ordered:
            ledger.begin_trial()
            placed = _fill_group(ledger, plan, shape, None, tasks, (), now_ms)
            if placed is not None:
                ledger.commit_trial()
                return placed
            ledger.rollback_trial()
        memo.no_gang.add(key)
    if not can_preempt_anything(band) or (key, band) in memo.no_gang:
        return None
    allowed = set(ledger.preemptible_workers(shape))
    best: tuple | None = None
    for group, plan in groups:
        members = tuple(sorted(w for pool in plan for w in pool.members if w in allowed))
        ledger.begin_trial()
        placed = _fill_group(ledger, plan, shape, band, tasks, members, now_ms)
        ledger.rollback_trial()
        if placed is not None:
            cost = (victim_cost(placed.victims, now_ms), group)
            if best is None or cost < best[0]:
                best = (cost, plan, members)
    if best is None:
        memo.no_gang.add((key, band))
        return None
    _, plan, members = best
    ledger.begin_trial()
    placed = _fill_group(ledger, plan, shape, band, tasks, members, now_ms)
    ledger.commit_trial()
    return placed
