"""Tick writes that carry no state policy: recording an attempt's start, and storing its logs within
what output may take of the database.

Each function runs inside the tick's write transaction. The order of writes is what makes a crash
harmless: an attempt row is committed (ASSIGNED, by the applier) before its process is started, and
its pid after, so a restarted controller finds every attempt that might be running and either
re-adopts it or marks it WORKER_FAILED and retries it. Placing and ending attempts is decided in
`controller/state/transitions.py` and written by `controller/state/applier.py`.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from sqlalchemy.engine import Connection

from iris.backends.protocol import LogChunk
from iris.controller.db.database import run, run_many, sql
from iris.controller.db.literals import ASSIGNED, JOB_PENDING, RUNNING
from iris.core import metrics
from iris.core.names import AttemptName
from iris.core.states import TaskState


def mark_started(
    conn: Connection, attempt_id: str, pid: int, devices: str, now_ms: int, running: bool = True
) -> str | None:
    """Records a started process; returns its job id, or None if the attempt was ended meanwhile.

    `running` False records the id a backend's own queue gave the attempt (a Slurm job id) and
    leaves it ASSIGNED until `mark_running`: a job waiting in that queue is still pending."""
    row = run(conn, "SELECT task_id, job_id, state FROM attempts WHERE attempt_id = :a", {"a": attempt_id}).fetchone()
    if row is None:
        return None
    if not running:
        run(
            conn,
            "UPDATE attempts SET pid = :p, devices = :d WHERE attempt_id = :a",
            {"p": pid or None, "d": devices, "a": attempt_id},  # 0: its pid is still to come
        )
        return None
    run(
        conn,
        "UPDATE attempts SET pid = :p, devices = :d, started_ms = :now,"
        f" state = CASE WHEN state = {ASSIGNED} THEN {RUNNING} ELSE state END WHERE attempt_id = :a",
        {"p": pid, "d": devices, "now": now_ms, "a": attempt_id},
    )
    if row[2] != TaskState.ASSIGNED.value:
        return None
    run(
        conn,
        f"UPDATE tasks SET state = {RUNNING}, started_ms = :now WHERE task_id = :t AND state = {ASSIGNED}",
        {"now": now_ms, "t": row[0]},
    )
    return row[1]


def mark_spawned(conn: Connection, attempt_id: str, pid: int, at_ms: int) -> str | None:
    """Records the process of an attempt whose backend learned its pid after the start (see
    `BackendEvents.spawned`): it runs since `at_ms`. Returns its job id when it changed; an attempt no
    longer ASSIGNED (stopped meanwhile, or already running before a restart) is left as it is."""
    row = run(
        conn,
        f"UPDATE attempts SET pid = :p, started_ms = :at, state = {RUNNING}"
        f" WHERE attempt_id = :a AND state = {ASSIGNED} RETURNING task_id, job_id",
        {"p": pid, "at": at_ms, "a": attempt_id},
    ).fetchone()
    if row is None:
        return None
    run(
        conn,
        f"UPDATE tasks SET state = {RUNNING}, started_ms = :at WHERE task_id = :t AND state = {ASSIGNED}",
        {"at": at_ms, "t": row[0]},
    )
    return row[1]


def mark_running(conn: Connection, attempt_id: str, now_ms: int) -> str | None:
    """An attempt that left its backend's queue now runs; returns its job id when it changed."""
    row = conn.execute(
        sql(f"SELECT pid, devices FROM attempts WHERE attempt_id = :a AND state = {ASSIGNED}"), {"a": attempt_id}
    ).first()
    if row is None:
        return None
    return mark_started(conn, attempt_id, row[0], row[1], now_ms)


def job_attempts(conn: Connection, job_id: str) -> list[tuple[str, str]]:
    """(attempt, backend) of each attempt of the job run by this cluster's own backends."""
    rows = run(conn, "SELECT attempt_id, backend_id FROM attempts WHERE job_id = ? AND cluster IS NULL", (job_id,))
    return [(a, b) for a, b in rows.fetchall() if b]


# What one stored line of output costs the database besides its text, measured on the logs table and
# its (job_id, seq) index (`bench/logs.py` prints it): about 45 bytes of row and index overhead, and
# the job id twice (in the row and in the index). A 1-byte line thus costs some 60 bytes, so caps
# counted in bytes of output let a job of one-character lines store 30 times its cap; counted here,
# every cap is what the output takes on disk.
ROW_OVERHEAD = 48
DEFAULT_MIN_FREE_DISK = 1024**3
_MIB = 1024**2


def stored_size(job_id: str, text: str) -> int:
    """The bytes one line of `job_id`'s output takes in the database, overhead included."""
    size = len(text) if text.isascii() else len(text.encode())
    return size + 2 * len(job_id) + ROW_OVERHEAD


def job_truncation_marker(cap: int) -> str:
    return (
        f"[iris] output truncated: this job's output over all its attempts takes more than {cap / _MIB:g} MiB of"
        " the controller's database (each line costs its bytes and about 60 more); the rest is discarded while"
        " it keeps running (raise controller.log_max_job_output to keep more)"
    )


def attempt_truncation_marker(cap: int) -> str:
    return (
        f"[iris] output truncated: this attempt's output takes more than {cap / _MIB:g} MiB of the controller's"
        " database (each line costs its bytes and about 60 more); the rest is discarded while it keeps running"
        " (raise controller.log_max_output to keep more)"
    )


def user_cap_marker(user: str, stored: int, cap: int) -> str:
    return (
        f"[iris] output dropped: the jobs of {user} hold {stored / _MIB:.0f} MiB of output in the controller's"
        f" database, the most controller.max_user_log_bytes ({cap / _MIB:g} MiB) allows; further output is"
        " discarded until older jobs' logs expire (controller.log_retention) or are replaced"
    )


def low_disk_marker(user: str, stored: int, free: int, floor: int) -> str:
    return (
        f"[iris] output dropped: the controller's disk has {free / _MIB:.0f} MiB free, under"
        f" controller.min_free_disk ({floor / _MIB:g} MiB); the output of those who store the most is refused"
        f" first ({user}: {stored / _MIB:.0f} MiB) until space is freed, so that every other write still fits"
    )


@dataclass(frozen=True, slots=True)
class OutputLimits:
    """What output the database takes now: caps in stored bytes (0: none) and the disk's free space."""

    attempt: int = 0  # controller.log_max_output, per attempt
    job: int = 0  # controller.log_max_job_output, per job over all its attempts and relayed lines
    user: int = 0  # controller.max_user_log_bytes, per user over all their retained jobs
    min_free_disk: int | None = 0  # controller.min_free_disk (None: 5 % of the disk, at most 1 GiB)
    disk_free: int | None = None  # bytes free on the database's disk at the last look


class OutputPolicy:
    """The limits output is stored under, with the database disk's free space looked at most once a
    second (`statvfs` is cheap, but a flooding job's lines arrive on every pass). It also remembers
    which attempts were told that their output is being dropped, so each is told once."""

    LOOK_EVERY_S = 1.0

    def __init__(
        self,
        folder: Path | None = None,
        attempt: int = 0,
        job: int = 0,
        user: int = 0,
        min_free_disk: int | None = 0,
    ):
        self.folder = folder
        self.caps = OutputLimits(attempt, job, user, min_free_disk)
        self._looked = -math.inf
        self._free: int | None = None
        self._size = 0
        self.told: set[tuple[str, str]] = set()  # (attempt or job, why) that got their marker line

    def tell(self, who: str, why: str) -> bool:
        """Whether `who` is yet to get the marker line saying `why` its output is dropped (and now has)."""
        if (who, why) in self.told:
            return False
        if len(self.told) >= 100_000:  # forgetting costs at most a repeated marker line
            self.told.clear()
        self.told.add((who, why))
        return True

    def limits(self) -> OutputLimits:
        if self.folder is None or self.caps.min_free_disk == 0:
            return self.caps
        now = time.monotonic()
        if now - self._looked >= self.LOOK_EVERY_S:
            self._looked = now
            try:
                st = os.statvfs(self.folder)
                self._free = st.f_bavail * st.f_frsize
                self._size = st.f_blocks * st.f_frsize
            except OSError:
                self._free = None
        floor = self.caps.min_free_disk
        if floor is None:
            floor = min(DEFAULT_MIN_FREE_DISK, self._size * 5 // 100)
        return replace(self.caps, disk_free=self._free, min_free_disk=floor)


NO_OUTPUT_LIMITS = OutputPolicy()


@dataclass(slots=True)
class _Budget:
    """One counter of stored bytes (an attempt's, a job's, a user's) against its cap."""

    spent: int
    cap: int
    changed: bool = False

    def over(self) -> bool:
        return self.cap > 0 and self.spent > self.cap

    def room(self, cost: int) -> bool:
        return self.cap <= 0 or self.spent + cost <= self.cap

    def take(self, cost: int) -> None:
        self.spent += cost
        self.changed = True

    def close(self) -> None:
        """Marks it spent: the marker line is in, and nothing more is kept."""
        self.spent = self.cap + 1
        self.changed = True


_IN_CHUNK = 500  # values bound in one IN (…): well under SQLite's limit on parameters


def _rows_in(conn: Connection, statement: str, values: list[str]) -> list[tuple]:
    """The rows of `statement` (whose `{marks}` is an IN list's placeholders) over `values`, in chunks."""
    out: list[tuple] = []
    for i in range(0, len(values), _IN_CHUNK):
        part = values[i : i + _IN_CHUNK]
        out += run(conn, statement.format(marks=", ".join("?" * len(part))), part).fetchall()
    return out


def admit_output(
    conn: Connection, batches: list[tuple[str, str, list[tuple]]], policy: OutputPolicy, text_at: int = -1
) -> list[tuple]:
    """Which log rows are stored: `batches` are (job, attempt or "" for relayed lines, rows), each
    row with its text at `text_at`. Rows are kept while the attempt, its job and its user have room
    under their caps (stored bytes, see `stored_size`); the row that passes a cap becomes that cap's
    marker line, after which nothing more of that attempt (job) is kept. While the disk has less than
    `min_free_disk` free, the users storing the most output (at least half of the largest user's)
    are refused first, and under a quarter of it everyone is, each attempt told once; submits and
    every other write keep the room that is left. The counters are updated in the same transaction."""
    limits = policy.limits()
    if not batches:
        return []
    job_ids = sorted({job for job, _, _ in batches})
    jobs = {
        job: (user, _Budget(spent, limits.job))
        for job, user, spent in _rows_in(
            conn, "SELECT job_id, user, log_chars FROM jobs WHERE job_id IN ({marks})", job_ids
        )
    }
    attempt_ids = sorted({a for _, a, _ in batches if a})
    attempts = {
        a: _Budget(spent, limits.attempt)
        for a, spent in _rows_in(
            conn, "SELECT attempt_id, log_bytes FROM attempts WHERE attempt_id IN ({marks})", attempt_ids
        )
    }
    user_names = sorted({user for user, _ in jobs.values()})
    users = {u: _Budget(0, limits.user) for u in user_names}
    for u, spent in _rows_in(conn, "SELECT user, bytes FROM log_usage WHERE user IN ({marks})", user_names):
        users[u].spent = spent
    refused = _refused_for_disk(conn, limits, users)
    kept: list[tuple] = []
    stored = 0
    for job, attempt, rows in batches:
        if job not in jobs:
            continue  # deleted (replaced) while its output was on its way
        user, job_budget = jobs[job]
        user_budget = users[user]
        attempt_budget = attempts.get(attempt, _Budget(0, 0))
        if job_budget.over() or attempt_budget.over():
            continue
        who = attempt or job
        if user not in refused:  # the common case: the whole batch fits, counted in one sum
            texts = [r[text_at] for r in rows]
            size = sum(map(len, texts)) if all(map(str.isascii, texts)) else sum(len(x.encode()) for x in texts)
            total = size + len(rows) * (2 * len(job) + ROW_OVERHEAD)
            if attempt_budget.room(total) and job_budget.room(total) and user_budget.room(total):
                attempt_budget.take(total)
                job_budget.take(total)
                user_budget.take(total)
                kept.extend(rows)
                stored += total
                continue
        for row in rows:
            if user in refused:
                if policy.tell(who, "disk"):
                    kept.append(
                        _marked(
                            row,
                            text_at,
                            low_disk_marker(user, user_budget.spent, limits.disk_free or 0, limits.min_free_disk or 0),
                        )
                    )
                break
            cost = stored_size(job, row[text_at])
            if not attempt_budget.room(cost):
                kept.append(_marked(row, text_at, attempt_truncation_marker(limits.attempt)))
                attempt_budget.close()
                break
            if not job_budget.room(cost):
                kept.append(_marked(row, text_at, job_truncation_marker(limits.job)))
                job_budget.close()
                break
            if not user_budget.room(cost):
                if policy.tell(who, "user"):
                    kept.append(_marked(row, text_at, user_cap_marker(user, user_budget.spent, limits.user)))
                break
            attempt_budget.take(cost)
            job_budget.take(cost)
            user_budget.take(cost)
            kept.append(row)
            stored += cost
    _write_back(conn, jobs, attempts, users)
    metrics.LOG_STORED_BYTES.inc(stored)
    metrics.LOG_STORED_LINES.inc(len(kept))
    return kept


def _refused_for_disk(conn: Connection, limits: OutputLimits, users: dict[str, _Budget]) -> set[str]:
    """The users whose output is refused because the disk is nearly full (see `admit_output`)."""
    floor = limits.min_free_disk or 0
    if limits.disk_free is None or floor <= 0 or limits.disk_free >= floor:
        return set()
    if limits.disk_free < floor // 4:
        return set(users)
    largest = run(conn, "SELECT COALESCE(MAX(bytes), 0) FROM log_usage").fetchone()[0]
    return {u for u, b in users.items() if b.spent * 2 >= largest}


def _marked(row: tuple, text_at: int, text: str) -> tuple:
    marker = list(row)
    marker[text_at] = text
    return tuple(marker)


def _write_back(conn: Connection, jobs, attempts, users) -> None:
    job_rows = [(b.spent, job) for job, (_, b) in jobs.items() if b.changed]
    if job_rows:
        run_many(conn, "UPDATE jobs SET log_chars = ? WHERE job_id = ?", job_rows)
    attempt_rows = [(b.spent, a) for a, b in attempts.items() if b.changed]
    if attempt_rows:
        run_many(conn, "UPDATE attempts SET log_bytes = ? WHERE attempt_id = ?", attempt_rows)
    user_rows = [(u, b.spent) for u, b in users.items() if b.changed]
    if user_rows:
        run_many(
            conn,
            "INSERT INTO log_usage (user, bytes) VALUES (?, ?) ON CONFLICT(user) DO UPDATE SET bytes = excluded.bytes",
            user_rows,
        )


def release_output(conn: Connection, job_ids: list[str]) -> None:
    """Takes what the jobs' stored output counted off their users' totals: their logs are being
    deleted (retention, or a replace deleting the tree)."""
    for i in range(0, len(job_ids), _IN_CHUNK):
        part = job_ids[i : i + _IN_CHUNK]
        marks = ", ".join("?" * len(part))
        spent = run(
            conn,
            f"SELECT user, SUM(log_chars) FROM jobs WHERE job_id IN ({marks}) AND log_chars > 0 GROUP BY user",
            part,
        ).fetchall()
        run_many(conn, "UPDATE log_usage SET bytes = MAX(0, bytes - ?) WHERE user = ?", [(n, u) for u, n in spent])
        run(conn, f"UPDATE jobs SET log_chars = 0 WHERE job_id IN ({marks}) AND log_chars > 0", part)


def store_logs(conn: Connection, chunks: Iterable[LogChunk], policy: OutputPolicy = NO_OUTPUT_LIMITS) -> None:
    """Appends log lines (those `admit_output` keeps under `policy`) and advances each attempt's
    read offset in the same transaction.

    The lines go to the driver as plain tuples: with a named-parameter dict per row the insert
    took about 2.5 times as long, and a flooding job's lines are the bulk of all writes."""
    batches: list[tuple[str, str, list[tuple]]] = []
    for chunk in chunks:
        name = AttemptName.parse(chunk.attempt_id)
        job_id, i, a, stream = name.job_id, name.index, name.attempt, chunk.stream
        batches.append((job_id, chunk.attempt_id, [(job_id, i, a, stream, ts, line) for ts, line in chunk.lines]))
        run(
            conn,
            f"UPDATE attempts SET {chunk.stream}_offset = :o WHERE attempt_id = :a",
            {"o": chunk.end_offset, "a": chunk.attempt_id},
        )
    rows = admit_output(conn, [b for b in batches if b[2]], policy)
    if rows:
        run_many(
            conn, "INSERT INTO logs (job_id, task_index, attempt, stream, ts_ms, text) VALUES (?, ?, ?, ?, ?, ?)", rows
        )


def store_waiting(conn: Connection, waiting: Iterable[tuple[str, str]]) -> None:
    """Shows why a backend's own queue holds an attempt as its job's pending reason."""
    rows = [{"r": reason, "a": attempt_id} for attempt_id, reason in waiting]
    if rows:
        conn.execute(
            sql(
                f"UPDATE jobs SET pending_reason = :r WHERE state = {JOB_PENDING} AND job_id ="
                f" (SELECT job_id FROM attempts WHERE attempt_id = :a AND state = {ASSIGNED})"
            ),
            rows,
        )


def add_system_log(conn: Connection, job_id: str, task_index: int, attempt: int, line: str, now_ms: int) -> None:
    conn.execute(
        sql("INSERT INTO logs (job_id, task_index, attempt, stream, ts_ms, text) VALUES (:j, :i, :a, 'iris', :ts, :x)"),
        {"j": job_id, "i": task_index, "a": attempt, "ts": now_ms, "x": line},
    )
