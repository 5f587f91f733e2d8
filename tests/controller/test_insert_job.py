"""A job's insertion number: each new job gets the next one, and a replaced job a higher one than it
had, so the tick's per-job config cache (keyed on it) never serves the old job's config."""

from __future__ import annotations

from dataclasses import replace

import pytest

from iris.controller.db.database import Database, sql
from iris.controller.db.jobs import insert_job
from iris.controller.state.tick import ControlLoop
from iris.core.errors import AlreadyExists, FailedPrecondition
from iris.core.job import JobSpec
from iris.core.resources import Resources


def _spec(name: str, command: str = "true") -> JobSpec:
    return JobSpec(job_id=f"/alice/{name}", user="alice", owner="alice", command=(command,), resources=Resources(cpu=1))


def _insertions(db: Database) -> dict[str, int]:
    with db.read() as conn:
        return {r[0]: r[1] for r in conn.execute(sql("SELECT job_id, insertion FROM jobs"))}


def test_insert_job_numbers_new_jobs_in_order_and_a_replacement_after_every_other(tmp_path):
    db = Database(tmp_path / "controller.db")
    with db.write() as conn:
        for name in ("a", "b", "c"):
            insert_job(conn, _spec(name), 1000)
    assert _insertions(db) == {"/alice/a": 1, "/alice/b": 2, "/alice/c": 3}
    with db.write() as conn:
        conn.execute(sql("UPDATE jobs SET state = 'SUCCEEDED' WHERE job_id = '/alice/c'"))
        conn.execute(sql("UPDATE tasks SET state = 'SUCCEEDED' WHERE job_id = '/alice/c'"))
    loop = ControlLoop(db, {}, {})
    with db.read() as conn:
        assert loop.loader.config(conn, "/alice/c").command == ("true",)
    with db.write() as conn:  # the newest job replaced: its new row must not reuse number 3
        insert_job(conn, _spec("c", command="echo"), 2000, existing_policy="replace")
        with pytest.raises(AlreadyExists):
            insert_job(conn, _spec("a"), 2000)
    assert _insertions(db) == {"/alice/a": 1, "/alice/b": 2, "/alice/c": 4}
    with db.read() as conn:
        assert loop.loader.config(conn, "/alice/c").command == ("echo",)
    db.close()


def test_replaced_job_keeps_none_of_the_workdir_files_of_the_job_it_replaced(tmp_path):
    from iris.controller.db import workspace

    db = Database(tmp_path / "controller.db")
    with db.write() as conn:
        insert_job(conn, _spec("w"), 1000)
        workspace.store_files(conn, "/alice/w", {"old.txt": b"old", "both.txt": b"1"})
        conn.execute(sql("UPDATE jobs SET state = 'SUCCEEDED' WHERE job_id = '/alice/w'"))
        conn.execute(sql("UPDATE tasks SET state = 'SUCCEEDED' WHERE job_id = '/alice/w'"))
    with db.write() as conn:
        insert_job(conn, _spec("w"), 2000, existing_policy="replace")
        workspace.store_files(conn, "/alice/w", {"both.txt": b"2"})
    with db.read() as conn:
        assert workspace.job_files(conn, "/alice/w") == {"both.txt": b"2"}
    with db.write() as conn:
        conn.execute(sql("UPDATE jobs SET state = 'SUCCEEDED' WHERE job_id = '/alice/w'"))
        insert_job(conn, _spec("w"), 3000, existing_policy="replace")
        workspace.store_files(conn, "/alice/w", {})
    with db.read() as conn:
        assert workspace.job_files(conn, "/alice/w") == {}
    db.close()


def test_new_job_is_stored_without_looking_its_id_up_and_a_taken_id_is_still_refused_or_kept(tmp_path):
    db = Database(tmp_path / "controller.db")
    statements: list[str] = []
    with db.write() as conn:
        conn.connection.driver_connection.set_trace_callback(statements.append)
        assert insert_job(conn, _spec("new"), 1000) == ("PENDING", True)
        conn.connection.driver_connection.set_trace_callback(None)
    # (A statement whose triggers run is traced once more for each of them.)
    assert list(dict.fromkeys(s.split(" (")[0] for s in statements)) == [
        "INSERT INTO jobs",
        "INSERT INTO job_config",
        "INSERT INTO tasks",
    ], statements
    with db.write() as conn:
        with pytest.raises(AlreadyExists, match="/alice/new already exists"):
            insert_job(conn, _spec("new", command="echo"), 2000)
        assert insert_job(conn, _spec("new", command="echo"), 2000, existing_policy="keep") == ("PENDING", False)
    with db.read() as conn:
        assert conn.execute(sql("SELECT command FROM job_config")).scalar_one() == '["true"]'
    db.close()


def test_taken_child_id_under_a_finished_parent_is_answered_as_taken_and_a_new_one_refused(tmp_path):
    db = Database(tmp_path / "controller.db")
    child = JobSpec(
        job_id="/alice/p/c",
        user="alice",
        owner="alice",
        command=("true",),
        resources=Resources(cpu=1),
        parent_job_id="/alice/p",
        root_job_id="/alice/p",
        depth=2,
    )
    with db.write() as conn:
        insert_job(conn, _spec("p"), 1000)
        insert_job(conn, child, 1000)
        conn.execute(sql("UPDATE jobs SET state = 'SUCCEEDED' WHERE job_id = '/alice/p'"))
    with db.write() as conn:
        assert insert_job(conn, child, 2000, existing_policy="keep") == ("PENDING", False)
        with pytest.raises(AlreadyExists):
            insert_job(conn, child, 2000)
        with pytest.raises(FailedPrecondition, match="parent job /alice/p has already finished"):
            insert_job(conn, replace(child, job_id="/alice/p/d"), 2000)
    db.close()
