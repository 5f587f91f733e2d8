"""The tick applies a scheduling result through the applier: a placement decided from a snapshot
that a cancel has since overtaken is refused and counted, and the cancel's state stands."""

from __future__ import annotations

import logging

from iris.backends.protocol import WorkerSnapshot
from iris.controller.db.database import Database, sql
from iris.controller.db.jobs import insert_job
from iris.controller.state import applier
from iris.controller.state import transitions as tr
from iris.controller.state.tick import ControlLoop
from iris.core.job import JobSpec
from iris.core.resources import Resources
from iris.core.states import TaskState
from iris.scheduler import schedule
from iris.scheduler.snapshot import ScheduleResult, Unschedulable


def _submit(db: Database, name: str, replicas: int = 1) -> str:
    spec = JobSpec(
        job_id=f"/alice/{name}",
        user="alice",
        owner="alice",
        command=("true",),
        resources=Resources(cpu=1),
        replicas=replicas,
    )
    with db.write() as conn:
        insert_job(conn, spec, 1)
    return spec.job_id


def test_tick_refuses_a_placement_whose_job_was_cancelled_after_the_snapshot(tmp_path, caplog):
    db = Database(tmp_path / "controller.db")
    try:
        loop = ControlLoop(db, {}, {})
        job = _submit(db, "raced")
        worker = WorkerSnapshot("w0", "local", Resources(cpu=4, memory=2**30, disk=2**30), {})
        result = schedule(loop.loader.load(2, (worker,)))
        assert [a.task_id for a in result.assignments] == [f"{job}/0"]
        with db.write() as conn:  # the stop commits between the snapshot and the apply
            assert applier.stop_job(conn, job, "stopped by alice", 3) == [job]
        with caplog.at_level(logging.DEBUG, logger="iris.applier"):
            launches, victims = loop._commit_decisions(result, 4, {})
        assert launches == [] and victims == []
        assert loop.refused["AttemptPlaced"] == 1
        assert f"refused AttemptPlaced on {job}/0: job {job} was cancelled" in caplog.text
        with db.read() as conn:
            assert conn.execute(sql("SELECT state FROM jobs WHERE job_id = :j"), {"j": job}).scalar() == "KILLED"
            assert conn.execute(sql("SELECT state, attempt FROM tasks")).all() == [("KILLED", -1)]
            assert conn.execute(sql("SELECT COUNT(*) FROM attempts")).scalar() == 0
    finally:
        db.close()


def test_roll_up_of_a_child_listed_before_its_failing_parent_still_ends_the_child(tmp_path):
    db = Database(tmp_path / "controller.db")
    try:
        parent = _submit(db, "p")
        child = JobSpec(
            job_id=f"{parent}/c",
            user="alice",
            owner="alice",
            command=("true",),
            resources=Resources(cpu=1),
            parent_job_id=parent,
            depth=1,
            root_job_id=parent,
        )
        with db.write() as conn:
            insert_job(conn, child, 1)
            for task in (f"{parent}/0", f"{child.job_id}/0"):
                assert applier.place(conn, tr.Placement(task, "local", "w0"), 2).placed
            ended = applier.end_attempt(conn, tr.AttemptExited(f"{parent}/0:0", TaskState.FAILED, "boom", 1), 3)
            assert ended.jobs == [parent]
            report = applier.roll_up(conn, [child.job_id, parent], 4)
        assert report.ended == [parent, child.job_id]
        with db.read() as conn:
            states = dict(conn.execute(sql("SELECT job_id, state FROM jobs")).all())
        assert states == {parent: "FAILED", child.job_id: "KILLED"}
    finally:
        db.close()


def test_unschedulable_tasks_end_a_job_at_a_time_with_the_same_guards_as_one_by_one(tmp_path, caplog):
    """A scheduling result that ends tasks as unschedulable ends each pending one with its own
    reason, refuses one that is no longer pending (naming why), and leaves tasks it does not name."""
    db = Database(tmp_path / "controller.db")
    try:
        whole = _submit(db, "whole", 300)
        raced = _submit(db, "raced", 3)
        mixed = _submit(db, "mixed", 2)
        part = _submit(db, "part", 2)
        with db.write() as conn:  # a placement commits between the snapshot and the apply
            assert applier.place(conn, tr.Placement(f"{raced}/1", "local", "w0"), 2).placed
        ends = [(f"{whole}/{i}", "Not placed within 1s") for i in range(300)]
        ends += [(f"{raced}/{i}", "Not placed within 1s") for i in range(3)]
        ends += [(f"{mixed}/0", "reason a"), (f"{mixed}/1", "reason b"), (f"{part}/1", "reason c")]
        result = ScheduleResult(unschedulable=tuple(Unschedulable(t, r) for t, r in ends))
        with caplog.at_level(logging.DEBUG, logger="iris.applier"):
            with db.write() as conn:
                report, victims = applier.commit_schedule(conn, result, 7)
        assert victims == []
        assert sorted(set(report.jobs)) == sorted([whole, raced, mixed, part])
        assert [(r.change, r.subject) for r in report.refused] == [("TaskUnschedulable", f"{raced}/1")]
        assert report.refused[0].reason == "the task is ASSIGNED, no longer PENDING"
        assert f"refused TaskUnschedulable on {raced}/1" in caplog.text
        with db.read() as conn:
            rows = {r[0]: r[1:] for r in conn.execute(sql("SELECT task_id, state, error, finished_ms FROM tasks"))}
        assert all(rows[f"{whole}/{i}"] == ("UNSCHEDULABLE", "Not placed within 1s", 7) for i in range(300))
        assert rows[f"{raced}/0"] == rows[f"{raced}/2"] == ("UNSCHEDULABLE", "Not placed within 1s", 7)
        assert rows[f"{raced}/1"][0] == "ASSIGNED"
        assert rows[f"{mixed}/0"] == ("UNSCHEDULABLE", "reason a", 7)
        assert rows[f"{mixed}/1"] == ("UNSCHEDULABLE", "reason b", 7)
        assert rows[f"{part}/0"] == ("PENDING", "", None)
        assert rows[f"{part}/1"] == ("UNSCHEDULABLE", "reason c", 7)
    finally:
        db.close()
