"""Peers' availability blocks in either wire format, over a real loopback HTTP server that answers
ListBackends the way another implementation would."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from iris.core.bands import Band
from iris.federation.manager import FederationManager
from iris.federation.peer import availability_from_proto
from iris.rpc import controller_pb2 as pb


def upstream_block(version: int, band: str) -> pb.Availability:
    return pb.Availability(
        version=version,
        observation_epoch_ms=1,
        amounts={"gpu:h100": 4.0},
        total_amounts={"gpu:h100": 8.0},
        held_by_band=[pb.BandAmounts(band=band, amounts={"gpu:h100": 4.0})],
    )


def test_upstream_version_2_with_priority_band_names_reads_like_ours():
    theirs = availability_from_proto(upstream_block(2, "PRIORITY_BAND_BATCH"))
    ours = availability_from_proto(upstream_block(1, "batch"))
    assert theirs.held(Band.BATCH, "gpu:h100") == ours.held(Band.BATCH, "gpu:h100") == 4.0
    assert theirs.held_below(Band.PRODUCTION, "gpu:h100") == 4.0


@pytest.fixture
def fake_peer():
    """A loopback server answering ListBackends with whatever block the test sets."""
    answer: dict[str, pb.Availability] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("content-length", 0)))
            resp = pb.ListBackendsResponse(cluster="upstream")
            resp.backends.add(id="h100", kind="k8s").availability.CopyFrom(answer["block"])
            body = resp.SerializeToString()
            self.send_response(200)
            self.send_header("content-type", "application/proto")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", answer
    finally:
        server.shutdown()
        server.server_close()


def probe(url: str):
    manager = FederationManager("marin", {"up": url}, store=None, router=None)
    try:
        manager.heartbeat()
        return manager.statuses()[0]
    finally:
        manager.stop()


def test_a_peer_speaking_the_upstream_format_is_reachable_with_its_bands(fake_peer):
    url, answer = fake_peer
    answer["block"] = upstream_block(2, "PRIORITY_BAND_PRODUCTION")
    status = probe(url)
    assert status.reachable and status.last_error == ""
    assert status.backends[0].availability.held(Band.PRODUCTION, "gpu:h100") == 4.0


@pytest.mark.parametrize(
    ("block", "cause"),
    [
        (upstream_block(9, "PRIORITY_BAND_BATCH"), "version 9 is not understood"),
        (upstream_block(2, "PRIORITY_BAND_URGENT"), "'URGENT' is not a band"),
    ],
)
def test_a_block_that_cannot_be_read_is_reported_with_its_cause_not_as_unreachable(fake_peer, block, cause):
    url, answer = fake_peer
    answer["block"] = block
    status = probe(url)
    assert status.reachable
    assert status.last_error.startswith("answers, but its availability block for backend h100 cannot be read")
    assert cause in status.last_error
    assert status.backends == ()
