"""The snapshot loader reads again only the pending rows that changed since its last load (the stamps
of `schedule_changes`), and what it hands the scheduler is what a load from nothing reads, after every
kind of write that can change a pending task's row."""

from __future__ import annotations

import random

from iris.backends.protocol import WorkerSnapshot
from iris.controller.db.database import Database, sql
from iris.controller.db.jobs import insert_job
from iris.controller.snapshot import SnapshotLoader
from iris.core.job import JobSpec
from iris.core.resources import Resources

G = 1024**3
WORKERS = (WorkerSnapshot("w0", "cpu", Resources(cpu=4, memory=8 * G), {}),)


def _submit(db: Database, name: str, replicas: int = 1, parent: str | None = None, existing: str = "error") -> str:
    job_id = f"{parent}/{name}" if parent else f"/alice/{name}"
    spec = JobSpec(
        job_id=job_id,
        user="alice",
        owner="alice",
        command=("true",),
        resources=Resources(cpu=1),
        replicas=replicas,
        parent_job_id=parent,
    )
    with db.write() as conn:
        insert_job(conn, spec, 1, existing)
    return job_id


def _write(db: Database, statement: str, **params) -> None:
    with db.write() as conn:
        conn.execute(sql(statement), params)


def _view(loader: SnapshotLoader, now_ms: int):
    snapshot = loader.load(now_ms, WORKERS)
    return sorted(snapshot.pending, key=lambda t: t.task_id), dict(loader.backing_off)


def test_an_unchanged_backlog_is_not_read_again_and_one_change_reads_one_row(tmp_path):
    db = Database(tmp_path / "controller.db")
    jobs = [_submit(db, f"j{i}", replicas=5) for i in range(100)]
    loader = SnapshotLoader(db)
    assert len(loader.load(10, WORKERS).pending) == 500
    assert loader.rows_read == 500
    loader.load(20, WORKERS)
    assert loader.rows_read == 500  # nothing changed: no row read again
    _write(db, "UPDATE tasks SET state = 'RUNNING', worker_id = 'w0' WHERE job_id = :j AND idx = 0", j=jobs[7])
    snapshot = loader.load(30, WORKERS)
    assert loader.rows_read == 501
    assert len(snapshot.pending) == 499
    assert f"{jobs[7]}/0" not in {t.task_id for t in snapshot.pending}


def test_every_kind_of_write_leaves_the_loader_seeing_what_a_fresh_load_sees(tmp_path):
    db = Database(tmp_path / "controller.db")
    rng = random.Random(7)
    kept = SnapshotLoader(db)
    parents = [_submit(db, f"p{i}") for i in range(3)]
    children = [_submit(db, f"c{i}", replicas=2, parent=parents[i % 3]) for i in range(6)]
    plain = [_submit(db, f"j{i}", replicas=3) for i in range(6)]
    attempt_no = 0
    unfinished: list[str] = []
    for step in range(60):
        now = 1_000_000 + step * 1000
        kind = rng.choice(["state", "parent", "band", "fail", "finish", "cluster", "replace", "submit", "delete"])
        job = rng.choice(plain + children)
        if kind == "state":
            state = rng.choice(["RUNNING", "PENDING", "SUCCEEDED"])
            _write(db, "UPDATE tasks SET state = :s WHERE job_id = :j AND idx = 0", s=state, j=job)
        elif kind == "parent":  # a child's task becomes placeable once its parent job runs
            state = rng.choice(["RUNNING", "PENDING"])  # never finished: a child's replacement needs it live
            _write(db, "UPDATE jobs SET state = :s WHERE job_id = :j", s=state, j=rng.choice(parents))
        elif kind == "band":
            _write(db, "UPDATE jobs SET band = :b WHERE job_id = :j", b=rng.choice(["batch", "interactive"]), j=job)
        elif kind == "fail":  # a failed attempt, whose end (stored later) starts a retry backoff
            attempt_no += 1
            with db.write() as conn:
                conn.execute(
                    sql(
                        "INSERT INTO attempts (attempt_id, task_id, job_id, idx, attempt, state, created_ms)"
                        " VALUES (:t || ':' || :a, :t, :j, 0, :a, 'FAILED', 1)"
                    ),
                    {"t": f"{job}/0", "j": job, "a": attempt_no},
                )
                conn.execute(
                    sql("UPDATE tasks SET attempt = :a, failure_count = failure_count + 1 WHERE task_id = :t"),
                    {"t": f"{job}/0", "a": attempt_no},
                )
            unfinished.append(f"{job}/0:{attempt_no}")
        elif kind == "finish" and unfinished:
            _write(db, "UPDATE attempts SET finished_ms = :f WHERE attempt_id = :a", f=now - 500, a=unfinished.pop())
        elif kind == "cluster":
            _write(db, "UPDATE tasks SET cluster = :c WHERE job_id = :j", c=rng.choice([None, "peer"]), j=job)
        elif kind == "replace":
            _write(db, "UPDATE tasks SET state = 'SUCCEEDED' WHERE job_id = :j", j=job)
            _write(db, "UPDATE jobs SET state = 'SUCCEEDED' WHERE job_id = :j", j=job)
            _submit(
                db,
                job.rsplit("/", 1)[1],
                replicas=3,
                parent=job.rsplit("/", 1)[0] if job in children else None,
                existing="replace",
            )
        elif kind == "submit":
            plain.append(_submit(db, f"n{step}", replicas=2))
        else:
            _write(db, "DELETE FROM tasks WHERE job_id = :j AND idx = 1", j=job)
        assert _view(kept, now) == _view(SnapshotLoader(db), now), f"after step {step} ({kind})"
