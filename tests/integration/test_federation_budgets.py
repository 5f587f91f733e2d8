"""A root job handed to a peer is charged on the parent against its owner's budget: its spend
shows there as on peers, and it pushes the owner's local interactive work down to batch."""

from __future__ import annotations

from iris.rpc import controller_pb2 as pb
from tests.conftest import wait_until
from tests.controller.helpers import client, launch, status
from tests.integration.test_federation import gpu_job
from tests.integration.test_federation_explain import gpus
from tests.integration.test_federation_sync import start_pair


def test_federated_root_job_is_charged_on_the_parent_against_its_owners_budget(controller_factory):
    marin, _, token = start_pair(controller_factory, budgets={"users": {"alice": 100}})
    c, admin = client(marin, token), client(marin)
    remote = c.launch_job(gpu_job("train", "h100", command=("sleep", "300"))).job_id
    wait_until(lambda: status(c, remote).job.state == "RUNNING", timeout=60, message="running on the peer")

    def alice():
        return next((s for s in admin.get_cluster_info(pb.GetClusterInfoRequest()).spend if s.user == "alice"), None)

    charged = wait_until(lambda: alice() if alice() and alice().on_peers else None, message="peer spend charged")
    assert charged.on_peers >= 8000 and charged.spend == charged.on_peers  # eight accelerators
    assert charged.over_budget and charged.budget == 100

    # Over budget through the peer alone: alice's local interactive job competes as batch here, so
    # it does not preempt bob's batch job that fills marin, and says why it waits.
    filler = launch(admin, "filler", ["sleep", "300"], user="bob", priority="batch", resources=pb.Resources(cpu=2))
    wait_until(lambda: status(admin, filler).job.state == "RUNNING", message="bob's batch job running")
    local = c.launch_job(pb.LaunchJobRequest(name="local", user="alice", command=["sleep", "300"]))
    assert local.disposition == "local"
    wait_until(lambda: "user alice is over budget" in status(c, local.job_id).job.pending_reason, message="downgraded")
    assert status(admin, filler).job.state == "RUNNING"
    text = marin.cli("cluster", "status").stdout
    assert any(line.startswith("alice") and "OVER" in line for line in text.splitlines())


def test_queued_federated_job_of_an_over_budget_owner_competes_as_batch_and_reclaims_nothing(controller_factory):
    marin, h100, token = start_pair(controller_factory, peer_workers=1, budgets={"users": {"alice": 5}})
    admin, peer = client(marin), client(h100)
    # The peer's 8 h100 are all held by batch work, which an interactive job could reclaim.
    batch = launch(peer, "batchy", ["sleep", "300"], user="bob", priority="batch", resources=gpus(8))
    wait_until(lambda: status(peer, batch).job.state == "RUNNING", message="batch work on the peer")

    def batch_held() -> bool:
        for info in admin.list_peers(pb.ListPeersRequest()).peers:
            for backend in info.backends:
                if any(h.band == "batch" and h.amounts.get("h100") == 8 for h in backend.availability.held_by_band):
                    return True
        return False

    wait_until(batch_held, message="marin sees the peer's batch work")
    c = client(marin, token)
    spender = c.launch_job(pb.LaunchJobRequest(name="spender", user="alice", command=["sleep", "300"])).job_id
    wait_until(lambda: status(c, spender).job.state == "RUNNING", message="alice over budget here")
    # Over budget, her interactive GPU job competes as batch: it may not reclaim batch work, so no
    # pass promotes it, and its reason says why.
    queued = c.launch_job(gpu_job("big", "h100", command=("sleep", "300"))).job_id

    def downgraded() -> str | None:
        reason = status(c, queued).job.pending_reason
        return reason if "over budget" in reason else None

    reason = wait_until(downgraded, message="the queued job's reason names the budget")
    assert reason.startswith("Queued for a federation peer") and "user alice is over budget" in reason
    handle = admin.execute_raw_query(
        pb.ExecuteRawQueryRequest(sql=f"SELECT handoff_state FROM federated_jobs WHERE job_id = '{queued}'")
    )
    assert handle.rows[0].values[0].string_value == "QUEUED_HANDOFF"
    assert status(peer, batch).job.state == "RUNNING"
