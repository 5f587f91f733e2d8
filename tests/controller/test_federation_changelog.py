"""The peer's changelog of received jobs, on a real SQLite file: tombstones on deletion and
replacement, bounded full resyncs, exact staleness across pruning, and named follow-ups."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import text

from iris.controller.db.database import Database
from iris.controller.db.federation import (
    MAX_SYNC_JOB_IDS,
    admit_received,
    changelog_bounds,
    changes_since,
    prune_changelog,
)
from iris.controller.db.jobs import delete_job_tree
from iris.core.errors import InvalidArgument
from iris.core.job import JobSpec
from iris.core.resources import Resources
from iris.rpc import controller_pb2 as pb


@pytest.fixture
def db(tmp_path):
    database = Database(tmp_path / "peer.db")
    yield database
    database.close()


def receive(db, job_id: str, nonce: str = "n1", requester: str = "marin") -> None:
    spec = JobSpec(job_id, "alice", "alice", ("true",), Resources())
    handoff = pb.HandoffRecord(
        requester_cluster=requester, owner_principal="alice", submitting_user="alice", nonce=nonce
    )
    with db.write() as conn:
        admit_received(conn, spec, handoff, {}, int(time.time() * 1000))


def finish(db, job_id: str) -> None:
    with db.write() as conn:
        conn.execute(text("UPDATE jobs SET state = 'SUCCEEDED' WHERE job_id = :j"), {"j": job_id})


def head(db) -> int:
    with db.read() as conn:
        return changelog_bounds(conn)[0]


def sync(db, cursor: int, requester: str = "marin", job_ids=()):
    with db.read() as conn:
        return changes_since(conn, requester, cursor, job_ids)


def prune_all(db) -> None:
    with db.write() as conn:
        prune_changelog(conn, int(time.time() * 1000) + 60_000)


def test_changelog_deleting_a_received_job_reports_a_tombstone(db):
    receive(db, "/alice/a")
    finish(db, "/alice/a")
    cursor = head(db)
    with db.write() as conn:
        delete_job_tree(conn, "/alice/a", 0)
    batch = sync(db, cursor)
    assert (batch.changed, batch.tombstones, batch.full) == ((), ("/alice/a",), False)
    assert batch.cursor == head(db) > cursor


def test_changelog_replacing_a_received_job_tombstones_the_old_run_and_reports_the_new_one(db):
    receive(db, "/alice/a", nonce="first")
    finish(db, "/alice/a")
    cursor = head(db)
    receive(db, "/alice/a", nonce="second")  # a new nonce over a finished run re-runs it
    with db.read() as conn:
        kinds = [
            r[0] for r in conn.execute(text("SELECT tombstone FROM federation_changelog WHERE seq > :c"), {"c": cursor})
        ]
    assert kinds[0] == 1 and kinds[-1] == 0  # the old run's tombstone, then the new run's admission
    batch = sync(db, cursor)
    assert (batch.changed, batch.tombstones) == (("/alice/a",), ())


def test_changelog_full_resync_sends_active_jobs_and_recent_changes_not_every_job(db):
    for name in ("old", "recent", "live"):
        receive(db, f"/alice/{name}")
    finish(db, "/alice/old")
    finish(db, "/alice/recent")
    receive(db, "/alice/gone")
    finish(db, "/alice/gone")
    prune_all(db)  # everything so far is older than the retained window
    with db.write() as conn:
        conn.execute(text("UPDATE jobs SET pending_reason = 'touched' WHERE job_id = '/alice/recent'"))
        delete_job_tree(conn, "/alice/gone", 0)
    batch = sync(db, 0)
    assert batch.full is True
    assert sorted(batch.changed) == ["/alice/live", "/alice/recent"]
    assert batch.tombstones == ("/alice/gone",)
    assert sync(db, 0, requester="other").changed == ()


def test_changelog_a_cursor_before_the_pruned_prefix_or_past_the_head_gets_a_full_resync(db):
    receive(db, "/alice/a")
    early = head(db)
    finish(db, "/alice/a")
    receive(db, "/alice/b")
    assert sync(db, early).full is False
    prune_all(db)
    assert sync(db, early).full is True  # what followed `early` was pruned unseen
    caught_up = sync(db, head(db))
    assert (caught_up.full, caught_up.changed) == (False, ())  # an empty log is not a stale cursor
    assert sync(db, head(db) + 5).full is True  # a cursor this database never issued


def test_changelog_pruning_drops_tombstones_older_than_the_window_only(db):
    receive(db, "/alice/a")
    finish(db, "/alice/a")
    with db.write() as conn:
        delete_job_tree(conn, "/alice/a", 0)
        conn.execute(text("UPDATE federation_changelog SET ts_ms = 1000"))
    receive(db, "/alice/b")
    with db.write() as conn:
        assert prune_changelog(conn, 2000) == 3  # admission, update, tombstone of /alice/a
        left = [r[0] for r in conn.execute(text("SELECT job_id FROM federation_changelog"))]
    assert left == ["/alice/b"]


def test_changelog_a_named_follow_up_reports_held_jobs_and_tombstones_the_rest(db):
    receive(db, "/alice/a")
    finish(db, "/alice/a")
    receive(db, "/alice/c", requester="other")
    prune_all(db)
    batch = sync(db, 0, job_ids=["/alice/a", "/alice/b", "/alice/c"])
    assert (batch.changed, batch.tombstones, batch.full) == (("/alice/a",), ("/alice/b", "/alice/c"), False)
    with pytest.raises(InvalidArgument, match="at most"):
        sync(db, 0, job_ids=[f"/alice/j{i}" for i in range(MAX_SYNC_JOB_IDS + 1)])


def test_a_new_nonce_over_a_finished_run_records_the_old_runs_layers_for_release(db):
    def admit(nonce: str, bundle_id: str, now_ms: int) -> None:
        spec = JobSpec("/alice/ws", "alice", "alice", ("true",), Resources(), bundle_id=bundle_id, files_id="sha256:f")
        handoff = pb.HandoffRecord(
            requester_cluster="marin", owner_principal="alice", submitting_user="alice", nonce=nonce
        )
        with db.write() as conn:
            admit_received(conn, spec, handoff, {}, now_ms)

    admit("n1", "sha256:a", 1000)
    finish(db, "/alice/ws")
    admit("n2", "sha256:b", 2000)
    with db.read() as conn:
        rows = conn.execute(text("SELECT content_id, released_ms FROM released_layers ORDER BY content_id")).all()
    assert [tuple(r) for r in rows] == [("sha256:a", 2000), ("sha256:f", 2000)]
