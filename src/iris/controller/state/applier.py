"""The one writer of attempt, task and job state: loads typed rows, asks `transitions` what follows
from an event, and commits the changes with guarded updates.

Every update names the state it expects (`UPDATE … WHERE id = ? AND state IN (…)`), so a change
decided on rows that have since moved on is refused rather than written over them: a placement the
scheduler chose from a snapshot loses to a cancel committed after that snapshot was read. Each
refusal is returned with its reason, logged at debug, and counted by the caller; it is not an
error, only a decision that no longer applies.

All functions take an open write transaction (`Database.write()`); the caller commits. The
statements every job pays for (an attempt placed, ended, its job rolled up) run on the driver's
connection (`run`), which costs a fraction of SQLAlchemy's statement path. A job's
roll-up runs after any change to its tasks, so the stored `jobs.state` never drifts from what its
tasks derive, and an ended job's descendants are killed and rolled up in the same transaction.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy.engine import Connection

from iris.controller.db.database import run, sql
from iris.controller.db.literals import JOB_PENDING, LIVE_TASKS, PENDING, SENT, TERMINAL_JOBS, TERMINAL_TASKS, quoted
from iris.controller.state import transitions as tr
from iris.core.names import AttemptName, TaskName
from iris.core.states import JobState, RetryBudget, TaskState

log = logging.getLogger("iris.applier")

ACTIVE = LIVE_TASKS


@dataclass(frozen=True, slots=True)
class Refusal:
    """A change the current rows no longer allow: what it was, on what, and why it was not applied."""

    change: str
    subject: str
    reason: str


@dataclass(frozen=True, slots=True)
class PlacedAttempt:
    task_id: str
    job_id: str
    index: int
    attempt: int
    attempt_id: str
    backend_id: str
    worker_id: str


@dataclass
class Report:
    """What one apply committed: the jobs whose tasks changed (to roll up), the jobs that ended,
    the attempts placed, and the changes refused."""

    jobs: list[str] = field(default_factory=list)
    ended: list[str] = field(default_factory=list)
    placed: list[PlacedAttempt] = field(default_factory=list)
    refused: list[Refusal] = field(default_factory=list)

    def merge(self, other: Report) -> Report:
        self.jobs += other.jobs
        self.ended += other.ended
        self.placed += other.placed
        self.refused += other.refused
        return self


# -- loading -------------------------------------------------------------------------------------


def load_attempt(conn: Connection, attempt_id: str) -> tuple[tr.AttemptRow, tr.TaskRow, RetryBudget] | None:
    row = run(
        conn,
        "SELECT a.task_id, a.job_id, a.state, a.attempt, t.idx, t.state, t.attempt, t.failure_count,"
        " t.preemption_count, t.error, c.max_retries_failure, c.max_retries_preemption"
        " FROM attempts a JOIN tasks t ON t.task_id = a.task_id JOIN job_config c ON c.job_id = a.job_id"
        " WHERE a.attempt_id = :a",
        {"a": attempt_id},
    ).fetchone()
    if row is None:
        return None
    attempt = tr.AttemptRow(attempt_id, row[0], row[1], row[3], TaskState(row[2]))
    task = tr.TaskRow(row[0], row[1], row[4], TaskState(row[5]), row[6], row[7], row[8], row[9])
    return attempt, task, RetryBudget(row[10], row[11])


def live_descendants(conn: Connection, job_id: str) -> tuple[str, ...]:
    """Every unfinished job nested under `job_id`, parents first; walks the parent index level by
    level, so the cost follows the size of the subtree."""
    out: list[str] = []
    level = [job_id]
    while level:
        rows = [
            r
            for parent in level
            for r in run(conn, "SELECT job_id, state FROM jobs WHERE parent_job_id = :p", {"p": parent}).fetchall()
        ]
        out += [r[0] for r in rows if not JobState(r[1]).is_terminal]
        level = [r[0] for r in rows]
    return tuple(out)


def load_job(conn: Connection, job_id: str, descendants: bool = True) -> tr.JobRow | None:
    """The job's row; `descendants` False leaves `live_descendants` empty (a roll-up loads them
    only for a job its tasks end)."""
    row = run(
        conn,
        "SELECT state, started_ms, error, cancel_requested,"
        " EXISTS (SELECT 1 FROM federated_jobs f WHERE f.job_id = jobs.job_id"
        f" AND f.direction = {SENT})"
        " FROM jobs WHERE job_id = :j",
        {"j": job_id},
    ).fetchone()
    if row is None:
        return None
    state = JobState(row[0])
    live = live_descendants(conn, job_id) if descendants and not (state.is_terminal or row[4]) else ()
    return tr.JobRow(job_id, state, row[1], row[2], bool(row[3]), bool(row[4]), live)


def load_tasks(conn: Connection, job_id: str) -> tuple[tr.TaskRow, ...]:
    rows = run(
        conn,
        "SELECT task_id, idx, state, attempt, failure_count, preemption_count, error FROM tasks"
        " WHERE job_id = :j ORDER BY idx",
        {"j": job_id},
    ).fetchall()
    return tuple(tr.TaskRow(r[0], job_id, r[1], TaskState(r[2]), r[3], r[4], r[5], r[6]) for r in rows)


# -- applying ------------------------------------------------------------------------------------


def apply(conn: Connection, changes: Iterable[tr.Change]) -> Report:
    """Commits `changes` in order, each as one guarded update; returns what was refused and why."""
    report = Report()
    for change in changes:
        reason = _APPLY[type(change)](conn, change, report)
        if reason is not None:
            _refuse(report, change, reason)
    return report


def _refuse(report: Report, change: tr.Change, reason: str) -> None:
    """Records (and logs at debug) that `change` was not applied, and why."""
    refusal = Refusal(type(change).__name__, _subject(change), reason)
    log.debug("refused %s on %s: %s", refusal.change, refusal.subject, refusal.reason)
    report.refused.append(refusal)


def _subject(change: tr.Change) -> str:
    for name in ("attempt_id", "task_id", "job_id", "parent_job_id"):
        if hasattr(change, name):
            return getattr(change, name)
    return ""


def _attempt_ended(conn: Connection, c: tr.AttemptEnded, report: Report) -> str | None:
    n = run(
        conn,
        "UPDATE attempts SET state = :s, exit_code = :c, finished_ms = :now, error = :e"
        f" WHERE attempt_id = :a AND state IN {ACTIVE}",
        {"s": c.state.value, "c": c.exit_code, "now": c.finished_ms, "e": c.error, "a": c.attempt_id},
    ).rowcount
    if not n:
        return "the attempt is no longer live"
    report.jobs.append(AttemptName.parse(c.attempt_id).job_id)
    return None


def _exit_code_recorded(conn: Connection, c: tr.ExitCodeRecorded, report: Report) -> str | None:
    n = conn.execute(
        sql(f"UPDATE attempts SET exit_code = COALESCE(exit_code, :c) WHERE attempt_id = :a AND state NOT IN {ACTIVE}"),
        {"c": c.exit_code, "a": c.attempt_id},
    ).rowcount
    return None if n else "the attempt is live again or gone"


def _task_retry_scheduled(conn: Connection, c: tr.TaskRetryScheduled, report: Report) -> str | None:
    n = conn.execute(
        sql(
            f"UPDATE tasks SET state = {PENDING}, worker_id = NULL, backend_id = NULL, failure_count = :f,"
            " preemption_count = :p, exit_code = :c, error = :e"
            f" WHERE task_id = :t AND attempt = :n AND state IN {ACTIVE}"
        ),
        {
            "f": c.failure_count,
            "p": c.preemption_count,
            "c": c.exit_code,
            "e": c.error,
            "t": c.task_id,
            "n": c.attempt,
        },
    ).rowcount
    return None if n else f"the task no longer runs attempt {c.attempt}"


def _task_ended(conn: Connection, c: tr.TaskEnded, report: Report) -> str | None:
    n = run(
        conn,
        "UPDATE tasks SET state = :s, failure_count = :f, preemption_count = :p, exit_code = :c,"
        f" finished_ms = :now, error = :e WHERE task_id = :t AND attempt = :n AND state IN {ACTIVE}",
        {
            "s": c.state.value,
            "f": c.failure_count,
            "p": c.preemption_count,
            "c": c.exit_code,
            "now": c.finished_ms,
            "e": c.error,
            "t": c.task_id,
            "n": c.attempt,
        },
    ).rowcount
    return None if n else f"the task no longer runs attempt {c.attempt}"


def _job_rolled_up(conn: Connection, c: tr.JobRolledUp, report: Report) -> str | None:
    n = run(
        conn,
        "UPDATE jobs SET state = :s, started_ms = :st, finished_ms = :fin,"
        f" pending_reason = CASE WHEN :s = {JOB_PENDING} THEN pending_reason ELSE '' END"
        " WHERE job_id = :j AND state = :from",
        {"s": c.state.value, "st": c.started_ms, "fin": c.finished_ms, "j": c.job_id, "from": c.from_state.value},
    ).rowcount
    if not n:
        return f"the job is no longer {c.from_state.value}"
    if c.state.is_terminal:
        report.ended.append(c.job_id)
    return None


def _error_attributed(conn: Connection, c: tr.ErrorAttributed, report: Report) -> str | None:
    n = conn.execute(
        sql(f"UPDATE jobs SET error = :e WHERE job_id = :j AND state NOT IN {TERMINAL_JOBS}"),
        {"e": c.error, "j": c.job_id},
    ).rowcount
    return None if n else "the job has already ended"


def _tasks_stopped(conn: Connection, c: tr.TasksStopped, report: Report) -> str | None:
    params = {"s": c.state.value, "now": c.finished_ms, "e": c.reason, "j": c.job_id}
    conn.execute(
        sql(f"UPDATE attempts SET state = :s, finished_ms = :now, error = :e WHERE job_id = :j AND state IN {ACTIVE}"),
        params,
    )
    conn.execute(
        sql(
            "UPDATE tasks SET state = :s, finished_ms = :now, error = :e"
            f" WHERE job_id = :j AND state NOT IN {TERMINAL_TASKS}"
        ),
        params,
    )
    report.jobs.append(c.job_id)
    return None


def _children_killed(conn: Connection, c: tr.ChildrenKilled, report: Report) -> str | None:
    for child in c.children:
        _tasks_stopped(conn, tr.TasksStopped(child, TaskState.KILLED, c.reason, c.finished_ms), report)
    return None


def _cancel_recorded(conn: Connection, c: tr.CancelRecorded, report: Report) -> str | None:
    n = conn.execute(
        sql(f"UPDATE jobs SET cancel_requested = 1 WHERE job_id = :j AND state NOT IN {TERMINAL_JOBS}"),
        {"j": c.job_id},
    ).rowcount
    return None if n else "the job has already ended"


def _task_unschedulable(conn: Connection, c: tr.TaskUnschedulable, report: Report) -> str | None:
    n = conn.execute(
        sql(
            f"UPDATE tasks SET state = {quoted(TaskState.UNSCHEDULABLE)}, error = :e, finished_ms = :now"
            f" WHERE task_id = :t AND state = {PENDING}"
        ),
        {"e": c.reason, "now": c.finished_ms, "t": c.task_id},
    ).rowcount
    if not n:
        return _not_pending(conn, c.task_id)
    report.jobs.append(TaskName.parse(c.task_id).job_id)
    return None


def _attempt_placed(conn: Connection, c: tr.AttemptPlaced, report: Report) -> str | None:
    row = run(
        conn,
        f"UPDATE tasks SET state = {quoted(TaskState.ASSIGNED)}, attempt = attempt + 1, backend_id = :b,"
        " worker_id = :w, error = '', exit_code = NULL"
        f" WHERE task_id = :t AND state = {PENDING} AND EXISTS (SELECT 1 FROM jobs j"
        f" WHERE j.job_id = tasks.job_id AND j.cancel_requested = 0 AND j.state NOT IN {TERMINAL_JOBS})"
        " RETURNING job_id, idx, attempt",
        {"b": c.backend_id, "w": c.worker_id, "t": c.task_id},
    ).fetchone()
    if row is None:
        return _not_pending(conn, c.task_id)
    job_id, idx, attempt = row
    attempt_id = str(TaskName.parse(c.task_id).attempt(attempt))
    run(
        conn,
        "INSERT INTO attempts (attempt_id, task_id, job_id, idx, attempt, state, backend_id, worker_id, created_ms)"
        f" VALUES (:id, :t, :j, :i, :a, {quoted(TaskState.ASSIGNED)}, :b, :w, :now)",
        {
            "id": attempt_id,
            "t": c.task_id,
            "j": job_id,
            "i": idx,
            "a": attempt,
            "b": c.backend_id,
            "w": c.worker_id,
            "now": c.created_ms,
        },
    )
    report.placed.append(PlacedAttempt(c.task_id, job_id, idx, attempt, attempt_id, c.backend_id, c.worker_id))
    report.jobs.append(job_id)
    return None


def _not_pending(conn: Connection, task_id: str) -> str:
    """Why a change that needs a pending task of a live job was refused."""
    row = conn.execute(
        sql(
            "SELECT t.state, j.job_id, j.state, j.cancel_requested FROM tasks t JOIN jobs j ON j.job_id = t.job_id"
            " WHERE t.task_id = :t"
        ),
        {"t": task_id},
    ).first()
    if row is None:
        return "the task no longer exists"
    if row[3]:
        return f"job {row[1]} was cancelled"
    if JobState(row[2]).is_terminal:
        return f"job {row[1]} has ended ({row[2]})"
    return f"the task is {row[0]}, no longer PENDING"


_APPLY: dict[type, Callable[[Connection, Any, Report], str | None]] = {
    tr.AttemptEnded: _attempt_ended,
    tr.ExitCodeRecorded: _exit_code_recorded,
    tr.TaskRetryScheduled: _task_retry_scheduled,
    tr.TaskEnded: _task_ended,
    tr.JobRolledUp: _job_rolled_up,
    tr.ErrorAttributed: _error_attributed,
    tr.TasksStopped: _tasks_stopped,
    tr.ChildrenKilled: _children_killed,
    tr.CancelRecorded: _cancel_recorded,
    tr.TaskUnschedulable: _task_unschedulable,
    tr.AttemptPlaced: _attempt_placed,
}


# -- load → decide → apply -----------------------------------------------------------------------


def end_attempt(conn: Connection, event: tr.AttemptEvent, now_ms: int) -> Report:
    """Ends one attempt (its task's retry budget applied); the caller rolls up `report.jobs`."""
    rows = load_attempt(conn, event.attempt_id)
    if rows is None:
        return Report(refused=[Refusal(type(event).__name__, event.attempt_id, "the attempt does not exist")])
    return apply(conn, tr.end_attempt(event, *rows, now_ms))


def end_attempts(conn: Connection, events: Iterable[tr.AttemptEvent], now_ms: int) -> Report:
    """Ends each attempt, then rolls up the jobs whose tasks changed."""
    report = Report()
    for event in events:
        report.merge(end_attempt(conn, event, now_ms))
    return report.merge(roll_up(conn, report.jobs, now_ms))


def roll_up(conn: Connection, job_ids: Iterable[str], now_ms: int) -> Report:
    """Recomputes each job's state from its tasks; a job that ends takes its unfinished tasks and
    every descendant job with it (those are rolled up in turn). `report.ended` lists the jobs that
    ended."""
    report = Report()
    # A job is rolled up again when it comes back to the queue: a child rolled up early in the
    # pass is rolled up once more after its parent ended and killed its tasks. Each job ends once,
    # so the queue always drains.
    queue = list(dict.fromkeys(job_ids))
    while queue:
        job_id = queue.pop(0)
        job = load_job(conn, job_id, descendants=False)
        if job is None:
            continue
        tasks = () if job.state.is_terminal or job.mirrored else load_tasks(conn, job_id)
        changes = tr.roll_up(job, tasks, now_ms)
        if any(isinstance(c, tr.JobRolledUp) and c.state.is_terminal for c in changes):
            # Most roll-ups leave the job running; only one that ends it needs the subtree.
            changes = tr.roll_up(replace(job, live_descendants=live_descendants(conn, job_id)), tasks, now_ms)
        step = apply(conn, changes)
        report.ended += step.ended
        report.refused += step.refused
        for change in changes:
            if isinstance(change, tr.ChildrenKilled):
                queue.extend(change.children)
    return report


def stop_job(conn: Connection, job_id: str, reason: str, now_ms: int) -> list[str]:
    """Stops a job and every unfinished job nested under it; returns the jobs that were still live
    (the caller has checked that `job_id` exists)."""
    job = load_job(conn, job_id)
    if job is None:
        return []
    if job.state.is_terminal:  # a finished job's descendants may still run; stop those
        job = tr.JobRow(job_id, job.state, live_descendants=live_descendants(conn, job_id))
    changes = tr.stop_job(tr.StopRequested(job_id, reason), job, now_ms)
    live = [c.job_id for c in changes if isinstance(c, tr.CancelRecorded)]
    if not live:
        return []
    apply(conn, changes)
    roll_up(conn, live, now_ms)
    return live


def fail_jobs(conn: Connection, errors: dict[str, str], now_ms: int) -> Report:
    """Fails each job in `errors` (job id → why) outright, with no retry."""
    report = Report()
    for job_id, error in errors.items():
        report.merge(apply(conn, tr.fail_job(job_id, error, now_ms)))
    return report.merge(roll_up(conn, list(errors), now_ms))


def commit_schedule(conn: Connection, result, now_ms: int) -> tuple[Report, list[tuple[str, str]]]:
    """Commits a scheduling result's preemptions, unschedulable tasks and placements (not yet the
    roll-up: the caller builds launch specs first); returns the report and the preempted attempts
    to stop as (backend_id, attempt_id)."""
    report = Report()
    victims: list[tuple[str, str]] = []
    for p in result.preemptions:
        row = conn.execute(
            sql(f"SELECT attempt, backend_id FROM tasks WHERE task_id = :t AND state IN {ACTIVE}"),
            {"t": p.task_id},
        ).first()
        if row is None:
            report.refused.append(Refusal("Preempted", p.task_id, "the task no longer runs"))
            continue
        attempt_id = str(TaskName.parse(p.task_id).attempt(row[0]))
        step = end_attempt(conn, tr.Preempted(attempt_id, p.by_task_id), now_ms)
        if step.jobs:
            victims.append((row[1], attempt_id))
        report.merge(step)
    _end_unschedulable(conn, [tr.TaskUnschedulable(u.task_id, u.reason, now_ms) for u in result.unschedulable], report)
    return report, victims


def _end_unschedulable(conn: Connection, changes: list[tr.TaskUnschedulable], report: Report) -> None:
    """Commits `changes` as `apply` would, guarded the same way (only a pending task ends; any other
    is refused with why), but a job at a time: a job of 100,000 replicas past its scheduling
    deadline ends all its tasks in one tick, and an update a task took ~90 µs, holding the tick and
    every submit behind it for 9 s; one update of the job's pending tasks takes 0.3 s. The
    transaction is this tick's own, so the tasks read as pending here are pending when updated."""
    by_job: dict[str, list[tr.TaskUnschedulable]] = {}
    for c in changes:  # ids the snapshot read from the tasks table, so `<job>/<index>`
        by_job.setdefault(c.task_id.rpartition("/")[0], []).append(c)
    update = (
        f"UPDATE tasks SET state = {quoted(TaskState.UNSCHEDULABLE)}, error = :e, finished_ms = :now"
        f" WHERE state = {PENDING} AND "
    )
    for job_id, ending in by_job.items():
        rows = conn.execute(sql(f"SELECT task_id FROM tasks WHERE job_id = :j AND state = {PENDING}"), {"j": job_id})
        pending = {r[0] for r in rows}
        ready = [c for c in ending if c.task_id in pending]
        whole = {(c.reason, c.finished_ms) for c in ready}
        if len(whole) == 1 and len(ready) == len(pending) == len({c.task_id for c in ready}):  # all, one reason
            reason, now = whole.pop()
            conn.execute(sql(update + "job_id = :j"), {"e": reason, "now": now, "j": job_id})
        elif ready:
            conn.execute(
                sql(update + "task_id = :t"), [{"e": c.reason, "now": c.finished_ms, "t": c.task_id} for c in ready]
            )
        if ready:
            report.jobs.append(job_id)
        for c in ending:
            if c.task_id not in pending:
                _refuse(report, c, _not_pending(conn, c.task_id))


def place(conn: Connection, placement: tr.Placement, now_ms: int) -> Report:
    """Places one task as the scheduler chose; refused when its job was cancelled or the task is
    no longer pending since the snapshot was read."""
    return apply(conn, (tr.place(placement, now_ms),))
