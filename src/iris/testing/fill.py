"""Fills a stopped controller's database with copies of a job the API wrote: the fast path of
`bench/scale.py`.

A copy is made column by column from the template job's own rows (jobs, job_config, tasks,
attempts, logs, job_files), in SQL, with only its ids, its user, its insertion number and its
times changed. Why copy instead of writing rows here: rows a second writer composes drift from what
`LaunchJob` and the tick write as the schema grows, and a benchmark over drifted rows measures
nothing; a copy of rows the API wrote is what the API writes, by construction, and
`tests/testing/test_fill.py` compares a copy with a job submitted through the API, column by column.

It uses only `sqlite3` and reads the columns from the database itself, so the same module fills a
database of an older revision's schema (the benchmark measures the base revision with it too).
Run it only while no controller holds the database: the controller is the single writer.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

# Tables whose rows belong to one job (keyed by its job_id), copied in this order (parents first).
JOB_TABLES = ("jobs", "job_config", "tasks", "attempts", "logs", "job_files")
# Columns that carry the template's job id, alone or as the prefix of a task or attempt id.
ID_COLUMNS = frozenset({"job_id", "root_job_id", "parent_job_id", "task_id", "attempt_id"})
USER_COLUMNS = frozenset({"user", "owner"})
SKIPPED_COLUMNS = frozenset({"seq"})  # assigned by SQLite (AUTOINCREMENT)


@dataclass(frozen=True)
class Copy:
    """One job to make: its id, its user, and how far its times lie before the template's (ms)."""

    job_id: str
    user: str
    earlier_ms: int = 0


def copy_jobs(db_path: Path | str, template_job_id: str, copies: Sequence[Copy], template_user: str = "") -> int:
    """Writes `copies` of the template job in one transaction; returns how many jobs it wrote.

    Each copy gets the next insertion numbers after the highest in the database, so copies list
    as newer than every job already there, in the order given.
    """
    conn = sqlite3.connect(str(db_path), isolation_level=None)
    try:
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("PRAGMA busy_timeout=10000")
        if conn.execute("SELECT 1 FROM jobs WHERE job_id = ?", (template_job_id,)).fetchone() is None:
            raise ValueError(f"no job {template_job_id!r} in {db_path} to copy")
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "CREATE TEMP TABLE fill_copies (n INTEGER PRIMARY KEY, job_id TEXT, user TEXT, earlier_ms INTEGER)"
        )
        conn.executemany(
            "INSERT INTO fill_copies (n, job_id, user, earlier_ms) VALUES (?, ?, ?, ?)",
            ((i + 1, c.job_id, c.user, c.earlier_ms) for i, c in enumerate(copies)),
        )
        first = conn.execute("SELECT COALESCE(MAX(insertion), 0) FROM jobs").fetchone()[0]
        params = {"tpl": template_job_id, "tpl_user": template_user, "first": first}
        for table in JOB_TABLES:
            columns = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
            if not columns:
                continue  # an older schema without this table
            kept = [c for c in columns if c not in SKIPPED_COLUMNS]
            values = ", ".join(_value(table, c) for c in kept)
            names = ", ".join(f'"{c}"' for c in kept)
            conn.execute(
                f"INSERT INTO {table} ({names}) SELECT {values} FROM {table} AS src, temp.fill_copies AS f"
                " WHERE src.job_id = :tpl ORDER BY f.n",
                params,
            )
        if conn.execute("PRAGMA table_info(log_usage)").fetchall():
            # Each copy's output counts against its user's stored-output total, as the tick counts it.
            conn.execute(
                "INSERT INTO log_usage (user, bytes) SELECT j.user, SUM(j.log_chars) FROM jobs j"
                " JOIN temp.fill_copies f ON f.job_id = j.job_id WHERE j.log_chars > 0 GROUP BY j.user"
                " ON CONFLICT(user) DO UPDATE SET bytes = bytes + excluded.bytes"
            )
        conn.execute("DROP TABLE temp.fill_copies")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    finally:
        conn.close()
    return len(copies)


# Counts of stored output bytes, which hold each line's job id twice (`stored_size`): a copy whose
# id is longer or shorter than the template's stores each of those lines in that many more bytes.
_STORED_BYTES = {
    ("jobs", "log_chars"): "SELECT COUNT(*) FROM logs WHERE logs.job_id = :tpl",
    ("attempts", "log_bytes"): (
        "SELECT COUNT(*) FROM logs WHERE logs.job_id = :tpl"
        " AND logs.task_index = src.idx AND logs.attempt = src.attempt"
    ),
}


def _value(table: str, column: str) -> str:
    """The SQL expression that gives a copy's value of `column` from the template row `src`."""
    if (table, column) in _STORED_BYTES:
        lines = _STORED_BYTES[table, column]
        return f"src.{column} + 2 * (length(f.job_id) - length(:tpl)) * ({lines})"
    if column in ID_COLUMNS:
        # The template id is the whole value or its prefix ('/u/tpl/0:1'); a parent outside the
        # template's tree (or NULL) is kept as it is.
        return (
            f"CASE WHEN src.{column} = :tpl OR substr(src.{column}, 1, length(:tpl) + 1) IN (:tpl || '/', :tpl || ':')"
            f" THEN f.job_id || substr(src.{column}, length(:tpl) + 1) ELSE src.{column} END"
        )
    if column in USER_COLUMNS:
        return f'CASE WHEN src."{column}" = :tpl_user THEN f.user ELSE src."{column}" END'
    if column == "insertion":
        return ":first + f.n"
    if column.endswith("_ms"):
        return f"src.{column} - f.earlier_ms"
    return f'src."{column}"'
