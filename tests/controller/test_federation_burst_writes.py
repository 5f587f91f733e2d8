"""A burst's handoff writes on a real SQLite file: a delivery's start and its requests are one
transaction that a cancel since the promotion beats, and the promotion, delivery start and
acceptance writes join the submit group's transactions when the controller has one."""

from __future__ import annotations

from iris.controller.db.database import Database, sql
from iris.controller.db.federation import cancel_sent, queue_job
from iris.controller.db.group_commit import GroupCommit
from iris.controller.state.federation_store import ControllerFederationStore
from iris.core.job import JobSpec
from iris.core.resources import Resources
from iris.federation.model import Promotion


def _queue(db: Database, name: str) -> str:
    spec = JobSpec(job_id=f"/alice/{name}", user="alice", owner="alice", command=("true",), resources=Resources())
    with db.write() as conn:
        assert queue_job(conn, spec, None, "alice", 1)
    return spec.job_id


def _handles(db: Database) -> dict[str, tuple[str, int]]:
    with db.read() as conn:
        rows = conn.execute(sql("SELECT job_id, handoff_state, delivery_started FROM federated_jobs")).all()
    return {r[0]: (r[1], r[2]) for r in rows}


def test_begin_deliveries_starts_and_reads_only_the_jobs_not_cancelled_since_their_promotion(tmp_path):
    db = Database(tmp_path / "controller.db")
    store = ControllerFederationStore(db, "marin", lambda: 1_000)
    jobs = [_queue(db, name) for name in ("kept", "cancelled", "other")]
    assert len(store.promote_all([Promotion(j, "cw-h100", "h100") for j in jobs])) == 3
    with db.write() as conn:
        assert cancel_sent(conn, "/alice/cancelled", "stopped by request", 2)
    requests = store.begin_deliveries(jobs)
    assert list(requests) == ["/alice/kept", "/alice/other"]
    for job_id, req in requests.items():
        assert req.name == job_id and req.handoff.requester_cluster == "marin" and req.handoff.nonce
    handles = _handles(db)
    assert handles["/alice/kept"] == ("PENDING_HANDOFF", 1) and handles["/alice/other"] == ("PENDING_HANDOFF", 1)
    assert handles["/alice/cancelled"][1] == 0  # never started: the cancel ended it here
    assert store.begin_deliveries(["/alice/cancelled"]) == {}
    db.close()


def test_a_bursts_handoff_writes_go_through_the_submit_group_commit(tmp_path):
    db = Database(tmp_path / "controller.db")
    commits = GroupCommit(db)
    store = ControllerFederationStore(db, "marin", lambda: 1_000, commits)
    jobs = [_queue(db, name) for name in ("a", "b")]
    try:
        assert len(store.promote_all([Promotion(j, "cw-h100", "h100") for j in jobs])) == 2
        assert list(store.begin_deliveries(jobs)) == jobs
        store.mark_handed_off(jobs)
        assert commits.items == 3  # promotion, delivery start, acceptance: each an item of a group
        assert {j: h[0] for j, h in _handles(db).items()} == dict.fromkeys(jobs, "HANDED_OFF")
    finally:
        commits.close()
        db.close()
