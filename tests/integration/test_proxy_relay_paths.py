"""A parent's `/proxy/t/cluster=<peer>/…` relay reaches only the peer's `/proxy/t/` capability
URLs: a path with `.` or `..` segments (plain or percent-encoded), which an HTTP client would
resolve to the peer's API where the parent's own address may be trusted, is refused at the parent
(real controllers on loopback, a real task as the victim)."""

from __future__ import annotations

import subprocess

import pytest

from iris.rpc import controller_pb2 as pb
from tests.conftest import wait_until
from tests.controller.helpers import client, launch, status

HOSTILE = [
    "/proxy/t/cluster=cw/../../iris.v1.ControllerService/TerminateJob",
    "/proxy/t/cluster=cw/%2e%2e/%2E%2E/iris.v1.ControllerService/TerminateJob",
    "/proxy/t/cluster=cw/tok/web/../../../../iris.v1.ControllerService/TerminateJob",
    "/proxy/t/cluster=cw/./../..%2firis.v1.ControllerService/TerminateJob",
    "/proxy/t/cluster=cw/..",
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
