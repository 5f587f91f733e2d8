"""The frozen inputs and outputs of federation's pure decisions: what the router and the placement
pass read about peers and jobs, and what they return.

The shell (the controller's heartbeat cache, its submit handler and its control tick) builds these
from the database and the last capability heartbeats, calls the kernels, and applies what comes
back. Nothing here does I/O, so every federation decision can be tested with plain values.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from iris.core.availability import Availability
from iris.core.bands import Band
from iris.core.constraints import Constraint
from iris.core.errors import InvalidArgument
from iris.core.resources import Resources


def _frozen_attributes(attributes: Mapping[str, object]) -> Mapping[str, str]:
    return MappingProxyType({str(k).lower(): str(v) for k, v in attributes.items() if v is not None})


class HandoffState(str, enum.Enum):
    QUEUED_HANDOFF = "QUEUED_HANDOFF"
    PENDING_HANDOFF = "PENDING_HANDOFF"
    HANDED_OFF = "HANDED_OFF"
    HANDOFF_REJECTED = "HANDOFF_REJECTED"


class Direction(str, enum.Enum):
    SENT = "SENT"
    RECEIVED = "RECEIVED"


# --- peers, as the last capability heartbeat saw them ---------------------------------------------


@dataclass(frozen=True, slots=True)
class PeerBackend:
    """One backend a peer advertises: its kind, routing attributes and availability (None: no metric)."""

    backend_id: str
    kind: str
    attributes: Mapping[str, str] = field(default_factory=dict)
    availability: Availability | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "attributes", _frozen_attributes(self.attributes))


@dataclass(frozen=True, slots=True)
class PeerSnapshot:
    """A configured peer: whether its last probe answered, and the backends it last advertised."""

    peer_id: str
    reachable: bool
    backends: tuple[PeerBackend, ...] = ()
    last_contact_ms: int = 0


# --- jobs ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SubmittedJob:
    """What the router needs of a submission: its id (root or child), shape and constraints."""

    job_id: str
    resources: Resources
    constraints: tuple[Constraint, ...] = ()
    replicas: int = 1


@dataclass(frozen=True, slots=True)
class QueuedJob:
    """A job waiting in QUEUED_HANDOFF for a peer to report room for it."""

    job_id: str
    band: Band
    submitted_ms: int
    resources: Resources
    replicas: int = 1
    constraints: tuple[Constraint, ...] = ()
    pinned_peer: str | None = None
    excluded_peers: frozenset[str] = frozenset()  # peers it was withdrawn from: never handed to again
    pending_reason: str | None = None  # what its pending reason says now (None: not known)

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise InvalidArgument(f"job {self.job_id} asks for {self.replicas} replicas; ask for at least one")


@dataclass(frozen=True, slots=True)
class Submitter:
    """Who submitted a job. A `local_admin` identity (the operator, no token) never federates."""

    principal: str
    local_admin: bool = False
    credential: str = ""  # the id of the token it submitted with (see Identity.submitted_with)


# --- decisions ----------------------------------------------------------------------------------


class DispositionKind(str, enum.Enum):
    LOCAL = "LOCAL"
    QUEUE = "QUEUE"
    REJECT = "REJECT"


@dataclass(frozen=True, slots=True)
class Disposition:
    """Where a submission goes: run here, queue for a peer (a pinned one, or whichever has room), or fail."""

    kind: DispositionKind
    peer_id: str | None = None
    reason: str = ""
    candidate_peers: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Promotion:
    """Hand queued job `job_id` to `backend_id` on `peer_id`.

    `amount` of `token` is what the job draws there (0 and '' for a job without a device gate, or a
    backend without a metric); `reclaimed` is the part of it that comes from work the peer holds at
    lower bands, i.e. what its scheduler will preempt. `observation_epoch_ms` is the heartbeat
    generation the decision was made against, which the ledger is charged under.
    """

    job_id: str
    peer_id: str
    backend_id: str
    token: str = ""
    amount: float = 0.0
    reclaimed: float = 0.0
    observation_epoch_ms: int | None = None

    @property
    def reclaims(self) -> bool:
        return self.reclaimed > 0


@dataclass(frozen=True, slots=True)
class PendingDelivery:
    """A promoted job waiting to be delivered to its peer; a cancelled one is never delivered."""

    job_id: str
    peer_id: str
    cancelled: bool


@dataclass(frozen=True, slots=True)
class PendingCancel:
    """A handed-off job whose cancel (intent `version`) the peer has not confirmed yet; `nonce`
    names the run delivered there, which the stop names too."""

    job_id: str
    peer_id: str
    version: int
    nonce: str = ""


@dataclass(frozen=True, slots=True)
class Withdrawal:
    """A handed-off job being withdrawn from `peer_id` (it cannot place it there), and why;
    `nonce` names the run delivered there."""

    job_id: str
    peer_id: str
    reason: str
    nonce: str = ""


@dataclass(frozen=True, slots=True)
class LogTarget:
    """A handed-off job whose logs are relayed from its peer, after the peer's log seq `after_seq`."""

    job_id: str
    after_seq: int


@dataclass(frozen=True, slots=True)
class SyncBatch:
    """What a peer reports to one requester in a sync: jobs to report in full, jobs it no longer
    holds (tombstones), the cursor to ask from next, and whether this is a full resync."""

    changed: tuple[str, ...]
    tombstones: tuple[str, ...]
    cursor: int
    full: bool


@dataclass(frozen=True, slots=True)
class LocalBackendShape:
    """A local backend as the router sees it: per-worker capacity and attributes."""

    backend_id: str
    worker_capacity: Resources
    attributes: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "attributes", _frozen_attributes(self.attributes))
