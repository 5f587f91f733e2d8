"""Tick writes: placing attempts, recording their start and their end, and storing their logs.

Each function runs inside the tick's write transaction. The order of writes is what makes a crash
harmless: an attempt row is committed (ASSIGNED) before its process is started, and its pid after,
so a restarted controller finds every attempt that might be running and either re-adopts it or
marks it WORKER_FAILED and retries it.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy.engine import Connection

from iris.backends.protocol import AttemptExit, LogChunk
from iris.controller.db.database import sql
from iris.core.states import RetryBudget, TaskState, decide_retry


def assign_attempt(
    conn: Connection, task_id: str, backend_id: str, worker_id: str, now_ms: int
) -> tuple[str, int] | None:
    """Moves a PENDING task to ASSIGNED with a new attempt; returns (attempt_id, attempt) or None
    when the task is no longer pending (a cancel won the race)."""
    row = conn.execute(sql("SELECT job_id, idx, attempt, state FROM tasks WHERE task_id = :t"), {"t": task_id}).first()
    if row is None or row[3] != TaskState.PENDING.value:
        return None
    job_id, idx, attempt = row[0], row[1], row[2] + 1
    attempt_id = f"{task_id}:{attempt}"
    conn.execute(
        sql(
            "UPDATE tasks SET state = 'ASSIGNED', attempt = :a, backend_id = :b, worker_id = :w, error = '',"
            " exit_code = NULL WHERE task_id = :t"
        ),
        {"a": attempt, "b": backend_id, "w": worker_id, "t": task_id},
    )
    conn.execute(
        sql(
            "INSERT INTO attempts (attempt_id, task_id, job_id, idx, attempt, state, backend_id, worker_id, created_ms)"
            " VALUES (:id, :t, :j, :i, :a, 'ASSIGNED', :b, :w, :now)"
        ),
        {
            "id": attempt_id,
            "t": task_id,
            "j": job_id,
            "i": idx,
            "a": attempt,
            "b": backend_id,
            "w": worker_id,
            "now": now_ms,
        },
    )
    return attempt_id, attempt


def mark_started(
    conn: Connection, attempt_id: str, pid: int, devices: str, now_ms: int, running: bool = True
) -> str | None:
    """Records a started process; returns its job id, or None if the attempt was ended meanwhile.

    `running` False records the id a backend's own queue gave the attempt (a Slurm job id) and
    leaves it ASSIGNED until `mark_running`: a job waiting in that queue is still pending."""
    row = conn.execute(
        sql("SELECT task_id, job_id, state FROM attempts WHERE attempt_id = :a"), {"a": attempt_id}
    ).first()
    if row is None:
        return None
    if not running:
        conn.execute(
            sql("UPDATE attempts SET pid = :p, devices = :d WHERE attempt_id = :a"),
            {"p": pid, "d": devices, "a": attempt_id},
        )
        return None
    conn.execute(
        sql(
            "UPDATE attempts SET pid = :p, devices = :d, started_ms = :now,"
            " state = CASE WHEN state = 'ASSIGNED' THEN 'RUNNING' ELSE state END WHERE attempt_id = :a"
        ),
        {"p": pid, "d": devices, "now": now_ms, "a": attempt_id},
    )
    if row[2] != "ASSIGNED":
        return None
    conn.execute(
        sql("UPDATE tasks SET state = 'RUNNING', started_ms = :now WHERE task_id = :t AND state = 'ASSIGNED'"),
        {"now": now_ms, "t": row[0]},
    )
    return row[1]


def mark_running(conn: Connection, attempt_id: str, now_ms: int) -> str | None:
    """An attempt that left its backend's queue now runs; returns its job id when it changed."""
    row = conn.execute(
        sql("SELECT pid, devices FROM attempts WHERE attempt_id = :a AND state = 'ASSIGNED'"), {"a": attempt_id}
    ).first()
    if row is None:
        return None
    return mark_started(conn, attempt_id, row[0], row[1], now_ms)


def end_attempt(
    conn: Connection, attempt_id: str, outcome: TaskState, now_ms: int, error: str = "", exit_code: int | None = None
) -> str | None:
    """Ends a live attempt with `outcome` and applies the task's retry budget.

    Returns the job id when the attempt was live (so the caller refreshes the job), else None; an
    attempt already ended (stopped by a cancel, a timeout, a preemption) only gains its exit code.
    """
    row = conn.execute(
        sql(
            "SELECT a.task_id, a.job_id, a.state, t.failure_count, t.preemption_count, c.max_retries_failure,"
            " c.max_retries_preemption, t.attempt, a.attempt FROM attempts a JOIN tasks t ON t.task_id = a.task_id"
            " JOIN job_config c ON c.job_id = a.job_id WHERE a.attempt_id = :a"
        ),
        {"a": attempt_id},
    ).first()
    if row is None:
        return None
    if row[2] not in ("ASSIGNED", "BUILDING", "RUNNING"):
        if exit_code is not None:
            conn.execute(
                sql("UPDATE attempts SET exit_code = COALESCE(exit_code, :c) WHERE attempt_id = :a"),
                {"c": exit_code, "a": attempt_id},
            )
        return None
    conn.execute(
        sql("UPDATE attempts SET state = :s, exit_code = :c, finished_ms = :now, error = :e WHERE attempt_id = :a"),
        {"s": outcome.value, "c": exit_code, "now": now_ms, "e": error, "a": attempt_id},
    )
    if row[7] != row[8]:
        return row[1]  # the task already moved on to a newer attempt
    decision = decide_retry(outcome, RetryBudget(row[5], row[6]), row[3], row[4])
    if decision.retried:
        conn.execute(
            sql(
                "UPDATE tasks SET state = 'PENDING', worker_id = NULL, backend_id = NULL, failure_count = :f,"
                " preemption_count = :p, exit_code = :c, error = :e WHERE task_id = :t"
            ),
            {
                "f": decision.failure_count,
                "p": decision.preemption_count,
                "c": exit_code,
                "e": f"retrying after {outcome.value.lower().replace('_', ' ')}" + (f": {error}" if error else ""),
                "t": row[0],
            },
        )
    else:
        conn.execute(
            sql(
                "UPDATE tasks SET state = :s, failure_count = :f, preemption_count = :p, exit_code = :c,"
                " finished_ms = :now, error = :e WHERE task_id = :t"
            ),
            {
                "s": decision.task_state.value,
                "f": decision.failure_count,
                "p": decision.preemption_count,
                "c": exit_code,
                "now": now_ms,
                "e": error,
                "t": row[0],
            },
        )
    return row[1]


def outcome_of(exit: AttemptExit) -> tuple[TaskState, str]:
    if exit.outcome is not None:
        return exit.outcome, exit.error
    if exit.exit_code is None:
        return TaskState.WORKER_FAILED, exit.error or "the attempt was lost"
    if exit.exit_code == 0:
        return TaskState.SUCCEEDED, ""
    return TaskState.FAILED, exit.error or f"exit code {exit.exit_code}"


def record_exit(conn: Connection, exit: AttemptExit, now_ms: int) -> str | None:
    outcome, error = outcome_of(exit)
    return end_attempt(conn, exit.attempt_id, outcome, now_ms, error, exit.exit_code)


def store_logs(conn: Connection, chunks: Iterable[LogChunk]) -> None:
    """Appends log lines and advances the attempt's read offset in the same transaction.

    The lines go to the driver as plain tuples: with a named-parameter dict per row the insert
    took about 2.5 times as long, and a flooding job's lines are the bulk of all writes."""
    rows: list[tuple[str, int, int, str, int, str]] = []
    for chunk in chunks:
        job_id, _, rest = chunk.attempt_id.rpartition("/")
        idx, _, attempt = rest.partition(":")
        i, a, stream = int(idx), int(attempt), chunk.stream
        rows.extend((job_id, i, a, stream, ts, line) for ts, line in chunk.lines)
        conn.execute(
            sql(f"UPDATE attempts SET {chunk.stream}_offset = :o WHERE attempt_id = :a"),
            {"o": chunk.end_offset, "a": chunk.attempt_id},
        )
    if rows:
        conn.exec_driver_sql(
            "INSERT INTO logs (job_id, task_index, attempt, stream, ts_ms, text) VALUES (?, ?, ?, ?, ?, ?)", rows
        )


def store_waiting(conn: Connection, waiting: Iterable[tuple[str, str]]) -> None:
    """Shows why a backend's own queue holds an attempt as its job's pending reason."""
    rows = [{"r": reason, "a": attempt_id} for attempt_id, reason in waiting]
    if rows:
        conn.execute(
            sql(
                "UPDATE jobs SET pending_reason = :r WHERE state = 'PENDING' AND job_id ="
                " (SELECT job_id FROM attempts WHERE attempt_id = :a AND state = 'ASSIGNED')"
            ),
            rows,
        )


def add_system_log(conn: Connection, job_id: str, task_index: int, attempt: int, line: str, now_ms: int) -> None:
    conn.execute(
        sql("INSERT INTO logs (job_id, task_index, attempt, stream, ts_ms, text) VALUES (:j, :i, :a, 'iris', :ts, :x)"),
        {"j": job_id, "i": task_index, "a": attempt, "ts": now_ms, "x": line},
    )
