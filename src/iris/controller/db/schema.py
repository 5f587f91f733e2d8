"""The controller database: opening SQLite in WAL mode and the numbered migrations.

Each migration runs in one transaction together with the row that records it (SQLite's DDL is
transactional), so a crash part-way leaves either the old schema or the new one and running the
migrations again after any crash is always safe; statements that can be are also re-runnable
(`IF NOT EXISTS`).
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import Engine
from sqlalchemy.pool import QueuePool

from iris.controller.db.literals import RECEIVED, RUNNING

# What the control tick's scheduling step reads, as the row events that change it: a trigger on each
# moves `schedule_inputs.version`, so a pass that finds the version, the workers and the clock where
# the last scheduling left them skips the step (a backlog of 10,000 pending tasks cost ~170 ms of
# CPU a second re-deciding what it had decided). Triggers and not the writers' own calls, so that no
# write path (submit, cancel, exits, a peer's sync, retention) can forget to say it changed
# something. Columns the scheduler never reads (a job's pending reason, its output's size, a task's
# exit code) move nothing, so the tick's own reasons and a chatty job's logs leave the version be.
SCHEDULE_INPUTS: dict[str, tuple[str, ...]] = {
    "tasks": (
        "INSERT",
        "DELETE",
        "UPDATE OF task_id, job_id, idx, state, attempt, worker_id, failure_count, started_ms, cluster",
    ),
    "jobs": (
        "DELETE",
        "UPDATE OF job_id, insertion, parent_job_id, depth, user, band, state, replicas, cluster, submitted_ms,"
        " root_submitted_ms, scheduling_deadline_ms",
    ),
    "attempts": ("UPDATE OF finished_ms",),  # when a failed task's retry backoff ends
}

# Which tasks changed since a snapshot was read: each write that can change a task's pending row (the
# loader's `_PENDING_SQL`: its task, its job, its parent's RUNNING or not, its attempt's end) stamps
# the task in `schedule_changes` with the inputs version of the moment, so the tick's loader reads only
# the rows stamped at or after the version of its last load, not every pending row on every pass (for
# a backlog of 2,000 that re-read was a quarter of the controller's CPU per job). Any version read at
# the stamp is at least the one of every snapshot read before it, whichever trigger fires first. A
# deleted task loses its stamp and moves `schedule_inputs.deletes`, which sends the loader back to a
# whole read.
_STAMP = "(SELECT version FROM schedule_inputs WHERE id = 0)"
_STAMP_TASKS = "INSERT OR REPLACE INTO schedule_changes (task_id, stamp) SELECT task_id, " + _STAMP + " FROM tasks"
_STAMP_NEW = f"INSERT OR REPLACE INTO schedule_changes (task_id, stamp) VALUES (NEW.task_id, {_STAMP});"
SCHEDULE_CHANGES: list[tuple[str, str]] = [
    ("tasks_insert", f"AFTER INSERT ON tasks BEGIN {_STAMP_NEW} END"),
    (
        "tasks_update",
        "AFTER UPDATE OF task_id, job_id, idx, state, attempt, failure_count, cluster ON tasks"
        f" BEGIN {_STAMP_NEW}"
        " DELETE FROM schedule_changes WHERE task_id = OLD.task_id AND OLD.task_id != NEW.task_id;"
        " UPDATE schedule_inputs SET deletes = deletes + 1 WHERE id = 0 AND OLD.task_id != NEW.task_id; END",
    ),
    (
        "tasks_delete",
        "AFTER DELETE ON tasks BEGIN DELETE FROM schedule_changes WHERE task_id = OLD.task_id;"
        " UPDATE schedule_inputs SET deletes = deletes + 1 WHERE id = 0; END",
    ),
    (
        "jobs_update",
        "AFTER UPDATE OF job_id, insertion, parent_job_id, depth, user, band, replicas, root_submitted_ms,"
        f" scheduling_deadline_ms ON jobs BEGIN {_STAMP_TASKS} WHERE job_id IN (NEW.job_id, OLD.job_id); END",
    ),
    (
        "jobs_running",
        f"AFTER UPDATE OF state ON jobs WHEN (OLD.state = {RUNNING}) IS NOT (NEW.state = {RUNNING})"
        f" BEGIN {_STAMP_TASKS} WHERE job_id IN (SELECT job_id FROM jobs WHERE parent_job_id = NEW.job_id); END",
    ),
    (
        "attempts_finished",
        f"AFTER UPDATE OF finished_ms ON attempts BEGIN {_STAMP_TASKS} WHERE task_id = NEW.task_id; END",
    ),
]

MIGRATIONS: list[tuple[int, str, list[str]]] = [
    (
        1,
        "jobs, tasks, attempts, workers, logs, bundles, endpoints and the federation tables",
        [
            """CREATE TABLE IF NOT EXISTS jobs (
                job_id TEXT PRIMARY KEY,
                insertion INTEGER NOT NULL UNIQUE,
                parent_job_id TEXT,
                root_job_id TEXT NOT NULL,
                depth INTEGER NOT NULL,
                user TEXT NOT NULL,
                owner TEXT NOT NULL,
                band TEXT NOT NULL,
                state TEXT NOT NULL,
                replicas INTEGER NOT NULL,
                cluster TEXT,
                submitted_ms INTEGER NOT NULL,
                root_submitted_ms INTEGER NOT NULL,
                started_ms INTEGER,
                finished_ms INTEGER,
                error TEXT NOT NULL DEFAULT '',
                pending_reason TEXT NOT NULL DEFAULT '',
                scheduling_deadline_ms INTEGER,
                cancel_requested INTEGER NOT NULL DEFAULT 0
            )""",
            "CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state)",
            "CREATE INDEX IF NOT EXISTS jobs_parent ON jobs(parent_job_id)",
            """CREATE TABLE IF NOT EXISTS job_config (
                job_id TEXT PRIMARY KEY REFERENCES jobs(job_id) ON DELETE CASCADE,
                command TEXT NOT NULL,
                resources TEXT NOT NULL,
                constraints TEXT NOT NULL,
                env TEXT NOT NULL,
                workdir TEXT NOT NULL DEFAULT '',
                bundle_id TEXT NOT NULL DEFAULT '',
                workdir_files TEXT NOT NULL DEFAULT '{}',
                max_retries_failure INTEGER NOT NULL,
                max_retries_preemption INTEGER NOT NULL,
                timeout_s REAL NOT NULL DEFAULT 0,
                coschedule INTEGER NOT NULL DEFAULT 0
            )""",
            """CREATE TABLE IF NOT EXISTS tasks (
                task_id TEXT PRIMARY KEY,
                job_id TEXT NOT NULL REFERENCES jobs(job_id) ON DELETE CASCADE,
                idx INTEGER NOT NULL,
                state TEXT NOT NULL,
                attempt INTEGER NOT NULL DEFAULT -1,
                backend_id TEXT,
                worker_id TEXT,
                failure_count INTEGER NOT NULL DEFAULT 0,
                preemption_count INTEGER NOT NULL DEFAULT 0,
                exit_code INTEGER,
                started_ms INTEGER,
                finished_ms INTEGER,
                error TEXT NOT NULL DEFAULT '',
                cluster TEXT
            )""",
            "CREATE INDEX IF NOT EXISTS tasks_job ON tasks(job_id, idx)",
            "CREATE INDEX IF NOT EXISTS tasks_state ON tasks(state)",
            """CREATE TABLE IF NOT EXISTS attempts (
                attempt_id TEXT PRIMARY KEY,
                task_id TEXT NOT NULL,
                job_id TEXT NOT NULL,
                idx INTEGER NOT NULL,
                attempt INTEGER NOT NULL,
                state TEXT NOT NULL,
                backend_id TEXT,
                worker_id TEXT,
                devices TEXT NOT NULL DEFAULT '',
                pid INTEGER,
                exit_code INTEGER,
                created_ms INTEGER NOT NULL,
                started_ms INTEGER,
                finished_ms INTEGER,
                error TEXT NOT NULL DEFAULT '',
                stdout_offset INTEGER NOT NULL DEFAULT 0,
                stderr_offset INTEGER NOT NULL DEFAULT 0,
                cluster TEXT
            )""",
            "CREATE INDEX IF NOT EXISTS attempts_task ON attempts(task_id, attempt)",
            "CREATE INDEX IF NOT EXISTS attempts_job ON attempts(job_id)",
            "CREATE INDEX IF NOT EXISTS attempts_state ON attempts(state)",
            """CREATE TABLE IF NOT EXISTS workers (
                worker_id TEXT PRIMARY KEY,
                backend_id TEXT NOT NULL,
                capacity TEXT NOT NULL,
                attributes TEXT NOT NULL,
                alive INTEGER NOT NULL DEFAULT 1,
                last_seen_ms INTEGER NOT NULL
            )""",
            """CREATE TABLE IF NOT EXISTS logs (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                job_id TEXT NOT NULL,
                task_index INTEGER NOT NULL,
                attempt INTEGER NOT NULL,
                stream TEXT NOT NULL,
                ts_ms INTEGER NOT NULL,
                text TEXT NOT NULL
            )""",
            "CREATE INDEX IF NOT EXISTS logs_job ON logs(job_id, seq)",
            """CREATE TABLE IF NOT EXISTS bundles (
                content_id TEXT PRIMARY KEY,
                size INTEGER NOT NULL,
                created_ms INTEGER NOT NULL
            )""",
            """CREATE TABLE IF NOT EXISTS endpoints (
                name TEXT NOT NULL,
                job_id TEXT NOT NULL,
                address TEXT NOT NULL,
                created_ms INTEGER NOT NULL,
                PRIMARY KEY (job_id, name)
            )""",
            """CREATE TABLE IF NOT EXISTS federated_jobs (
                job_id TEXT NOT NULL,
                direction TEXT NOT NULL,
                peer_id TEXT NOT NULL DEFAULT '',
                backend_id TEXT NOT NULL DEFAULT '',
                owner_principal TEXT NOT NULL DEFAULT '',
                handoff_state TEXT NOT NULL,
                cancel_intent_version INTEGER NOT NULL DEFAULT 0,
                nonce TEXT NOT NULL DEFAULT '',
                updated_ms INTEGER NOT NULL,
                error TEXT NOT NULL DEFAULT '',
                PRIMARY KEY (job_id, direction)
            )""",
            "CREATE INDEX IF NOT EXISTS federated_jobs_state ON federated_jobs(direction, handoff_state)",
            """CREATE TABLE IF NOT EXISTS federation_sync_state (
                peer_id TEXT PRIMARY KEY,
                cursor INTEGER NOT NULL DEFAULT 0,
                last_sync_ms INTEGER,
                stale INTEGER NOT NULL DEFAULT 0
            )""",
            """CREATE TABLE IF NOT EXISTS federation_changelog (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                job_id TEXT NOT NULL,
                requester TEXT NOT NULL,
                task_index INTEGER,
                tombstone INTEGER NOT NULL DEFAULT 0,
                ts_ms INTEGER NOT NULL
            )""",
            "CREATE INDEX IF NOT EXISTS federation_changelog_requester ON federation_changelog(requester, seq)",
        ],
    ),
    (
        2,
        "handoff bookkeeping, inline job files, and the changelog triggers for received jobs",
        [
            "ALTER TABLE federated_jobs ADD COLUMN submitting_user TEXT NOT NULL DEFAULT ''",
            "ALTER TABLE federated_jobs ADD COLUMN cancel_relayed_version INTEGER NOT NULL DEFAULT 0",
            "ALTER TABLE federated_jobs ADD COLUMN first_report INTEGER NOT NULL DEFAULT 0",
            "ALTER TABLE federated_jobs ADD COLUMN log_cursor INTEGER NOT NULL DEFAULT 0",
            """CREATE TABLE IF NOT EXISTS job_files (
                job_id TEXT NOT NULL REFERENCES jobs(job_id) ON DELETE CASCADE,
                name TEXT NOT NULL,
                data BLOB NOT NULL,
                PRIMARY KEY (job_id, name)
            )""",
            *[
                f"""CREATE TRIGGER IF NOT EXISTS changelog_{table}_{event.lower()} AFTER {event} ON {table}
                FOR EACH ROW WHEN EXISTS (SELECT 1 FROM federated_jobs f WHERE f.job_id = NEW.job_id AND f.direction = {RECEIVED})
                BEGIN
                    INSERT INTO federation_changelog (job_id, requester, task_index, tombstone, ts_ms)
                    SELECT NEW.job_id, f.peer_id, {index}, 0, CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)
                    FROM federated_jobs f WHERE f.job_id = NEW.job_id AND f.direction = {RECEIVED};
                END"""
                for table, event, index in (
                    ("jobs", "UPDATE", "NULL"),
                    ("tasks", "INSERT", "NEW.idx"),
                    ("tasks", "UPDATE", "NEW.idx"),
                    ("attempts", "INSERT", "NEW.idx"),
                    ("attempts", "UPDATE", "NEW.idx"),
                )
            ],
        ],
    ),
    (
        3,
        "a job's container image",
        ["ALTER TABLE job_config ADD COLUMN image TEXT NOT NULL DEFAULT ''"],
    ),
    (
        4,
        "workspace bundles stored once by content id",
        ["ALTER TABLE bundles ADD COLUMN data BLOB"],
    ),
    (
        5,
        "the uid each user's tasks run as, and revoked tokens",
        [
            """CREATE TABLE IF NOT EXISTS task_uids (
                user TEXT PRIMARY KEY,
                uid INTEGER NOT NULL UNIQUE
            )""",
            """CREATE TABLE IF NOT EXISTS revoked_tokens (
                jti TEXT PRIMARY KEY,
                subject TEXT NOT NULL DEFAULT '',
                expires_ms INTEGER NOT NULL DEFAULT 0,
                revoked_ms INTEGER NOT NULL
            )""",
        ],
    ),
    (
        6,
        "whether a handed-off job's logs have all been relayed from its peer",
        ["ALTER TABLE federated_jobs ADD COLUMN logs_complete INTEGER NOT NULL DEFAULT 0"],
    ),
    (
        7,
        "the attempt that holds each serving endpoint's lease",
        ["ALTER TABLE endpoints ADD COLUMN attempt_id TEXT NOT NULL DEFAULT ''"],
    ),
    (
        8,
        "a tombstone in the federation changelog whenever a received job is deleted or replaced",
        [
            f"""CREATE TRIGGER IF NOT EXISTS changelog_received_delete AFTER DELETE ON federated_jobs
            FOR EACH ROW WHEN OLD.direction = {RECEIVED}
            BEGIN
                INSERT INTO federation_changelog (job_id, requester, task_index, tombstone, ts_ms)
                VALUES (OLD.job_id, OLD.peer_id, NULL, 1, CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER));
            END""",
            "CREATE INDEX IF NOT EXISTS federation_changelog_ts ON federation_changelog(ts_ms)",
        ],
    ),
    (
        9,
        "withdrawal of a handed-off job its peer cannot place, and whether a delivery was attempted",
        [
            "ALTER TABLE federated_jobs ADD COLUMN withdraw_reason TEXT NOT NULL DEFAULT ''",
            "ALTER TABLE federated_jobs ADD COLUMN excluded_peers TEXT NOT NULL DEFAULT ''",
            "ALTER TABLE federated_jobs ADD COLUMN handed_off_ms INTEGER",
            "ALTER TABLE federated_jobs ADD COLUMN delivery_started INTEGER NOT NULL DEFAULT 0",
        ],
    ),
    (
        10,
        "indexes that serve each job list filter in the list's own order (newest first)",
        [
            # Each filter of ListJobs seeks its index and reads it in insertion order, so a page
            # of a large history costs its own rows, not a sort of every job that matches.
            "CREATE INDEX IF NOT EXISTS jobs_state_insertion ON jobs(state, insertion)",
            "CREATE INDEX IF NOT EXISTS jobs_user_insertion ON jobs(user, insertion)",
            "CREATE INDEX IF NOT EXISTS jobs_parent_insertion ON jobs(parent_job_id, insertion)",
            "CREATE INDEX IF NOT EXISTS jobs_cluster_insertion ON jobs(cluster, insertion)",
            # A name prefix is a range of ids: this index yields its rows' insertion numbers alone,
            # so the newest of them are picked without sorting whole rows.
            "CREATE INDEX IF NOT EXISTS jobs_id_insertion ON jobs(job_id, insertion)",
            "DROP INDEX IF EXISTS jobs_state",
            "DROP INDEX IF EXISTS jobs_parent",
        ],
    ),
    (
        11,
        "handed-off runs their parent stopped before this cluster admitted them (see db/handoff_stops.py)",
        [
            """CREATE TABLE IF NOT EXISTS handoff_stops (
                requester TEXT NOT NULL,
                job_id TEXT NOT NULL,
                nonce TEXT NOT NULL DEFAULT '',
                stopped_ms INTEGER NOT NULL,
                PRIMARY KEY (requester, job_id, nonce)
            )""",
            "CREATE INDEX IF NOT EXISTS handoff_stops_age ON handoff_stops(requester, stopped_ms)",
        ],
    ),
    (
        12,
        "the characters of output stored for each job, against controller.log_max_job_output",
        ["ALTER TABLE jobs ADD COLUMN log_chars INTEGER NOT NULL DEFAULT 0"],
    ),
    (
        13,
        "a version that every change to what the scheduler reads moves (see `SCHEDULE_INPUTS`)",
        [
            """CREATE TABLE IF NOT EXISTS schedule_inputs (
                id INTEGER PRIMARY KEY CHECK (id = 0),
                version INTEGER NOT NULL
            )""",
            "INSERT OR IGNORE INTO schedule_inputs (id, version) VALUES (0, 0)",
            *(
                f"""CREATE TRIGGER IF NOT EXISTS schedule_inputs_{table}_{event.split()[0].lower()}
                AFTER {event} ON {table} FOR EACH ROW
                BEGIN UPDATE schedule_inputs SET version = version + 1 WHERE id = 0; END"""
                for table, events in SCHEDULE_INPUTS.items()
                for event in events
            ),
        ],
    ),
    (
        14,
        "the tasks each write changed, stamped with the inputs version (see `SCHEDULE_CHANGES`)",
        [
            """CREATE TABLE IF NOT EXISTS schedule_changes (
                task_id TEXT PRIMARY KEY,
                stamp INTEGER NOT NULL
            ) WITHOUT ROWID""",
            "CREATE INDEX IF NOT EXISTS schedule_changes_stamp ON schedule_changes(stamp)",
            "ALTER TABLE schedule_inputs ADD COLUMN deletes INTEGER NOT NULL DEFAULT 0",
            *(f"CREATE TRIGGER IF NOT EXISTS schedule_changes_{name} {body}" for name, body in SCHEDULE_CHANGES),
        ],
    ),
    (
        15,
        "workspace layers a replaced job's deleted tree named, for retention to release (see retention.py)",
        [
            """CREATE TABLE IF NOT EXISTS released_layers (
                content_id TEXT PRIMARY KEY,
                released_ms INTEGER NOT NULL
            ) WITHOUT ROWID""",
            "CREATE INDEX IF NOT EXISTS released_layers_age ON released_layers(released_ms)",
        ],
    ),
    (
        16,
        "output counted in stored bytes: per attempt, and per user against controller.max_user_log_bytes",
        [
            "ALTER TABLE attempts ADD COLUMN log_bytes INTEGER NOT NULL DEFAULT 0",
            """CREATE TABLE IF NOT EXISTS log_usage (
                user TEXT PRIMARY KEY,
                bytes INTEGER NOT NULL
            ) WITHOUT ROWID""",
            "INSERT OR IGNORE INTO log_usage (user, bytes)"
            " SELECT user, SUM(log_chars) FROM jobs WHERE log_chars > 0 GROUP BY user",
        ],
    ),
    (
        17,
        "the token each job's tree was submitted with, whose revocation ends its tasks' tokens",
        ["ALTER TABLE jobs ADD COLUMN credential TEXT NOT NULL DEFAULT ''"],
    ),
]


def _on_connect(dbapi_conn: sqlite3.Connection, _record) -> None:
    # The driver's implicit transactions are off; Database emits BEGIN (reads) or BEGIN IMMEDIATE
    # (writes) itself, so a writer takes the lock up front instead of upgrading mid-transaction.
    dbapi_conn.isolation_level = None
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    # NORMAL in WAL mode survives a process crash (SIGKILL): commits are in the WAL before the
    # call returns; only an OS crash could lose the last transactions.
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=10000")
    cur.close()


def _on_begin(conn) -> None:
    # Reads (execution option iris_read) take a deferred snapshot; writes lock up front. Sent on the
    # driver's connection: through SQLAlchemy's statement path the BEGIN alone took about 150 µs,
    # as much as the rest of a small transaction, and every API call and tick pass opens some.
    statement = "BEGIN" if conn.get_execution_options().get("iris_read") else "BEGIN IMMEDIATE"
    try:
        conn.connection.driver_connection.execute(statement)
    except sqlite3.Error:  # again through SQLAlchemy, which raises its own error type for it
        conn.exec_driver_sql(statement)


def open_engine(path: Path) -> Engine:
    """An engine over the database file at `path`, every connection in WAL mode."""
    path.parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(
        f"sqlite:///{path}",
        poolclass=QueuePool,
        pool_size=8,
        max_overflow=8,
        connect_args={"check_same_thread": False},
    )
    event.listen(engine, "connect", _on_connect)
    event.listen(engine, "begin", _on_begin)
    return engine


def migrate(engine: Engine) -> list[int]:
    """Applies every migration not yet recorded; returns the versions applied now."""
    applied_now: list[int] = []
    with engine.begin() as conn:
        conn.execute(
            text(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                "version INTEGER PRIMARY KEY, description TEXT NOT NULL, applied_ms INTEGER NOT NULL)"
            )
        )
    for version, description, statements in MIGRATIONS:
        with engine.begin() as conn:
            done = conn.execute(text("SELECT 1 FROM schema_migrations WHERE version = :v"), {"v": version}).first()
            if done:
                continue
            for statement in statements:
                conn.execute(text(statement))
            conn.execute(
                text("INSERT INTO schema_migrations (version, description, applied_ms) VALUES (:v, :d, :t)"),
                {"v": version, "d": description, "t": int(time.time() * 1000)},
            )
            applied_now.append(version)
    return applied_now
