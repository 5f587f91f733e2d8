"""Decides one scheduling tick: which pending tasks go where, which running tasks are preempted
for them, which can never run, and what every job still pending waits for.

The pipeline is gating (budgets, deadlines) → ordering (band, depth, submit time, insertion) →
unschedulable check → fit and best-fit assignment (soft constraints first) → preemption when
nothing fits → reasons. It is a pure function of the snapshot: no clock (time is
`snapshot.now_ms`), no I/O, and the same snapshot always yields the same result. The tick shell
applies the result in one transaction; `explain` re-runs the same pass to say why a job waits.
"""

from __future__ import annotations

import gc
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from itertools import compress, groupby, islice
from operator import attrgetter, eq, is_, itemgetter, lt

from iris.core.bands import Band
from iris.scheduler.fit import Shape, ShapeCache
from iris.scheduler.gating import deadline_passed, effective_band, with_peer_spend
from iris.scheduler.index import ClusterIndex
from iris.scheduler.ledger import Ledger
from iris.scheduler.ordering import JobRequest, is_coscheduled, job_order_key, task_order_key
from iris.scheduler.placement import Memo, Placed, place_coscheduled, place_independent
from iris.scheduler.reasons import PoolStats, never_fits, waiting_reason
from iris.scheduler.reservations import Reservations, backfill, blocked_by, clock, release, reserve
from iris.scheduler.snapshot import (
    Assignment,
    Estimate,
    PendingTask,
    Preemption,
    ScheduleResult,
    SchedulingSnapshot,
    Unschedulable,
)


@dataclass(slots=True)
class JobOutcome:
    """What the tick decided for one pending job."""

    request: JobRequest
    placed: int = 0
    preempted: int = 0
    unschedulable: str | None = None
    pending_reason: str | None = None


@dataclass(slots=True)
class Tick:
    """A finished pass: the ledger as it stands after it, and the per-job outcomes."""

    snapshot: SchedulingSnapshot
    ledger: Ledger
    outcomes: dict[str, JobOutcome] = field(default_factory=dict)
    assignments: list[Assignment] = field(default_factory=list)
    preemptions: list[Preemption] = field(default_factory=list)
    unschedulable: list[Unschedulable] = field(default_factory=list)
    reservations: Reservations = field(default_factory=Reservations)
    estimates: dict[str, Estimate] = field(default_factory=dict)

    def result(self) -> ScheduleResult:
        reasons = {job: o.pending_reason for job, o in self.outcomes.items() if o.pending_reason is not None}
        return ScheduleResult(
            assignments=tuple(self.assignments),
            preemptions=tuple(self.preemptions),
            unschedulable=tuple(self.unschedulable),
            pending_reasons=reasons,
            reservations=tuple(h.reservation for h in self.reservations.holds),
            estimates=self.estimates,
        )


def pending_by_job(snapshot: SchedulingSnapshot) -> dict[str, list[PendingTask]]:
    """Pending tasks grouped by job, each job's tasks in replica order."""
    return _grouped(snapshot.pending)[0]


def _grouped(pending: Sequence[PendingTask]) -> tuple[dict[str, list[PendingTask]], bool]:
    """`pending_by_job`, and whether no two tasks of a job share a `task_order_key` (their order
    then depends on the snapshot's alone, and a job's tasks are the same list whatever their order)."""
    by_job: dict[str, list[PendingTask]] = defaultdict(list)
    # A job's tasks mostly come one after another: taken a run at a time.
    for job_id, run in groupby(pending, key=_job_id):
        by_job[job_id].extend(run)
    distinct = True
    for tasks in by_job.values():
        if len(tasks) > 1:
            # Mostly in replica order already: told apart by index alone, they need no sort.
            indexes = list(map(_index, tasks))
            if not all(map(lt, indexes, islice(indexes, 1, None))):
                distinct = _in_task_order(tasks) and distinct
    return by_job, distinct


def _in_task_order(tasks: list[PendingTask]) -> bool:
    """Sorts `tasks` by `task_order_key`; False when two share it (their order is then the snapshot's)."""
    if len(tasks) < 2:
        return True
    tasks.sort(key=task_order_key)
    keys = list(map(task_order_key, tasks))
    return not any(map(eq, keys, islice(keys, 1, None)))


_job_id = attrgetter("job_id")
_index = attrgetter("index")
_task_id = attrgetter("task_id")


def deadlines(tasks: Sequence[PendingTask]) -> list[int | None]:
    """The scheduling deadline of each task (read in C: a tick looks at every pending task)."""
    return list(map(_deadline, tasks))


_deadline = attrgetter("scheduling_deadline_ms")


def _split_expired(tasks: list[PendingTask], now_ms: int) -> tuple[tuple[PendingTask, ...], tuple[PendingTask, ...]]:
    """(tasks still eligible, tasks past their scheduling deadline), each in task order."""
    if deadlines(tasks).count(None) == len(tasks):
        return tuple(tasks), ()
    live: list[PendingTask] = []
    expired: list[PendingTask] = []
    for task in tasks:
        (expired if deadline_passed(task, now_ms) else live).append(task)
    return tuple(live), tuple(expired)


@dataclass(frozen=True, slots=True)
class Requests:
    """A tick's pending jobs as placement takes them, and the gating they were decided by.

    Kept in the worker index (`ClusterIndex.requests`) for the next tick: the controller hands on
    a pending task as the same object while its row is unchanged, so a queue that only waits is
    the same tasks tick after tick, and the grouping by job, the shapes and the order are taken as
    they are when gating decides the same again (the same band for every user, the same groups
    for coscheduled jobs with running replicas, and deadlines judged at the same time). Checking
    that costs a pass over the bands and users, not over the tasks. Behind a draining backlog
    the tasks differ by the jobs placed or gone and the jobs submitted since: the requests of the
    jobs whose tasks are the same are kept, in their order, and only the others are made again
    (see `Delta`).
    """

    pending: tuple[PendingTask, ...]  # the snapshot's, whose tasks these are (compared by identity)
    by_job: dict[str, list[PendingTask]]  # never changed once made: read by later ticks
    shapes: dict[str, Shape]
    now_ms: int | None  # the time deadlines were judged at; None when no task has a deadline
    bands: dict[tuple[Band, str], Band]  # (band, user) -> the band it competes in
    pinned: dict[str, tuple[str, str]]  # coscheduled job -> the group its running replicas are in
    ordered: list[JobRequest]
    pins_worker: bool  # whether some shape pins a `worker` (placement then classes every worker alone)
    keys: list[tuple] = field(default_factory=list)  # each of `ordered`'s `job_order_key`, in order
    key_of: dict[str, tuple] = field(default_factory=dict)  # job -> its key in `keys`
    pinning: frozenset[str] = frozenset()  # the jobs whose shape pins a `worker`
    distinct: bool = False  # whether no two tasks of a job share a `task_order_key` (see `_grouped`)
    shares: dict[str, int] = field(default_factory=dict)  # user -> the dominant share `keys` hold

    def same_tasks(self, pending: tuple[PendingTask, ...]) -> bool:
        """Whether `pending` holds the very tasks these requests were made from, in order."""
        return pending is self.pending or (len(pending) == len(self.pending) and all(map(is_, pending, self.pending)))


@dataclass(frozen=True, slots=True)
class Delta:
    """How a tick's pending tasks differ from those `carried` was made from: jobs some of whose
    tasks came or went (`touched`, each with its tasks now in `by_job` or gone from it), the
    others holding the very same tasks."""

    carried: Requests
    by_job: dict[str, list[PendingTask]]
    shapes: dict[str, Shape]
    touched: set[str]
    pinning: frozenset[str]


# Tasks come or go between ticks beyond this share of the carried jobs (and a few more): all
# requests are made again rather than merged one by one.
_MAX_TOUCHED = 0.25


def _delta(carried: Requests, pending: tuple[PendingTask, ...], cache: ShapeCache) -> Delta | None:
    """The delta from `carried` to `pending`, or None when it is cheaper (or only exact) to start over.

    Tasks are told apart by identity, in C: both tuples hold their tasks while this runs, so no
    two distinct tasks share an `id`."""
    if not carried.distinct:
        return None
    new_ids = set(map(id, pending))
    old_ids = set(map(id, carried.pending))
    if len(new_ids) != len(pending):
        return None  # a task given twice
    gone_ids, came_ids = old_ids - new_ids, new_ids - old_ids
    if len(gone_ids) + len(came_ids) > _MAX_TOUCHED * len(carried.by_job) + 16:
        return None
    came: dict[str, list[PendingTask]] = defaultdict(list)
    for task in compress(pending, map(came_ids.__contains__, map(id, pending))):
        came[task.job_id].append(task)
    touched = set(came)
    touched.update(map(_job_id, compress(carried.pending, map(gone_ids.__contains__, map(id, carried.pending)))))
    by_job, shapes = dict(carried.by_job), dict(carried.shapes)
    pinning = set()
    for job_id in touched:
        tasks = [t for t in by_job.pop(job_id, ()) if id(t) not in gone_ids]
        tasks += came.get(job_id, ())
        shapes.pop(job_id, None)
        if not tasks:
            continue  # none of its tasks waits now
        if not _in_task_order(tasks):
            return None
        by_job[job_id] = tasks
        shape = shapes[job_id] = cache.of(tasks[0])
        if _pins_worker(shape):
            pinning.add(job_id)
    pins = (carried.pinning - touched) | pinning
    return Delta(carried, by_job, shapes, touched, frozenset(pins))


def _pins_worker(shape: Shape) -> bool:
    return any(c.key == "worker" for c in shape.hard)


def build_requests(
    snapshot: SchedulingSnapshot,
    ledger: Ledger,
    by_job: dict[str, list[PendingTask]],
    shapes: dict[str, Shape],
    carried: Requests | None = None,
    delta: Delta | None = None,
    pinning: frozenset[str] = frozenset(),
    distinct: bool = False,
) -> Requests:
    """Gating: applies budgets and deadlines to each pending job (whose shape is `shapes[job]`),
    and orders the jobs; `carried` (made from the same tasks) is taken when gating decides as it
    did, and so are `delta`'s carried requests for the jobs it leaves untouched."""
    spend = with_peer_spend(ledger.ix.spend, snapshot.peer_spend)
    shares = ledger.ix.shares()
    job_workers = ledger.ix.job_workers
    pinned: dict[str, tuple[str, str]] = {}
    for job_id in by_job.keys() & job_workers.keys():
        placed = [(t, w) for t, w in job_workers[job_id].items() if w is not None]
        if placed and is_coscheduled(by_job[job_id][0]):
            pinned[job_id] = ledger.group(min(placed)[1])
    now_ms, budgets, default = snapshot.now_ms, snapshot.user_budgets, snapshot.default_budget
    # Most often no pending task has a deadline: then none is looked at job by job.
    no_deadlines = deadlines(snapshot.pending).count(None) == len(snapshot.pending)
    judged = None if no_deadlines else now_ms
    base = delta.carried if delta is not None else carried
    if (
        base is not None
        and base.now_ms == judged
        and all(effective_band(b, u, spend, budgets, default) is e for (b, u), e in base.bands.items())
    ):
        moved = {user for user, share in base.shares.items() if shares.get(user, 0) != share}
        if moved:
            base = _rekeyed(base, shares, moved)
        if delta is None and base.pinned == pinned:
            return base
        touched = set(delta.touched) if delta is not None else set()
        # A job whose running replicas moved to another group (or left) is made again.
        touched.update(j for j in pinned.keys() | base.pinned.keys() if pinned.get(j) != base.pinned.get(j))
        if len(touched) <= _MAX_TOUCHED * len(base.ordered) + 16:
            pinning = delta.pinning if delta is not None else base.pinning
            return _merged(snapshot, base, by_job, shapes, touched, pinned, judged, spend, shares, pinning)
    bands: dict[tuple[Band, str], Band] = {}  # (band, user) -> the band it competes in: users are few
    requests, keys = _made(snapshot, by_job, by_job.keys(), shapes, bands, spend, shares, pinned, no_deadlines)
    pairs = sorted(zip(keys, requests))  # a key ends in the job id: the requests are never compared
    keys = list(map(_first, pairs))
    if delta is not None:
        pinning, distinct = delta.pinning, True
    return Requests(
        pending=snapshot.pending,
        by_job=by_job,
        shapes=shapes,
        now_ms=judged,
        bands=bands,
        pinned=pinned,
        ordered=list(map(_second, pairs)),
        pins_worker=ledger.ix.per_worker,
        keys=keys,
        key_of=dict(zip(map(_last, keys), keys)),
        pinning=pinning,
        distinct=distinct,
        shares=_shares_of(bands, shares),
    )


def _rekeyed(base: Requests, shares: dict[str, int], moved: set[str]) -> Requests:
    """`base` with the keys of the jobs of `moved` users holding their users' new shares, in order
    again. A request does not depend on its user's share, only its place does: tasks starting and
    ending move some user's share on most ticks, and sorting the keys costs far less than making
    every request again."""
    pairs = []
    for key, request in zip(base.keys, base.ordered):
        if request.user in moved:
            key = (key[0], shares.get(request.user, 0), *key[2:])
        pairs.append((key, request))
    pairs.sort(key=_first)  # a key ends in the job id: no two are equal
    keys = list(map(_first, pairs))
    return replace(
        base,
        ordered=list(map(_second, pairs)),
        keys=keys,
        key_of=dict(zip(map(_last, keys), keys)),
        shares={**base.shares, **{user: shares.get(user, 0) for user in moved}},
    )


def _shares_of(bands: dict[tuple[Band, str], Band], shares: dict[str, int]) -> dict[str, int]:
    """The share of every user with pending work (those `bands` names), as their keys hold it."""
    return {user: shares.get(user, 0) for _, user in bands}


_first, _second, _last = itemgetter(0), itemgetter(1), itemgetter(-1)


def _made(
    snapshot: SchedulingSnapshot,
    by_job: dict[str, list[PendingTask]],
    jobs: Iterable[str],
    shapes: dict[str, Shape],
    bands: dict[tuple[Band, str], Band],
    spend: dict[str, int],
    shares: dict[str, int],
    pinned: dict[str, tuple[str, str]],
    no_deadlines: bool,
) -> tuple[list[JobRequest], list[tuple]]:
    """The requests of `jobs` (of `by_job`), and each one's `job_order_key`; `bands` is filled in
    with the effective band of each (band, user) it had none for."""
    now_ms, budgets, default = snapshot.now_ms, snapshot.user_budgets, snapshot.default_budget
    requests = []
    keys = []  # each request's `job_order_key`, built here rather than by a call per job
    for job_id in jobs:
        tasks = by_job[job_id]
        first = tasks[0]
        band, user = first.band, first.user
        live, expired = (tuple(tasks), ()) if no_deadlines else _split_expired(tasks, now_ms)
        effective = bands.get((band, user))
        if effective is None:
            effective = bands[(band, user)] = effective_band(band, user, spend, budgets, default)
        head = live[0] if live else expired[0]
        keys.append(job_order_key(head, effective, shares.get(user, 0)))
        requests.append(
            JobRequest(
                job_id=job_id,
                tasks=live,
                expired=expired,
                shape=shapes[job_id],
                band=effective,
                requested_band=band,
                user=user,
                replicas=max(first.replicas, len(tasks)),
                coscheduled=is_coscheduled(first),
                pinned_group=pinned.get(job_id),
                task_ids=tuple(map(_task_id, live)),
            )
        )
    return requests, keys


def _merged(
    snapshot: SchedulingSnapshot,
    base: Requests,
    by_job: dict[str, list[PendingTask]],
    shapes: dict[str, Shape],
    touched: set[str],
    pinned: dict[str, tuple[str, str]],
    judged: int | None,
    spend: dict[str, int],
    shares: dict[str, int],
    pinning: frozenset[str],
) -> Requests:
    """`base`'s requests with those of `touched` jobs made again (or dropped, for jobs no longer
    pending), each put where a full sort would: the keys are unique, so the order is the same."""
    keys, ordered, key_of = list(base.keys), list(base.ordered), dict(base.key_of)
    for job_id in touched:
        key = key_of.pop(job_id, None)
        if key is not None:
            at = bisect_left(keys, key)
            del keys[at], ordered[at]
    bands = dict(base.bands)
    again = [job_id for job_id in touched if job_id in by_job]
    requests, made = _made(snapshot, by_job, again, shapes, bands, spend, shares, pinned, judged is None)
    for key, request in zip(made, requests):
        at = bisect_left(keys, key)
        keys.insert(at, key)
        ordered.insert(at, request)
        key_of[request.job_id] = key
    return Requests(
        pending=snapshot.pending,
        by_job=by_job,
        shapes=shapes,
        now_ms=judged,
        bands=bands,
        pinned=pinned,
        ordered=ordered,
        pins_worker=bool(pinning),
        keys=keys,
        key_of=key_of,
        pinning=pinning,
        distinct=base.distinct,
        shares=_shares_of(bands, shares),
    )


def _place(tick: Tick, memo: Memo, request: JobRequest, outcome: JobOutcome) -> None:
    ledger, now_ms = tick.ledger, tick.snapshot.now_ms
    placed: Placed | None
    if request.coscheduled:
        tasks = list(request.tasks)
        placed = place_coscheduled(ledger, memo, request.shape, request.band, tasks, request.pinned_group, now_ms)
    else:
        placed = place_independent(ledger, memo, request.shape, request.band, request.tasks, now_ms)
    if placed is None:
        return
    tick.assignments.extend(placed.assignments)
    tick.preemptions.extend(placed.preemptions)
    outcome.placed = len(placed.assignments)
    outcome.preempted = len(placed.preemptions)


def run_tick(snapshot: SchedulingSnapshot) -> Tick:
    """Runs the whole pipeline and keeps what `explain` needs to look at afterwards."""
    index = snapshot.index if isinstance(snapshot.index, ClusterIndex) else None
    carried = index.requests if index is not None else None
    delta = None
    pinning: frozenset[str] = frozenset()
    distinct = False
    if isinstance(carried, Requests) and carried.same_tasks(snapshot.pending):
        by_job, job_shapes, pins_worker = carried.by_job, carried.shapes, carried.pins_worker
        pinning, distinct = carried.pinning, carried.distinct
    elif (
        isinstance(carried, Requests)
        and index is not None
        and (delta := _delta(carried, snapshot.pending, index.shapes))
    ):
        carried = None
        by_job, job_shapes, pins_worker = delta.by_job, delta.shapes, bool(delta.pinning)
    else:
        carried = None
        by_job, distinct = _grouped(snapshot.pending)
        shapes = index.shapes if index is not None else ShapeCache()
        job_shapes = {job_id: shapes.of(tasks[0]) for job_id, tasks in by_job.items()}
        pinning = frozenset(job_id for job_id, shape in job_shapes.items() if shape.hard and _pins_worker(shape))
        pins_worker = bool(pinning)
    ledger = Ledger(snapshot, per_worker=pins_worker)
    requests = build_requests(snapshot, ledger, by_job, job_shapes, carried, delta, pinning, distinct)
    if index is not None:
        index.requests = requests  # one object, replaced whole: `explain` may read it meanwhile
    tick = Tick(snapshot, ledger)
    now_ms = snapshot.now_ms
    reserved = tick.reservations
    memo = Memo()
    never = ledger.ix.never  # a function of the workers alone: kept across ticks with them
    # The same, by (shape identity, replicas), or the identity alone for one replica (most jobs):
    # the requests hold their shapes while this runs, and a shape's hash is a Python call.
    verdicts: dict[tuple[int, int] | int, str | None] = {}
    # (shape identity, band) of the independent jobs that placed fewer than all their tasks: no
    # worker had room for that shape and nothing that band may evict was left, and within a tick
    # free capacity and evictable work only shrink, so every later job of the same shape and band
    # places nothing either. Behind a backlog that fills the cluster, that is every job after the
    # first few, and each is passed over without a placement attempt.
    exhausted: set[tuple[int, Band]] = set()
    # The outcomes `_explain_waits` gives reasons for: behind a backlog the cluster has room for,
    # most jobs place every task and need none.
    left: list[JobOutcome] = []
    # Independent jobs add their decisions to the tick's own lists (their counts are read off the
    # lengths): a tick places one per pending job, and copying each job's over costs more.
    assigned, preempted = tick.assignments, tick.preemptions
    into = Placed()
    into.assignments, into.preemptions = assigned, preempted
    for request in requests.ordered:
        job_id, tasks, shape, band = request.job_id, request.tasks, request.shape, request.band
        coscheduled = request.coscheduled
        outcome = tick.outcomes[job_id] = JobOutcome(request)
        replicas = request.replicas if coscheduled else 1
        mine = id(shape) if replicas == 1 else (id(shape), replicas)  # no tuple for most
        try:
            verdict = verdicts[mine]
        except KeyError:
            key = (shape.need, shape.hard, replicas)
            if key not in never:
                never[key] = never_fits(ledger, shape, replicas)
            verdict = verdicts[mine] = never[key]
        outcome.unschedulable = verdict
        if verdict is not None:
            tick.unschedulable.extend(Unschedulable(t.task_id, verdict) for t in tasks)
        elif coscheduled:
            if tasks:
                _place(tick, memo, request, outcome)
        elif tasks and (kind := (id(shape), band)) not in exhausted:
            before, evicting = len(assigned), len(preempted)
            place_independent(ledger, memo, shape, band, tasks, now_ms, into, request.task_ids)
            outcome.placed = len(assigned) - before
            outcome.preempted = len(preempted) - evicting
            into.victims.clear()  # read only by a coscheduled trial
            if outcome.placed < len(tasks):
                exhausted.add(kind)
        if outcome.placed < len(tasks) or request.expired:
            left.append(outcome)
            if verdict is None and outcome.placed < len(tasks) and band not in reserved.by_band:
                # The first job of its band that waits: it holds what it will start on.
                waiting = len(tasks) - outcome.placed
                since = snapshot.reserved_since.get(job_id)
                # Said as it stands before the hold: what it waits for, not what it holds.
                reserved.sentences[job_id] = waiting_reason(ledger, PoolStats(), request, waiting)
                reserve(ledger, reserved, request, waiting, snapshot.pending, assigned, now_ms, since)
    if reserved.by_band:
        _backfill(tick, left)
    _explain_waits(tick, memo, left)
    if reserved.by_band:
        _explain_reservations(tick, left)
        # Nothing is placed after this: `explain` reads the ledger with held capacity free again.
        release(ledger, reserved.holds)
    return tick


def _backfill(tick: Tick, left: list[JobOutcome]) -> None:
    """Starts, on capacity held for reservations, the waiting tasks that end before it is needed."""
    holds = [h for h in tick.reservations.holds if h.reservation.start_ms is not None]
    if not holds:
        return
    holders = {h.reservation.job_id for h in tick.reservations.holds}
    for outcome in left:
        request = outcome.request
        tasks = request.tasks
        if (
            outcome.unschedulable is not None
            or request.coscheduled
            or request.job_id in holders
            or outcome.placed >= len(tasks)
            or not tasks[0].limit_ms
        ):
            continue
        placed = backfill(tick.ledger, holds, request.shape, tasks[outcome.placed :], tick.snapshot.now_ms)
        tick.assignments.extend(placed)
        outcome.placed += len(placed)


def _explain_reservations(tick: Tick, left: list[JobOutcome]) -> None:
    """Says of the jobs holding a reservation where, since when and until when; and of the jobs
    held capacity would let start now that they wait behind it, and whose it is."""
    holds = tick.reservations.holds
    now_ms = tick.snapshot.now_ms
    estimates = tick.estimates
    by_shape: dict[int, object] = {}
    for outcome in left:
        if outcome.pending_reason is None:
            continue
        request = outcome.request
        mine = tick.reservations.holder(request.job_id)
        if mine is not None:
            r = mine.reservation
            start = f"~{clock(r.start_ms)}" if r.start_ms is not None else "unknown (a task there has no time limit)"
            basis = (
                f"its reservation on {r.where()}: the time limits of the tasks running there"
                if r.start_ms is not None
                else f"its reservation on {r.where()}, where a task has no time limit"
            )
            estimates[request.job_id] = Estimate(now_ms + 1, r.start_ms, basis)
            sentence = tick.reservations.sentences.get(request.job_id, outcome.pending_reason)
            outcome.pending_reason = (
                f"{sentence}. Holds a reservation on {r.where()} since {clock(r.since_ms)}, expected start {start}."
            )
            continue
        key = id(request.shape)
        if key not in by_shape:
            by_shape[key] = blocked_by(tick.ledger, holds, request.shape)
        blocking = by_shape[key]
        if blocking is None:
            estimates[request.job_id] = Estimate(now_ms + 1, None, outcome.pending_reason)
            continue
        r = blocking.reservation  # type: ignore[attr-defined]
        if r.start_ms is not None:
            gap = max(0, (r.start_ms - now_ms) // 1000)
            hint = f" (expected start ~{clock(r.start_ms)}); a time limit under {gap}s would let it start now"
        else:
            hint = " (expected start unknown)"
        outcome.pending_reason = f"Waits behind the reservation of job {r.job_id} on {r.where()}{hint}."
        estimates[request.job_id] = Estimate(now_ms + 1, None, outcome.pending_reason)


def _explain_waits(tick: Tick, memo: Memo, outcomes: list[JobOutcome]) -> None:
    """Pending reasons for jobs with tasks left, and reasons for tasks past their deadline, of
    `outcomes` (in the order of the tick's, and holding every one with either)."""
    stats = PoolStats()
    sentences: dict[tuple, str] = {}
    for outcome in outcomes:
        request = outcome.request
        waiting = len(request.tasks) - outcome.placed
        if outcome.unschedulable is not None:
            if request.expired:
                tick.unschedulable.extend(Unschedulable(t.task_id, outcome.unschedulable) for t in request.expired)
            continue
        count = max(waiting, len(request.expired))
        if count <= 0:
            continue
        # By the shape's identity (its hash is a Python call, and a backlog asks once per job): the
        # requests hold their shapes while this runs, and equal shapes have equal sentences.
        downgraded = request.downgraded
        key = (
            id(request.shape),
            request.coscheduled,
            request.pinned_group,
            count if request.coscheduled else 0,
            downgraded,
            request.user if downgraded else "",
        )
        sentence = sentences.get(key)
        if sentence is None:
            gang = memo.gangs.get((request.shape.hard, request.shape.need, count)) if request.coscheduled else None
            if gang is not None:
                gang.refresh(tick.ledger.free)
            sentence = sentences[key] = waiting_reason(tick.ledger, stats, request, count, gang)
        if waiting > 0:
            outcome.pending_reason = sentence
        if request.expired:
            reason = f"Scheduling timeout reached before it could be placed. {sentence}"
            tick.unschedulable.extend(Unschedulable(t.task_id, reason) for t in request.expired)


def schedule(snapshot: SchedulingSnapshot) -> ScheduleResult:
    """Decides one tick: assignments, preemptions, unschedulable tasks and pending reasons."""
    with cycles_uncollected():
        return run_tick(snapshot).result()


@contextmanager
def cycles_uncollected() -> Iterator[None]:
    """Holds off Python's cycle collector while a tick runs.

    A tick allocates tens of thousands of short-lived objects (decisions, keys) that form no
    cycles and are freed by reference counting; each batch of allocations would otherwise start a
    collection that walks every object the controller holds (snapshots, the worker index), which
    measured 10-25 % of a tick on the scheduler benchmark. The collector resumes as before after.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
