"""The client a controller holds for one peer: the calls federation makes, with short timeouts,
translating between the peer's messages and federation's frozen types.

Transport failures surface as `Unavailable`, so the manager treats every network fault alike:
mark the peer unreachable, keep the last known state, try again on the next cycle.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from iris.core import metrics
from iris.core.availability import Availability, BandHolding
from iris.core.bands import Band
from iris.core.errors import (
    FailedPrecondition,
    InvalidArgument,
    IrisError,
    Unauthenticated,
    Unavailable,
    error_for_code,
)
from iris.federation.ids import received_job_id, sync_for_parent
from iris.federation.model import PeerBackend
from iris.rpc import controller_pb2 as pb
from iris.rpc.transport import ClientTls, ConnectTransport

if TYPE_CHECKING:
    from google.protobuf.message import Message

_M = TypeVar("_M", bound="Message")

# How long one minted token signs calls to the peer. The peer remembers a token it verified for up
# to a minute, so reusing one skips the signature check (and the signing here) on nearly every
# call; well inside the token's own lifetime (`PEER_TOKEN_TTL_S`), so a reused token never expires
# in flight.
TOKEN_REUSE_S = 30.0
READABLE_AVAILABILITY_VERSIONS = (1, 2)  # ours (lowercase band labels) and the upstream one
# The most pages and backends one peer's heartbeat reads (a page holds up to 1,000): a peer, buggy
# or hostile, that kept sending pages would otherwise hold the heartbeat of every peer, and the
# federation loop behind it, forever, its memory growing.
MAX_PEER_PAGES = 10
MAX_PEER_BACKENDS = 10_000
_UPSTREAM_BAND_PREFIX = "PRIORITY_BAND_"


class UnreadableAvailability(FailedPrecondition):
    """The peer answered, but an availability block it sent cannot be read here."""


def _wire_band(name: str) -> Band:
    """A band as either wire format names it: ours (`batch`) or upstream's (`PRIORITY_BAND_BATCH`)."""
    label = name[len(_UPSTREAM_BAND_PREFIX) :] if name.upper().startswith(_UPSTREAM_BAND_PREFIX) else name
    if not label.strip():
        raise InvalidArgument(f"band {name!r} is empty")
    return Band.parse(label)


def availability_from_proto(m: pb.Availability) -> Availability:
    version = m.version or 1
    if version not in READABLE_AVAILABILITY_VERSIONS:
        raise InvalidArgument(
            f"availability block version {version} is not understood (this cluster reads versions"
            f" {', '.join(map(str, READABLE_AVAILABILITY_VERSIONS))})"
        )
    return Availability(
        observation_epoch_ms=m.observation_epoch_ms,
        amounts=dict(m.amounts),
        total_amounts=dict(m.total_amounts),
        held_by_band=tuple(BandHolding(_wire_band(h.band), dict(h.amounts)) for h in m.held_by_band),
        version=version,
    )


def backend_from_proto(m: pb.BackendInfo) -> PeerBackend:
    try:
        avail = availability_from_proto(m.availability) if m.HasField("availability") else None
    except InvalidArgument as exc:
        raise UnreadableAvailability(
            f"its availability block for backend {m.id} cannot be read: {exc.message}; upgrade one side so"
            " both speak a common version"
        ) from None
    return PeerBackend(m.id, m.kind, dict(m.attributes), avail)


class _Unreachable(Unavailable):
    """The peer did not answer at all (as opposed to answering UNAVAILABLE)."""


class NotServed(Unavailable):
    """The peer does not serve the method at all (a peer from before it was added)."""


class PeerClient:
    """Calls one peer on behalf of cluster `requester`, over the Connect transport the SDK uses.
    Callers speak this cluster's job ids; the client names the peer's copy of a job by the id the
    peer filed it under (`ids`), and maps the ids in a sync answer back."""

    def __init__(
        self,
        peer_id: str,
        address: str,
        token_source: Callable[[], str | None] = lambda: None,
        timeout_s: float = 5.0,
        requester: str = "",
        tls: ClientTls | None = None,
    ):
        """`tls`: how an https peer's certificate is checked, and the certificate presented to it."""
        self.peer_id = peer_id
        self.address = address.rstrip("/")
        self.requester = requester
        self._token_source = token_source
        # A peer is called with its federation token, never as whoever runs this process.
        self._transport = ConnectTransport(
            self.address, timeout=timeout_s, on_unreachable=self._unreachable, local_socket=False, tls=tls
        )
        self._token: tuple[str | None, float] | None = None  # (token, monotonic time it was minted)
        self._token_lock = threading.Lock()

    def _current_token(self) -> str | None:
        """The token to sign the next call with: one minted at most `TOKEN_REUSE_S` ago."""
        now = time.monotonic()
        with self._token_lock:
            if self._token is None or now - self._token[1] >= TOKEN_REUSE_S:
                self._token = (self._token_source(), now)
            return self._token[0]

    def _unreachable(self, url: str, reason: str) -> Unavailable:
        return _Unreachable(f"peer {self.peer_id} at {self.address} is unreachable: {reason}")

    def _call(self, method: str, request: Message, response_type: type[_M]) -> _M:
        try:
            answer = self._transport.call(method, request, response_type, token=self._current_token())
        except _Unreachable:
            metrics.FEDERATION_CALLS.labels(self.peer_id, method, "unreachable").inc()
            raise
        except IrisError as exc:
            metrics.FEDERATION_CALLS.labels(self.peer_id, method, exc.code).inc()
            if isinstance(exc, Unauthenticated):
                with self._token_lock:
                    self._token = None  # refused (a clock step, a key rolled): the next call mints anew
            if exc.code == "unimplemented":
                raise NotServed(f"peer {self.peer_id} at {self.address} does not serve {method}") from None
            raise self.refusal(exc.code, exc.message) from None
        metrics.FEDERATION_CALLS.labels(self.peer_id, method, "ok").inc()
        return answer

    def refusal(self, code: str, message: str) -> IrisError:
        """The error a refusal by the peer is raised as: a typed refusal keeps its type; anything
        else (unavailable, internal, a code with no type here) means the peer cannot serve now, so
        the manager retries it next cycle."""
        exc = error_for_code(code, message)
        if type(exc) is not IrisError and not isinstance(exc, Unavailable):
            return type(exc)(f"peer {self.peer_id}: {message}")
        return Unavailable(f"peer {self.peer_id} at {self.address}: {code}: {message}")

    def list_backends(self) -> tuple[str, tuple[PeerBackend, ...]]:
        """The peer's name and every backend it reports (following its pages; an older peer sends one)."""
        resp = self._call("ListBackends", pb.ListBackendsRequest(), pb.ListBackendsResponse)
        backends = [backend_from_proto(b) for b in resp.backends]
        tokens = {""}
        while resp.next_page_token and resp.backends:
            if len(tokens) >= MAX_PEER_PAGES or len(backends) > MAX_PEER_BACKENDS or resp.next_page_token in tokens:
                raise UnreadableAvailability(
                    f"peer {self.peer_id} sends its backends without end (past {MAX_PEER_PAGES} pages or"
                    f" {MAX_PEER_BACKENDS} backends, or a page token again); no work goes to it until it"
                    " answers with a finite list"
                )
            tokens.add(resp.next_page_token)
            request = pb.ListBackendsRequest(page_token=resp.next_page_token)
            resp = self._call("ListBackends", request, pb.ListBackendsResponse)
            backends.extend(backend_from_proto(b) for b in resp.backends)
        return resp.cluster, tuple(backends)

    def launch_job(self, request: pb.LaunchJobRequest) -> pb.LaunchJobResponse:
        return self._call("LaunchJob", request, pb.LaunchJobResponse)

    def hand_off_jobs(self, requests: Sequence[pb.LaunchJobRequest]) -> list[IrisError | None]:
        """Hands the peer several jobs in one call; per job, in order, None when the peer admitted
        it or the error it was refused with (as `launch_job` would raise it). NotServed when the
        peer predates the call; any failure of the call as a whole raises as `launch_job` would."""
        resp = self._call("HandOffJobs", pb.HandOffJobsRequest(jobs=requests), pb.HandOffJobsResponse)
        if len(resp.outcomes) != len(requests):
            raise Unavailable(
                f"peer {self.peer_id} answered {len(resp.outcomes)} outcomes for {len(requests)} handoffs"
            )
        return [self.refusal(o.error_code, o.error_message) if o.error_code else None for o in resp.outcomes]

    def terminate_job(self, job_id: str, reason: str, nonce: str = "") -> pb.TerminateJobResponse:
        """Stops run `nonce` of the job there. NotFound means the peer does not hold that run and
        will refuse a handoff of it that arrives later, so the stop is satisfied either way."""
        request = pb.TerminateJobRequest(job_id=received_job_id(self.requester, job_id), reason=reason, nonce=nonce)
        return self._call("TerminateJob", request, pb.TerminateJobResponse)

    def federation_sync(self, cursor: int, job_ids: Sequence[str] = ()) -> pb.FederationSyncResponse:
        """The peer's changes since `cursor`, or (with `job_ids`, this cluster's ids) a report on
        exactly those jobs; every id in the answer is mapped back to this cluster's."""
        request = pb.FederationSyncRequest(
            requester=self.requester, cursor=cursor, job_ids=[received_job_id(self.requester, j) for j in job_ids]
        )
        return sync_for_parent(self.requester, self._call("FederationSync", request, pb.FederationSyncResponse))

    def fetch_logs(self, job_id: str, after_seq: int, limit: int = 5000) -> pb.FetchLogsResponse:
        remote = received_job_id(self.requester, job_id)
        request = pb.FetchLogsRequest(job_id=remote, task_index=-1, after_seq=after_seq, limit=limit)
        return self._call("FetchLogs", request, pb.FetchLogsResponse)

    def close(self) -> None:
        self._transport.close()
