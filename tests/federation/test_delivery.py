"""Delivery of promoted jobs: peers are called side by side, several calls each, each job once."""

from __future__ import annotations

import gzip
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from iris.federation.manager import FederationManager
from iris.federation.model import PendingDelivery
from iris.rpc import controller_pb2 as pb

PEERS = ("cw-0", "cw-1", "cw-2")


class Store:
    """The part of the federation store delivery uses: promoted jobs, and what became of them."""

    def __init__(self, pending: list[tuple[str, str]]):
        self.pending = pending
        self.handed_off: list[str] = []
        self.rejected: dict[str, str] = {}
        self._lock = threading.Lock()

    def pending_deliveries(self):
        done = set(self.handed_off) | set(self.rejected)
        return [PendingDelivery(job, peer, False) for job, peer in self.pending if job not in done]

    def start_delivery(self, job_id: str) -> bool:
        return True  # nothing here is cancelled

    def delivery_request(self, job_id: str) -> pb.LaunchJobRequest:
        return pb.LaunchJobRequest(name=job_id)

    def mark_handed_off(self, job_id: str) -> None:
        with self._lock:
            self.handed_off.append(job_id)

    def mark_rejected(self, job_id: str, message: str) -> None:
        self.rejected[job_id] = message


@pytest.fixture
def peers():
    """Three loopback peers whose first LaunchJob is answered only once all three have one in hand."""
    together = threading.Barrier(len(PEERS), timeout=10)
    received: dict[str, list[str]] = {p: [] for p in PEERS}
    servers = []

    def handler_for(peer: str):
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["content-length"]))
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                request = pb.LaunchJobRequest.FromString(body)
                received[peer].append(request.name)
                status = 200
                if len(received[peer]) == 1:
                    try:
                        together.wait()
                    except threading.BrokenBarrierError:
                        status = 503  # called one after the other: the others never arrived
                body = pb.LaunchJobResponse(job_id=request.name).SerializeToString() if status == 200 else b""
                self.send_response(status)
                self.send_header("content-type", "application/proto")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        return Handler

    urls = {}
    for peer in PEERS:
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(peer))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        urls[peer] = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield urls, received
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()


def test_deliver_calls_peers_side_by_side_each_job_once(peers):
    urls, received = peers
    jobs = [(f"/bob/j{i}", PEERS[i % 3]) for i in range(9)]
    store = Store(jobs)
    manager = FederationManager("marin", urls, store=store, router=None)
    try:
        manager.deliver()
    finally:
        manager.stop()
    assert sorted(store.handed_off) == sorted(job for job, _ in jobs)
    for peer in PEERS:
        assert sorted(received[peer]) == sorted(job for job, p in jobs if p == peer)  # each once, to its peer
    assert store.rejected == {}
