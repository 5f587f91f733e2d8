"""Delivery of promoted jobs: peers are called side by side, several calls each, each job once, and
the placement step promotes only into the slots acceptances have freed."""

from __future__ import annotations

import gzip
import threading
from concurrent.futures import wait
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from iris.core.errors import Unauthenticated
from iris.core.polling import wait_until
from iris.federation.manager import DELIVERIES_IN_FLIGHT, FederationManager
from iris.federation.model import PendingDelivery
from iris.federation.peer import PeerClient
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


# --- a burst flows: calls back to back per peer, each job in one call at a time --------------------


class Peer:
    """A loopback peer answering LaunchJob (held until `release` is set) and FederationSync (held
    until `sync_release` is set); it records who called what, and how many calls were open at once."""

    def __init__(self):
        self.release = threading.Event()
        self.sync_release = threading.Event()
        self.sync_asked = threading.Event()
        self.launched: list[str] = []
        self.tokens: list[str] = []  # the bearer token of each call
        self.refuse = 0  # how many of the next calls to answer UNAUTHENTICATED
        self.open = 0
        self.most_open = 0
        self._lock = threading.Lock()
        peer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["content-length"]))
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                peer.tokens.append(self.headers.get("authorization", ""))
                if peer.refuse:
                    peer.refuse -= 1
                    error = b'{"code": "unauthenticated", "message": "this cluster does not trust that key"}'
                    self.send_response(401)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(error)))
                    self.end_headers()
                    self.wfile.write(error)
                    return
                if self.path.endswith("/FederationSync"):
                    peer.sync_asked.set()
                    peer.sync_release.wait(10)
                    answer = pb.FederationSyncResponse(cursor=1, cursor_stale=True).SerializeToString()
                else:
                    request = pb.LaunchJobRequest.FromString(body)
                    with peer._lock:
                        peer.launched.append(request.name)
                        peer.open += 1
                        peer.most_open = max(peer.most_open, peer.open)
                    peer.release.wait(10)
                    with peer._lock:
                        peer.open -= 1
                    answer = pb.LaunchJobResponse(job_id=request.name).SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/proto")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.release.set()
        self.sync_release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def held_peer():
    peer = Peer()
    try:
        yield peer
    finally:
        peer.close()


class SyncStore(Store):
    """Adds what a sync folds, recording the order in which a sync and an acceptance land."""

    def __init__(self, pending):
        super().__init__(pending)
        self.events: list[str] = []

    def mark_handed_off(self, job_id: str) -> None:
        super().mark_handed_off(job_id)
        self.events.append(f"handed off {job_id}")

    def peers_with_handles(self):
        return {"cw"}

    def sync_cursor(self, peer_id):
        return 0

    def followed_unreported(self, peer_id, reported):
        return []

    def apply_sync(self, peer_id, response):
        self.events.append("sync folded")

    def log_targets(self, peer_id):
        return []

    def unplaced_past(self, peer_id, cutoff_ms):
        return []


def test_dispatch_keeps_calls_per_peer_bounded_and_each_job_in_one_call(held_peer):
    jobs = [(f"/bob/j{i}", "cw") for i in range(2 * DELIVERIES_IN_FLIGHT + 1)]
    store = Store(jobs)
    manager = FederationManager("marin", {"cw": held_peer.url}, store=store, router=None)
    try:
        first = manager.dispatch()
        wait_until(
            lambda: len(held_peer.launched) == DELIVERIES_IN_FLIGHT, timeout=10, what="the first calls to arrive"
        )
        assert manager.dispatch() == {}  # the peer's calls are all open: nothing more, nothing twice
        held_peer.release.set()
        wait(first.values())
        manager.deliver()  # the rest, calls back to back
    finally:
        manager.stop()
    assert sorted(store.handed_off) == sorted(job for job, _ in jobs)
    assert sorted(held_peer.launched) == sorted(job for job, _ in jobs)  # each job once
    assert held_peer.most_open == DELIVERIES_IN_FLIGHT


def test_acceptance_during_a_sync_is_recorded_after_the_sync_is_folded(held_peer):
    """A full resync drops the handed-off jobs it does not mention; one the peer accepted after it
    answered must not count as handed off until that answer is folded."""
    store = SyncStore([("/bob/late", "cw")])
    manager = FederationManager("marin", {"cw": held_peer.url}, store=store, router=None)
    held_peer.release.set()
    try:
        syncing = threading.Thread(target=manager.sync)
        syncing.start()
        assert held_peer.sync_asked.wait(10)  # the peer has answered nothing yet
        delivering = threading.Thread(target=manager.deliver)
        delivering.start()
        wait_until(lambda: held_peer.launched == ["/bob/late"], timeout=10, what="the delivery to reach the peer")
        held_peer.sync_release.set()
        syncing.join(10)
        delivering.join(10)
    finally:
        manager.stop()
    assert store.events == ["sync folded", "handed off /bob/late"]


class PlanStore:
    """Queued jobs and in-flight handoffs for the placement step."""

    def __init__(self, queued, in_flight):
        self.queued = queued
        self.in_flight = in_flight
        self.promoted: list[str] = []

    def expire_queued(self):
        return []

    def queued_jobs(self):
        return [j for j in self.queued if j.job_id not in self.promoted]

    def handoffs_in_flight(self):
        return dict(self.in_flight)

    def promote_all(self, promotions):
        self.promoted += [p.job_id for p in promotions]
        for p in promotions:
            self.in_flight[p.peer_id] = self.in_flight.get(p.peer_id, 0) + 1
        return list(promotions)

    def set_queued_reasons(self, reasons):
        pass


def test_plan_fills_only_the_slots_that_acceptances_freed():
    from tests.federation.federation_builders import gpu, h100_peer, job

    queued = [job(f"/bob/q{i}", gpu(count=1), submitted_ms=i) for i in range(6)]
    store = PlanStore(queued, {"cw": 3})
    manager = FederationManager("marin", {"cw": "http://127.0.0.1:9"}, store=store, router=None, max_per_peer=4)
    manager._status["cw"] = replace(manager._status["cw"], reachable=True, backends=h100_peer("cw", 64).backends)
    try:
        assert [p.job_id for p in manager.plan()] == ["/bob/q0"]  # 4 allowed, 3 not yet accepted
        assert manager.plan() == []  # still unaccepted: the peer takes nothing more
        store.in_flight["cw"] -= 2  # the peer accepted two meanwhile
        assert [p.job_id for p in manager.plan()] == ["/bob/q1", "/bob/q2"]
    finally:
        manager.stop()


def test_peer_client_reuses_a_token_until_the_peer_refuses_it(held_peer):
    minted: list[str] = []

    def mint() -> str:
        minted.append(f"token-{len(minted)}")
        return minted[-1]

    held_peer.release.set()
    client = PeerClient("cw", held_peer.url, mint, requester="marin")
    try:
        for i in range(3):
            client.launch_job(pb.LaunchJobRequest(name=f"/bob/j{i}"))
        held_peer.refuse = 1
        with pytest.raises(Unauthenticated):
            client.launch_job(pb.LaunchJobRequest(name="/bob/refused"))
        client.launch_job(pb.LaunchJobRequest(name="/bob/after"))
    finally:
        client.close()
    # One token signs calls (the peer verifies it once); a refusal makes the next call mint anew.
    assert held_peer.tokens == ["Bearer token-0"] * 4 + ["Bearer token-1"]
