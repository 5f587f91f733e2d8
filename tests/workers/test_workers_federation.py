"""A parent cluster hands a GPU job to a peer whose only backend is a pool of worker daemons."""

from __future__ import annotations

from iris.controller.auth import load_or_create_signing_key, public_key_pem
from iris.federation.ids import received_job_id
from tests.conftest import wait_until
from tests.controller.helpers import client, logs, pb, user_token, wait_state
from tests.workers.conftest import GRACE, workers_backends

FAST = {"tick_interval": "1s", "federation_heartbeat_interval": "0.5s", "federation_sync_interval": "0.5s"}


def test_workers_pool_peer_takes_a_gpu_job_from_its_parent(controller_factory, worker_factory):
    parent = controller_factory(
        "marin", start=False, controller=FAST, backends=[{"id": "cpu", "kind": "local", "capacity": {"cpu": 2}}]
    )
    key = public_key_pem(load_or_create_signing_key(None, parent.state_dir))
    peer = controller_factory(
        "cw-pool",
        backends=workers_backends(),
        controller={**FAST, "worker_grace_period": GRACE},
        auth={"federation_peers": {"marin": key}},
    )
    worker_factory(peer, "gpu-host", "--devices", "gpu:h100:2")
    parent.rewrite(peers={"cw-pool": {"address": peer.url}})
    parent.start()
    c = client(parent, user_token(parent, "alice"))

    def advertised():
        peers = c.list_peers(pb.ListPeersRequest()).peers
        return any(b.availability.amounts.get("h100") == 2 for p in peers for b in p.backends)

    wait_until(advertised, timeout=30, message="the peer to advertise its worker's GPUs")
    job = c.launch_job(
        pb.LaunchJobRequest(
            name="train", user="alice", command=["sh", "-c", "echo on $IRIS_CLUSTER gpus=$CUDA_VISIBLE_DEVICES"],
            resources=pb.Resources(device=pb.Device(kind="gpu", variant="h100", count=2)),
        )
    ).job_id  # fmt: skip
    done = wait_state(c, job, timeout=60)
    assert done.job.state == "SUCCEEDED", done
    assert done.job.cluster == "cw-pool"
    wait_until(lambda: logs(c, job) == ["on cw-pool gpus=0,1"], timeout=30, message="the peer's logs")
    on_peer = wait_state(client(peer), received_job_id(parent.name, job))
    assert on_peer.tasks[0].worker_id == "gpu-host"


def test_job_only_a_joined_worker_hosts_runs_at_home_instead_of_on_a_peer(controller_factory, worker_factory):
    peer = controller_factory("cw-cpu", start=False, controller=FAST, backends=[{"id": "cpu", "kind": "local"}])
    parent = controller_factory(
        "marin",
        controller={**FAST, "worker_grace_period": GRACE},
        backends=[{"id": "cpu", "kind": "local", "capacity": {"cpu": 2}}, *workers_backends()],
        peers={"cw-cpu": {"address": peer.url}},
    )
    key = public_key_pem(load_or_create_signing_key(None, parent.state_dir))
    peer.rewrite(auth={"federation_peers": {"marin": key}, "allowed_submitters": ["*"]})
    peer.start()
    worker_factory(parent, "home-host", "--attr", "zone=home")
    c = client(parent, user_token(parent, "alice"))
    wait_until(lambda: c.list_peers(pb.ListPeersRequest()).peers[0].reachable, timeout=30, message="the peer")
    zoned = pb.Constraint(key="zone", op="EQ", values=["home"])
    pinned = pb.Constraint(key="backend", op="EQ", values=["pool"])
    for name, constraint in (("zoned", zoned), ("pinned", pinned)):
        request = pb.LaunchJobRequest(name=name, user="alice", command=["true"], constraints=[constraint])
        launched = c.launch_job(request)
        assert launched.disposition == "local", launched
        done = wait_state(c, launched.job_id, timeout=60)
        assert (done.job.state, done.job.cluster, done.tasks[0].worker_id) == ("SUCCEEDED", "marin", "home-host")
