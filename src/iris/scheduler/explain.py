"""Decides what `iris job explain JOB` says: a one-line summary (the job's pending reason) and, per
backend and per group of identical workers, why the job does not fit there now.

It runs the same tick as `schedule` over the same snapshot and then asks the same filters
(`failing_constraints`, capacity, `reclaimable` for preemption) group by group, so the explanation
can never disagree with what the scheduler did: the summary *is* the pending reason the tick
produced, and the details describe the capacity left after the tick's own placements.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from iris.core.bands import Band
from iris.scheduler.fit import (
    DEVICES,
    DIMENSIONS,
    Shape,
    Vector,
    amount,
    failing_constraints,
    fits,
    preemption_allowed_on,
    short_dimensions,
)
from iris.scheduler.ledger import Ledger, WorkerClass
from iris.scheduler.preemption import can_preempt_anything, may_preempt, reclaimable
from iris.scheduler.snapshot import SchedulingSnapshot
from iris.scheduler.tick import JobOutcome, Tick, run_tick


@dataclass(frozen=True, slots=True)
class GroupExplanation:
    """Why a job does not fit on one group of identical workers (same backend, attributes, capacity)."""

    backend_id: str
    workers: int
    example_worker: str
    fits_now: int  # workers of the group that could take one of its tasks right now
    reasons: tuple[str, ...]

    @property
    def group(self) -> str:
        """The group in words: `3 workers like gpu-0`."""
        return f"{self.workers} worker{'s' if self.workers != 1 else ''} like {self.example_worker}"

    @property
    def verdict(self) -> str:
        """`fits` when a worker of the group could take a task now, else `blocked`."""
        return "fits" if self.fits_now > 0 else "blocked"

    def line(self) -> str:
        return f"{self.group}: {'; '.join(self.reasons) if self.reasons else 'fits'}"


@dataclass(frozen=True, slots=True)
class BackendExplanation:
    backend_id: str
    groups: tuple[GroupExplanation, ...]


@dataclass(frozen=True, slots=True)
class Explanation:
    """Why a job is (or is not) placed: the summary line, then details per backend and worker group."""

    job_id: str
    summary: str
    backends: tuple[BackendExplanation, ...] = ()

    @property
    def groups(self) -> tuple[GroupExplanation, ...]:
        """Every group of every backend, in order."""
        return tuple(group for backend in self.backends for group in backend.groups)

    @property
    def lines(self) -> tuple[str, ...]:
        """The details under the summary, one line per backend and per group."""
        out: list[str] = []
        for backend in self.backends:
            out.append(f"backend {backend.backend_id}:")
            out.extend(f"  {group.line()}" for group in backend.groups)
        return tuple(out)

    def render(self) -> str:
        return "\n".join([f"{self.job_id}: {self.summary}", *(f"  {line}" for line in self.lines)])


def _word(shape: Shape, d: int, value: int) -> str:
    return amount(d, value, shape.device_word)


def _preemption_note(ledger: Ledger, shape: Shape, band: Band, alive: list[int], d: int) -> str | None:
    if not can_preempt_anything(band):
        return f"{band.label} work cannot preempt anything"
    if not all(preemption_allowed_on(shape, ledger.workers[w]) for w in alive):
        return None
    holders = sorted({t.band for w in alive for t in ledger.victims_on(w) if not may_preempt(band, t.band)})
    held = f"held by {', '.join(b.label for b in holders)} work it does not outrank" if holders else ""
    if not any(may_preempt(band, t.band) for w in alive for t in ledger.victims_on(w)):
        return f"nothing to preempt: capacity is {held}" if held else None
    best = max(reclaimable(ledger, w, band)[0][d] for w in alive)
    note = f"preempting the lower-band work here would free at most {_word(shape, d, max(best, 0))}"
    return f"{note}; the rest is {held}" if held else note


def explain_group(ledger: Ledger, outcome: JobOutcome, cls: WorkerClass) -> GroupExplanation:
    """The reasons one group of identical workers cannot take the job's next task."""
    shape = outcome.request.shape
    alive = [w for w in cls.members if ledger.alive[w]]
    reasons: list[str] = []
    if len(alive) < len(cls.members):
        reasons.append(f"{len(cls.members) - len(alive)} of them not alive")
    probe = dict(cls.attributes)
    for constraint in failing_constraints(shape.hard, probe):
        reasons.append(f"constraint {constraint} fails ({constraint.key}={probe.get(constraint.key, 'unset')})")
    for d in () if reasons else short_dimensions(cls.capacity, shape.need):
        reasons.append(f"needs {_word(shape, d, shape.need[d])}; these workers have {_word(shape, d, cls.capacity[d])}")
    fitting = [w for w in alive if fits(ledger.free[w], shape.need)]
    if not reasons and alive and not fitting:
        most = cast(Vector, tuple(max(ledger.free[w][d] for w in alive) for d in DIMENSIONS))
        short = short_dimensions(most, shape.need)
        if short:
            d = short[0]
            reasons.append(
                f"needs {_word(shape, d, shape.need[d])} free; at most {_word(shape, d, max(most[d], 0))} free"
            )
        else:
            d = next((d for d in DIMENSIONS if shape.need[d] > 0), DEVICES)
            reasons.append(f"no worker has {shape.describe()} free at once")
        note = _preemption_note(ledger, shape, outcome.request.band, alive, d)
        if note:
            reasons.append(note)
    elif fitting and outcome.request.coscheduled:
        reasons.append(f"{len(fitting)} could take a replica now, but its replicas must start together")
    return GroupExplanation(
        backend_id=cls.backend_id,
        workers=len(cls.members),
        example_worker=ledger.workers[cls.members[0]].worker_id,
        fits_now=len(fitting),
        reasons=tuple(reasons),
    )


def summary_of(tick: Tick, job_id: str) -> str:
    """The summary line: the pending reason when the job waits, else what the tick did with it."""
    outcome = tick.outcomes.get(job_id)
    if outcome is None:
        return "No pending tasks"
    if outcome.pending_reason is not None:
        return outcome.pending_reason
    if outcome.unschedulable is not None:
        return f"Unschedulable: {outcome.unschedulable}"
    for result in tick.unschedulable:
        if result.task_id in {t.task_id for t in outcome.request.expired}:
            return f"Unschedulable: {result.reason}"
    text = f"Fits now: {outcome.placed} task{'s' if outcome.placed != 1 else ''} placed by this tick"
    if outcome.preempted:
        text += f", preempting {outcome.preempted} lower-band task{'s' if outcome.preempted != 1 else ''}"
    return text


def explain_tick(tick: Tick, job_id: str) -> Explanation:
    """The explanation of one job from a finished tick."""
    summary = summary_of(tick, job_id)
    outcome = tick.outcomes.get(job_id)
    if outcome is None:
        return Explanation(job_id, summary)
    by_backend: dict[str, list[GroupExplanation]] = {}
    for cls in sorted(tick.ledger.classes, key=lambda c: (c.backend_id, c.members[0])):
        by_backend.setdefault(cls.backend_id, []).append(explain_group(tick.ledger, outcome, cls))
    return Explanation(
        job_id=job_id,
        summary=summary,
        backends=tuple(BackendExplanation(b, tuple(groups)) for b, groups in sorted(by_backend.items())),
    )


def explain(snapshot: SchedulingSnapshot, job_id: str) -> Explanation:
    """Why `job_id` does (or does not) fit: the same pass as `schedule`, then the same filters per
    backend and per group of identical workers. The summary equals the job's pending reason."""
    return explain_tick(run_tick(snapshot), job_id)
