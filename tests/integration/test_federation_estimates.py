"""A job that waits on a federation peer shows the expected start the peer works out for it: the
peer reports it in each sync answer, and the parent's `job describe` and `job list` show it. Real
controllers: alice's batch job runs on cw-h100 until bob's production job with a time limit
preempts it there, and then it waits on the peer for that limit to pass."""

from __future__ import annotations

import json

from iris.rpc import controller_pb2 as pb
from tests.conftest import wait_until
from tests.controller.helpers import client, status, user_token
from tests.integration.test_federation import gpu_job, on_peer
from tests.integration.test_federation_auth import relay_federation  # noqa: F401  (a fixture)


def test_a_job_waiting_on_a_peer_shows_the_peers_expected_start(relay_federation):  # noqa: F811
    marin, h100, _relay = relay_federation
    alice = client(marin, user_token(marin, "alice"))
    wait_until(lambda: alice.list_peers(pb.ListPeersRequest()).peers[0].reachable, message="first heartbeat")
    job = alice.launch_job(gpu_job("wide", "h100", command=("sleep", "300"), priority="batch")).job_id
    wait_until(lambda: status(alice, job).job.state == "RUNNING", timeout=30, message="the job to run on the peer")

    bob = client(h100, user_token(h100, "bob"))
    urgent = gpu_job("urgent", "h100", command=("sleep", "300"), priority="production", timeout_s=600)
    urgent.user = "bob"
    bob.launch_job(urgent)
    there = client(h100)

    def estimated_on_peer():
        s = status(there, on_peer(job)).job
        return s if s.state == "PENDING" and s.start_latest_ms else None

    peer_view = wait_until(estimated_on_peer, timeout=30, message="the preempted job to wait on the peer, estimated")

    def near(ms: int, to: int) -> bool:  # the peer works its figures out again on every pass
        return abs(ms - to) < 5000

    def shown_on_parent():
        s = status(alice, job).job
        return s if s.start_basis.startswith("on peer cw-h100: ") else None

    mine = wait_until(shown_on_parent, timeout=20, message="the peer's estimate to reach the parent")
    assert mine.state == "PENDING" and mine.cluster == "cw-h100"
    assert near(mine.start_latest_ms, peer_view.start_latest_ms) and near(
        mine.start_earliest_ms, peer_view.start_earliest_ms
    )
    assert mine.start_basis == f"on peer cw-h100: {peer_view.start_basis}"
    # bob's limit, from when his job started there
    assert near(peer_view.start_latest_ms, status(there, "/bob/urgent").job.started_ms + 600_000)
    marin.extra_env["IRIS_TOKEN"] = user_token(marin, "alice")
    described = " ".join(marin.cli("job", "describe", job).stdout.split())
    assert "Expected start:" in described and "on peer cw-h100:" in described, described
    listed = json.loads(marin.cli("-o", "json", "job", "list").stdout)
    row = next(j for j in listed["jobs"] if j["job_id"] == job)
    assert near(int(row["start_latest_ms"]), peer_view.start_latest_ms), row

    for c, j in ((alice, job), (there, "/bob/urgent")):
        c.terminate_job(pb.TerminateJobRequest(job_id=j))
