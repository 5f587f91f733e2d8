"""The federation manager: the loops that talk to peers — capability heartbeat, delivery of promoted
jobs, cancel relay, status sync and log relay — and the placement step the control tick calls.

Decisions stay in the pure kernels (`router`, `availability`); the manager only gathers their
inputs, applies their outputs through a small store interface the controller implements, and turns
every network fault into "try again next cycle". Nothing here can fail or kill a job because a peer
is unreachable: an unreachable peer keeps its last known state, marked stale.

Two background threads do what needs the network, so a slow peer delays federation work but never
the control tick; the tick's `plan` step is pure computation plus one transaction of conditional
updates. One thread heartbeats, relays cancels and withdrawals, and syncs. The other delivers: it
keeps up to `DELIVERIES_IN_FLIGHT` LaunchJob calls open per peer, starting the next promoted job as
soon as a call returns, and wakes the tick when a peer accepted one, so a burst flows at the pace the
peers admit it rather than one pass or one sync (with its log relay) after another. A job is in at
most one call at a time, and a cancel or withdrawal of it waits until its call has returned, so the
peer never sees a stop before the delivery it would have to stop.

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
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from typing import Protocol

from iris.core.bands import Band
from iris.core.errors import AlreadyExists, InvalidArgument, NotFound, PermissionDenied, Unauthenticated, Unavailable
from iris.core.names import JobName
from iris.core.states import JobState
from iris.federation.availability import ReservationLedger, assign_queued
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
from iris.federation.reasons import credentials_refused_reason, peer_error_words, queued_reason
from iris.federation.router import PeerRouter
from iris.rpc import controller_pb2 as pb
from iris.rpc.codec import fill_availability
from iris.scheduler.gating import over_budget_note

log = logging.getLogger("iris.federation")
_TERMINAL = frozenset(s.value for s in JobState if s.is_terminal)
MIN_DELIVERY_BACKOFF_S = 1.0
MAX_DELIVERY_BACKOFF_S = 60.0
SYNC_FOLLOW_UP_PAGE = 500  # jobs named per follow-up FederationSync after a full resync
DELIVERIES_IN_FLIGHT = 4  # LaunchJob calls one peer answers at once during a delivery pass


class FederationStore(Protocol):
    """What the manager needs of the controller's database (implemented by the controller)."""

    def queued_jobs(self) -> list[QueuedJob]: ...
    def expire_queued(self) -> list[str]: ...  # queued jobs past their scheduling timeout, now ended
    def set_queued_reasons(self, reasons: dict[str, str]) -> None: ...  # job -> pending reason
    def promote_all(self, promotions: Sequence[Promotion]) -> list[Promotion]: ...  # the confirmed ones
    def handoffs_in_flight(self) -> dict[str, int]: ...  # peer -> promoted, not yet accepted there
    def pending_deliveries(self) -> list[PendingDelivery]: ...
    def delivery_request(self, job_id: str) -> pb.LaunchJobRequest: ...
    def mark_handed_off(self, job_id: str) -> None: ...
    def mark_rejected(self, job_id: str, message: str) -> None: ...
    def note_pending_reason(self, job_id: str, reason: str) -> None: ...
    def pending_cancels(self) -> list[PendingCancel]: ...
    def mark_cancel_relayed(self, job_id: str, version: int) -> None: ...
    def sync_cursor(self, peer_id: str) -> int: ...
    def apply_sync(self, peer_id: str, response: pb.FederationSyncResponse) -> None: ...
    def mark_stale(self, peer_id: str) -> None: ...
    def followed_unreported(self, peer_id: str, reported: set[str]) -> list[str]: ...
    def peers_with_handles(self) -> set[str]: ...
    def log_targets(self, peer_id: str) -> list[LogTarget]: ...
    def append_relayed_logs(
        self, job_id: str, lines: list[pb.LogLine], cursor: int, complete: bool = False
    ) -> None: ...
    def active_counts(self) -> dict[str, int]: ...
    def start_delivery(self, job_id: str) -> bool: ...  # False: cancelled meanwhile, do not deliver
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
    ):
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
            pid: PeerClient(pid, addr, functools.partial(token_source, pid), timeout_s=3.0, requester=cluster_name)
            for pid, addr in peers.items()
        }
        self._status = {pid: PeerStatus(pid, addr) for pid, addr in peers.items()}
        self._lock = threading.Lock()
        self._queued_reasons: dict[str, str] = {}  # what each queued job's pending reason says now
        self._wake = threading.Event()
        self._deliver_wake = threading.Event()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._pool = ThreadPoolExecutor(max_workers=min(16, max(1, len(peers))), thread_name_prefix="federation-peer")
        self._delivery_pool = ThreadPoolExecutor(
            max_workers=min(64, max(1, DELIVERIES_IN_FLIGHT * len(peers))), thread_name_prefix="federation-delivery"
        )
        self._next_heartbeat = 0.0
        self._next_sync = 0.0
        # Deliveries to try again later: job -> (next try, monotonic s; last delay). A transport
        # failure waits one sync interval; a refusal of our credentials backs off (see `deliver`).
        self._delivery_backoff: dict[str, tuple[float, float]] = {}
        self._delivering: dict[str, str] = {}  # job -> peer: LaunchJob calls open now (under _lock)
        # Held by a sync of the peer from its question to its fold, and by a delivery recording the
        # peer's acceptance (see `sync`).
        self._sync_gates = {pid: threading.Lock() for pid in peers}
        self._queue_left = False  # the last placement pass left jobs queued: a freed slot may take one

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        self._threads = [
            threading.Thread(target=self._run, name="federation", daemon=True),
            threading.Thread(target=self._deliver_loop, name="federation-delivery", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._deliver_wake.set()
        for thread in self._threads:
            thread.join(timeout=15)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._delivery_pool.shutdown(wait=False, cancel_futures=True)
        for client in self.clients.values():
            client.close()

    def wake(self) -> None:
        self._wake.set()
        self._deliver_wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()  # before the work: a wake-up during it runs the loop again at once
            now = time.monotonic()
            try:
                if now >= self._next_heartbeat:
                    self._next_heartbeat = now + self.heartbeat_interval
                    self.heartbeat()
                if now >= self._next_sync:
                    self._next_sync = now + self.sync_interval
                    self.relay_withdrawals()
                    self.relay_cancels()
                    self.sync()
            except Exception:
                log.exception("federation cycle failed; retrying on the next one")
            self._wake.wait(max(0.0, min(self._next_heartbeat, self._next_sync) - time.monotonic()))

    def _deliver_loop(self) -> None:
        while not self._stop.is_set():
            self._deliver_wake.clear()
            try:
                self.dispatch()
            except Exception:
                log.exception("starting deliveries failed; retrying shortly")
            # Woken by a promotion or a returning call; the timeout re-drives failed deliveries.
            self._deliver_wake.wait(min(self.sync_interval, MIN_DELIVERY_BACKOFF_S))

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
        queued = self.store.queued_jobs()
        self._queue_left = False
        if not queued:
            return []
        candidates = [replace(job, band=band_of(job)) for job in queued] if band_of else queued
        downgraded = {c.job_id for c, job in zip(candidates, queued, strict=True) if c.band is not job.band}
        promotions = assign_queued(
            candidates, self.peers(), self.ledger, self.max_per_peer, self.store.handoffs_in_flight()
        )
        confirmed = self.store.promote_all(promotions) if promotions else []
        for promotion in confirmed:
            self.ledger.charge(promotion)
        self._queue_left = len(confirmed) < len(queued)
        if confirmed:
            self._deliver_wake.set()
        promoted = {p.job_id for p in confirmed}
        self._explain_waits([c for c in candidates if c.job_id not in promoted], downgraded)
        return confirmed

    def _explain_waits(self, waiting: list[QueuedJob], downgraded: set[str]) -> None:
        """Gives each still-queued job a pending reason that names why its peers cannot take it
        (a peer that refuses this cluster's key, one that does not answer, an owner over budget);
        written only on change."""
        with self._lock:
            errors = {s.peer_id: s.last_error for s in self._status.values() if s.last_error}
        reasons = {
            j.job_id: queued_reason(j.pinned_peer, errors)
            + (over_budget_note(JobName.parse(j.job_id).user) if j.job_id in downgraded else "")
            for j in waiting
        }
        changed = {j: r for j, r in reasons.items() if self._queued_reasons.get(j) != r}
        self._queued_reasons = reasons
        if changed:
            self.store.set_queued_reasons(changed)

    # -- delivery, cancel, sync, logs -------------------------------------------------------------

    def deliver(self) -> None:
        """Delivers every promoted job once now and waits for the answers: the delivery loop's
        work, done in the caller's thread (tests, tools)."""
        tried: set[str] = set()
        while started := self.dispatch(tried):
            tried.update(started)
            wait(started.values())

    def dispatch(self, skip: set[str] | frozenset[str] = frozenset()) -> dict[str, Future]:
        """Starts a LaunchJob call for each promoted job that is not in one already (nor in
        `skip`), up to `DELIVERIES_IN_FLIGHT` per peer, all peers side by side; returns the calls
        started by job.

        Each call, on its return, wakes the loop to start the next job (and the tick to promote
        into the slot it freed), so calls to a peer follow one another back to back.
        """
        now = time.monotonic()
        started: dict[str, Future] = {}
        with self._lock:
            busy = Counter(self._delivering.values())
        for delivery in self.store.pending_deliveries():
            job_id, peer_id = delivery.job_id, delivery.peer_id
            if delivery.cancelled or job_id in skip:
                continue  # cancelled before handoff: never delivered
            if peer_id not in self.clients:
                self.store.mark_rejected(job_id, f"peer {peer_id} is no longer configured")
                continue
            with self._lock:
                # The back-off is read under the lock: a call that failed set it before it left
                # `_delivering`, so a job is never re-driven at once by a read from before.
                retry = self._delivery_backoff.get(job_id)
                if job_id in self._delivering or busy[peer_id] >= DELIVERIES_IN_FLIGHT:
                    continue
                if retry is not None and now < retry[0]:
                    continue
                self._delivering[job_id] = peer_id
                busy[peer_id] += 1
            try:
                started[job_id] = self._delivery_pool.submit(self._deliver_one, peer_id, job_id)
            except RuntimeError:  # shutting down
                with self._lock:
                    self._delivering.pop(job_id, None)
                break
        return started

    def _deliver_one(self, peer_id: str, job_id: str) -> None:
        called = False
        try:
            called = self._deliver(peer_id, job_id)
        except Exception:
            log.exception("delivery of %s to %s failed; it will be re-driven", job_id, peer_id)
        finally:
            with self._lock:
                self._delivering.pop(job_id, None)
        if called:
            self._deliver_wake.set()
            if self._queue_left:
                self.wake_tick()

    def _deliver(self, peer_id: str, job_id: str) -> bool:
        """Calls the peer's LaunchJob for one promoted job and records the answer; False when it
        made no call (the job was cancelled, or delivered, since it was read).

        Which answers are final: ALREADY_EXISTS, PERMISSION_DENIED and INVALID_ARGUMENT are the
        peer's considered refusal of this job, and re-driving would only repeat it, so the job
        fails with the peer's message. UNAUTHENTICATED is not about the job but about this
        cluster's credentials (a key not yet rolled out, a clock step, a proxy's 401): it heals
        without anyone touching the job, so the job stays pending with the cause as its reason and
        is re-driven with back-off (1 s doubling to a minute), same id and nonce. Any other failure
        (transport, a peer that cannot serve now) is re-driven after a short wait, same id and nonce,
        which the peer dedups.
        """
        retry = self._delivery_backoff.get(job_id)
        if not self.store.start_delivery(job_id):
            return False  # cancelled since it was read: never delivered
        try:
            self.clients[peer_id].launch_job(self.store.delivery_request(job_id))
        except Unauthenticated as exc:
            delay = min(2 * retry[1], MAX_DELIVERY_BACKOFF_S) if retry else MIN_DELIVERY_BACKOFF_S
            self._delivery_backoff[job_id] = (time.monotonic() + delay, delay)
            log.warning(
                "peer %s refused our credentials delivering %s; retrying in %gs: %s", peer_id, job_id, delay, exc
            )
            self.store.note_pending_reason(
                job_id, credentials_refused_reason(peer_id, exc.message.removeprefix(f"peer {peer_id}: "), delay)
            )
        except (AlreadyExists, PermissionDenied, InvalidArgument) as exc:
            self._delivery_backoff.pop(job_id, None)
            self.store.mark_rejected(job_id, exc.message)
        except Exception as exc:  # transport or peer trouble: re-driven with the same id and nonce
            delay = min(self.sync_interval, MIN_DELIVERY_BACKOFF_S)
            self._delivery_backoff[job_id] = (time.monotonic() + delay, retry[1] if retry else 0.0)
            log.info("delivery of %s to %s failed, will retry: %s", job_id, peer_id, exc)
        else:
            self._delivery_backoff.pop(job_id, None)
            with self._sync_gates[peer_id]:
                self.store.mark_handed_off(job_id)
        return True

    def _delivery_open(self, job_id: str) -> bool:
        """Whether a LaunchJob call for `job_id` is open now (a stop must wait until it returns)."""
        with self._lock:
            return job_id in self._delivering

    def relay_cancels(self) -> None:
        for cancel in self.store.pending_cancels():
            job_id, peer_id, version = cancel.job_id, cancel.peer_id, cancel.version
            client = self.clients.get(peer_id)
            if client is None or self._delivery_open(job_id):
                continue  # a delivery on its way: relayed on the next cycle, once it has landed
            try:
                client.terminate_job(job_id, f"cancelled on {self.cluster_name}")
            except NotFound:
                pass  # never admitted or already gone: the cancel is satisfied
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
            if self._delivery_open(job_id):
                continue  # a re-drive on its way: withdrawn on the next cycle, once it has landed
            try:
                answer = client.terminate_job(job_id, f"withdrawn by {self.cluster_name} to try another peer: {reason}")
                confirmed = answer.state in _TERMINAL
            except NotFound:
                confirmed = True  # never admitted, or already gone
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
                # A delivery that the peer accepts while this sync is between its question and
                # its fold is recorded after the fold: the answer predates the job there, and a
                # full resync drops the handed-off jobs it does not mention.
                with self._sync_gates[peer_id]:
                    response = client.federation_sync(self.store.sync_cursor(peer_id))
                    if response.cursor_stale:
                        self._complete_resync(peer_id, client, response)
                    for synced in response.jobs:
                        if synced.job.state == JobState.UNSCHEDULABLE.value:
                            error = synced.job.error or "it reports the job unschedulable"
                            self.store.begin_withdrawal(
                                synced.job.job_id, peer_id, f"peer {peer_id} cannot place it: {error}"
                            )
                    self.store.apply_sync(peer_id, response)
                if self.reroute_after > 0:
                    cutoff = self.now_ms() - int(self.reroute_after * 1000)
                    for job_id in self.store.unplaced_past(peer_id, cutoff):
                        self.store.begin_withdrawal(
                            job_id, peer_id, f"peer {peer_id} did not place it within {self.reroute_after:g}s"
                        )
                self._relay_logs(peer_id, client, response)
            except Exception as exc:
                log.info("sync with %s failed; keeping the last known state: %s", peer_id, exc)
                self.store.mark_stale(peer_id)

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

    def _relay_logs(self, peer_id: str, client: PeerClient, report: pb.FederationSyncResponse | None = None) -> None:
        """Asks the peer for each job's lines after its cursor, page by page, until the peer has no
        more; a job whose peer says it is over with nothing left (or no longer knows it) is done.

        A job the sync `report` names with its last line's seq at or before the cursor has nothing
        to fetch as of that report: it is not asked about (and is done if the report says it is
        over), so a burst of jobs that print little costs the peer no call per job each sync."""
        heads = dict(report.log_heads) if report is not None and report.reports_log_heads else {}
        over = {s.job.job_id for s in report.jobs if s.job.state in _TERMINAL} if heads and report else set()
        for target in self.store.log_targets(peer_id):
            job_id, cursor = target.job_id, target.after_seq
            head = heads.get(job_id)
            if head is not None and head <= cursor:
                if job_id in over:
                    self.store.append_relayed_logs(job_id, [], cursor, complete=True)
                continue
            while True:
                try:
                    resp = client.fetch_logs(job_id, cursor)
                except NotFound:
                    self.store.append_relayed_logs(job_id, [], cursor, complete=True)
                    break
                if resp.lines or resp.job_finished:
                    self.store.append_relayed_logs(job_id, list(resp.lines), resp.next_seq, complete=resp.job_finished)
                cursor = resp.next_seq
                if resp.job_finished or not resp.lines:
                    break

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
