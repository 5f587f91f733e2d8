"""Delivery of promoted jobs: peers are called side by side, each call carrying every job promoted
to its peer, each job in one call at a time and delivered once; a peer that takes no batches gets one
call per job; and the placement step promotes only into the slots acceptances have freed."""

from __future__ import annotations

import gzip
import threading
from concurrent.futures import wait
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from connectrpc.errors import ConnectError

from iris.core.errors import Unauthenticated
from iris.core.polling import wait_until
from iris.federation import delivery as delivery_module
from iris.federation.delivery import CALLS_PER_PEER, MAX_BYTES_PER_CALL, MAX_JOBS_PER_CALL, Delivery, batches
from iris.federation.manager import FederationManager
from iris.federation.model import PendingDelivery
from iris.federation.peer import PeerClient
from iris.federation.reasons import queued_reason
from iris.rpc import controller_pb2 as pb
from iris.rpc.request_codecs import BoundedProtoCodec

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

    def begin_deliveries(self, job_ids):
        return {j: pb.LaunchJobRequest(name=j) for j in job_ids}  # nothing here is cancelled

    def mark_handed_off(self, job_ids) -> None:
        with self._lock:
            self.handed_off.extend(job_ids)

    def mark_rejected(self, job_id: str, message: str) -> None:
        self.rejected[job_id] = message

    def note_pending_reason(self, job_id: str, reason: str) -> None:
        pass


def _answer(handler, status: int, body: bytes, content_type: str = "application/proto") -> None:
    handler.send_response(status)
    handler.send_header("content-type", content_type)
    handler.send_header("content-length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def _body(handler) -> bytes:
    body = handler.rfile.read(int(handler.headers["content-length"]))
    return gzip.decompress(body) if handler.headers.get("content-encoding") == "gzip" else body


def _jobs_of(handler, body: bytes) -> list[pb.LaunchJobRequest]:
    """The jobs a delivery call carries: several for HandOffJobs, one for LaunchJob."""
    if handler.path.endswith("/HandOffJobs"):
        return list(pb.HandOffJobsRequest.FromString(body).jobs)
    return [pb.LaunchJobRequest.FromString(body)]


def _accepted(handler, jobs: list[pb.LaunchJobRequest], refused: dict[str, tuple[str, str]] | None = None) -> bytes:
    refused = refused or {}
    if not handler.path.endswith("/HandOffJobs"):
        return pb.LaunchJobResponse(job_id=jobs[0].name).SerializeToString()
    outcomes = []
    for job in jobs:
        if job.name in refused:
            code, message = refused[job.name]
            outcomes.append(pb.HandOffOutcome(job_id=job.name, error_code=code, error_message=message))
        else:
            outcomes.append(pb.HandOffOutcome(job_id=job.name, accepted=pb.LaunchJobResponse(job_id=job.name)))
    return pb.HandOffJobsResponse(outcomes=outcomes).SerializeToString()


@pytest.fixture
def peers():
    """Three loopback peers whose first LaunchJob is answered only once all three have one in hand."""
    together = threading.Barrier(len(PEERS), timeout=10)
    received: dict[str, list[str]] = {p: [] for p in PEERS}
    calls = dict.fromkeys(PEERS, 0)
    servers = []

    def handler_for(peer: str):
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                jobs = _jobs_of(self, _body(self))
                calls[peer] += 1
                received[peer].extend(j.name for j in jobs)
                status = 200
                if calls[peer] == 1:
                    try:
                        together.wait()
                    except threading.BrokenBarrierError:
                        status = 503  # called one after the other: the others never arrived
                _answer(self, status, _accepted(self, jobs) if status == 200 else b"")

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
        yield urls, received, calls
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()


def test_deliver_calls_peers_side_by_side_one_call_each_job_once(peers):
    urls, received, calls = peers
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
    assert calls == dict.fromkeys(PEERS, 1)  # every job promoted to a peer travels in one call


# --- a burst flows: calls back to back per peer, each job in one call at a time --------------------


class Peer:
    """A loopback peer answering the delivery calls (held until `release` is set) and
    FederationSync (held until `sync_release` is set); it records who called what, and how many
    delivery calls were open at once. With `batches` off it is a peer from before HandOffJobs."""

    def __init__(self, batches: bool = True):
        self.release = threading.Event()
        self.sync_release = threading.Event()
        self.sync_asked = threading.Event()
        self.launched: list[str] = []
        self.calls: list[list[str]] = []  # the jobs of each delivery call, in arrival order
        self.tokens: list[str] = []  # the bearer token of each call
        self.refuse = 0  # how many of the next calls to answer UNAUTHENTICATED
        self.refused: dict[str, tuple[str, str]] = {}  # job -> (code, message) a batch refuses it with
        self.open = 0
        self.most_open = 0
        self._lock = threading.Lock()
        peer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = _body(self)
                peer.tokens.append(self.headers.get("authorization", ""))
                if peer.refuse:
                    peer.refuse -= 1
                    error = b'{"code": "unauthenticated", "message": "this cluster does not trust that key"}'
                    _answer(self, 401, error, "application/json")
                    return
                if self.path.endswith("/FederationSync"):
                    peer.sync_asked.set()
                    peer.sync_release.wait(10)
                    _answer(self, 200, pb.FederationSyncResponse(cursor=1, cursor_stale=True).SerializeToString())
                    return
                if self.path.endswith("/HandOffJobs") and not batches:
                    _answer(self, 404, b"")
                    return
                jobs = _jobs_of(self, body)
                with peer._lock:
                    peer.calls.append([j.name for j in jobs])
                    peer.launched.extend(j.name for j in jobs)
                    peer.open += 1
                    peer.most_open = max(peer.most_open, peer.open)
                peer.release.wait(10)
                with peer._lock:
                    peer.open -= 1
                _answer(self, 200, _accepted(self, jobs, peer.refused))

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

    def mark_handed_off(self, job_ids) -> None:
        super().mark_handed_off(job_ids)
        self.events += [f"handed off {j}" for j in job_ids]

    def peers_with_handles(self):
        return {"cw"}

    def sync_cursor(self, peer_id):
        return 0

    def followed_unreported(self, peer_id, reported):
        return []

    def apply_sync(self, peer_id, response, accepted_since=()):
        self.events.append(f"sync folded (new: {','.join(sorted(accepted_since))})")

    def log_targets(self, peer_id):
        return []

    def unplaced_past(self, peer_id, cutoff_ms):
        return []


def test_dispatch_batches_what_was_promoted_keeps_calls_bounded_and_each_job_in_one_call(held_peer):
    store = Store([(f"/bob/a{i}", "cw") for i in range(5)])
    manager = FederationManager("marin", {"cw": held_peer.url}, store=store, router=None)
    open_calls = []
    expected = [[f"/bob/a{i}" for i in range(5)]]
    try:
        open_calls.append(manager.dispatch())
        wait_until(lambda: len(held_peer.calls) == 1, timeout=10, what="the first call to arrive")
        for k in range(1, CALLS_PER_PEER):  # promoted while the earlier calls are out: one call each time
            store.pending += [(f"/bob/b{k}.0", "cw"), (f"/bob/b{k}.1", "cw")]
            expected.append([f"/bob/b{k}.0", f"/bob/b{k}.1"])
            open_calls.append(manager.dispatch())
            wait_until(lambda k=k: len(held_peer.calls) == k + 1, timeout=10, what=f"call {k + 1} to arrive")
        store.pending += [("/bob/c0", "cw")]
        assert manager.dispatch() == {}  # CALLS_PER_PEER calls open: nothing more, nothing twice
        held_peer.release.set()
        wait({f for started in open_calls for f in started.values()})
        manager.deliver()  # the rest
    finally:
        manager.stop()
    assert held_peer.calls == [*expected, ["/bob/c0"]]
    assert sorted(store.handed_off) == sorted(job for job, _ in store.pending)
    assert held_peer.most_open == CALLS_PER_PEER


class CountingStore(Store):
    """Counts how often the delivery loop reads the promoted jobs."""

    reads = 0

    def pending_deliveries(self):
        self.reads += 1
        return super().pending_deliveries()


def _running_delivery(monkeypatch, peer: Peer, store: Store) -> Delivery:
    # The loop's timer never fires during a test: only a wake-up makes it read the promoted jobs.
    monkeypatch.setattr(delivery_module, "MIN_DELIVERY_BACKOFF_S", 600.0)
    delivery = Delivery({"cw": PeerClient("cw", peer.url, lambda: None, requester="marin")}, store, 600.0)
    delivery.start()
    wait_until(lambda: store.reads == 1, timeout=10, what="the loop's first read")
    return delivery


def test_jobs_promoted_while_every_call_is_out_go_once_a_call_returns(monkeypatch, held_peer):
    store = CountingStore([])
    delivery = _running_delivery(monkeypatch, held_peer, store)
    try:
        for k in range(CALLS_PER_PEER + 1):
            store.pending.append((f"/bob/j{k}", "cw"))
            delivery.promoted([PendingDelivery(f"/bob/j{k}", "cw", False)])
            if k < CALLS_PER_PEER:
                wait_until(lambda k=k: len(held_peer.calls) == k + 1, timeout=10, what=f"call {k + 1} to arrive")
        assert len(held_peer.calls) == CALLS_PER_PEER  # the last job waits for a call to return
        held_peer.release.set()
        wait_until(lambda: len(store.handed_off) == CALLS_PER_PEER + 1, timeout=10, what="every job handed off")
    finally:
        delivery.stop()
    assert held_peer.calls[-1] == [f"/bob/j{CALLS_PER_PEER}"]


def test_a_returning_call_with_nothing_waiting_does_not_make_the_loop_read_again(monkeypatch, held_peer):
    held_peer.release.set()
    store = CountingStore([("/bob/j0", "cw")])
    delivery = _running_delivery(monkeypatch, held_peer, store)  # its first read started the call
    try:
        wait_until(lambda: store.handed_off == ["/bob/j0"], timeout=10, what="the first job handed off")
        store.pending.append(("/bob/j1", "cw"))
        started = delivery.dispatch(promoted=[PendingDelivery("/bob/j1", "cw", False)])
        wait(set(started.values()))
    finally:
        delivery.stop()
    assert store.handed_off == ["/bob/j0", "/bob/j1"]
    assert store.reads == 1  # each job was in a call as soon as it was promoted: nothing to look for


def test_a_batch_refusal_fails_only_that_job_and_the_others_are_handed_off(held_peer):
    held_peer.release.set()
    held_peer.refused = {"/bob/taken": ("already_exists", "job /bob/taken is still RUNNING here")}
    store = Store([("/bob/ok0", "cw"), ("/bob/taken", "cw"), ("/bob/ok1", "cw")])
    manager = FederationManager("marin", {"cw": held_peer.url}, store=store, router=None)
    try:
        manager.deliver()
    finally:
        manager.stop()
    assert len(held_peer.calls) == 1
    assert sorted(store.handed_off) == ["/bob/ok0", "/bob/ok1"]
    assert store.rejected == {"/bob/taken": "peer cw: job /bob/taken is still RUNNING here"}


def test_a_peer_without_batches_gets_one_call_per_job_each_job_once():
    peer = Peer(batches=False)
    peer.release.set()
    store = Store([(f"/bob/j{i}", "cw") for i in range(5)])
    manager = FederationManager("marin", {"cw": peer.url}, store=store, router=None)
    try:
        manager.deliver()
        store.pending.append(("/bob/later", "cw"))
        manager.deliver()  # the peer is known to take no batches now: straight to one call per job
    finally:
        manager.stop()
        peer.close()
    assert sorted(store.handed_off) == sorted(job for job, _ in store.pending)
    assert sorted(peer.launched) == sorted(job for job, _ in store.pending)  # each job once
    assert all(len(call) == 1 for call in peer.calls)


def test_batches_split_by_count_and_bytes_and_a_large_job_goes_alone():
    small = [(f"/bob/s{i}", pb.LaunchJobRequest(name=f"/bob/s{i}")) for i in range(MAX_JOBS_PER_CALL + 3)]
    assert [len(b) for b in batches(small)] == [MAX_JOBS_PER_CALL, 3]
    big = pb.LaunchJobRequest(name="/bob/big", workspace_bundle=b"x" * MAX_BYTES_PER_CALL)
    mixed = [small[0], ("/bob/big", big), small[1], small[2]]
    assert [[job for job, _ in b] for b in batches(mixed)] == [["/bob/s0"], ["/bob/big"], ["/bob/s1", "/bob/s2"]]
    assert batches([]) == []


def test_acceptance_during_a_sync_is_recorded_at_once_and_named_to_that_sync_fold(held_peer):
    """A full resync drops the handed-off jobs it does not mention; one the peer accepted after it
    was asked is recorded without waiting for the sync, and the fold is told it is new."""
    store = SyncStore([("/bob/late", "cw")])
    manager = FederationManager("marin", {"cw": held_peer.url}, store=store, router=None)
    held_peer.release.set()
    try:
        syncing = threading.Thread(target=manager.sync)
        syncing.start()
        assert held_peer.sync_asked.wait(10)  # the peer has answered nothing yet
        manager.deliver()  # does not wait for the sync
        assert store.events == ["handed off /bob/late"]
        held_peer.sync_release.set()
        syncing.join(10)
        manager.sync()  # a sync asked after the acceptance: nothing is new to it
    finally:
        manager.stop()
    assert store.events == ["handed off /bob/late", "sync folded (new: /bob/late)", "sync folded (new: )"]


class PlanStore:
    """Queued jobs and in-flight handoffs for the placement step."""

    def __init__(self, queued, in_flight):
        self.queued = queued
        self.in_flight = in_flight
        self.promoted: list[str] = []
        self.reasons_written: list[dict[str, str]] = []
        self.reads = 0  # how many times the queue was read

    def expire_queued(self):
        return []

    def queued_jobs(self):
        self.reads += 1
        return [j for j in self.queued if j.job_id not in self.promoted]

    def handoffs_in_flight(self):
        return dict(self.in_flight)

    def promote_all(self, promotions):
        self.promoted += [p.job_id for p in promotions]
        for p in promotions:
            self.in_flight[p.peer_id] = self.in_flight.get(p.peer_id, 0) + 1
        return list(promotions)

    def set_queued_reasons(self, reasons):
        self.reasons_written.append(dict(reasons))


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


def test_plan_with_every_peer_at_its_cap_reads_no_queue_until_a_slot_frees():
    from tests.federation.federation_builders import gpu, h100_peer, job

    queued = [job(f"/bob/q{i}", gpu(count=1), submitted_ms=i) for i in range(5)]
    store = PlanStore(queued, {"a": 0, "b": 1})
    peers = {"a": "http://127.0.0.1:9", "b": "http://127.0.0.1:9"}
    manager = FederationManager("marin", peers, store=store, router=None, max_per_peer=2)
    for pid in peers:
        manager._status[pid] = replace(manager._status[pid], reachable=True, backends=h100_peer(pid, 64).backends)
    try:
        assert len(manager.plan()) == 3  # a takes two, b one: every peer is at its cap
        assert manager.saturated and store.reads == 1
        assert manager.plan() == [] and manager.plan() == []
        assert store.reads == 1  # nothing could move: the queue was not read again
        store.in_flight["b"] -= 1  # b accepted one
        assert [p.job_id for p in manager.plan()] == ["/bob/q3"]
        assert store.reads == 2 and manager.saturated
        store.in_flight["a"] -= 2
        assert [p.job_id for p in manager.plan()] == ["/bob/q4"]
        assert not manager.saturated  # the queue is empty: a new submit must wake the tick
    finally:
        manager.stop()


def test_an_answer_landing_while_a_pass_runs_wakes_the_tick_once_the_pass_leaves_jobs_queued():
    from tests.federation.federation_builders import gpu, h100_peer, job

    queued = [job(f"/bob/q{i}", gpu(count=1), submitted_ms=i) for i in range(3)]
    wakes: list[int] = []
    manager = None

    class AnsweredMidPass(PlanStore):
        def queued_jobs(self):
            # The peer accepts the handoff it held and its answer arrives after this pass read the
            # slots (all taken) and before the pass says jobs are left: only the pass can see it.
            if self.reads == 0:
                self.in_flight["cw"] -= 1
                manager._answered()
            return super().queued_jobs()

    store = AnsweredMidPass(queued, {"cw": 1})
    manager = FederationManager(
        "marin", {"cw": "http://127.0.0.1:9"}, store=store, router=None, max_per_peer=1,
        wake_tick=lambda: wakes.append(1),
    )  # fmt: skip
    manager._status["cw"] = replace(manager._status["cw"], reachable=True, backends=h100_peer("cw", 64).backends)
    try:
        assert manager.plan() == []  # it read the peer as full
        assert wakes, "the answer's freed slot would wait for the next timed pass"
        assert [p.job_id for p in manager.plan()] == ["/bob/q0"]
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


def test_plan_writes_a_pending_reason_only_where_it_differs_from_what_the_job_says():
    from tests.federation.federation_builders import gpu, h100_peer, job

    queued = [
        replace(job(f"/bob/q{i}", gpu(count=1), submitted_ms=i), pending_reason=queued_reason()) for i in range(3)
    ]
    store = PlanStore(queued, {"cw": 0})
    manager = FederationManager("marin", {"cw": "http://127.0.0.1:9"}, store=store, router=None, max_per_peer=1)
    manager._status["cw"] = replace(manager._status["cw"], reachable=True, backends=h100_peer("cw", 64).backends)
    try:
        assert [p.job_id for p in manager.plan()] == ["/bob/q0"]
        assert store.reasons_written == []  # the others still say what they were queued with
        manager._status["cw"] = replace(manager._status["cw"], last_error="refuses this cluster's key")
        manager.plan()
        assert store.reasons_written == [
            {j: queued_reason(None, {"cw": "refuses this cluster's key"}) for j in ("/bob/q1", "/bob/q2")}
        ]
    finally:
        manager.stop()


def test_a_promotion_starts_its_call_in_the_promoting_thread_once_the_loop_runs(held_peer):
    store = Store([])
    manager = FederationManager("marin", {"cw": held_peer.url}, store=store, router=None)
    try:
        manager.delivery.promoted()  # before the loop starts: nothing is called from here
        manager.delivery.start()
        store.pending.append(("/bob/now", "cw"))
        manager.delivery.promoted()
        assert manager.delivery.is_open("/bob/now")  # in a call already, not waiting for the loop
        wait_until(lambda: held_peer.calls == [["/bob/now"]], timeout=10, what="the call to arrive")
        held_peer.release.set()
        wait_until(lambda: store.handed_off == ["/bob/now"], timeout=10, what="the acceptance")
    finally:
        manager.stop()
    assert held_peer.calls == [["/bob/now"]]


def test_batches_stay_within_the_values_a_peer_decodes_however_large_the_jobs_envs():
    # 64 jobs of 1,000 env entries: one call would hold ~190,000 values, and the peer would refuse
    # the whole body, failing every job in it.
    env = {f"VAR_{i}": "x" for i in range(1000)}
    jobs = [(f"/bob/e{i}", pb.LaunchJobRequest(name=f"/bob/e{i}", command=["true"], env=env)) for i in range(64)]
    calls = batches(jobs)
    assert len(calls) > 1 and [job for call in calls for job, _ in call] == [job for job, _ in jobs]
    codec = BoundedProtoCodec()
    for call in calls:
        body = pb.HandOffJobsRequest(jobs=[req for _, req in call]).SerializeToString()
        assert len(codec.decode(body, pb.HandOffJobsRequest).jobs) == len(call)
    with pytest.raises(ConnectError, match="values"):  # what one call of them all would meet
        codec.decode(pb.HandOffJobsRequest(jobs=[req for _, req in jobs]).SerializeToString(), pb.HandOffJobsRequest)
