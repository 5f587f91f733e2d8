"""Federation paths that only faults reach, through real controllers: handoff nonces (replay,
re-run, refusal over a live run), credentials that must not travel, a cancel the peer answers
NOT_FOUND, a cancel while a delivery may be in flight, and log follow after a peer is removed."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3

from iris.controller.auth import load_or_create_signing_key, mint_peer_token
from iris.rpc import controller_pb2 as pb
from tests.conftest import wait_until
from tests.controller.helpers import client, error_code, logs, pid_alive, status, wait_state
from tests.integration.test_federation import gpu_job, on_peer, start_federation


def _handle(c, job_id: str) -> dict:
    rows = c.execute_raw_query(
        pb.ExecuteRawQueryRequest(
            sql="SELECT handoff_state, delivery_started, cancel_intent_version FROM federated_jobs"
            f" WHERE job_id = '{job_id}' AND direction = 'SENT'"
        )
    ).rows
    if not rows:
        return {}
    v = rows[0].values
    return {"state": v[0].string_value, "delivery_started": v[1].number_value, "intent": v[2].number_value}


def test_handoff_nonce_replay_rerun_and_refusal_over_a_live_run(controller_factory, tmp_path):
    fed = start_federation(controller_factory)
    peer = client(fed.h100, mint_peer_token(load_or_create_signing_key(None, fed.marin.state_dir), "marin", "cw-h100"))
    runs, go = tmp_path / "runs", tmp_path / "go"

    def handoff(nonce: str) -> pb.LaunchJobRequest:
        req = gpu_job(
            "again", "h100", command=("sh", "-c", f"echo run >> {runs}; while [ ! -e {go} ]; do sleep 0.05; done")
        )
        req.name, req.user = "/alice/again", ""
        req.handoff.CopyFrom(
            pb.HandoffRecord(requester_cluster="marin", owner_principal="alice", submitting_user="alice", nonce=nonce)
        )
        return req

    first = peer.launch_job(handoff("n1"))
    assert first.disposition == "local" and first.job_id == on_peer("/alice/again")
    wait_until(lambda: runs.exists(), timeout=30, message="the first run started")
    assert peer.launch_job(handoff("n1")).disposition == "existing"  # a replay: idempotent
    code, message = error_code(lambda: peer.launch_job(handoff("n2")))
    assert code == "already_exists" and "must wait until it ends" in message
    go.touch()
    assert wait_state(peer, first.job_id).job.state == "SUCCEEDED"
    again = peer.launch_job(handoff("n3"))  # a new nonce over the finished run runs it again
    assert again.disposition == "local"
    assert wait_state(peer, first.job_id, timeout=30).job.state == "SUCCEEDED"
    wait_until(lambda: runs.read_text().splitlines() == ["run", "run"], message="exactly two runs")
    assert peer.launch_job(handoff("n3")).disposition == "existing"
    assert runs.read_text().splitlines() == ["run", "run"]


def test_credentials_never_travel_in_a_handoff(controller_factory):
    fed = start_federation(controller_factory, parent_defaults={"task_env": {"MARIN_SECRET": "s3cret-of-marin"}})
    marin, h100 = fed.marin, fed.h100
    c = client(marin, fed.token)
    job = c.launch_job(gpu_job("envdump", "h100", command=("env",), env={"MINE": "travels"})).job_id
    assert wait_state(c, job, timeout=60).job.state == "SUCCEEDED"
    lines = wait_until(lambda: logs(c, job), message="relayed env")
    assert "MINE=travels" in lines and "IRIS_CLUSTER=cw-h100" in lines
    secrets = [b"s3cret-of-marin", fed.token.encode()]
    key_files = [p for p in marin.state_dir.rglob("*") if p.is_file() and "key" in p.name]
    assert key_files, "marin's signing key is on disk"
    secrets += [p.read_bytes().strip() for p in key_files]
    assert not any(s.decode(errors="replace") in line for s in secrets for line in lines)
    # Nothing the peer stored (job, config, env, files, handle) holds any of them.
    db = sqlite3.connect(f"file:{h100.state_dir / 'controller.db'}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        stored = b"".join(
            (v if isinstance(v, bytes) else str(v).encode())
            for t in tables
            for row in db.execute(f"SELECT * FROM {t}")
            for v in row
            if v is not None
        )
    finally:
        db.close()
    assert b"travels" in stored  # the job's own env did travel, so the scan reads what matters
    assert not [s for s in secrets if s in stored]


def test_cancel_the_peer_answers_not_found_ends_the_job_killed(controller_factory):
    fed = start_federation(controller_factory)
    marin, h100 = fed.marin, fed.h100
    c = client(marin, fed.token)
    job = c.launch_job(gpu_job("lost", "h100", command=("sleep", "300"))).job_id
    wait_until(lambda: status(c, job).job.state == "RUNNING", timeout=30, message="running on the peer")
    h100.stop()
    c.terminate_job(pb.TerminateJobRequest(job_id=job))
    assert "stopping" in status(c, job).job.pending_reason
    shutil.rmtree(h100.state_dir)  # the peer comes back without any memory of the job
    h100.start()
    final = wait_state(c, job, timeout=30)
    assert final.job.state == "KILLED", final.job.error
    assert _handle(c, job).get("intent", 1) >= 1


def test_cancel_while_a_delivery_may_be_in_flight_waits_for_the_peer(controller_factory):
    fed = start_federation(controller_factory)
    marin, h100 = fed.marin, fed.h100
    c = client(marin, fed.token)
    os.kill(h100.proc.pid, signal.SIGSTOP)
    try:
        job = c.launch_job(gpu_job("inflight", "h100", command=("sleep", "300"))).job_id
        wait_until(lambda: _handle(c, job).get("delivery_started") == 1, timeout=30, message="a delivery started")
        c.terminate_job(pb.TerminateJobRequest(job_id=job))
        now = status(c, job).job
        # The peer may admit it once it answers again: not KILLED until the peer confirms.
        assert now.state != "KILLED" and "stopping" in now.pending_reason and "cw-h100" in now.pending_reason
    finally:
        os.kill(h100.proc.pid, signal.SIGCONT)
    assert wait_state(c, job, timeout=40).job.state == "KILLED"
    peer = client(h100)
    known = {j.job_id: j for j in peer.list_jobs(pb.ListJobsRequest()).jobs}
    if on_peer(job) in known:  # it landed: then it was stopped there, and nothing of it runs
        on = wait_state(peer, on_peer(job))
        assert on.job.state == "KILLED"
        pids = [a.pid for t in on.tasks for a in t.attempts if a.pid]
        wait_until(lambda: not any(pid_alive(p) for p in pids), timeout=20, message="its processes gone")


def test_logs_follow_ends_with_a_message_once_the_peer_is_removed(controller_factory):
    fed = start_federation(controller_factory)
    marin = fed.marin
    c = client(marin, fed.token)
    job = c.launch_job(gpu_job("orphan", "h100", command=("sh", "-c", "echo started; sleep 300"))).job_id
    wait_until(lambda: logs(c, job) == ["started"], timeout=30, message="first line relayed")
    marin.rewrite(peers={"cw-gb200": {"address": fed.gb200.url}})
    marin.restart()
    marin.extra_env["IRIS_TOKEN"] = fed.token
    followed = marin.cli("job", "logs", "-f", job, timeout=60)
    assert followed.returncode == 0, followed.stderr
    assert followed.stdout.splitlines() == ["started"]
    assert "cw-h100 is no longer in this cluster's peers" in followed.stderr
    assert status(c, job).job.state == "FAILED"
