"""Delivery of promoted jobs to their peers: which jobs go in which call, and what each answer
does to a job.

A burst of handoffs costs both sides per call (a connection's round trip, the peer's token check,
one write transaction and one wake-up of its tick), so the promoted jobs of a peer travel together:
one `HandOffJobs` call carries every job of that peer not yet in a call (up to
`MAX_JOBS_PER_CALL`, at most `MAX_BYTES_PER_CALL` of requests and `VALUES_PER_CALL` values unless
one job alone is larger: a peer refuses a whole body of more than `MAX_VALUES` values, and every job
in it would fail with that refusal),
and the peer admits or refuses each on its own. Calls to different peers run side by side, at most
`CALLS_PER_PEER` open per peer, so jobs promoted while a call is out go in the next one instead of
waiting for it. A peer that does not serve `HandOffJobs` (an older version) gets one `LaunchJob`
per job instead, as before.

Exactly once: every job keeps its id and nonce across calls and retries, and the peer dedups on
them, so a call whose answer is lost is simply made again. A job is in at most one call at a time,
and a cancel or withdrawal of it waits until its call has returned (`is_open`), so the peer never
sees a stop before the delivery it would have to stop.

What an answer does (`settle`): ALREADY_EXISTS, PERMISSION_DENIED and INVALID_ARGUMENT are the
peer's considered refusal of this job, and re-driving would only repeat it, so the job fails with
the peer's message. UNAUTHENTICATED is not about the job but about this cluster's credentials (a
key not yet rolled out, a clock step, a proxy's 401): it heals without anyone touching the job, so
the job stays pending with the cause as its reason and is re-driven with back-off (1 s doubling to
a minute). Any other failure (transport, a peer that cannot serve now) is re-driven after a short
wait.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from typing import TYPE_CHECKING, Protocol

from connectrpc.errors import ConnectError
from google.protobuf.message import DecodeError

from iris.core import spans
from iris.core.errors import AlreadyExists, InvalidArgument, IrisError, PermissionDenied, Unauthenticated
from iris.federation.model import PendingDelivery
from iris.federation.peer import NotServed, PeerClient
from iris.federation.reasons import credentials_refused_reason
from iris.rpc.request_codecs import MAX_VALUES, count_fields

if TYPE_CHECKING:
    from iris.rpc import controller_pb2 as pb

log = logging.getLogger("iris.federation")

MIN_DELIVERY_BACKOFF_S = 1.0
MAX_DELIVERY_BACKOFF_S = 60.0
# Calls open to one peer at once. With only two, jobs the tick promoted into the slots of a peer
# whose two calls were out (a busy peer answers in tens of ms) sat promoted and unsent, holding
# slots of the per-peer cap, until a call came back; the cap (`max_per_peer`) bounds what a peer
# holds unaccepted either way. Measured with bench/federation_e2e.py on a loaded 2-core host,
# three rounds each one after the other: 2 calls 121, 168, 116 jobs/s; 4 calls 189, 153, 133.
CALLS_PER_PEER = 4
MAX_JOBS_PER_CALL = 64
MAX_BYTES_PER_CALL = 8 * 1024**2  # requests carry workspaces inline; a larger single job goes alone
VALUES_PER_CALL = MAX_VALUES // 2  # fields of the requests of one call, counted as the peer counts them
_FINAL = (AlreadyExists, PermissionDenied, InvalidArgument)


class DeliveryStore(Protocol):
    """What delivery needs of the controller's database."""

    def pending_deliveries(self) -> list[PendingDelivery]: ...
    # The request of each job whose delivery may start (not cancelled since it was read), its start
    # recorded in the same transaction.
    def begin_deliveries(self, job_ids: Sequence[str]) -> dict[str, pb.LaunchJobRequest]: ...
    def mark_handed_off(self, job_ids: Sequence[str]) -> None: ...
    def mark_rejected(self, job_id: str, message: str) -> None: ...
    def note_pending_reason(self, job_id: str, reason: str) -> None: ...


def batches(requests: Sequence[tuple[str, pb.LaunchJobRequest]]) -> list[list[tuple[str, pb.LaunchJobRequest]]]:
    """Splits one peer's requests into calls of at most `MAX_JOBS_PER_CALL` jobs,
    `MAX_BYTES_PER_CALL` bytes and `VALUES_PER_CALL` values (a job larger than that alone makes a
    call of its own), in order."""
    out: list[list[tuple[str, pb.LaunchJobRequest]]] = []
    size = values = 0
    for item in requests:
        n = item[1].ByteSize()
        v = _values(item[1], n)
        if (
            not out
            or len(out[-1]) >= MAX_JOBS_PER_CALL
            or (out[-1] and (size + n > MAX_BYTES_PER_CALL or values + v > VALUES_PER_CALL))
        ):
            out.append([])
            size = values = 0
        out[-1].append(item)
        size += n
        values += v
    return out


def _values(request: pb.LaunchJobRequest, size: int) -> int:
    """How many values a peer counts in `request` within a call (its own field included): at most
    one per two bytes, so a small one is not looked into; a larger one (many env entries, say) is
    counted as the peer counts it."""
    if size < 2048:
        return size // 2 + 1
    data = request.SerializeToString()
    try:
        return MAX_VALUES - count_fields(data, 0, len(data), request.DESCRIPTOR, MAX_VALUES) + 1
    except (ConnectError, DecodeError):  # more than any call may hold: it goes alone, and the peer's answer says why
        return VALUES_PER_CALL


class Delivery:
    """The delivery loop and its bookkeeping: which jobs are in a call now, which wait to be
    re-driven, which peers take batches. `on_answer` runs after each call that reached a peer (the
    manager wakes the tick there, to promote into the slots acceptances freed)."""

    def __init__(
        self,
        clients: Mapping[str, PeerClient],
        store: DeliveryStore,
        retry_after_s: float,
        on_answer: Callable[[], None] = lambda: None,
    ):
        self.clients = clients
        self.store = store
        self.retry_after_s = retry_after_s
        self.on_answer = on_answer
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pool = ThreadPoolExecutor(
            max_workers=min(64, max(1, CALLS_PER_PEER * len(clients))), thread_name_prefix="federation-delivery"
        )
        self._delivering: dict[str, str] = {}  # job -> peer: in a call now (under _lock)
        self._calls: Counter[str] = Counter()  # peer -> calls open now (under _lock)
        # Deliveries to try again later: job -> (next try, monotonic s; last delay).
        self._backoff: dict[str, tuple[float, float]] = {}
        self._one_by_one: set[str] = set()  # peers that do not serve HandOffJobs
        # Set when a dispatch left promoted jobs without a call (their peer's calls were all open):
        # only then does a returning call wake the loop to start them.
        self._crowded = False
        self._watchers: dict[str, list[set[str]]] = {}  # peer -> sets collecting its acceptances (under _lock)

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="federation-delivery", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=15)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def wake(self) -> None:
        self._wake.set()

    def promoted(self, jobs: Sequence[PendingDelivery] | None = None) -> None:
        """Jobs were just promoted (`jobs`, when the caller knows them: then the promoted jobs are
        not read back): once the loop runs, their calls start from the caller's thread (the
        tick's) rather than after a switch to the loop's, which on a busy controller can wait a
        whole GIL interval per promotion round. Before the loop starts, only the flag is set."""
        if self._thread is None or self._stop.is_set():
            self._wake.set()
            return
        try:
            with spans.span("federation.dispatch"):
                self.dispatch(promoted=jobs)
        except Exception:
            log.exception("starting deliveries failed; the delivery loop retries")
            self._wake.set()

    @contextmanager
    def accepted_from_now(self, peer_id: str) -> Iterator[set[str]]:
        """A set that collects every job `peer_id` accepts from now until the block ends; a job
        is in it before its acceptance is recorded."""
        accepted: set[str] = set()
        with self._lock:
            self._watchers.setdefault(peer_id, []).append(accepted)
        try:
            yield accepted
        finally:
            with self._lock:
                self._watchers[peer_id].remove(accepted)

    def is_open(self, job_id: str) -> bool:
        """Whether a call carrying `job_id` is open now (a stop must wait until it returns)."""
        with self._lock:
            return job_id in self._delivering

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            # Cleared before the read: jobs left waiting for a call after it was read set it again.
            self._crowded = False
            try:
                with spans.span("federation.dispatch"):
                    self.dispatch()
            except Exception:
                log.exception("starting deliveries failed; retrying shortly")
            # Woken by a promotion or a returning call; the timeout re-drives failed deliveries.
            self._wake.wait(min(self.retry_after_s, MIN_DELIVERY_BACKOFF_S))

    # -- starting calls --------------------------------------------------------------------------

    def deliver(self) -> None:
        """Delivers every promoted job once now and waits for the answers: the loop's work, done in
        the caller's thread (tests, tools)."""
        tried: set[str] = set()
        while started := self.dispatch(tried):
            tried.update(started)
            wait(set(started.values()))

    def dispatch(
        self, skip: set[str] | frozenset[str] = frozenset(), promoted: Sequence[PendingDelivery] | None = None
    ) -> dict[str, Future]:
        """Starts calls for the promoted jobs that are not in one already (nor in `skip`, nor
        waiting out a back-off): per peer, one call carrying all of them while fewer than
        `CALLS_PER_PEER` are open (one call per job, up to that many, for a peer that takes no
        batches). `promoted`: only these jobs (just promoted); else every job awaiting delivery.
        Returns the call each started job is in."""
        now = time.monotonic()
        ready: dict[str, list[str]] = {}
        for delivery in self.store.pending_deliveries() if promoted is None else promoted:
            if delivery.cancelled or delivery.job_id in skip:
                continue  # cancelled before handoff: never delivered
            if delivery.peer_id not in self.clients:
                self.store.mark_rejected(delivery.job_id, f"peer {delivery.peer_id} is no longer configured")
                continue
            ready.setdefault(delivery.peer_id, []).append(delivery.job_id)
        started: dict[str, Future] = {}
        for peer_id, jobs in ready.items():
            with self._lock:
                # The back-off is read under the lock: a call that failed set it before it left
                # `_delivering`, so a job is never re-driven at once by a read from before.
                jobs = [
                    j
                    for j in jobs
                    if j not in self._delivering and not (j in self._backoff and now < self._backoff[j][0])
                ]
                calls = []
                while jobs and self._calls[peer_id] < CALLS_PER_PEER:
                    take = 1 if peer_id in self._one_by_one else MAX_JOBS_PER_CALL
                    calls.append(jobs[:take])
                    jobs = jobs[take:]
                    self._calls[peer_id] += 1
                    self._delivering.update((j, peer_id) for j in calls[-1])
                if jobs:
                    self._crowded = True  # a returning call frees a slot for them: it wakes the loop
            for call in calls:
                try:
                    future = self._pool.submit(self._deliver_call, peer_id, call)
                except RuntimeError:  # shutting down
                    with self._lock:
                        self._calls[peer_id] -= 1
                        for j in call:
                            self._delivering.pop(j, None)
                    return started
                started.update((j, future) for j in call)
        return started

    def _deliver_call(self, peer_id: str, job_ids: list[str]) -> None:
        called = False
        try:
            called = self._deliver(peer_id, job_ids)
        except Exception:
            log.exception("delivery of %d jobs to %s failed; they will be re-driven", len(job_ids), peer_id)
        finally:
            with self._lock:
                self._calls[peer_id] -= 1
                for j in job_ids:
                    self._delivering.pop(j, None)
                again = self._crowded or any(j in self._backoff for j in job_ids)
        if called:
            if again:  # otherwise the loop would read the promoted jobs only to find each in a call
                self._wake.set()
            self.on_answer()

    def _deliver(self, peer_id: str, job_ids: list[str]) -> bool:
        """Delivers `job_ids` to `peer_id` and records each answer; False when it made no call (all
        were cancelled, or delivered, since they were read)."""
        with spans.span("federation.deliver.start"):
            requests = self.store.begin_deliveries(job_ids)  # a cancel since the read wins
        if not requests:
            return False
        client = self.clients[peer_id]
        for call in batches([(j, requests[j]) for j in job_ids if j in requests]):
            answers: dict[str, Exception | None]
            with spans.span("federation.deliver.call"):
                answers = self._call(peer_id, client, call)
            with spans.span("federation.deliver.record"):
                self.settle(peer_id, answers)
        return True

    def _call(self, peer_id: str, client: PeerClient, call: list[tuple[str, pb.LaunchJobRequest]]):
        """Each job's answer: None when admitted, else the error it was refused or failed with."""
        if peer_id not in self._one_by_one:
            try:
                refusals: Sequence[Exception | None] = client.hand_off_jobs([req for _, req in call])
                return {job: refusal for (job, _), refusal in zip(call, refusals, strict=True)}
            except NotServed:
                log.info("peer %s takes no batched handoffs; delivering to it one job per call", peer_id)
                self._one_by_one.add(peer_id)
            except Exception as exc:  # the call as a whole: the same for every job in it
                return dict.fromkeys((job for job, _ in call), exc)
        answers: dict[str, Exception | None] = {}
        for job, req in call:
            try:
                client.launch_job(req)
                answers[job] = None
            except Exception as exc:
                answers[job] = exc
        return answers

    # -- what an answer does to a job --------------------------------------------------------------

    def settle(self, peer_id: str, answers: Mapping[str, Exception | None]) -> None:
        """Records the answer for each job of one call (see the module's docstring)."""
        accepted = []
        for job_id, error in answers.items():
            retry = self._backoff.get(job_id)
            if error is None:
                self._backoff.pop(job_id, None)
                accepted.append(job_id)
            elif isinstance(error, Unauthenticated):
                delay = min(2 * retry[1], MAX_DELIVERY_BACKOFF_S) if retry else MIN_DELIVERY_BACKOFF_S
                self._backoff[job_id] = (time.monotonic() + delay, delay)
                log.warning(
                    "peer %s refused our credentials delivering %s; retrying in %gs: %s", peer_id, job_id, delay, error
                )
                message = error.message.removeprefix(f"peer {peer_id}: ")
                self.store.note_pending_reason(job_id, credentials_refused_reason(peer_id, message, delay))
            elif isinstance(error, _FINAL):
                self._backoff.pop(job_id, None)
                self.store.mark_rejected(job_id, error.message)
            else:  # transport or peer trouble: re-driven with the same id and nonce
                delay = min(self.retry_after_s, MIN_DELIVERY_BACKOFF_S)
                self._backoff[job_id] = (time.monotonic() + delay, retry[1] if retry else 0.0)
                words = error.message if isinstance(error, IrisError) else repr(error)
                log.info("delivery of %s to %s failed, will retry: %s", job_id, peer_id, words)
        if accepted:
            with self._lock:  # before the record: a sync's fold that sees it knows it is new
                for watcher in self._watchers.get(peer_id, ()):
                    watcher.update(accepted)
            self.store.mark_handed_off(accepted)
