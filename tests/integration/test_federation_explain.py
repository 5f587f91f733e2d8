"""`iris job explain` of a federated job that waits: per peer backend, what is free of its device
and what the peer holds per band below the job's band (what it would preempt for the job)."""

from __future__ import annotations

import json

from iris.core.availability import Availability, BandHolding
from iris.core.bands import Band
from iris.federation.explain import explain_peers
from iris.federation.manager import PeerStatus
from iris.federation.model import PeerBackend
from iris.rpc import controller_pb2 as pb
from tests.conftest import wait_until
from tests.controller.helpers import client, launch, status
from tests.integration.test_federation import gpu_job
from tests.integration.test_federation_sync import start_pair


def gpus(n: int) -> pb.Resources:
    return pb.Resources(device=pb.Device(kind="gpu", variant="h100", count=n))


def test_explain_of_a_queued_federated_job_shows_what_each_peer_holds_below_its_band(controller_factory):
    marin, h100, token = start_pair(controller_factory, peer_workers=1)
    peer = client(h100)
    # The peer's one host (8 h100) is full: 4 held by interactive work, 4 by batch work.
    held = [
        launch(peer, "inter", ["sleep", "300"], user="bob", resources=gpus(4)),
        launch(peer, "batchy", ["sleep", "300"], user="bob", resources=gpus(4), priority="batch"),
    ]
    for job in held:
        wait_until(lambda job=job: status(peer, job).job.state == "RUNNING", message=f"{job} running on the peer")
    c = client(marin, token)
    # An interactive 8-GPU job could reclaim only the 4 batch ones: it stays queued on marin.
    job = c.launch_job(gpu_job("big", "h100", priority="interactive", command=("sleep", "300"))).job_id

    def explained():
        data = json.loads(marin.cli("-o", "json", "job", "explain", job, check=True).stdout)
        backends = data.get("peer_backends", [])
        seen = backends and backends[0].get("availability", {}).get("amounts", {}).get("h100", 0) == 0
        return data if seen and backends[0].get("held_below") else None

    marin.extra_env["IRIS_TOKEN"] = token
    data = wait_until(explained, timeout=30, message="explain shows the peer full, with batch work held")
    assert status(c, job).job.state == "PENDING"
    assert data["band"] == "interactive"
    backend = data["peer_backends"][0]
    assert (backend["peer_id"], backend["backend_id"], backend["state"]) == ("cw-h100", "h100", "reachable")
    assert backend["held_below"] == [{"band": "batch", "amounts": {"h100": 4.0}}]
    text = marin.cli("job", "explain", job, check=True).stdout
    assert "backend h100: h100 0 free of 8" in text
    assert "held below interactive (it would preempt for this job): batch h100 4" in text


def test_explain_peers_counts_only_bands_below_the_jobs_and_says_when_nothing_is_held():
    availability = Availability(
        1,
        amounts={"h100": 0},
        total_amounts={"h100": 8, "a100": 4},
        held_by_band=(
            BandHolding(Band.PRODUCTION, {"h100": 2}),
            BandHolding(Band.INTERACTIVE, {"h100": 4, "a100": 1}),
            BandHolding(Band.BATCH, {"h100": 2}),
        ),
    )
    peers = [
        PeerStatus("p1", "http://p1", True, 1000, (PeerBackend("gpu", "local", {}, availability),)),
        PeerStatus("p2", "http://p2", True, 1000, (PeerBackend("bare", "local"),)),
    ]
    production = explain_peers(peers, "h100", Band.PRODUCTION, "", 1000, 60_000)
    assert [(h.band, dict(h.amounts)) for h in production.backends[0].held_below] == [
        ("interactive", {"h100": 4}),
        ("batch", {"h100": 2}),
    ]
    batch = explain_peers(peers, "h100", Band.BATCH, "p1", 1000, 60_000)
    assert len(batch.backends) == 1 and not batch.backends[0].held_below
    assert "    nothing held below batch: no lower-band work to preempt" in batch.lines
    no_device = explain_peers(peers, "", Band.PRODUCTION, "", 1000, 60_000)
    assert dict(no_device.backends[0].held_below[0].amounts) == {"h100": 4, "a100": 1}
    assert "  backend bare: reports no availability; matched on shape only" in no_device.lines
    stale = explain_peers(peers, "h100", Band.BATCH, "p1", 200_000, 60_000)
    assert stale.backends[0].stale and any(line.startswith("  STALE") for line in stale.lines)
