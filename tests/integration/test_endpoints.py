"""Serving endpoints end to end: a job on a peer serves HTTP and a WebSocket, and a client on
loopback reaches both through the parent's public capability URL (real controllers, real task)."""

from __future__ import annotations

import hashlib
import os
import sys
import time
from pathlib import Path

import httpx
import pytest
from websockets.sync.client import connect

from iris.controller.auth import load_or_create_signing_key, mint_token, public_key_pem
from iris.federation.ids import received_job_id
from iris.rpc import controller_pb2 as pb
from tests.conftest import start_together, wait_until
from tests.controller.helpers import client, error_code, status, user_token, wait_state

FAST = {"tick_interval": "1s", "federation_heartbeat_interval": "0.5s", "federation_sync_interval": "0.5s"}
SERVE = str(Path(__file__).with_name("serve_task.py"))
ROOT = str(Path(__file__).parents[2])


@pytest.fixture
def clusters(controller_factory):
    """marin (public, CPU only) peered with cw-h100, whose endpoints are reached through marin."""
    marin = controller_factory(
        "marin",
        start=False,
        controller=FAST,
        backends=[{"id": "cpu", "kind": "local", "workers": 1, "capacity": {"cpu": 2, "memory": "4G"}}],
    )
    marin_key = public_key_pem(load_or_create_signing_key(None, marin.state_dir))
    h100 = controller_factory(
        "cw-h100",
        start=False,
        controller=FAST,
        auth={"federation_peers": {"marin": marin_key}},
        federation_public_parent=marin.url,
        defaults={"task_env": {"PYTHONPATH": ROOT}},
        backends=[
            {
                "id": "h100",
                "kind": "local",
                "workers": 1,
                "capacity": {"cpu": 8, "memory": "16G"},
                "devices": {"gpu": "h100", "count": 8},
            }
        ],
    )
    marin.rewrite(peers={"cw-h100": {"address": h100.url}})
    start_together(h100, marin)
    c = client(marin)
    wait_until(lambda: all(p.reachable for p in c.list_peers(pb.ListPeersRequest()).peers), message="peer reachable")
    return marin, h100


def serving_job(marin, name: str = "serve") -> str:
    c = client(marin, user_token(marin, "alice"))
    req = pb.LaunchJobRequest(
        name=name,
        user="alice",
        command=[sys.executable, SERVE],
        resources=pb.Resources(device=pb.Device(kind="gpu", variant="h100", count=1)),
    )
    return c.launch_job(req).job_id


def live(h100, job_id: str) -> dict[str, pb.Endpoint]:
    """The job's live endpoints on the peer (none while the job has not reached it yet)."""
    eps = client(h100).list_endpoints(pb.ListEndpointsRequest()).endpoints
    return {e.name: e for e in eps if e.job_id == job_id}


def check_refusals(h100, job: str) -> None:
    """Strangers and bad input change nothing: the endpoints stay as the task registered them."""
    attempt = status(client(h100), job).tasks[0].attempts[-1].attempt_id
    bob = client(h100, user_token(h100, "bob"))
    req = pb.RegisterEndpointRequest(job_id=job, attempt_id=attempt, name="evil", port=8080)
    assert error_code(lambda: bob.register_endpoint(req))[0] == "permission_denied"
    assert error_code(lambda: bob.mint_endpoint_url(pb.MintEndpointUrlRequest(job_id=job, name="web")))[0] == (
        "permission_denied"
    )
    alice = client(h100, user_token(h100, "alice"))
    for bad in (
        pb.RegisterEndpointRequest(job_id=job, attempt_id=attempt, name="../x", port=80),
        pb.RegisterEndpointRequest(job_id=job, attempt_id=attempt, name="ok", port=0),
        pb.RegisterEndpointRequest(job_id=job, attempt_id="nope", name="ok", port=80),
    ):
        assert error_code(lambda bad=bad: alice.register_endpoint(bad))[0] == "invalid_argument"
    assert error_code(lambda: alice.mint_endpoint_url(pb.MintEndpointUrlRequest(job_id=job, name="none")))[0] == (
        "not_found"
    )
    assert set(live(h100, job)) == {"web", "ws"}


def test_endpoint_on_a_peer_is_reached_through_the_parent(clusters):
    marin, h100 = clusters
    submitted = serving_job(marin)
    job = received_job_id("marin", submitted)  # the id cw-h100 runs it under
    eps = wait_until(lambda: len(live(h100, job)) == 2 and live(h100, job), timeout=60, message="endpoints registered")
    assert eps["web"].address.startswith("127.0.0.1:")

    alice = client(h100, user_token(h100, "alice"))
    url = alice.mint_endpoint_url(pb.MintEndpointUrlRequest(job_id=job, name="web")).url
    assert url.startswith(f"{marin.url}/proxy/t/cluster=cw-h100/") and url.endswith("/web/")
    ws_url = alice.mint_endpoint_url(pb.MintEndpointUrlRequest(job_id=job, name="ws", ttl_s=60)).url

    with httpx.Client(timeout=30) as http:
        got = http.get(url + "hello?x=1", headers={"authorization": "Bearer secret", "cookie": "s=1"})
        assert got.status_code == 200
        assert got.json() == {"path": "/hello?x=1", "authorization": None, "cookie": None}

        body = os.urandom(10 * 1024 * 1024)
        posted = http.post(url + "upload", content=body)
        assert posted.json() == {"sha256": hashlib.sha256(body).hexdigest()}

        with http.stream("GET", url + "stream") as streamed:
            lines = streamed.iter_lines()
            assert next(line for line in lines if line) == "data: first"
            # The second event is only produced after this call: reading the first proves streaming.
            assert http.get(url + "release").status_code == 200
            assert next(line for line in lines if line) == "data: second"

        size = 20 * 1024 * 1024
        assert len(http.get(url + f"bytes/{size}").content) == size

        # The child is the only judge of its tokens; the parent only routes.
        token = url.split("/proxy/t/cluster=cw-h100/")[1].split("/")[0]
        assert http.get(f"{marin.url}/proxy/t/cluster=cw-h100/{token[:-4]}AAAA/web/hello").status_code == 401
        assert http.get(f"{marin.url}/proxy/t/cluster=nowhere/{token}/web/hello").status_code == 404
        # A token for one endpoint does not open another.
        assert http.get(f"{marin.url}/proxy/t/cluster=cw-h100/{token}/ws/").status_code == 401
        expired = mint_token(
            load_or_create_signing_key(None, h100.state_dir),
            "cw-h100",
            job,
            "user",
            60,
            now=time.time() - 3600,
            audience="iris-endpoint/web",
        )
        refused = http.get(f"{marin.url}/proxy/t/cluster=cw-h100/{expired}/web/hello")
        assert refused.status_code == 401
        assert any(word in refused.json()["message"] for word in ("expired", "lifetime"))
        # Direct at the child, the same token works without the cluster tag.
        assert http.get(f"{h100.url}/proxy/t/{token}/web/hello").status_code == 200
        # A capability token is never an API token.
        code, _ = error_code(lambda: client(h100, token).list_jobs(pb.ListJobsRequest()))
        assert code == "unauthenticated"

    with connect("ws" + ws_url[len("http") :], open_timeout=10) as ws:
        ws.send("ping")
        assert ws.recv(timeout=10) == "ping"
        ws.send(b"\x00\x01")
        assert ws.recv(timeout=10) == b"\x00\x01"

    check_refusals(h100, job)
    client(marin, user_token(marin, "alice")).terminate_job(pb.TerminateJobRequest(job_id=submitted))
    wait_state(client(h100), job)
    assert live(h100, job) == {}
    with httpx.Client(timeout=10) as http:
        assert http.get(url + "hello").status_code == 404
