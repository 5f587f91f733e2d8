"""Decides what one scheduling tick decides, written as plainly as the rules read in DESIGN.md §4
and docs/scheduling.md: the definition the fast kernel (`iris.scheduler.tick`) is tested against.

No index, no cache, no packed keys, no carried state: every best fit scans every worker, every
victim set is found by trying every worker, every coscheduled job tries every group. It imports
nothing from the kernel's modules but the snapshot types and the budget unit, so a shortcut that
goes wrong in the kernel shows up as a difference here. It is far too slow for a real tick and
is never called by the controller; the tests compare the two on generated clusters.

The rules, in the order a tick applies them:

1. Gating. A user's spend is the resource value of their running non-batch tasks (and what
   their jobs hold on peers). An interactive job of a user whose spend is over their budget
   competes as batch. A task whose scheduling deadline has passed is not placed.
2. Order. Jobs by effective band, then by their user's dominant share (below), then children of
   running jobs first (depth), then the root job's submit time, then the submit sequence, then
   the job id. A job's tasks go in replica order.
3. Never. A job no worker could ever hold (no worker, alive or down, satisfies its hard
   constraints or has the capacity; for a coscheduled job, no group could hold every replica on
   empty workers) is unschedulable. With no worker alive, everything waits.
4. Fit. A task may go on an alive worker that satisfies its hard constraints and has the free
   capacity (devices, cpu, memory, disk). Workers are split into preference levels by how many
   preferred constraints they satisfy; the best level with a fitting worker is used, and in it
   the best fit: the least free capacity, compared as (devices, cpu, memory, disk), then the
   worker order (backend id, worker id).
5. Preemption. A task that fits nowhere may evict tasks of strictly lower bands on alive workers
   of its own device variant. On each worker the victims are the lowest band first, then the
   youngest, until it fits, dropping those found unnecessary (last taken first); the cheapest
   worker wins: reaching the lowest band highest, then fewest victims, then least work lost,
   then the worker order. The task takes the freed capacity; the rest of it is not handed out
   until the next tick. A task that can neither fit nor preempt ends the job's turn.
6. Coscheduled jobs (replicas that start together) go all into one group of workers (same
   `tpu-name`, else `pool`, else backend) or not at all: the group with the fewest free slots
   that still holds every replica, else, preempting, the group whose evictions cost least. A job
   some of whose replicas run stays in their group.
7. Reservations. The first job of each band that still waits holds, on the workers where what it
   waits for could start soonest as running and just-placed tasks reach their time limits (the
   workers with most free when no end is known), the free capacity it will need there less what
   ends by then; later jobs cannot use it. After the pass, a waiting task whose own time limit
   ends before a hold's expected start may start on that hold (backfill).

Dominant share (fair share between users): per backend and per resource, what the user's running
tasks hold over what the backend's alive workers have, in tenths of a percent rounded down; the
largest of those is the user's share. Within a band the user holding least goes first, so one
user's large job cannot hold another's small job back.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from iris.core.bands import Band
from iris.core.constraints import AVAILABLE_PREFIX, Constraint, device_constraints, matches
from iris.core.resources import Resources
from iris.scheduler.gating import resource_value
from iris.scheduler.snapshot import PendingTask, RunningTask, SchedulingSnapshot, WorkerSnapshot

Vector = tuple[int, int, int, int]  # devices, cpu millicores, memory bytes, disk bytes


@dataclass(frozen=True, slots=True)
class Decisions:
    """What a tick decided, in a form both schedulers can be compared by."""

    assignments: frozenset[tuple[str, str]]  # (task, worker)
    preemptions: frozenset[tuple[str, str, str]]  # (victim task, worker, preempting task)
    never: frozenset[str]  # tasks that can never be placed
    timed_out: frozenset[str]  # tasks whose scheduling deadline passed before a placement
    waiting: frozenset[str]  # jobs with eligible tasks left pending


@dataclass(frozen=True, slots=True)
class Request:
    """A pending job as the rules read it."""

    job_id: str
    tasks: tuple[PendingTask, ...]  # eligible, in replica order
    expired: tuple[PendingTask, ...]
    need: Vector
    hard: tuple[Constraint, ...]
    preferred: tuple[Constraint, ...]
    band: Band  # after gating
    replicas: int
    coscheduled: bool
    pinned_group: tuple[str, str] | None
    key: tuple


@dataclass
class State:
    """Free capacity and evictions as the tick goes (copied whole for a coscheduled trial)."""

    free: dict[str, Vector]
    evicted: set[str] = field(default_factory=set)
    assignments: list[tuple[str, str]] = field(default_factory=list)
    preemptions: list[tuple[str, str, str]] = field(default_factory=list)
    victims: list[RunningTask] = field(default_factory=list)

    def copy(self) -> State:
        return State(dict(self.free), set(self.evicted), list(self.assignments), list(self.preemptions), [])


def demand(resources: Resources) -> Vector:
    device = resources.device
    return (device.count if device.kind != "cpu" else 0, round(resources.cpu * 1000), resources.memory, resources.disk)


def plus(a: Vector, b: Vector) -> Vector:
    return (a[0] + b[0], a[1] + b[1], a[2] + b[2], a[3] + b[3])


def minus(a: Vector, b: Vector) -> Vector:
    return (a[0] - b[0], a[1] - b[1], a[2] - b[2], a[3] - b[3])


def fits(free: Vector, need: Vector) -> bool:
    return all(f >= n for f, n in zip(free, need))


def copies(free: Vector, need: Vector, limit: int) -> int:
    """How many tasks of `need` fit in `free`, at most `limit`."""
    count = 0
    while count < limit and fits(free, need):
        free = minus(free, need)
        count += 1
    return count


def _normalized(c: Constraint) -> Constraint:
    return Constraint(c.key.strip().lower(), c.op, tuple(str(v).strip().lower() for v in c.values), c.preferred)


def constraints_of(task: PendingTask) -> tuple[tuple[Constraint, ...], tuple[Constraint, ...]]:
    """(hard, preferred): the task's own (less the keys only federation reads) and its device's."""
    own = [_normalized(c) for c in task.constraints]
    own = [c for c in own if c.key != "cluster" and not c.key.startswith(AVAILABLE_PREFIX)]
    hard = {c for c in own if not c.preferred} | {_normalized(c) for c in device_constraints(task.resources)}
    return tuple(hard), tuple({c for c in own if c.preferred})


def attributes(worker: WorkerSnapshot) -> dict[str, object]:
    attrs: dict[str, object] = {str(k).strip().lower(): v for k, v in worker.attributes.items() if v is not None}
    attrs["backend"] = worker.backend_id
    attrs["worker"] = worker.worker_id
    return attrs


def group_of(worker: WorkerSnapshot) -> tuple[str, str]:
    """The coscheduling group: the worker's `tpu-name`, else its `pool`, else its backend."""
    attrs = attributes(worker)
    for key in ("tpu-name", "pool"):
        if attrs.get(key) not in (None, ""):
            return (key, str(attrs[key]).lower())
    return ("backend", worker.backend_id)


def variant_of(worker: WorkerSnapshot) -> str:
    """The device variant a worker offers ('' without accelerators)."""
    device = worker.capacity.device
    if device.kind == "cpu" or device.count <= 0:
        return ""
    return device.variant.lower() or str(worker.attributes.get("device-variant", "")).lower() or device.kind


def may_evict_on(task: PendingTask, worker: WorkerSnapshot) -> bool:
    """Preemption stays within a device variant: cpu work evicts only on hosts without accelerators."""
    device = task.resources.device
    if not device.is_accelerator:
        return variant_of(worker) == ""
    if device.variant:
        return variant_of(worker) == device.variant.lower()
    return worker.capacity.device.kind == device.kind


def dominant_shares(workers: list[WorkerSnapshot], running: tuple[RunningTask, ...]) -> dict[str, int]:
    """Per user, the largest share of any resource of any backend their running tasks hold, in
    tenths of a percent, rounded down."""
    capacity: dict[str, Vector] = defaultdict(lambda: (0, 0, 0, 0))
    by_id = {w.worker_id: w for w in workers if w.alive}
    for w in by_id.values():
        capacity[w.backend_id] = plus(capacity[w.backend_id], demand(w.capacity))
    used: dict[tuple[str, str], Vector] = defaultdict(lambda: (0, 0, 0, 0))
    for t in running:
        if t.worker_id in by_id:
            key = (t.user, by_id[t.worker_id].backend_id)
            used[key] = plus(used[key], demand(t.resources))
    shares: dict[str, int] = defaultdict(int)
    for (user, backend), amounts in used.items():
        for have, total in zip(amounts, capacity[backend]):
            if total > 0 and have > 0:
                shares[user] = max(shares[user], have * 1000 // total)
    return shares


def requests(snapshot: SchedulingSnapshot, workers: list[WorkerSnapshot]) -> list[Request]:
    """Gating and order: every pending job, in the order the tick considers them."""
    spend: dict[str, int] = defaultdict(int, snapshot.peer_spend)
    for t in snapshot.running:
        if t.band is not Band.BATCH:
            spend[t.user] += resource_value(t.resources)
    shares = dominant_shares(workers, snapshot.running)
    by_id = {w.worker_id: w for w in workers}
    by_job: dict[str, list[PendingTask]] = defaultdict(list)
    for task in snapshot.pending:
        by_job[task.job_id].append(task)
    out = []
    for job_id, tasks in by_job.items():
        tasks.sort(key=lambda t: (t.index, t.task_id))
        first = tasks[0]
        band = first.band
        budget = snapshot.user_budgets.get(first.user, snapshot.default_budget)
        if band is Band.INTERACTIVE and budget is not None and spend[first.user] > budget:
            band = Band.BATCH
        now = snapshot.now_ms
        passed = [t.scheduling_deadline_ms is not None and now >= t.scheduling_deadline_ms for t in tasks]
        expired = [t for t, late in zip(tasks, passed) if late]
        live = [t for t, late in zip(tasks, passed) if not late]
        coscheduled = first.replicas > 1 and (first.coschedule or first.resources.device.is_accelerator)
        placed = sorted(
            (t for t in snapshot.running if t.job_id == job_id and t.worker_id in by_id), key=lambda t: t.task_id
        )
        pinned = group_of(by_id[placed[0].worker_id]) if coscheduled and placed else None
        head = (live or expired)[0]
        key = (band, shares[first.user], -head.depth, head.root_submitted_ms, head.insertion, job_id)
        hard, preferred = constraints_of(first)
        need = demand(first.resources)
        replicas = max(first.replicas, len(tasks))
        out.append(
            Request(
                job_id, tuple(live), tuple(expired), need, hard, preferred, band, replicas, coscheduled, pinned, key
            )
        )
    return sorted(out, key=lambda r: r.key)


def never_placed(request: Request, workers: list[WorkerSnapshot]) -> bool:
    """Whether no worker (alive or down) could ever hold the job, judged on empty workers."""
    if not any(w.alive for w in workers):
        return False
    matching = [w for w in workers if all(matches(c, attributes(w)) for c in request.hard)]
    roomy = [w for w in matching if fits(demand(w.capacity), request.need)]
    if not roomy:
        return True
    if not request.coscheduled:
        return False
    slots: dict[tuple[str, str], int] = defaultdict(int)
    for w in roomy:
        slots[group_of(w)] += copies(demand(w.capacity), request.need, request.replicas)
    return max(slots.values()) < request.replicas


def levels(request: Request, workers: list[WorkerSnapshot]) -> list[list[WorkerSnapshot]]:
    """The alive workers the job may use, by how many of its preferences they meet, best first."""
    by_score: dict[int, list[WorkerSnapshot]] = defaultdict(list)
    for w in workers:
        attrs = attributes(w)
        if w.alive and all(matches(c, attrs) for c in request.hard):
            by_score[sum(1 for c in request.preferred if matches(c, attrs))].append(w)
    return [by_score[s] for s in sorted(by_score, reverse=True)]


Levels = list[list[WorkerSnapshot]]


def best_fit(state: State, level_list: Levels, need: Vector, order: dict[str, int]) -> WorkerSnapshot | None:
    """The worker with the least free capacity that holds `need`, of the best level that has one."""
    for level in level_list:
        fitting = [w for w in level if fits(state.free[w.worker_id], need)]
        if fitting:
            return min(fitting, key=lambda w: (state.free[w.worker_id], order[w.worker_id]))
    return None


def victim_set(
    state: State, snapshot: SchedulingSnapshot, worker: WorkerSnapshot, need: Vector, band: Band
) -> list[RunningTask] | None:
    """The victims on one worker that make room for `need` at `band`, or None."""
    candidates = [
        t
        for t in snapshot.running
        if t.worker_id == worker.worker_id and t.task_id not in state.evicted and band.outranks(t.band)
    ]
    candidates.sort(key=lambda t: (-int(t.band), -t.started_ms, t.task_id))  # lowest band, youngest first
    have, chosen = state.free[worker.worker_id], []
    for task in candidates:
        if fits(have, need):
            break
        chosen.append(task)
        have = plus(have, demand(task.resources))
    if not chosen or not fits(have, need):
        return None
    for task in reversed(list(chosen)):
        without = minus(have, demand(task.resources))
        if fits(without, need):
            chosen.remove(task)
            have = without
    return chosen


def cost_of(victims: list[RunningTask], now_ms: int) -> tuple:
    """(the highest band reached, victims, work lost): lower is cheaper."""
    return (-int(min(v.band for v in victims)), len(victims), sum(max(0, now_ms - v.started_ms) for v in victims))


def place_one(
    state: State,
    snapshot: SchedulingSnapshot,
    request: Request,
    task: PendingTask,
    level_list: Levels,
    evictable_on: list[WorkerSnapshot],
    order: dict[str, int],
) -> bool:
    """Places one task: on its best fit, else by the cheapest preemption; False when neither."""
    worker = best_fit(state, level_list, request.need, order)
    if worker is not None:
        free = state.free[worker.worker_id]
        state.free[worker.worker_id] = minus(free, request.need)
        state.assignments.append((task.task_id, worker.worker_id))
        return True
    if request.band is Band.BATCH:
        return False  # the lowest band evicts nothing
    best: tuple[tuple, WorkerSnapshot, list[RunningTask]] | None = None
    for w in evictable_on:
        victims = victim_set(state, snapshot, w, request.need, request.band)
        if victims is not None:
            cost = (*cost_of(victims, snapshot.now_ms), order[w.worker_id])
            if best is None or cost < best[0]:
                best = (cost, w, victims)
    if best is None:
        return False
    _, w, victims = best
    old, freed = state.free[w.worker_id], (0, 0, 0, 0)
    for v in victims:
        state.evicted.add(v.task_id)
        state.preemptions.append((v.task_id, w.worker_id, task.task_id))
        state.victims.append(v)
        freed = plus(freed, demand(v.resources))
    # The preemptor takes what it needs; what is left over is not handed out this tick.
    after = minus(plus(old, freed), request.need)
    state.free[w.worker_id] = (
        min(old[0], after[0]),
        min(old[1], after[1]),
        min(old[2], after[2]),
        min(old[3], after[3]),
    )
    state.assignments.append((task.task_id, w.worker_id))
    return True


def place_independent(
    state: State, snapshot: SchedulingSnapshot, request: Request, workers: list[WorkerSnapshot], order: dict[str, int]
) -> int:
    level_list = levels(request, workers)
    evictable_on = [w for level in level_list for w in level if may_evict_on(request.tasks[0], w)]
    placed = 0
    for task in request.tasks:
        if not place_one(state, snapshot, request, task, level_list, evictable_on, order):
            break
        placed += 1
    return placed


def place_coscheduled(
    state: State, snapshot: SchedulingSnapshot, request: Request, workers: list[WorkerSnapshot], order: dict[str, int]
) -> tuple[int, State]:
    """(tasks placed, the state after): every eligible replica in one group, or none."""
    n = len(request.tasks)
    everywhere = levels(request, workers)
    groups = sorted({group_of(w) for level in everywhere for w in level})
    if request.pinned_group is not None:
        groups = [g for g in groups if g == request.pinned_group]

    def levels_in(group: tuple[str, str]) -> Levels:
        inside = [[w for w in level if group_of(w) == group] for level in everywhere]
        return [level for level in inside if level]

    def trial(group: tuple[str, str], preempt: bool) -> State | None:
        tried = state.copy()
        group_levels = levels_in(group)
        evictable_on = [w for level in group_levels for w in level if preempt and may_evict_on(request.tasks[0], w)]
        for task in request.tasks:
            if not place_one(tried, snapshot, request, task, group_levels, evictable_on, order):
                return None
        return tried

    slots = {
        g: sum(copies(state.free[w.worker_id], request.need, n) for lv in levels_in(g) for w in lv) for g in groups
    }
    ready = sorted((s, g) for g, s in slots.items() if s >= n)
    if ready:  # the tightest group that holds every replica: best fit, group by group
        done = trial(ready[0][1], preempt=False)
        assert done is not None  # free slots for every replica: the fill cannot fail
        return n, done
    if request.band is Band.BATCH:
        return 0, state
    cheapest = None
    for g in groups:
        tried = trial(g, preempt=True)
        if tried is not None:
            cost = (cost_of(tried.victims, snapshot.now_ms), g)
            if cheapest is None or cost < cheapest[0]:
                cheapest = (cost, tried)
    return (n, cheapest[1]) if cheapest is not None else (0, state)


@dataclass
class Hold:
    """Free capacity held for the first job of a band that waits, per worker, and when it is
    expected to start (None: unknown, as it rests on a task without a time limit)."""

    job_id: str
    start_ms: int | None
    held: dict[str, Vector]


Line = list[tuple[int | None, Vector]]


def timeline(
    state: State, snapshot: SchedulingSnapshot, worker: WorkerSnapshot, pending: dict[str, PendingTask]
) -> Line:
    """(end or None, demand) of what holds capacity on a worker now: its running tasks not evicted,
    and the tasks placed on it this tick (ending their time limit from now)."""
    line = [
        (t.ends_ms, demand(t.resources))
        for t in snapshot.running
        if t.worker_id == worker.worker_id and t.task_id not in state.evicted
    ]
    for task_id, worker_id in state.assignments:
        if worker_id == worker.worker_id:
            task = pending[task_id]
            line.append((snapshot.now_ms + task.limit_ms if task.limit_ms else None, demand(task.resources)))
    return line


def released_by(line: Line, t: int) -> Vector:
    got: Vector = (0, 0, 0, 0)
    for end, need in line:
        if end is not None and end <= t:
            got = plus(got, need)
    return got


def reserve(
    state: State,
    snapshot: SchedulingSnapshot,
    request: Request,
    waiting: int,
    workers: list[WorkerSnapshot],
    pending: dict[str, PendingTask],
) -> Hold | None:
    """The hold of a job that waits: where all it waits for (one task, or every waiting replica in
    one group) could start soonest as tasks reach their time limits; with no known end, the
    workers that have most free. What it needs there, less what ends by then, leaves the free
    capacity. None when no workers could ever hold it."""
    n = waiting if request.coscheduled else 1
    everywhere = levels(request, workers)
    if request.coscheduled:
        groups = sorted({group_of(w) for level in everywhere for w in level})
        candidates = [
            [[w for w in level if group_of(w) == g] for level in everywhere]
            for g in groups
            if request.pinned_group in (None, g)
        ]
        candidates = [[level for level in c if level] for c in candidates]
    else:
        candidates = [[[w]] for level in everywhere for w in level]
    lines = {w.worker_id: timeline(state, snapshot, w, pending) for c in candidates for lv in c for w in lv}
    best: tuple[int, int, dict[str, int]] | None = None
    for rank, c in enumerate(candidates):
        members = [w for level in c for w in level]
        ends = sorted({max(e, snapshot.now_ms) for w in members for e, _ in lines[w.worker_id] if e is not None})
        for t in ends:
            got: dict[str, int] = {}
            left = n
            for w in members:
                k = copies(plus(state.free[w.worker_id], released_by(lines[w.worker_id], t)), request.need, left)
                if k:
                    got[w.worker_id], left = k, left - k
                    if left == 0:
                        break
            if left == 0:
                if best is None or (t, rank) < best[:2]:
                    best = (t, rank, got)
                break
    start: int | None = None
    counts: dict[str, int] | None = None
    if best is not None:
        start, counts = best[0], best[2]
    for c in candidates if best is None else []:
        members = [w for level in c for w in level if copies(demand(w.capacity), request.need, n)]
        members.sort(key=lambda w: tuple(-x for x in state.free[w.worker_id]))
        counts, left = {}, n
        for w in members:
            k = copies(demand(w.capacity), request.need, left)
            counts[w.worker_id], left = k, left - k
            if left <= 0:
                break
        if left <= 0:
            break
        counts = None
    if not counts:
        return None
    held: dict[str, Vector] = {}
    for worker_id, k in counts.items():
        released = released_by(lines[worker_id], start) if start is not None else (0, 0, 0, 0)
        free = state.free[worker_id]
        want = minus((request.need[0] * k, request.need[1] * k, request.need[2] * k, request.need[3] * k), released)
        held[worker_id] = (  # what it wants of what is free, never below nothing
            max(0, min(free[0], want[0])),
            max(0, min(free[1], want[1])),
            max(0, min(free[2], want[2])),
            max(0, min(free[3], want[3])),
        )
        state.free[worker_id] = minus(free, held[worker_id])
    return Hold(request.job_id, start, held)


def backfill(
    state: State,
    snapshot: SchedulingSnapshot,
    request: Request,
    tasks: tuple[PendingTask, ...],
    holds: list[Hold],
    workers: list[WorkerSnapshot],
    order: dict[str, int],
) -> int:
    """Places, in order, tasks that end before a hold is needed on what it holds; stops at the
    first that does not fit."""
    limit = tasks[0].limit_ms
    if not limit:
        return 0
    usable = [h for h in holds if h.start_ms is not None and snapshot.now_ms + limit <= h.start_ms]
    allowed = {w.worker_id for level in levels(request, workers) for w in level}
    placed = 0
    for task in tasks:
        spot = next(
            (
                (h, w)
                for h in usable
                for w in sorted(h.held, key=order.__getitem__)
                if w in allowed and fits(plus(h.held[w], state.free[w]), request.need)
            ),
            None,
        )
        if spot is None:
            break
        h, w = spot
        held, need = h.held[w], request.need
        from_held = (min(held[0], need[0]), min(held[1], need[1]), min(held[2], need[2]), min(held[3], need[3]))
        h.held[w] = minus(held, from_held)
        state.free[w] = minus(state.free[w], minus(need, from_held))
        state.assignments.append((task.task_id, w))
        placed += 1
    return placed


def decide(snapshot: SchedulingSnapshot) -> Decisions:
    """The decisions of one tick over `snapshot`, by the rules above."""
    workers = sorted(snapshot.workers, key=lambda w: (w.backend_id, w.worker_id))
    order = {w.worker_id: i for i, w in enumerate(workers)}
    free: dict[str, Vector] = {}
    for w in workers:
        free[w.worker_id] = demand(w.capacity)
        for t in snapshot.running:
            if w.alive and t.worker_id == w.worker_id:  # a down worker's tasks hold nothing placeable
                free[w.worker_id] = minus(free[w.worker_id], demand(t.resources))
    state = State(free)
    never: set[str] = set()
    timed_out: set[str] = set()
    waiting: dict[str, tuple[Request, int]] = {}  # job -> (its request, tasks placed)
    pending = {t.task_id: t for t in snapshot.pending}
    holds: dict[Band, Hold] = {}  # the first job of each band that waits holds what it will start on
    for request in requests(snapshot, workers):
        if never_placed(request, workers):
            never.update(t.task_id for t in request.tasks + request.expired)
            continue
        timed_out.update(t.task_id for t in request.expired)
        if not request.tasks:
            continue
        if request.coscheduled:
            placed, after = place_coscheduled(state, snapshot, request, workers, order)
            after.victims = []
            state = after
        else:
            placed = place_independent(state, snapshot, request, workers, order)
        if placed < len(request.tasks):
            waiting[request.job_id] = (request, placed)
            if request.band not in holds:
                hold = reserve(state, snapshot, request, len(request.tasks) - placed, workers, pending)
                if hold is not None:
                    holds[request.band] = hold
    # Backfill: a waiting task whose time limit ends before a hold is needed may start on it.
    holders = {h.job_id for h in holds.values()}
    for job_id, (request, placed) in list(waiting.items()):
        if holds and not request.coscheduled and job_id not in holders:
            placed += backfill(state, snapshot, request, request.tasks[placed:], list(holds.values()), workers, order)
            if placed == len(request.tasks):
                del waiting[job_id]
    return Decisions(
        frozenset(state.assignments),
        frozenset(state.preemptions),
        frozenset(never),
        frozenset(timed_out),
        frozenset(waiting),
    )
