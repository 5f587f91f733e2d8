"""A root job handed to a peer is charged on the parent against its owner's budget: its spend
shows there as on peers, and it pushes the owner's local interactive work down to batch."""

from __future__ import annotations

from iris.rpc import controller_pb2 as pb
from tests.conftest import wait_until
from tests.controller.helpers import client, launch, status
from tests.integration.test_federation import gpu_job
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
