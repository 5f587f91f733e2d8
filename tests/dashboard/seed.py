"""Fills a stopped controller's database with finished jobs, for pages of many jobs without running them.

Each job goes through the same `build_spec` and `insert_job` a submission does, so its rows are
what the controller itself writes; then all of them are marked finished in one statement, so the
controller that starts on this database has nothing to run.
"""

from __future__ import annotations

from pathlib import Path

from iris.controller.api.job_spec import build_spec
from iris.controller.db.database import Database, sql
from iris.controller.db.jobs import insert_job
from iris.rpc import controller_pb2 as pb


def seed_finished_jobs(state_dir: Path, count: int, users=("alice", "bob", "carol"), now_ms: int = 1_700_000_000_000):
    """Writes `count` SUCCEEDED jobs (`/<user>/seed-<i>`) into the database under `state_dir`."""
    state_dir.mkdir(parents=True, exist_ok=True)
    db = Database(state_dir / "controller.db")
    try:
        with db.write() as conn:
            for i in range(count):
                user = users[i % len(users)]
                req = pb.LaunchJobRequest(name=f"seed-{i:05d}", user=user, command=["true"])
                insert_job(conn, build_spec(req, None, (), {}, owner=user), now_ms + i)
            conn.execute(
                sql("UPDATE tasks SET state = 'SUCCEEDED', exit_code = 0, started_ms = :t, finished_ms = :t"),
                {"t": now_ms + count},
            )
            conn.execute(
                sql("UPDATE jobs SET state = 'SUCCEEDED', started_ms = :t, finished_ms = :t, pending_reason = ''"),
                {"t": now_ms + count},
            )
    finally:
        db.close()
