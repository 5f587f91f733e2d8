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

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from operator import attrgetter

from iris.core.bands import Band
from iris.scheduler.fit import Shape, copies
from iris.scheduler.gangs import GangSlots, Group
from iris.scheduler.ledger import Finder, Ledger, Pool
from iris.scheduler.preemption import (
    LOWEST_BAND,
    EvictionRun,
    VictimIndex,
    VictimSet,
    apply_victim_set,
    can_preempt_anything,
    cheapest_victim_set,
    reclaimable,
    victim_bounds,
)
from iris.scheduler.snapshot import Assignment, PendingTask, Preemption, RunningTask, assignments


@dataclass(slots=True)
class Search:
    """How the tick searches for one shape of independent tasks."""

    find: Finder | None  # the best-fit search where it scans its workers (None where it has pools)
    pools: list[Pool] | None
    no_fit: bool  # it fitted nowhere earlier in the tick
    shape: Shape


@dataclass(slots=True)
class Memo:
    """What the tick has already learned cannot succeed, and the indexes it keeps while it runs.

    None of it changes a decision: the tests hold the pass to `reference`, which scans every
    worker as the rules read.
    """

    no_fit: set[Shape] = field(default_factory=set)
    # By a shape's identity (a shape's hash is a Python call, and a tick looks its shape up for
    # every job; the entry holds the shape, so no other object takes its identity while it is kept).
    independent: dict[int, Search] = field(default_factory=dict)
    no_preempt: set[tuple[Shape, Band]] = field(default_factory=set)
    no_gang: set[tuple] = field(default_factory=set)
    no_room: set[tuple] = field(default_factory=set)  # ((hard, need, replicas), group or None): no free room
    victims: dict[tuple, VictimIndex] = field(default_factory=dict)
    bounds: dict[tuple, list[tuple]] = field(default_factory=dict)  # (where it evicts, band) -> victim_bounds
    gangs: dict[tuple, GangSlots] = field(default_factory=dict)  # (hard, need, replicas) -> slots per group
    # (need, band, workers) -> (state, per worker, in all): what a group's workers hold after
    # evicting all that band outranks (see `_reclaim`)
    gang_reclaim: dict[tuple, tuple] = field(default_factory=dict)
    gang_reclaim_bounds: dict[tuple, dict[Group, int]] = field(default_factory=dict)  # (need, hard, band) -> the same
    gang_workers: dict[tuple, tuple[int, ...]] = field(default_factory=dict)  # (hard, group) -> its workers
    gang_cost: dict[tuple, tuple] = field(default_factory=dict)  # (need, band, members) -> (state, run)
    gang_members: dict[tuple, tuple[int, ...]] = field(default_factory=dict)  # (evicts_among, group) -> members


@dataclass(slots=True, init=False)
class Placed:
    """The decisions made for one job."""

    assignments: list[Assignment]
    preemptions: list[Preemption]
    victims: list[RunningTask]

    def __init__(self) -> None:
        # Written out: a tick makes one per job it places, and the generated one asks of each
        # field whether it was given.
        self.assignments, self.preemptions, self.victims = [], [], []


_task_id = attrgetter("task_id")


def _assign(ledger: Ledger, placed: Placed, w: int, tasks: list[PendingTask]) -> None:
    worker = ledger.workers[w]
    worker_id, backend_id = worker.worker_id, worker.backend_id
    placed.assignments.extend(assignments(map(_task_id, tasks), worker_id, backend_id))


def _preempt_one(ledger: Ledger, placed: Placed, shape: Shape, task: PendingTask, chosen: VictimSet | None) -> bool:
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
    ledger: Ledger,
    memo: Memo,
    shape: Shape,
    band: Band,
    tasks: Sequence[PendingTask],
    now_ms: int,
    placed: Placed | None = None,
    task_ids: Sequence[str] | None = None,
) -> Placed:
    """Places as many of `tasks` as fit, in order, each on its best-fit worker, preempting when
    allowed; stops at the first task that cannot be placed. The decisions are added to `placed`
    when given (a tick passes its own lists), else to a new `Placed`; `task_ids`, when given,
    are the ids of `tasks` (a request keeps them across ticks)."""
    if placed is None:
        placed = Placed()
    entry = memo.independent.get(id(shape))
    if entry is None:
        pools = ledger.pools(shape)
        # A search through pools needs no finder: once they hold no more, the shape fits nowhere.
        find = ledger.finder(shape) if pools is None else None
        entry = memo.independent[id(shape)] = Search(find, pools, shape in memo.no_fit, shape)
    find, pools, no_fit = entry.find, entry.pools, entry.no_fit
    need = shape.need
    i, n = 0, len(tasks)
    free, hosts, assigned = ledger.free, ledger.workers, placed.assignments
    if pools is not None and not no_fit:
        ids = task_ids if task_ids is not None else tuple(map(_task_id, tasks))
        # One call per preference level places the run over as many of its workers as it takes,
        # each the best fit in turn; a level is searched once those before it hold no more (free
        # capacity only shrinks while a job is placed, so none of them holds more later).
        for pool in pools:
            for filled, k in pool.fill(need, free, n - i, ledger.take):
                worker = hosts[filled]
                run_ids = ids if k == n else ids[i : i + k]
                assigned.extend(assignments(run_ids, worker.worker_id, worker.backend_id))
                i += k
            if i == n:
                break
        no_fit = i < n
    while i < n:
        w = None if no_fit or find is None else find(need, free)
        if w is not None:
            # One search, then as many of the run as the worker holds (it stays the best fit).
            k = copies(free[w], need, n - i) or 1
            worker = hosts[w]
            run = tasks if k == n else tasks[i : i + k]
            assigned.extend(assignments(map(_task_id, run), worker.worker_id, worker.backend_id))
            ledger.take(w, need, k)
            i += k
            continue
        no_fit = entry.no_fit = True
        memo.no_fit.add(shape)
        if not can_preempt_anything(band) or (shape, band) in memo.no_preempt:
            break
        index = memo.victims.get((shape.evicts_among, band))
        if index is None:
            workers = ledger.preemptible_workers(shape)
            bounds = memo.bounds.get((workers, band))
            if bounds is None:
                bounds = memo.bounds[(workers, band)] = victim_bounds(ledger, workers, band, now_ms)
            index = memo.victims[(shape.evicts_among, band)] = VictimIndex(ledger, bounds, need, band, now_ms)
        if not _preempt_one(ledger, placed, shape, tasks[i], index.cheapest()):
            memo.no_preempt.add((shape, band))
            break
        i += 1
    return placed


def _fill_group(
    ledger: Ledger,
    find: Finder,
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
        w = find(shape.need, ledger.free)
        if w is not None:
            k = max(1, copies(ledger.free[w], shape.need, n - i))
            _assign(ledger, placed, w, tasks[i : i + k])
            ledger.take(w, shape.need, k)
            i += k
            continue
        if band is None:
            return None
        chosen = cheapest_victim_set(ledger, preemptible, shape.need, band, now_ms)
        if not _preempt_one(ledger, placed, shape, tasks[i], chosen):
            return None
        i += 1
    return placed


def _reclaim(ledger: Ledger, memo: Memo, shape: Shape, group: Group, band: Band, n: int) -> tuple[int, int]:
    """How many tasks of `shape` the group's workers hold after evicting everything `band`
    outranks, each worker counted up to `n`, and the same without a limit per worker: from what
    each worker held when last counted while no worker of the group has changed since (their
    highest stamp says so). What evictions can free only shrinks within a tick, so a group whose workers held
    fewer than `n` in all stays short of `n` without looking again."""
    workers = memo.gang_workers.get((shape.hard, group))
    if workers is None:
        workers = memo.gang_workers[(shape.hard, group)] = tuple(
            sorted(w for level in ledger.group_levels(shape)[group] for w in level)
        )
    key = (shape.need, band, workers)
    known = memo.gang_reclaim.get(key)
    if known is not None and known[2] < n:
        return known[2], known[2]
    version = ledger.version
    state = max([version[w] for w in workers], default=-1)
    if known is None or known[0] != state:
        need = shape.need
        held = tuple(copies(reclaimable(ledger, w, band)[0], need, _UNBOUNDED) for w in workers)
        known = memo.gang_reclaim[key] = (state, held, sum(held))
    return sum(c if c < n else n for c in known[1]), known[2]


_UNBOUNDED = 1 << 62


def _group_slots(
    ledger: Ledger, memo: Memo, shape: Shape, groups: dict[Group, list[tuple[int, ...]]], n: int
) -> tuple[dict[Group, int], Group | None, Callable[[], list[tuple[int, Group]]]]:
    """Per group, how many of `n` replicas its workers hold now; the tightest group holding all;
    and how to list every group as (-slots, group), the most slots first."""
    key = (shape.hard, shape.need, n)
    gang = memo.gangs.get(key)
    if gang is None:
        gang = memo.gangs[key] = GangSlots(ledger, shape.hard, shape.need, n)
    return gang.refresh(ledger.free), gang.tightest(), gang.roomiest


def _trial_floor(ledger: Ledger, members: tuple[int, ...], band: Band, now_ms: int, victims: int) -> tuple:
    """A lower bound of what a trial that must evict at least `victims` tasks on `members` costs:
    if every victim is of the lowest band held there, at least the least work lost among those."""
    low, work = -1, 0
    for w in members:
        summary = ledger.eviction_summary(w, band, now_ms)
        if summary is None:
            continue
        rank, lost = summary.lowest, summary.least_work
        if rank > low:
            low, work = rank, lost
        elif rank == low and lost < work:
            work = lost
    return (-low, victims, work)


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

    Identical tasks placed one by one on the best fit always use every slot of a group, so a group
    holds the job exactly when its slot count reaches the number of tasks; among those, the
    tightest group wins (best fit at the group level). Otherwise every group is tried with
    preemption and the cheapest victim set wins. `pinned_group` restricts the search to where the
    job's running replicas already are.
    """
    n = len(tasks)
    # Free slots only shrink within a tick: where no group (or not the pinned one) held a request
    # earlier, none does now, and a job that may not preempt needs no counting to wait.
    room = (shape.hard, shape.need, n)
    if (not can_preempt_anything(band) or (shape, n, pinned_group, band) in memo.no_gang) and (
        (room, None) in memo.no_room or (room, pinned_group) in memo.no_room
    ):
        return None
    groups = ledger.group_levels(shape)
    free_slots, tightest, ranked = _group_slots(ledger, memo, shape, groups, n)
    if tightest is None:
        memo.no_room.add((room, None))
    if pinned_group is not None:
        pinned = free_slots.get(pinned_group)
        only: list[tuple[int, Group]] = [] if pinned is None else [(-pinned, pinned_group)]
        ranked = lambda: only  # noqa: E731
        tightest = pinned_group if pinned is not None and pinned >= n else None
        if tightest is None:
            memo.no_room.add((room, pinned_group))
    if tightest is not None:
        # The group's free slots hold every task, and each step of the fill takes at least one of
        # them: it cannot fail, so it needs no trial to undo.
        return _fill_group(ledger, ledger.finder(shape, tightest), shape, None, tasks, (), now_ms)
    if not can_preempt_anything(band) or (shape, n, pinned_group, band) in memo.no_gang:
        return None
    allowed: set[int] | None = None
    reclaim_bounds = memo.gang_reclaim_bounds.setdefault((shape.need, shape.hard, band), {})
    cheapest: tuple | None = None
    # Every task that free capacity cannot hold evicts at least one task, and no eviction costs
    # less than one of the lowest band losing no work: a bound that skips the trial of a group
    # which cannot beat the cheapest found so far. Groups with the most free room go first, so the
    # first group whose bound reaches the cheapest ends the search.
    for negative_slots, group in ranked():
        if cheapest is not None and ((-LOWEST_BAND, n + negative_slots, 0), group) >= cheapest[0]:
            break
        levels = groups[group]
        # What a group's workers hold, evicting, only shrinks within a tick: each count is an
        # upper bound for the rest of it.
        most = reclaim_bounds.get(group)
        if most is not None and most < n:
            continue
        reclaim, reclaim_bounds[group] = _reclaim(ledger, memo, shape, group, band, n)
        if reclaim < n:
            continue
        members = memo.gang_members.get((shape.evicts_among, group))
        if members is None:
            if allowed is None:
                allowed = set(ledger.preemptible_workers(shape))
            members = tuple(sorted(w for level in levels for w in level if w in allowed))
            memo.gang_members[(shape.evicts_among, group)] = members
        if (
            cheapest is not None
            and (_trial_floor(ledger, members, band, now_ms, n + negative_slots), group) >= cheapest[0]
        ):
            continue
        # A trial's cost depends on the state of the workers it may evict on alone, which their
        # highest stamp identifies: the evictions measured on unchanged workers serve every request
        # of the same demand and band there, whatever its replica count.
        version = ledger.version
        state = max([version[w] for w in members], default=-1)
        key = (shape.need, band, members)
        known = memo.gang_cost.get(key)
        if known is None or known[0] != state:
            known = memo.gang_cost[key] = (state, EvictionRun(ledger, members, shape.need, band, now_ms))
        trial_cost = known[1].cost(n + negative_slots)
        if trial_cost is not None:
            cost = (trial_cost, group)
            if cheapest is None or cost < cheapest[0]:
                cheapest = (cost, group, members)
    if cheapest is None:
        memo.no_gang.add((shape, n, pinned_group, band))
        return None
    _, group, members = cheapest
    return _fill_in_trial(ledger, ledger.finder(shape, group), shape, band, tasks, members, now_ms)


def _fill_in_trial(
    ledger: Ledger,
    find: Finder,
    shape: Shape,
    band: Band | None,
    tasks: list[PendingTask],
    preemptible: tuple[int, ...],
    now_ms: int,
) -> Placed | None:
    """`_fill_group`, leaving the ledger untouched when it cannot place every task."""
    ledger.begin_trial()
    placed = _fill_group(ledger, find, shape, band, tasks, preemptible, now_ms)
    if placed is None:
        ledger.rollback_trial()
    else:
        ledger.commit_trial()
    return placed
