"""A cancel racing a promotion and a delivery, on a real SQLite file: the cancel always wins
before any delivery starts, and once one may have reached the peer it waits for the peer."""

from __future__ import annotations

from iris.controller.db.database import Database, sql
from iris.controller.db.federation import cancel_sent, queue_job
from iris.controller.state.federation_store import ControllerFederationStore
from iris.core.job import JobSpec
from iris.core.resources import Resources
from iris.federation.model import PendingCancel, Promotion
from iris.rpc import controller_pb2 as pb


def _store(tmp_path):
    db = Database(tmp_path / "controller.db")
    return db, ControllerFederationStore(db, "marin", lambda: 1_000)


def _queue(db, name: str) -> str:
    spec = JobSpec(job_id=f"/alice/{name}", user="alice", owner="alice", command=("true",), resources=Resources())
    with db.write() as conn:
        assert queue_job(conn, spec, None, "alice", 1)
    return spec.job_id


def _cancel(db, job_id: str) -> None:
    with db.write() as conn:
        assert cancel_sent(conn, job_id, "stopped by request", 2)


def _job(db, job_id: str) -> tuple[str, str, str]:
    with db.read() as conn:
        return tuple(
            conn.execute(sql("SELECT state, error, pending_reason FROM jobs WHERE job_id = :j"), {"j": job_id}).one()
        )


def test_cancel_before_the_promotion_wins_and_the_promotion_is_refused(tmp_path):
    db, store = _store(tmp_path)
    job = _queue(db, "early")
    _cancel(db, job)
    assert store.promote_all([Promotion(job, "cw-h100", "h100")]) == []
    assert _job(db, job)[:2] == ("KILLED", "Cancelled before handoff")
    assert store.pending_deliveries() == [] and store.pending_cancels() == []
    db.close()


def test_cancel_after_the_promotion_but_before_delivery_ends_it_here_and_no_delivery_starts(tmp_path):
    db, store = _store(tmp_path)
    job = _queue(db, "promoted")
    assert store.promote_all([Promotion(job, "cw-h100", "h100")])
    _cancel(db, job)
    assert not store.start_delivery(job)  # the delivery loop read it before the cancel: it stops here
    assert _job(db, job)[:2] == ("KILLED", "Cancelled before handoff")
    assert store.pending_cancels() == []
    db.close()


def test_cancel_once_a_delivery_started_waits_for_the_peer_to_confirm(tmp_path):
    db, store = _store(tmp_path)
    job = _queue(db, "inflight")
    assert store.promote_all([Promotion(job, "cw-h100", "h100")])
    assert store.start_delivery(job)
    _cancel(db, job)
    state, _, reason = _job(db, job)
    assert state == "PENDING" and "stopping" in reason and "cw-h100" in reason
    with db.read() as conn:
        nonce = conn.execute(sql("SELECT nonce FROM federated_jobs WHERE job_id = :j"), {"j": job}).scalar()
    assert store.pending_cancels() == [PendingCancel(job, "cw-h100", 1, nonce)]  # the stop names the run
    store.mark_cancel_relayed(job, 1)  # the peer answered: stopped, or it never admitted it
    assert _job(db, job)[0] == "KILLED"
    assert store.pending_cancels() == []
    db.close()


def test_a_full_resync_keeps_a_job_accepted_after_its_question_and_drops_one_it_no_longer_holds(tmp_path):
    db, store = _store(tmp_path)
    jobs = [_queue(db, name) for name in ("gone", "fresh")]
    store.promote_all([Promotion(j, "cw-h100", "h100") for j in jobs])
    assert store.start_deliveries(jobs) == jobs
    store.mark_handed_off(jobs)
    # The peer's answer names neither: "gone" it no longer holds; "fresh" it accepted after it answered.
    store.apply_sync("cw-h100", pb.FederationSyncResponse(cursor=7, cursor_stale=True), accepted_since={"/alice/fresh"})
    assert _job(db, "/alice/gone")[0] == "FAILED" and "no longer holds" in _job(db, "/alice/gone")[1]
    assert _job(db, "/alice/fresh")[0] == "PENDING"
    assert [d.job_id for d in store.pending_cancels()] == [] and store.sync_cursor("cw-h100") == 7
    with db.read() as conn:
        handles = conn.execute(sql("SELECT job_id, handoff_state FROM federated_jobs ORDER BY job_id")).all()
    assert [tuple(h) for h in handles] == [("/alice/fresh", "HANDED_OFF")]
    db.close()


def test_a_cancelled_job_its_peer_reports_live_after_confirming_is_stopped_there_again(tmp_path):
    db, store = _store(tmp_path)
    job = _queue(db, "late")
    assert store.promote_all([Promotion(job, "cw-h100", "h100")])
    assert store.start_delivery(job)
    _cancel(db, job)
    store.mark_cancel_relayed(job, 1)  # the peer answered NOT_FOUND: it did not hold the job then
    assert _job(db, job)[0] == "KILLED" and store.pending_cancels() == []
    # A peer that admitted a late handoff anyway reports the job running: the stop is relayed again.
    running = pb.SyncedJob(job=pb.JobStatus(job_id=job, state="RUNNING"))
    store.apply_sync("cw-h100", pb.FederationSyncResponse(cursor=3, jobs=[running]))
    assert _job(db, job)[0] == "KILLED"
    assert [(c.job_id, c.version) for c in store.pending_cancels()] == [(job, 2)]
    store.apply_sync("cw-h100", pb.FederationSyncResponse(cursor=4, jobs=[running]))  # not re-armed twice
    assert [(c.job_id, c.version) for c in store.pending_cancels()] == [(job, 2)]
    store.mark_cancel_relayed(job, 2)
    killed = pb.SyncedJob(job=pb.JobStatus(job_id=job, state="KILLED"))
    store.apply_sync("cw-h100", pb.FederationSyncResponse(cursor=5, jobs=[killed]))
    assert store.pending_cancels() == [] and _job(db, job)[0] == "KILLED"
    db.close()
