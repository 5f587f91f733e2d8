"""The snapshot loader over a real database: unchanged rows are handed on as the same tasks, and the
worker index it carries from load to load agrees with one built from nothing."""

from __future__ import annotations

from dataclasses import replace

from iris.backends.protocol import WorkerSnapshot
from iris.controller.db.database import Database, sql
from iris.controller.db.jobs import insert_job
from iris.controller.state.snapshot import SnapshotLoader
from iris.core.job import JobSpec
from iris.core.resources import Resources
from iris.scheduler import schedule
from iris.scheduler.index import ClusterIndex

G = 1024**3
WORKERS = tuple(WorkerSnapshot(f"w{i}", "cpu", Resources(cpu=4, memory=8 * G), {"region": "us"}) for i in range(3))


def _submit(db: Database, name: str, cpu: float, existing: str = "error") -> str:
    spec = JobSpec(
        job_id=f"/alice/{name}", user="alice", owner="alice", command=("true",), resources=Resources(cpu=cpu)
    )
    with db.write() as conn:
        insert_job(conn, spec, 1, existing)
    return spec.job_id


def _run_on(db: Database, job_id: str, worker_id: str) -> None:
    with db.write() as conn:
        conn.execute(
            sql(
                "UPDATE tasks SET state = 'RUNNING', worker_id = :w, backend_id = 'cpu', started_ms = 5 WHERE job_id = :j"
            ),
            {"w": worker_id, "j": job_id},
        )


def test_loader_hands_on_unchanged_tasks_and_carries_a_correct_index(tmp_path):
    db = Database(tmp_path / "controller.db")
    loader = SnapshotLoader(db)
    a, b, c = _submit(db, "a", 1), _submit(db, "b", 2), _submit(db, "c", 3)
    first = loader.load(10, WORKERS)
    assert {t.job_id for t in first.pending} == {a, b, c}
    _run_on(db, a, "w0")
    second = loader.load(20, WORKERS)
    by_job = {t.job_id: t for t in second.pending}
    assert set(by_job) == {b, c}
    assert all(by_job[t.job_id] is t for t in first.pending if t.job_id != a)  # not rebuilt
    assert [t.job_id for t in second.running] == [a]
    fresh = ClusterIndex(WORKERS, second.running)
    assert second.index is not first.index
    assert second.index.free == fresh.free
    assert second.index.free[second.index.index["w0"]][1] == 3000  # 1 of its 4 cores is taken
    assert schedule(second) == schedule(replace(second, index=None))
    _run_on(db, b, "w0")
    with db.write() as conn:
        conn.execute(sql("UPDATE tasks SET state = 'SUCCEEDED' WHERE job_id = :j"), {"j": a})
    third = loader.load(30, WORKERS)
    assert [t.job_id for t in third.running] == [b]
    assert third.index.free == ClusterIndex(WORKERS, third.running).free
    db.close()


def test_loader_rebuilds_a_replaced_job_with_its_new_request(tmp_path):
    db = Database(tmp_path / "controller.db")
    loader = SnapshotLoader(db)
    job_id = _submit(db, "j", 1)
    assert [t.resources.cpu for t in loader.load(10, WORKERS).pending] == [1]
    with db.write() as conn:  # it ended (replacing needs a finished job); a new one under its id waits
        conn.execute(sql("UPDATE jobs SET state = 'KILLED' WHERE job_id = :j"), {"j": job_id})
    _submit(db, "j", 2, existing="replace")
    assert [t.resources.cpu for t in loader.load(20, WORKERS).pending] == [2]
    assert [t.job_id for t in loader.load(30, WORKERS).pending] == [job_id]
    db.close()
