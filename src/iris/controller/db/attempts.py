"""Tick writes that carry no policy: recording an attempt's start and storing its logs.

Each function runs inside the tick's write transaction. The order of writes is what makes a crash
harmless: an attempt row is committed (ASSIGNED, by the applier) before its process is started, and
its pid after, so a restarted controller finds every attempt that might be running and either
re-adopts it or marks it WORKER_FAILED and retries it. Placing and ending attempts is decided in
`controller/state/transitions.py` and written by `controller/state/applier.py`.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy.engine import Connection

from iris.backends.protocol import LogChunk
from iris.controller.db.database import run, run_many, sql
from iris.controller.db.literals import ASSIGNED, JOB_PENDING, RUNNING
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


def job_truncation_marker(cap: int) -> str:
    return (
        f"[iris] output truncated: this job's tasks wrote more than {cap / 1024**2:g} MiB of output over all"
        " their attempts; the rest is discarded while they keep running (raise controller.log_max_job_output"
        " to keep more)"
    )


def capped_rows(conn: Connection, job_id: str, rows: list[tuple], cap: int, text_at: int = -1) -> list[tuple]:
    """The log `rows` of `job_id` (each with its text at `text_at`) that fit in what is left of its
    output cap (`cap` characters over all its attempts, 0: no cap), counting them against it. The
    row that passes the cap is replaced by a marker row (its text `job_truncation_marker`); after
    it, nothing of the job is kept."""
    if cap <= 0 or not rows:
        return rows
    row = run(conn, "SELECT log_chars FROM jobs WHERE job_id = :j", {"j": job_id}).fetchone()
    if row is None:
        return rows
    stored = row[0]
    if stored > cap:
        return []  # already truncated
    size = sum(len(r[text_at]) + 1 for r in rows)  # a line and its newline
    if stored + size <= cap:
        run(conn, "UPDATE jobs SET log_chars = log_chars + :n WHERE job_id = :j", {"n": size, "j": job_id})
        return rows
    kept: list[tuple] = []
    for r in rows:
        stored += len(r[text_at]) + 1
        if stored > cap:
            marker = list(r)
            marker[text_at] = job_truncation_marker(cap)
            kept.append(tuple(marker))
            break
        kept.append(r)
    run(conn, "UPDATE jobs SET log_chars = :n WHERE job_id = :j", {"n": cap + 1, "j": job_id})
    return kept


def store_logs(conn: Connection, chunks: Iterable[LogChunk], job_cap: int = 0) -> None:
    """Appends log lines (at most `job_cap` characters of each job: see `capped_rows`) and advances
    the attempt's read offset in the same transaction.

    The lines go to the driver as plain tuples: with a named-parameter dict per row the insert
    took about 2.5 times as long, and a flooding job's lines are the bulk of all writes."""
    by_job: dict[str, list[tuple[str, int, int, str, int, str]]] = {}
    for chunk in chunks:
        name = AttemptName.parse(chunk.attempt_id)
        job_id, i, a, stream = name.job_id, name.index, name.attempt, chunk.stream
        by_job.setdefault(job_id, []).extend((job_id, i, a, stream, ts, line) for ts, line in chunk.lines)
        run(
            conn,
            f"UPDATE attempts SET {chunk.stream}_offset = :o WHERE attempt_id = :a",
            {"o": chunk.end_offset, "a": chunk.attempt_id},
        )
    rows = [r for job_id, job_rows in by_job.items() for r in capped_rows(conn, job_id, job_rows, job_cap)]
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
