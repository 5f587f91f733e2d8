"""The snapshot loader reads again only the pending rows that changed since its last load (the stamps
of `schedule_changes`), and what it hands the scheduler is what a load from nothing reads, after every
kind of write that can change a pending task's row, a peer's sync of a handed-off job among them."""

from __future__ import annotations

import random

from iris.backends.protocol import WorkerSnapshot
from iris.controller.db.database import Database, sql
from iris.controller.db.federation import queue_job
from iris.controller.db.jobs import insert_job
from iris.controller.state.federation_store import ControllerFederationStore
from iris.controller.state.snapshot import SnapshotLoader
from iris.core.job import JobSpec
from iris.core.resources import Resources
from iris.federation.model import Promotion
from iris.rpc import controller_pb2 as pb

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


def _hand_off(db: Database, store: ControllerFederationStore, name: str) -> str:
    """A job queued for cw-h100 and accepted there, as the federation manager leaves it."""
    spec = JobSpec(job_id=f"/alice/{name}", user="alice", owner="alice", command=("true",), resources=Resources(cpu=1))
    with db.write() as conn:
        assert queue_job(conn, spec, None, "alice", 1)
    assert store.promote_all([Promotion(spec.job_id, "cw-h100", "h100")])
    assert store.start_deliveries([spec.job_id]) == [spec.job_id]
    store.mark_handed_off([spec.job_id])
    return spec.job_id


def _report(job_id: str, state: str, tasks: list[tuple[str, int]]) -> pb.SyncedJob:
    """A peer's report of a job: each task's state and how many of its attempts failed before."""
    synced = pb.SyncedJob(job=pb.JobStatus(job_id=job_id, state=state))
    for idx, (task_state, failures) in enumerate(tasks):
        task = synced.tasks.add(
            task_id=f"{job_id}/{idx}",
            job_id=job_id,
            index=idx,
            state=task_state,
            attempt=failures,
            failure_count=failures,
        )
        for n in range(failures + 1):
            failed = n < failures
            task.attempts.add(
                attempt_id=f"{task.task_id}:{n}",
                attempt=n,
                state="FAILED" if failed else task_state,
                finished_ms=900 * failed,
            )
    return synced


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


def test_syncs_of_a_handed_off_job_read_only_its_changed_rows_not_every_pending_task(tmp_path):
    db = Database(tmp_path / "controller.db")
    store = ControllerFederationStore(db, "marin", lambda: 1_000)
    [_submit(db, f"j{i}", replicas=5) for i in range(100)]
    away = _hand_off(db, store, "away")
    loader = SnapshotLoader(db)
    assert len(loader.load(10, WORKERS).pending) == 500
    reports = [
        ("PENDING", [("PENDING", 0)] * 3),
        ("RUNNING", [("RUNNING", 0), ("PENDING", 0), ("RUNNING", 0)]),
        ("RUNNING", [("RUNNING", 0), ("RUNNING", 1), ("SUCCEEDED", 0)]),
        ("RUNNING", [("RUNNING", 0), ("RUNNING", 1), ("SUCCEEDED", 0)]),  # unchanged: nothing stamped
        ("SUCCEEDED", [("SUCCEEDED", 0), ("SUCCEEDED", 1), ("SUCCEEDED", 0)]),
    ]
    for cursor, (state, tasks) in enumerate(reports, start=1):
        store.apply_sync("cw-h100", pb.FederationSyncResponse(cursor=cursor, jobs=[_report(away, state, tasks)]))
        assert len(loader.load(10 + cursor, WORKERS).pending) == 500
    assert loader.full_reads == 1  # the first load's alone: each sync rewrote the job's rows in place
    assert loader.rows_read == 500 + 3 + 2 + 2 + 0 + 2  # then the mirrored tasks each sync changed
    with db.read() as conn:
        rows = conn.execute(
            sql("SELECT task_id, state, cluster FROM tasks WHERE job_id = :j ORDER BY idx"), {"j": away}
        )
        assert [tuple(r) for r in rows] == [(f"{away}/{i}", "SUCCEEDED", "cw-h100") for i in range(3)]
        attempts = conn.execute(sql("SELECT COUNT(*) FROM attempts WHERE job_id = :j"), {"j": away}).scalar()
    assert attempts == 4
    # A task the peer no longer reports is deleted here, and that alone reads every pending row again.
    gone = _report(away, "SUCCEEDED", [("SUCCEEDED", 0), ("SUCCEEDED", 1)])
    store.apply_sync("cw-h100", pb.FederationSyncResponse(cursor=9, jobs=[gone]))
    assert len(loader.load(20, WORKERS).pending) == 500 and loader.full_reads == 2
    with db.read() as conn:
        left = conn.execute(sql("SELECT task_id FROM tasks WHERE job_id = :j ORDER BY idx"), {"j": away}).scalars()
        assert list(left) == [f"{away}/0", f"{away}/1"]
    db.close()


def test_a_report_of_a_handed_off_job_that_changes_nothing_moves_no_scheduling_input(tmp_path):
    db = Database(tmp_path / "controller.db")
    store = ControllerFederationStore(db, "marin", lambda: 1_000)
    away = _hand_off(db, store, "chatty")
    loader = SnapshotLoader(db)
    report = _report(away, "RUNNING", [("RUNNING", 1), ("SUCCEEDED", 0)])
    store.apply_sync("cw-h100", pb.FederationSyncResponse(cursor=1, jobs=[report]))
    version = loader.inputs_version()
    # The peer reports the job again for what is not mirrored here (its output grew): nothing moves.
    store.apply_sync("cw-h100", pb.FederationSyncResponse(cursor=2, jobs=[report]))
    assert loader.inputs_version() == version
    assert store.sync_cursor("cw-h100") == 2
    report.tasks[0].state = "SUCCEEDED"
    store.apply_sync("cw-h100", pb.FederationSyncResponse(cursor=3, jobs=[report]))
    assert loader.inputs_version() > version
    db.close()


def test_every_kind_of_write_leaves_the_loader_seeing_what_a_fresh_load_sees(tmp_path):
    db = Database(tmp_path / "controller.db")
    rng = random.Random(7)
    kept = SnapshotLoader(db)
    parents = [_submit(db, f"p{i}") for i in range(3)]
    children = [_submit(db, f"c{i}", replicas=2, parent=parents[i % 3]) for i in range(6)]
    plain = [_submit(db, f"j{i}", replicas=3) for i in range(6)]
    store = ControllerFederationStore(db, "marin", lambda: 1_000)
    away = [_hand_off(db, store, f"away{i}") for i in range(2)]
    _submit(db, "waits", replicas=2, parent=away[0])  # placeable here only while its peer runs the parent
    attempt_no = 0
    unfinished: list[str] = []
    kinds = ["state", "parent", "band", "fail", "finish", "cluster", "replace", "submit", "delete", "sync", "sync"]
    for step in range(120):
        now = 1_000_000 + step * 1000
        kind = rng.choice(kinds)
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
        elif kind == "sync":  # the peer reports a handed-off job: its tasks change, appear or disappear
            tasks = [
                (rng.choice(["PENDING", "RUNNING", "SUCCEEDED"]), rng.randint(0, 2)) for _ in range(rng.randint(0, 3))
            ]
            report = _report(rng.choice(away), rng.choice(["PENDING", "RUNNING"]), tasks)
            store.apply_sync("cw-h100", pb.FederationSyncResponse(cursor=step, jobs=[report]))
        else:
            _write(db, "DELETE FROM tasks WHERE job_id = :j AND idx = 1", j=job)
        assert _view(kept, now) == _view(SnapshotLoader(db), now), f"after step {step} ({kind})"


def test_the_configs_of_a_burst_of_new_jobs_are_read_in_one_statement_and_a_bad_one_fails_alone(tmp_path):
    db = Database(tmp_path / "controller.db")
    loader = SnapshotLoader(db)
    _submit(db, "first")
    assert len(loader.load(10, WORKERS).pending) == 1
    reads = loader.config_reads
    for i in range(200):
        _submit(db, f"b{i}", replicas=2)
    assert len(loader.load(20, WORKERS).pending) == 1 + 2 * 200
    assert loader.config_reads == reads + 1
    again = [_submit(db, f"c{i}") for i in range(20)]
    _write(db, 'UPDATE job_config SET resources = \'{"cpu": "lots"}\' WHERE job_id = :j', j=again[7])
    pending = loader.load(30, WORKERS).pending
    assert len(pending) == 1 + 2 * 200 + 19
    assert {t.resources.cpu for t in pending} == {1}
    assert list(loader.poisoned) == [again[7]] and "lots" in loader.poisoned[again[7]]
    db.close()
