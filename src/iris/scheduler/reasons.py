"""Decides what to tell a person about a task that was not placed: whether it can never be placed
(and why), or what it is waiting for, in one sentence.

"Never" is judged against empty workers: a task is unschedulable when no worker in the snapshot
satisfies its hard constraints, or none could hold it even with nothing else running (or, for a
coscheduled job, no group of workers could hold all its replicas). Workers that are down count as
possible hosts, so a backend restarting its workers does not fail every job that needs them; with
no worker alive at all the job waits. Everything else is a wait, described from the free capacity
left after this tick's placements, using the same filters the placement pass used.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from iris.scheduler.fit import DEVICES, DIMENSIONS, Shape, Vector, amount, copies, fits
from iris.scheduler.gangs import GangSlots, Group
from iris.scheduler.gating import over_budget_note
from iris.scheduler.ledger import Ledger, WorkerClass
from iris.scheduler.ordering import JobRequest


def group_label(group: tuple[str, str]) -> str:
    key, value = group
    return f"{key} {value}"


def _constraint_reason(ledger: Ledger, shape: Shape) -> str:
    for constraint in shape.hard:
        if not ledger.matching_classes((constraint,)):
            return f"no worker satisfies {constraint}"
    return "no single worker satisfies all of: " + "; ".join(str(c) for c in shape.hard)


def _capacity_reason(ledger: Ledger, shape: Shape, classes: list[WorkerClass]) -> str:
    word = shape.device_word
    for d in DIMENSIONS:
        if shape.need[d] <= 0:
            continue
        largest = max(cls.capacity[d] for cls in classes)
        if largest < shape.need[d]:
            return f"needs {amount(d, shape.need[d], word)}; the largest worker has {amount(d, largest, word)}"
    return f"needs {shape.describe()} on one worker; no worker has all of it"


def never_fits(ledger: Ledger, shape: Shape, replicas: int) -> str | None:
    """Why `shape` can never be placed here (None when it might be, now or later).

    Judged per class of identical workers, on total capacity. `replicas` > 1 asks for a
    coscheduled job: all replicas within one group of workers.
    """
    if not any(ledger.alive):
        return None
    matching = [ledger.classes[c] for c in ledger.matching_classes(shape.hard)]
    if not matching:
        return _constraint_reason(ledger, shape)
    room = {capacity: fits(capacity, shape.need) for capacity in {cls.capacity for cls in matching}}
    roomy = [cls for cls in matching if room[cls.capacity]]
    if not roomy:
        alive = [cls for cls in matching if cls.any_alive]
        return _capacity_reason(ledger, shape, alive or matching)
    if replicas > 1:
        slots: dict[tuple[str, str], int] = defaultdict(int)
        for cls in roomy:
            slots[cls.group] += len(cls.members) * copies(cls.capacity, shape.need, replicas)
        group, most = min(slots.items(), key=lambda item: (-item[1], item[0]))
        if most < replicas:
            return (
                f"needs {replicas} replicas of {shape.describe()} in one group of workers (same tpu-name, "
                f"pool or backend); the largest group ({group_label(group)}) holds {most}"
            )
    return None


class PoolStats:
    """Per backend, the most free capacity of any one worker in each dimension, post-tick."""

    def __init__(self) -> None:
        self._by_members: dict[tuple, dict[str, list[int]]] = {}

    def most_free(self, ledger: Ledger, key: tuple, members: list[int]) -> dict[str, list[int]]:
        """For the workers `members` (named by `key`, what selects them), per backend the most free."""
        found = self._by_members.get(key)
        if found is None:
            by_backend: dict[str, list[Vector]] = defaultdict(list)
            workers, free = ledger.workers, ledger.free
            for w in members:
                by_backend[workers[w].backend_id].append(free[w])
            # Per dimension, the most of its column (in C: a backlog's reasons read every worker).
            found = {backend: list(map(max, zip(*vectors))) for backend, vectors in by_backend.items()}
            self._by_members[key] = found
        return found


def _waiting_for_one(ledger: Ledger, stats: PoolStats, shape: Shape, members: list[int]) -> str:
    word = shape.device_word
    per_backend = stats.most_free(ledger, shape.hard, members)
    for d in DIMENSIONS:
        if shape.need[d] <= 0:
            continue
        backend = min(per_backend, key=lambda b: (-per_backend[b][d], b))
        best = per_backend[backend]
        if best[d] < shape.need[d]:
            free = max(best[d], 0)
            what = str(free) if d == DEVICES else amount(d, free, word)
            return (
                f"Waiting for {amount(d, shape.need[d], word)} on one worker; at most {what} free (backend {backend})"
            )
    return f"Waiting for {shape.describe()} on one worker; no worker has all of it free at once"


def _waiting_for_group(
    ledger: Ledger, request: JobRequest, members: list[int], count: int, counted: GangSlots | None
) -> str:
    shape = request.shape
    slots: Mapping[Group, int]
    if counted is not None and request.pinned_group is None:
        # Kept by the counts while they do not change: requests of one demand share it.
        most, group = counted.roomiest_group()
    else:
        if counted is not None:
            slots = counted.counts[0]
        else:
            slots = defaultdict(int)
            for w in members:
                slots[ledger.group(w)] += copies(ledger.free[w], shape.need, count)
        if request.pinned_group is not None:
            slots = {request.pinned_group: slots.get(request.pinned_group, 0)}
        # The group with the most slots, the lowest of those on a tie.
        most = max(slots.values())
        group = min([g for g, s in slots.items() if s == most])
    return (
        f"Waiting for {count} replicas of {shape.describe()} to start together in one group of workers; "
        f"at most {most} fit now ({group_label(group)})"
    )


def waiting_reason(
    ledger: Ledger, stats: PoolStats, request: JobRequest, count: int, counted: GangSlots | None = None
) -> str:
    """One sentence on what `count` still-pending tasks of `request` wait for. `counted`, for a
    coscheduled request, holds how many of `count` replicas each group holds now, refreshed, when
    the pass already keeps that count; it is counted here otherwise."""
    shape = request.shape
    if not any(ledger.alive):
        sentence = "Waiting for a worker to come up; no worker is alive"
    else:
        members = ledger.matching(shape.hard)  # the alive workers its plan searches, every level
        if not members:
            sentence = "Waiting for a worker that satisfies its constraints; every such worker is down"
        elif request.coscheduled:
            sentence = _waiting_for_group(ledger, request, members, count, counted)
        else:
            sentence = _waiting_for_one(ledger, stats, shape, members)
    if request.downgraded:
        sentence += over_budget_note(request.user)
    return sentence
