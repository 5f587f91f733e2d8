"""A peer's tombstones of handed-off runs stopped before they arrived, on a real SQLite file:
a late handoff of a stopped run is refused, other runs and other peers are untouched, and the
table is bounded per peer and by age."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from iris.controller.db import handoff_stops
from iris.controller.db.database import Database
from iris.controller.db.federation import admit_received
from iris.controller.db.handoff_stops import STOP_TOMBSTONE_TTL_MS, stop_unheld, stopped
from iris.core.errors import FailedPrecondition, InvalidArgument
from iris.core.job import JobSpec
from iris.core.resources import Resources
from iris.rpc import controller_pb2 as pb

NOW = 1_800_000_000_000


@pytest.fixture
def db(tmp_path):
    database = Database(tmp_path / "peer.db")
    yield database
    database.close()


def admit(db, job_id: str, nonce: str, requester: str = "marin", now: int = NOW) -> str:
    spec = JobSpec(job_id, "alice", "alice", ("true",), Resources())
    handoff = pb.HandoffRecord(
        requester_cluster=requester, owner_principal="alice", submitting_user="alice", nonce=nonce
    )
    with db.write() as conn:
        return admit_received(conn, spec, handoff, {}, now)


def stop(db, job_id: str, nonce: str, requester: str = "marin", now: int = NOW) -> bool:
    with db.write() as conn:
        return stop_unheld(conn, requester, job_id, nonce, now)


def is_stopped(db, job_id: str, nonce: str, requester: str = "marin", now: int = NOW) -> bool:
    with db.read() as conn:
        return stopped(conn, requester, job_id, nonce, now)


def count(db, requester: str) -> int:
    with db.read() as conn:
        return conn.execute(text("SELECT COUNT(*) FROM handoff_stops WHERE requester = :r"), {"r": requester}).scalar()


def test_stop_before_the_handoff_refuses_that_run_and_admits_a_new_one(db):
    assert stop(db, "/alice/marin.train", "n1")
    with pytest.raises(FailedPrecondition, match="stopped job /alice/marin.train .* before this handoff"):
        admit(db, "/alice/marin.train", "n1")
    with db.read() as conn:
        assert conn.execute(text("SELECT COUNT(*) FROM jobs")).scalar() == 0  # refused: nothing written
    assert admit(db, "/alice/marin.train", "n2") == "created"  # a new run of the same job is not blocked


def test_stop_of_a_held_run_leaves_no_tombstone_and_the_ordinary_stop_decides(db):
    assert admit(db, "/alice/marin.train", "n1") == "created"
    assert not stop(db, "/alice/marin.train", "n1")
    assert count(db, "marin") == 0
    assert admit(db, "/alice/marin.train", "n1") == "existing"  # a replay stays idempotent


def test_stop_naming_another_run_of_a_held_job_refuses_that_run_only(db):
    assert admit(db, "/alice/marin.train", "n1") == "created"
    assert stop(db, "/alice/marin.train", "n2")
    assert is_stopped(db, "/alice/marin.train", "n2") and not is_stopped(db, "/alice/marin.train", "n1")


def test_stop_without_a_nonce_refuses_every_run_of_the_job(db):
    assert stop(db, "/alice/marin.train", "")
    for nonce in ("n1", "n2"):
        with pytest.raises(FailedPrecondition):
            admit(db, "/alice/marin.train", nonce)


def test_a_peer_reaches_only_jobs_in_its_own_namespace(db):
    assert not stop(db, "/alice/lab.train", "n1", requester="marin")  # lab's job: not marin's to block
    assert not stop(db, "/alice/train", "n1", requester="marin")  # a local job
    assert not stop(db, "/alice/marin.train/child", "n1", requester="marin")  # not a root job
    assert not stop(db, "not a job id", "n1", requester="marin")
    assert count(db, "marin") == 0
    assert admit(db, "/alice/lab.train", "n1", requester="lab") == "created"
    # A held job another peer handed off is not marin's either, whatever its name says.
    assert not stop(db, "/alice/lab.train", "n9", requester="marin")


def test_tombstones_of_one_peer_do_not_touch_another(db):
    assert stop(db, "/alice/marin.train", "n1", requester="marin")
    assert not is_stopped(db, "/alice/marin.train", "n1", requester="lab")
    assert admit(db, "/alice/lab.train", "n1", requester="lab") == "created"


def test_a_tombstone_expires_after_its_ttl_and_expired_ones_are_dropped(db):
    assert stop(db, "/alice/marin.old", "n1", now=NOW)
    assert is_stopped(db, "/alice/marin.old", "n1", now=NOW + STOP_TOMBSTONE_TTL_MS - 1)
    later = NOW + STOP_TOMBSTONE_TTL_MS
    assert not is_stopped(db, "/alice/marin.old", "n1", now=later)
    assert admit(db, "/alice/marin.old", "n1", now=later) == "created"
    assert stop(db, "/alice/marin.new", "n1", now=later)  # a new tombstone sweeps the expired ones
    with db.read() as conn:
        assert [r[0] for r in conn.execute(text("SELECT job_id FROM handoff_stops"))] == ["/alice/marin.new"]
    assert stop(db, "/alice/lab.quiet", "n1", requester="lab", now=NOW)
    with db.write() as conn:  # a peer that sends no more stops has its expired ones swept by the tick
        assert handoff_stops.prune(conn, later) == 1
    assert count(db, "lab") == 0 and count(db, "marin") == 1


def test_each_peer_keeps_at_most_its_cap_dropping_its_own_oldest(db, monkeypatch):
    monkeypatch.setattr(handoff_stops, "MAX_STOPS_PER_PEER", 3)
    assert stop(db, "/alice/lab.keep", "n1", requester="lab")
    for i in range(5):
        assert stop(db, f"/alice/marin.j{i}", "n1", requester="marin", now=NOW + i)
    assert count(db, "marin") == 3
    assert not is_stopped(db, "/alice/marin.j0", "n1", now=NOW + 10)
    assert all(is_stopped(db, f"/alice/marin.j{i}", "n1", now=NOW + 10) for i in (2, 3, 4))
    assert is_stopped(db, "/alice/lab.keep", "n1", requester="lab")  # one peer's flood evicts only its own


def test_a_nonce_longer_than_any_handoff_nonce_is_refused_and_changes_nothing(db):
    with pytest.raises(InvalidArgument, match="at most 128"):
        stop(db, "/alice/marin.train", "x" * 129)
    assert count(db, "marin") == 0


def test_a_stop_at_the_cap_costs_a_walk_of_the_index_not_a_set_of_every_tombstone(db):
    # A peer at its cap must not make each further stop hold the writer for a sort or set of all
    # its tombstones: counted in SQLite's VM steps (deterministic), one stop at a cap of 10,000
    # stays within a few steps per tombstone (a set of all of them took about 16).
    cap = handoff_stops.MAX_STOPS_PER_PEER
    with db.write() as conn:
        conn.execute(
            text(
                "INSERT INTO handoff_stops (requester, job_id, nonce, stopped_ms) WITH RECURSIVE c(x) AS"
                " (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < :cap) SELECT 'marin', '/alice/marin.j' || x, 'n', :now FROM c"
            ),
            {"cap": cap, "now": NOW},
        )
    steps = [0]

    def step() -> int:
        steps[0] += 1
        return 0

    with db.write() as conn:
        raw = conn.connection.driver_connection
        raw.set_progress_handler(step, 1)
        try:
            assert stop_unheld(conn, "marin", "/alice/marin.late", "n", NOW + 1)
        finally:
            raw.set_progress_handler(None, 1)
    assert count(db, "marin") == cap
    assert is_stopped(db, "/alice/marin.late", "n", now=NOW + 2) and not is_stopped(db, "/alice/marin.j1", "n")
    assert steps[0] < 5 * cap, f"{steps[0]} VM steps for one stop at a cap of {cap}"
