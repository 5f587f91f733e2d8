"""The federation manager: the loops that talk to peers — capability heartbeat, delivery of promoted
jobs, cancel relay, status sync and log relay — and the placement step the control tick calls.

Decisions stay in the pure kernels (`router`, `availability`); the manager only gathers their
inputs, applies their outputs through a small store interface the controller implements, and turns
every network fault into "try again next cycle". Nothing here can fail or kill a job because a peer
is unreachable: an unreachable peer keeps its last known state, marked stale.

Two background threads do what needs the network, so a slow peer delays federation work but never
the control tick; the tick's `plan` step is pure computation plus one transaction of conditional
updates. One thread heartbeats, relays cancels and withdrawals, and syncs. The other delivers
promoted jobs (`delivery`: one call per peer carrying every job promoted to it, calls to all peers
side by side; the tick's own thread starts the calls for what it just promoted) and wakes the tick's
federation step when a peer answered, so a burst flows at the pace the peers admit it rather than
one pass or one sync (with its log relay) after another. A cancel or withdrawal of a
job waits until a call carrying it has returned, so the peer never sees a stop before the delivery
it would have to stop. A call this cluster gave up on may still reach the peer later, so a stop
names the run (its nonce), and a peer that does not hold that run answers NOT_FOUND only after
recording that a late handoff of it must be refused (`controller/db/handoff_stops.py`): NOT_FOUND
then means the run is over there for good. A cancelled job a peer reports live all the same (a
peer without that record) is stopped there again.

A federated job's logs are relayed on each sync by a per-job cursor: they trail the peer by at most
one `federation_sync_interval` (3 s by default) plus the peer's own capture delay (about 0.1 s), and
relay goes on, across any outage of either side, until the peer reports the job over with no line
left after the cursor.

A job a peer cannot place (it reports it UNSCHEDULABLE, or keeps it unplaced past
`federation_reroute_after`) is withdrawn: stopped there, and queued again for another peer only
once the peer confirms it stopped, so it never has two live runs (`controller/db/withdrawal.py`).
Jobs handed to a peer that is no longer configured are given up on, with a message saying so.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Protocol

from iris.core import spans
from iris.core.bands import Band
from iris.core.errors import NotFound, Unavailable
from iris.core.names import JobName
from iris.core.states import JobState
from iris.federation.availability import ReservationLedger, assign_queued
from iris.federation.delivery import Delivery, DeliveryStore
from iris.federation.model import (
    LogTarget,
    PeerBackend,
    PeerSnapshot,
    PendingCancel,
    PendingDelivery,
    Promotion,
    QueuedJob,
    SubmittedJob,
    Submitter,
    Withdrawal,
)
from iris.federation.peer import PeerClient, UnreadableAvailability
from iris.federation.reasons import peer_error_words, queued_reason
from iris.federation.router import PeerRouter
from iris.rpc import controller_pb2 as pb
from iris.rpc.codec import fill_availability
from iris.rpc.transport import ClientTls
from iris.scheduler.gating import over_budget_note

log = logging.getLogger("iris.federation")
_TERMINAL = frozenset(s.value for s in JobState if s.is_terminal)
SYNC_FOLLOW_UP_PAGE = 500  # jobs named per follow-up FederationSync after a full resync


class FederationStore(DeliveryStore, Protocol):
    """What the manager needs of the controller's database (implemented by the controller)."""

    def queued_jobs(self) -> list[QueuedJob]: ...
    def expire_queued(self) -> list[str]: ...  # queued jobs past their scheduling timeout, now ended
    def set_queued_reasons(self, reasons: dict[str, str]) -> None: ...  # job -> pending reason
    def promote_all(self, promotions: Sequence[Promotion]) -> list[Promotion]: ...  # the confirmed ones
    def handoffs_in_flight(self) -> dict[str, int]: ...  # peer -> promoted, not yet accepted there
    def pending_cancels(self) -> list[PendingCancel]: ...
    def mark_cancel_relayed(self, job_id: str, version: int) -> None: ...
    def sync_cursor(self, peer_id: str) -> int: ...
    def apply_sync(
        self, peer_id: str, response: pb.FederationSyncResponse, accepted_since: Collection[str] = ()
    ) -> None: ...
    def mark_stale(self, peer_id: str) -> None: ...
    def followed_unreported(self, peer_id: str, reported: set[str]) -> list[str]: ...
    def peers_with_handles(self) -> set[str]: ...
    def log_targets(self, peer_id: str) -> list[LogTarget]: ...
    def append_relayed_logs(
        self, job_id: str, lines: list[pb.LogLine], cursor: int, complete: bool = False
    ) -> None: ...
    def mark_logs_complete(self, job_ids: Sequence[str]) -> None: ...  # over, no line left to relay
    def active_counts(self) -> dict[str, int]: ...
    def begin_withdrawal(self, job_id: str, peer_id: str, reason: str) -> bool: ...
    def unplaced_past(self, peer_id: str, cutoff_ms: int) -> list[str]: ...
    def withdrawals(self) -> list[Withdrawal]: ...
    def requeue(self, job_id: str, peer_id: str, configured: frozenset[str]) -> str: ...
    def abandon_peer(self, peer_id: str) -> list[str]: ...


@dataclass(frozen=True, slots=True)
class PeerStatus:
    peer_id: str
    address: str
    reachable: bool = False
    last_contact_ms: int = 0
    backends: tuple[PeerBackend, ...] = ()
    last_error: str = ""
    cluster: str = ""

    def snapshot(self) -> PeerSnapshot:
        return PeerSnapshot(self.peer_id, self.reachable, self.backends, self.last_contact_ms)


class FederationManager:
    def __init__(
        self,
        cluster_name: str,
        peers: Mapping[str, str],
        store: FederationStore,
        router: PeerRouter,
        heartbeat_interval: float = 30.0,
        sync_interval: float = 3.0,
        max_per_peer: int = 8,
        reroute_after: float = 600.0,
        token_source: Callable[[str], str | None] = lambda peer: None,
        clock: Callable[[], float] = time.time,
        wake_tick: Callable[[], None] = lambda: None,
        peer_tls: Mapping[str, ClientTls] | None = None,
    ):
        """`peer_tls`: per peer, how its https certificate is checked (absent: the system's store)."""
        self.cluster_name = cluster_name
        self.store = store
        self.router = router
        self.heartbeat_interval = heartbeat_interval
        self.sync_interval = sync_interval
        self.max_per_peer = max_per_peer
        self.reroute_after = reroute_after
        self.clock = clock
        self.wake_tick = wake_tick
        self.ledger = ReservationLedger()
        self.clients = {
            pid: PeerClient(
                pid,
                addr,
                functools.partial(token_source, pid),
                timeout_s=3.0,
                requester=cluster_name,
                tls=(peer_tls or {}).get(pid),
            )
            for pid, addr in peers.items()
        }
        self._status = {pid: PeerStatus(pid, addr) for pid, addr in peers.items()}
        # peer -> job -> its expected start there, as the peer's last sync answer reported it
        self._estimates: dict[str, dict[str, pb.StartEstimate]] = {}
        self._lock = threading.Lock()
        self._queued_reasons: dict[str, str] = {}  # what each queued job's pending reason says now
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._pool = ThreadPoolExecutor(max_workers=min(16, max(1, len(peers))), thread_name_prefix="federation-peer")
        self._next_heartbeat = 0.0
        self._next_sync = 0.0
        self.delivery = Delivery(self.clients, store, sync_interval, self._answered)
        self._queue_left = False  # the last placement pass left jobs queued: a freed slot may take one
        self._answers = 0  # peer answers so far: a pass that read the slots before one wakes the tick
        # The last pass left jobs queued with every peer at its cap: a submit queued for a peer
        # need not wake the tick, since only an answer (which wakes it) can free a slot.
        self.saturated = False
        self._errors_said: dict[str, str] = {}  # the peers' errors the queued jobs' reasons name

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        self._threads = [threading.Thread(target=self._run, name="federation", daemon=True)]
        for thread in self._threads:
            thread.start()
        self.delivery.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self.delivery.stop()
        for thread in self._threads:
            thread.join(timeout=15)
        self._pool.shutdown(wait=False, cancel_futures=True)
        for client in self.clients.values():
            client.close()

    def wake(self) -> None:
        self._wake.set()
        self.delivery.wake()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()  # before the work: a wake-up during it runs the loop again at once
            now = time.monotonic()
            try:
                if now >= self._next_heartbeat:
                    self._next_heartbeat = now + self.heartbeat_interval
                    with spans.span("federation.heartbeat"):
                        self.heartbeat()
                if now >= self._next_sync:
                    self._next_sync = now + self.sync_interval
                    with spans.span("federation.sync"):
                        self.relay_withdrawals()
                        self.relay_cancels()
                        self.sync()
            except Exception:
                log.exception("federation cycle failed; retrying on the next one")
            self._wake.wait(max(0.0, min(self._next_heartbeat, self._next_sync) - time.monotonic()))

    # -- heartbeat -----------------------------------------------------------------------------

    def peers(self) -> tuple[PeerSnapshot, ...]:
        with self._lock:
            return tuple(s.snapshot() for s in self._status.values())

    def statuses(self) -> tuple[PeerStatus, ...]:
        with self._lock:
            return tuple(self._status.values())

    def heartbeat(self) -> None:
        """Asks every peer for its backends; a failed probe keeps the last known backends."""
        results = list(self._pool.map(self._probe, self.clients.values()))
        with self._lock:
            for peer_id, outcome in results:
                status = self._status[peer_id]
                if isinstance(outcome, UnreadableAvailability):
                    # It answers: reported reachable with the cause, offered no work until readable.
                    self._status[peer_id] = replace(
                        status,
                        reachable=True,
                        last_contact_ms=self.now_ms(),
                        backends=(),
                        last_error=peer_error_words(outcome),
                    )
                elif isinstance(outcome, Exception):
                    self._status[peer_id] = replace(status, reachable=False, last_error=peer_error_words(outcome))
                else:
                    cluster, backends = outcome
                    self._status[peer_id] = replace(
                        status,
                        reachable=True,
                        last_contact_ms=self.now_ms(),
                        backends=backends,
                        last_error="",
                        cluster=cluster,
                    )
            self.ledger.prune(tuple(s.snapshot() for s in self._status.values()))

    @staticmethod
    def _probe(client: PeerClient):
        try:
            return client.peer_id, client.list_backends()
        except Exception as exc:  # every failure of a probe means the same: unreachable for now
            return client.peer_id, exc

    # -- submit and tick -----------------------------------------------------------------------

    def classify(self, job: SubmittedJob, submitter: Submitter):
        return self.router.classify(job, self.peers(), submitter)

    def plan(self, band_of: Callable[[QueuedJob], Band] | None = None) -> list[Promotion]:
        """The tick's federation step: end queued jobs past their scheduling timeout, then promote
        the others onto peers with room (CAS each). `band_of` says which band each queued job
        competes in (batch when its owner is over budget); None: its own."""
        self.store.expire_queued()
        answers = self._answers  # before the slots are read: an answer after this may free one
        in_flight = self.store.handoffs_in_flight()
        errors = self._peer_errors()
        if self._queue_left and self._full(in_flight) and errors == self._errors_said:
            # Every peer holds as many unaccepted handoffs as it may: nothing queued can move until
            # an answer frees a slot (and wakes the tick), so the queue is not even read.
            self.saturated = True
            return []
        queued = self.store.queued_jobs()
        self._queue_left = False
        self.saturated = False
        if not queued:
            return []
        candidates = [replace(job, band=band_of(job)) for job in queued] if band_of else queued
        downgraded = {c.job_id for c, job in zip(candidates, queued, strict=True) if c.band is not job.band}
        promotions = self._assign(candidates, in_flight)
        confirmed = self.store.promote_all(promotions) if promotions else []
        for promotion in confirmed:
            self.ledger.charge(promotion)
            in_flight[promotion.peer_id] = in_flight.get(promotion.peer_id, 0) + 1
        self._queue_left = len(confirmed) < len(queued)
        self.saturated = self._queue_left and self._full(in_flight)
        if self._queue_left and self._answers != answers:
            # An answer came while this pass ran, when `_queue_left` did not yet say jobs were
            # left: it did not wake the tick, and the slots it freed were read before it.
            self.wake_tick()
        if confirmed:
            self.delivery.promoted([PendingDelivery(p.job_id, p.peer_id, False) for p in confirmed])
        promoted = {p.job_id for p in confirmed}
        self._explain_waits([c for c in candidates if c.job_id not in promoted], downgraded, errors)
        return confirmed

    def _assign(self, candidates: Sequence[QueuedJob], in_flight: Mapping[str, int]) -> tuple[Promotion, ...]:
        return assign_queued(candidates, self.peers(), self.ledger, self.max_per_peer, in_flight)

    def preview(self, job: QueuedJob, band_of: Callable[[QueuedJob], Band] | None = None) -> Promotion | None:
        """Where the next federation step would hand `job`, a job not queued yet (a dry run): that
        step's own pass over the queued jobs with `job` added, read for it. None when no peer
        reports room for it now, so it would wait queued. Writes nothing and charges no ledger."""
        queued = [*self.store.queued_jobs(), job]
        candidates = [replace(j, band=band_of(j)) for j in queued] if band_of else queued
        promotions = self._assign(candidates, self.store.handoffs_in_flight())
        return next((p for p in promotions if p.job_id == job.job_id), None)

    def _full(self, in_flight: Mapping[str, int]) -> bool:
        """Whether every reachable peer holds `max_per_peer` unaccepted handoffs, so that no queued
        job may be promoted (a peer that comes back changes its error, which ends the skipping)."""
        with self._lock:
            reachable = [s.peer_id for s in self._status.values() if s.reachable]
        return all(in_flight.get(peer_id, 0) >= self.max_per_peer for peer_id in reachable)

    def _peer_errors(self) -> dict[str, str]:
        with self._lock:
            return {s.peer_id: s.last_error for s in self._status.values() if s.last_error}

    def _explain_waits(self, waiting: list[QueuedJob], downgraded: set[str], errors: dict[str, str]) -> None:
        """Gives each still-queued job a pending reason that names why its peers cannot take it
        (a peer that refuses this cluster's key, one that does not answer, an owner over budget);
        written only where it differs from what the job says now (a burst of new jobs already says
        what they were queued with, so a pass that promotes some of them writes nothing more)."""
        self._errors_said = errors
        reasons = {
            j.job_id: queued_reason(j.pinned_peer, errors)
            + (over_budget_note(JobName.parse(j.job_id).user) if j.job_id in downgraded else "")
            for j in waiting
        }
        said = {j.job_id: j.pending_reason for j in waiting if j.pending_reason is not None}
        changed = {j: r for j, r in reasons.items() if said.get(j, self._queued_reasons.get(j)) != r}
        self._queued_reasons = reasons
        if changed:
            self.store.set_queued_reasons(changed)

    # -- delivery, cancel, sync, logs -------------------------------------------------------------

    def deliver(self) -> None:
        """Delivers every promoted job once now and waits for the answers (tests, tools)."""
        self.delivery.deliver()

    def dispatch(self, skip: set[str] | frozenset[str] = frozenset()) -> dict[str, Future]:
        """Starts the calls the delivery loop would start now; returns the call each job is in."""
        return self.delivery.dispatch(skip)

    def _answered(self) -> None:
        """A peer answered a delivery: the slots its acceptances freed may take queued jobs."""
        self._answers += 1
        if self._queue_left:
            self.wake_tick()

    def relay_cancels(self) -> None:
        for cancel in self.store.pending_cancels():
            job_id, peer_id, version = cancel.job_id, cancel.peer_id, cancel.version
            client = self.clients.get(peer_id)
            if client is None or self.delivery.is_open(job_id):
                continue  # a delivery on its way: relayed on the next cycle, once it has landed
            try:
                client.terminate_job(job_id, f"cancelled on {self.cluster_name}", cancel.nonce)
            except NotFound:
                pass  # not there, and a late handoff of this run is refused there: satisfied
            except Exception as exc:
                log.info("cancel of %s on %s failed, will retry: %s", job_id, peer_id, exc)
                continue
            self.store.mark_cancel_relayed(job_id, version)

    def relay_withdrawals(self) -> None:
        """Asks each peer to stop the jobs being withdrawn from it; a job is queued again (or, with
        every peer tried, ends UNSCHEDULABLE) only once the peer confirms it is over there."""
        for withdrawal in self.store.withdrawals():
            job_id, peer_id, reason = withdrawal.job_id, withdrawal.peer_id, withdrawal.reason
            client = self.clients.get(peer_id)
            if client is None:
                continue  # a peer removed from the config: `sync` gives up on its jobs
            if self.delivery.is_open(job_id):
                continue  # a re-drive on its way: withdrawn on the next cycle, once it has landed
            try:
                answer = client.terminate_job(
                    job_id, f"withdrawn by {self.cluster_name} to try another peer: {reason}", withdrawal.nonce
                )
                confirmed = answer.state in _TERMINAL
            except NotFound:
                confirmed = True  # not there, and a late handoff of this run is refused there
            except Exception as exc:
                log.info("withdrawal of %s from %s failed, will retry: %s", job_id, peer_id, exc)
                continue
            if confirmed:
                outcome = self.store.requeue(job_id, peer_id, frozenset(self.clients))
                log.info("withdrew %s from %s (%s): %s", job_id, peer_id, reason, outcome)

    def sync(self) -> None:
        for peer_id in sorted(self.store.peers_with_handles()):
            client = self.clients.get(peer_id)
            if client is None:
                for job_id in self.store.abandon_peer(peer_id):
                    log.warning("gave up on %s: peer %s is no longer configured", job_id, peer_id)
                continue
            try:
                # A job the peer accepts while this sync is between its question and its fold is
                # recorded at once, and the fold is told about it: the answer may predate the job
                # there, so neither a full resync's set-replacement nor a tombstone of an earlier
                # run may drop it. Deliveries never wait for a sync.
                with self.delivery.accepted_from_now(peer_id) as accepted_since:
                    asked = self.store.sync_cursor(peer_id)
                    response = client.federation_sync(asked)
                    if response.cursor < asked and not response.cursor_stale:
                        # A change feed answers from the cursor on: an answer from before it is an
                        # older one (replayed, or delayed past a newer), and would undo what followed.
                        log.warning(
                            "sync answer of %s ends at cursor %d, before the %d asked from; ignored",
                            peer_id,
                            response.cursor,
                            asked,
                        )
                        continue
                    if response.cursor_stale:
                        self._complete_resync(peer_id, client, response)
                    for synced in response.jobs:
                        if synced.job.state == JobState.UNSCHEDULABLE.value:
                            error = synced.job.error or "it reports the job unschedulable"
                            self.store.begin_withdrawal(
                                synced.job.job_id, peer_id, f"peer {peer_id} cannot place it: {error}"
                            )
                    self.store.apply_sync(peer_id, response, accepted_since)
                self._estimates[peer_id] = dict(response.estimates)
                if self.reroute_after > 0:
                    cutoff = self.now_ms() - int(self.reroute_after * 1000)
                    for job_id in self.store.unplaced_past(peer_id, cutoff):
                        self.store.begin_withdrawal(
                            job_id, peer_id, f"peer {peer_id} did not place it within {self.reroute_after:g}s"
                        )
                with spans.span("federation.sync.logs"):
                    self._relay_logs(peer_id, client, response)
            except Exception as exc:
                log.info("sync with %s failed; keeping the last known state: %s", peer_id, exc)
                self.store.mark_stale(peer_id)

    def estimate(self, peer_id: str, job_id: str) -> pb.StartEstimate | None:
        """The expected start of `job_id` on `peer_id` that the peer last reported, or None."""
        return self._estimates.get(peer_id, {}).get(job_id)

    def _complete_resync(self, peer_id: str, client: PeerClient, response: pb.FederationSyncResponse) -> None:
        """Asks the peer by name about the jobs this cluster still follows there that a full resync
        left out (it carries only active jobs and recent changes), so that set-replacement drops
        only what the peer truly no longer holds, and a job that ended while this cluster was away
        longer than the peer's window gets its real outcome."""
        reported = {j.job.job_id for j in response.jobs} | set(response.tombstones)
        missing = self.store.followed_unreported(peer_id, reported)
        for start in range(0, len(missing), SYNC_FOLLOW_UP_PAGE):
            answer = client.federation_sync(0, job_ids=missing[start : start + SYNC_FOLLOW_UP_PAGE])
            response.jobs.extend(answer.jobs)
            response.tombstones.extend(answer.tombstones)
            for job_id, estimate in answer.estimates.items():
                response.estimates[job_id].CopyFrom(estimate)

    def _relay_logs(self, peer_id: str, client: PeerClient, report: pb.FederationSyncResponse | None = None) -> None:
        """Asks the peer for each job's lines after its cursor, page by page, until the peer has no
        more; a job whose peer says it is over with nothing left (or no longer knows it) is done.

        A job the sync `report` names with its last line's seq at or before the cursor has nothing
        to fetch as of that report: it is not asked about (and is done if the report says it is
        over), so a burst of jobs that print little costs the peer no call per job each sync."""
        heads = dict(report.log_heads) if report is not None and report.reports_log_heads else {}
        over = {s.job.job_id for s in report.jobs if s.job.state in _TERMINAL} if heads and report else set()
        done: list[str] = []  # over with no line left to store: recorded together, in one transaction
        try:
            for target in self.store.log_targets(peer_id):
                job_id, cursor = target.job_id, target.after_seq
                head = heads.get(job_id)
                if head is not None and head <= cursor:
                    if job_id in over:
                        done.append(job_id)
                    continue
                while True:
                    try:
                        resp = client.fetch_logs(job_id, cursor)
                    except NotFound:
                        done.append(job_id)
                        break
                    if resp.lines:
                        self.store.append_relayed_logs(
                            job_id, list(resp.lines), resp.next_seq, complete=resp.job_finished
                        )
                    elif resp.job_finished:
                        done.append(job_id)
                    cursor = resp.next_seq
                    if resp.job_finished or not resp.lines:
                        break
        finally:  # what was learned before a failed call is kept
            if done:
                self.store.mark_logs_complete(done)

    # -- reporting -----------------------------------------------------------------------------

    def list_peers(self) -> pb.ListPeersResponse:
        counts = self.store.active_counts()
        resp = pb.ListPeersResponse()
        for s in self.statuses():
            info = resp.peers.add(
                peer_id=s.peer_id,
                address=s.address,
                reachable=s.reachable,
                last_contact_ms=s.last_contact_ms,
                active_federated_jobs=counts.get(s.peer_id, 0),
                last_error=s.last_error,
                cluster=s.cluster,
            )
            for b in s.backends:
                bi = info.backends.add(id=b.backend_id, kind=b.kind, attributes=dict(b.attributes))
                if b.availability is not None:
                    fill_availability(bi.availability, b.availability)
        return resp


__all__ = ["FederationManager", "FederationStore", "PeerStatus", "Unavailable"]
