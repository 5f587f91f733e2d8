"""A parent's `/proxy/t/cluster=<peer>/…` relay reaches only the peer's `/proxy/t/` capability
URLs: a path with `.` or `..` segments (plain or percent-encoded), which an HTTP client would
resolve to the peer's API where the parent's own address may be trusted, is refused at the parent
(real controllers on loopback, a real task as the victim)."""

from __future__ import annotations

import subprocess

import pytest

from iris.rpc import controller_pb2 as pb
from tests.conftest import wait_until
from tests.controller.helpers import client, launch, status, user_token

HOSTILE = [
    "/proxy/t/cluster=cw/../../iris.v1.ControllerService/TerminateJob",
    "/proxy/t/cluster=cw/%2e%2e/%2E%2E/iris.v1.ControllerService/TerminateJob",
    "/proxy/t/cluster=cw/tok/web/../../../../iris.v1.ControllerService/TerminateJob",
    "/proxy/t/cluster=cw/./../..%2firis.v1.ControllerService/TerminateJob",
    "/proxy/t/cluster=cw/..",
    "/proxy/t/cluster=cw/%252e%252e/%252E%252E/iris.v1.ControllerService/TerminateJob",
]


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    from tests.conftest import ControllerFactory

    factory = ControllerFactory(tmp_path_factory.mktemp("relay"))
    try:
        child = factory("cw")
        parent = factory("marin", start=False)
        parent.rewrite(peers={"cw": {"address": child.url}})
        parent.start()
        yield parent, child
    finally:
        factory.cleanup()


@pytest.mark.parametrize("path", HOSTILE)
def test_relay_path_with_dot_segments_is_refused_and_reaches_nothing(pair, path):
    parent, child = pair
    c = client(child)
    victim = launch(c, f"victim-{HOSTILE.index(path)}", ["sleep", "300"], user="carol")
    wait_until(lambda: status(c, victim).job.state == "RUNNING", timeout=60, message="the victim to run")
    got = subprocess.run(
        ["curl", "-s", "--compressed", "--path-as-is", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST"]
        + ["-H", "content-type: application/json", parent.url + path, "-d", f'{{"job_id": "{victim}"}}'],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert got.stdout in ("400", "404"), got.stdout
    assert status(c, victim).job.state == "RUNNING"
    c.terminate_job(pb.TerminateJobRequest(job_id=victim))  # frees its cpu for the next case


def test_relay_through_more_clusters_than_a_url_may_chain_is_refused_at_the_first(pair):
    """Two clusters that are each other's peers would bounce such a URL once per tag."""
    parent, _ = pair
    hops = "cluster=cw/" * 5
    got = subprocess.run(
        ["curl", "-s", "-w", " %{http_code}", parent.url + f"/proxy/t/{hops}not-a-token/web/hello"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert got.stdout.endswith(" 400"), got.stdout
    assert "at most 4 clusters, and this one names 5" in got.stdout


def test_relay_still_reaches_the_peer_s_capability_urls(pair):
    parent, _ = pair
    got = subprocess.run(
        ["curl", "-s", "-X", "GET", parent.url + "/proxy/t/cluster=cw/not-a-token/web/hello"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "malformed token" in got.stdout  # the peer judged the token: the relay went through
    assert client(parent).list_peers(pb.ListPeersRequest()).peers[0].peer_id == "cw"
    # What a user sends through the relay leaves no line per request in the parent's log.
    assert "HTTP Request:" not in parent.log.read_text(errors="replace")


@pytest.mark.parametrize("aimed_at", ["its own controller", "a peer's controller"])
def test_endpoint_aimed_at_a_controller_gets_no_admin_rights_through_the_relay(pair, aimed_at):
    """A user's task may register any host:port as its endpoint, the controller's own API included;
    what the relay sends there is a request with no token, and a relayed request is never local_admin."""
    parent, child = pair
    admin_child, admin_parent = client(child), client(parent)
    victim_ctl, victim_admin = (child, admin_child) if aimed_at == "its own controller" else (parent, admin_parent)
    victim = launch(victim_admin, f"ssrf-victim-{aimed_at[0]}", ["sleep", "300"], user="carol")
    alice = client(child, user_token(child, "alice"))
    job = launch(alice, f"ssrf-{aimed_at[0]}", ["sleep", "300"])
    wait_until(lambda: status(alice, job).job.state == "RUNNING", timeout=60, message="alice's job to run")
    wait_until(lambda: status(victim_admin, victim).job.state == "RUNNING", timeout=60, message="the victim to run")
    attempt = status(alice, job).tasks[0].attempts[-1].attempt_id
    alice.register_endpoint(
        pb.RegisterEndpointRequest(job_id=job, attempt_id=attempt, name="api", host="127.0.0.1", port=victim_ctl.port)
    )
    url = alice.mint_endpoint_url(pb.MintEndpointUrlRequest(job_id=job, name="api")).url
    for method, body in (("TerminateJob", f'{{"job_id": "{victim}"}}'), ("ExecuteRawQuery", '{"sql": "SELECT 1"}')):
        got = subprocess.run(
            ["curl", "-s", "--compressed", "-X", "POST", "-H", "content-type: application/json"]
            + [f"{url}iris.v1.ControllerService/{method}", "-d", body],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert '"unauthenticated"' in got.stdout and "relayed" in got.stdout, got.stdout
    assert status(victim_admin, victim).job.state == "RUNNING"
    for c, j in ((victim_admin, victim), (alice, job)):
        c.terminate_job(pb.TerminateJobRequest(job_id=j))
