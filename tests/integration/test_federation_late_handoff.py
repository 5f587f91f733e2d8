"""A stop that reaches a peer before the handoff it stops, through real controllers: the parent
gives up on a handoff call the peer is still admitting (the peer is held past the parent's 3 s
call timeout by its test-only admission delay), stops the job, and the peer, which answers that it
does not hold the job, refuses the late handoff instead of running it."""

from __future__ import annotations

import os
import time

from iris.controller.api.inbound_handoffs import HANDOFF_DELAY_ENV
from iris.controller.auth import load_or_create_signing_key, mint_peer_token, public_key_pem
from iris.controller.db.database import Database, sql
from iris.controller.db.federation import queue_job
from iris.controller.state.federation_store import ControllerFederationStore
from iris.core.job import JobSpec
from iris.core.resources import Resources
from iris.federation.manager import FederationManager
from iris.federation.model import Promotion
from iris.rpc import controller_pb2 as pb
from tests.conftest import start_together, wait_until
from tests.controller.helpers import client, status, user_token, wait_state
from tests.integration.test_federation import FAST, gpu_backend, gpu_job, on_peer

ADMISSION_DELAY_S = 8  # well past the parent's 3 s call timeout, so the stop lands first


def _slow_peer(controller_factory, name: str, trust: dict, backends: list[dict]):
    """A peer that holds every handoff call `ADMISSION_DELAY_S` before admitting anything (not started)."""
    peer = controller_factory(name, backends=backends, controller=FAST, auth=trust, start=False)
    peer.env = {**os.environ, HANDOFF_DELAY_ENV: str(ADMISSION_DELAY_S)}
    return peer


def _refused_late(peer, job_id: str) -> bool:
    """Whether the peer's log says it refused a late handoff of `job_id` (its own id for it)."""
    return any("refused a handoff" in line and job_id in line for line in peer.log.read_text().splitlines())


def _received(peer) -> list[str]:
    return [j.job_id for j in client(peer).list_jobs(pb.ListJobsRequest()).jobs]


def _late_handoff_landed(peer, job_id: str) -> None:
    """Waits until the peer has dealt with the late handoff of `job_id`, and holds that it refused
    it: the job was never admitted there."""
    wait_until(lambda: _refused_late(peer, job_id) or _received(peer), timeout=30, message="the late handoff")
    assert _received(peer) == [], f"{peer.name} admitted the late handoff of a run its parent had stopped"


def test_cancel_relayed_before_the_peer_admits_the_handoff_never_runs_there(controller_factory, tmp_path):
    marin = controller_factory(
        "marin",
        start=False,
        controller=FAST,
        backends=[{"id": "cpu", "kind": "local", "workers": 1, "capacity": {"cpu": 2, "memory": "2G"}}],
    )
    trust = {"federation_peers": {"marin": public_key_pem(load_or_create_signing_key(None, marin.state_dir))}}
    h100 = _slow_peer(controller_factory, "cw-h100", trust, gpu_backend("h100"))
    marin.rewrite(peers={"cw-h100": {"address": h100.url}})
    start_together(h100, marin)
    c = client(marin, user_token(marin, "alice"))
    wait_until(lambda: any(p.reachable for p in c.list_peers(pb.ListPeersRequest()).peers), message="peer reachable")
    runs = tmp_path / "late.runs"
    job = c.launch_job(gpu_job("late", "h100", command=("sh", "-c", f"echo ran >> {runs}"))).job_id

    def delivery_started() -> bool:
        rows = c.execute_raw_query(
            pb.ExecuteRawQueryRequest(sql=f"SELECT delivery_started FROM federated_jobs WHERE job_id = '{job}'")
        ).rows
        return bool(rows) and rows[0].values[0].number_value == 1

    wait_until(delivery_started, timeout=30, message="the handoff call to start")
    c.terminate_job(pb.TerminateJobRequest(job_id=job))
    # The parent relays the stop once its call has timed out; the peer, still holding the call,
    # answers that it does not hold the job, and the parent records it KILLED.
    assert wait_state(c, job, timeout=30).job.state == "KILLED"
    _late_handoff_landed(h100, on_peer(job))
    assert not runs.exists()
    assert status(c, job).job.state == "KILLED"


def test_withdrawal_confirmed_before_the_late_handoff_runs_the_job_on_one_peer_only(controller_factory, tmp_path):
    """The parent's side in this process (its manager and store over a real SQLite file), both peers
    real: a job whose run the parent believes is on cw-a, while that run's handoff still waits in
    cw-a's admission, is withdrawn (cw-a answers it does not hold it) and re-queued to cw-b. It runs
    on cw-b alone; cw-a refuses the late handoff."""
    key = load_or_create_signing_key(None, tmp_path / "marin")
    trust = {"federation_peers": {"marin": public_key_pem(key)}}
    cpu = {"kind": "local", "workers": 1, "capacity": {"cpu": 2, "memory": "2G"}}
    cw_a = _slow_peer(controller_factory, "cw-a", trust, [{"id": "a-cpu", **cpu}])
    cw_b = controller_factory("cw-b", start=False, backends=[{"id": "b-cpu", **cpu}], controller=FAST, auth=trust)
    start_together(cw_a, cw_b)
    db = Database(tmp_path / "marin" / "controller.db")
    store = ControllerFederationStore(db, "marin", lambda: int(time.time() * 1000))
    manager = FederationManager(
        "marin",
        {"cw-a": cw_a.url, "cw-b": cw_b.url},
        store,
        router=None,
        token_source=lambda peer: mint_peer_token(key, "marin", peer),
    )
    try:
        runs = tmp_path / "moved.runs"
        spec = JobSpec(
            "/alice/moved", "alice", "alice", ("sh", "-c", f"echo $IRIS_CLUSTER >> {runs}"), Resources(cpu=1)
        )
        with db.write() as conn:
            assert queue_job(conn, spec, None, "alice", 1)
        assert store.promote_all([Promotion(spec.job_id, "cw-a", "a-cpu")])
        manager.deliver()  # cw-a holds the call past the timeout: the job stays awaiting delivery
        with db.read() as conn:
            handle = conn.execute(sql("SELECT handoff_state, nonce FROM federated_jobs")).one()
        assert handle[0] == "PENDING_HANDOFF"
        # The parent takes the run as on cw-a (as an earlier answer or report would have it) and
        # withdraws it from there.
        store.mark_handed_off([spec.job_id])
        assert store.begin_withdrawal(spec.job_id, "cw-a", "cw-a did not place it")
        manager.relay_withdrawals()
        with db.read() as conn:
            requeued = conn.execute(sql("SELECT handoff_state, nonce, excluded_peers FROM federated_jobs")).one()
        assert requeued[0] == "QUEUED_HANDOFF" and requeued[1] != handle[1] and requeued[2] == "cw-a"
        assert store.promote_all([Promotion(spec.job_id, "cw-b", "b-cpu")])

        def handed_to_b() -> bool:
            manager.deliver()  # a no-op while the failed call to cw-a's back-off lasts
            with db.read() as conn:
                return conn.execute(sql("SELECT handoff_state FROM federated_jobs")).scalar() == "HANDED_OFF"

        wait_until(handed_to_b, message="the job handed to cw-b")
        done = wait_state(client(cw_b), on_peer(spec.job_id), timeout=30)
        assert done.job.state == "SUCCEEDED", done.job.error
        _late_handoff_landed(cw_a, on_peer(spec.job_id))
        assert runs.read_text().splitlines() == ["cw-b"]
    finally:
        manager.stop()
        db.close()
