"""Decides, each control tick, which queued jobs go to which peer backend: the placement pass and
the reservation ledger that keeps it honest between heartbeats.

`assign_queued` walks the queue in band-then-age order against the peers' last availability and
returns promotions (job → peer, backend). It is pure: it reads the ledger and never writes it. The
shell applies each promotion as a conditional update, and charges the ledger only for the ones that
were confirmed, so a promotion that a racing cancel beat never holds capacity.

The rules (DESIGN §6), each one a small function below:

- a job's device request is a gate, `ge(available:<token>, replicas × count)`, judged on ONE backend:
  a job pins to a backend, so free capacity is never summed across backends. A CPU job has no gate;
- a job of band B can reach the backend's free amount plus what work of bands strictly below B holds
  there (what the peer's scheduler would preempt), minus the ledger's reservations, minus what
  earlier candidates of this pass took. Every draw spends idle capacity first and then reclaims from
  the lowest band upward, so one running total per (backend, token) answers all bands at once;
- among the backends that fit: one that preempts nothing, then the one that preempts least, then the
  best fit (least left over of what the peer reported), then spread (fewer promotions to that peer in
  this pass, then a stable per-job hash), then peer id. Best fit is judged against the reported
  capacity, not the in-pass remainder, because every promotion of a pass is made against the same
  stale observation: spreading a burst across peers that reported the same room limits how far any
  one of them is over-promised. A backend with no availability block is matched on shape alone and
  ranks after every backend with a metric; a peer that reports no band split reclaims nothing;
- unreachable peers host nothing; a pin confines a job to its peer; a job that fits nowhere is
  skipped, never blocking the jobs behind it; each peer takes at most `max_per_peer` per pass.

Why a ledger keyed on the heartbeat generation, not a per-tick decrement. The tick runs every second
and on every submit, the heartbeat every 30 s, so one advertised number is read by many ticks. Left
alone, each tick would re-spend it and a burst of submissions would pile onto one peer. Decrementing
the cached number per tick does not work either: nothing says when the peer's next report already
counts the jobs we sent (the number would be subtracted twice), or when a report predates them (it
would be trusted too early). Keying reservations on the report's `observation_epoch_ms` makes that
exact: reservations charged against one observation accumulate while that observation is all we
have (effective = advertised − reserved), and a strictly newer observation, whose numbers were
measured after our promotions, replaces them wholesale. Over-assignment is thereby bounded to one
observation's free capacity per backend; the peer's own scheduler is the backstop.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from operator import attrgetter

from iris.core.availability import Availability
from iris.core.bands import Band
from iris.core.constraints import constraint_value
from iris.federation.model import PeerBackend, PeerSnapshot, Promotion, QueuedJob
from iris.federation.shape import Gate, capacity_gate, peer_backend_hosts, routing_constraints

# Bands from the lowest priority upward: the order in which held capacity is reclaimed.
_RECLAIM_ORDER: tuple[Band, ...] = tuple(sorted(Band, key=lambda b: b.value, reverse=True))


def _reach_index(band: Band) -> int:
    """How many bands `band` may reclaim from (those it strictly outranks)."""
    return sum(1 for other in _RECLAIM_ORDER if band.outranks(other))


_REACH = {band: _reach_index(band) for band in Band}


def _stable_hash(text: str) -> int:
    """A hash that is the same in every process (`hash()` is salted per process)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


# --- the ledger ---------------------------------------------------------------------------------


class ReservationLedger:
    """Capacity promoted against each (peer, backend, token) since that backend's last observation.

    Owned by the shell; the pass only reads it. Charge it after a promotion's conditional update
    succeeds. Reservations recorded under an observation stay in force until a strictly newer one
    is seen; an equal or older observation (a repeated heartbeat, a reordered answer) keeps them.
    """

    def __init__(self) -> None:
        self._entries: dict[tuple[str, str, str], tuple[int, float]] = {}

    def reserved(self, peer_id: str, backend_id: str, token: str, observation_epoch_ms: int) -> float:
        """What is already promoted against this backend's `token`, as seen from this observation."""
        entry = self._entries.get((peer_id, backend_id, token))
        if entry is None or observation_epoch_ms > entry[0]:
            return 0.0
        return entry[1]

    def charge(self, promotion: Promotion, amount: float | None = None, epoch_ms: int | None = None) -> None:
        """Records a confirmed promotion: `amount` (default: what it draws) under `epoch_ms`
        (default: the observation it was decided against). A backend without a metric, or a job
        without a gate, charges nothing."""
        amount = promotion.amount if amount is None else amount
        epoch = promotion.observation_epoch_ms if epoch_ms is None else epoch_ms
        if epoch is None or not promotion.token or amount <= 0:
            return
        key = (promotion.peer_id, promotion.backend_id, promotion.token)
        entry = self._entries.get(key)
        if entry is None or epoch > entry[0]:
            self._entries[key] = (epoch, float(amount))
        else:
            self._entries[key] = (entry[0], entry[1] + amount)

    def prune(self, peers: Iterable[PeerSnapshot]) -> None:
        """Forgets reservations a newer observation superseded, or whose backend is gone."""
        current: dict[tuple[str, str], int] = {}
        for peer in peers:
            for backend in peer.backends:
                if backend.availability is not None:
                    current[(peer.peer_id, backend.backend_id)] = backend.availability.observation_epoch_ms
        for key, (epoch, _) in list(self._entries.items()):
            seen = current.get(key[:2])
            if seen is None or seen > epoch:
                del self._entries[key]

    def __len__(self) -> int:
        return len(self._entries)


# --- per-backend capacity within one pass ---------------------------------------------------------


class _TokenPool:
    """One backend's capacity in one token during a pass: reach per band, and what is spent.

    `prefix[i]` is the free amount plus what the `i` lowest bands hold; `spent` starts at the
    ledger's reservation and grows with each promotion. Because every draw takes idle capacity
    first and then the lowest band upward, a band that may reclaim `i` bands can still reach
    `prefix[i] - spent`.
    """

    __slots__ = ("prefix", "spent", "reserved")

    def __init__(self, availability: Availability, token: str, reserved: float):
        total = max(0.0, float(availability.amounts.get(token, 0.0)))
        prefix = [total]
        for band in _RECLAIM_ORDER:
            total += max(0.0, float(availability.held(band, token)))
            prefix.append(total)
        self.prefix = prefix
        self.reserved = reserved
        self.spent = reserved

    def reach(self, band: Band) -> float:
        """Effective capacity for `band`: free + held below it − reserved − taken this pass."""
        return self.prefix[_REACH[band]] - self.spent

    def idle(self) -> float:
        return max(0.0, self.prefix[0] - self.spent)

    def reported_slack(self, band: Band, amount: float, preempts: bool) -> float:
        """What would be left of the reported capacity (less reservations), for best fit."""
        base = self.prefix[_REACH[band]] if preempts else self.prefix[0]
        return base - self.reserved - amount


@dataclass(slots=True)
class _Slot:
    """A reachable peer backend during one pass."""

    peer_index: int
    peer_id: str
    backend: PeerBackend
    salt: int
    pools: dict[str, _TokenPool]


@dataclass(frozen=True, slots=True)
class _Shape:
    """What the pass needs of a distinct (resources, replicas, constraints): gate, routing, pin."""

    gate: Gate | None
    slots: tuple[int, ...]  # indexes of the reachable backends whose attributes host the shape
    pin: str | None


class _Pass:
    """The mutable state of one placement pass: backends, per-peer counts, shapes seen."""

    def __init__(self, peers: Sequence[PeerSnapshot], ledger: ReservationLedger, max_per_peer: int):
        self.ledger = ledger
        self.max_per_peer = max_per_peer
        self.peer_ids = [p.peer_id for p in peers]
        self.peer_by_name = {p.peer_id.lower(): i for i, p in enumerate(peers)}
        self.placed = [0] * len(peers)
        self.open_peers = sum(1 for p in peers if p.reachable)
        self.slots: list[_Slot] = [
            _Slot(i, p.peer_id, b, _stable_hash(f"{p.peer_id}/{b.backend_id}"), {})
            for i, p in enumerate(peers)
            if p.reachable
            for b in p.backends
        ]
        self._shapes: dict[tuple, _Shape] = {}

    def shape_of(self, job: QueuedJob) -> _Shape:
        key = (job.resources, job.replicas, job.constraints, job.pinned_peer)
        shape = self._shapes.get(key)
        if shape is None:
            shape = self._shapes[key] = self._build_shape(job)
        return shape

    def _build_shape(self, job: QueuedJob) -> _Shape:
        routing = routing_constraints(job.resources, job.constraints)
        pin = job.pinned_peer or constraint_value(job.constraints, "cluster")
        pinned_index = self.peer_by_name.get(pin.lower(), -1) if pin else None
        slots = tuple(
            i
            for i, slot in enumerate(self.slots)
            if (pinned_index is None or slot.peer_index == pinned_index)
            and peer_backend_hosts(slot.backend, routing)
        )
        return _Shape(capacity_gate(job.resources, job.replicas), slots, pin)

    def pool(self, slot: _Slot, token: str) -> _TokenPool:
        pool = slot.pools.get(token)
        if pool is None:
            availability = slot.backend.availability
            assert availability is not None
            reserved = self.ledger.reserved(
                slot.peer_id, slot.backend.backend_id, token, availability.observation_epoch_ms
            )
            pool = slot.pools[token] = _TokenPool(availability, token, reserved)
        return pool

    def peer_full(self, peer_index: int) -> bool:
        return self.placed[peer_index] >= self.max_per_peer

    def record(self, slot: _Slot) -> None:
        self.placed[slot.peer_index] += 1
        if self.placed[slot.peer_index] == self.max_per_peer:
            self.open_peers -= 1


# --- ranking ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Option:
    """One backend that can take the job, with the draw it would make and its rank."""

    rank: tuple
    slot: _Slot
    token: str
    reclaimed: float
    pool: _TokenPool | None


def _metric_option(state: _Pass, slot: _Slot, job: QueuedJob, gate: Gate, job_hash: int) -> _Option | None:
    """The option on a backend with an availability block, or None when the gate does not fit."""
    token = gate.token_on(slot.backend)
    if not token:
        return None
    pool = state.pool(slot, token)
    if pool.reach(job.band) < gate.amount:
        return None
    reclaimed = max(0.0, gate.amount - pool.idle())
    preempts = reclaimed > 0
    rank = (
        False,
        preempts,
        reclaimed,
        pool.reported_slack(job.band, gate.amount, preempts),
        state.placed[slot.peer_index],
        job_hash ^ slot.salt,
        slot.peer_id,
        slot.backend.backend_id,
    )
    return _Option(rank, slot, token, reclaimed, pool)


def _shape_option(state: _Pass, slot: _Slot, gate: Gate | None, job_hash: int) -> _Option:
    """The option on a backend matched by shape alone (no gate, or no metric there)."""
    unmetered = gate is not None  # a gated job prefers every backend that has a metric
    token = gate.token_on(slot.backend) if gate is not None else ""
    rank = (
        unmetered,
        False,
        0.0,
        0.0,
        state.placed[slot.peer_index],
        job_hash ^ slot.salt,
        slot.peer_id,
        slot.backend.backend_id,
    )
    return _Option(rank, slot, token, 0.0, None)


def _best_option(state: _Pass, job: QueuedJob, shape: _Shape) -> _Option | None:
    job_hash = _stable_hash(job.job_id)
    best: _Option | None = None
    for index in shape.slots:
        slot = state.slots[index]
        if state.peer_full(slot.peer_index):
            continue
        if shape.gate is not None and slot.backend.availability is not None:
            option = _metric_option(state, slot, job, shape.gate, job_hash)
        else:
            option = _shape_option(state, slot, shape.gate, job_hash)
        if option is not None and (best is None or option.rank < best.rank):
            best = option
    return best


def _promote(state: _Pass, job: QueuedJob, shape: _Shape, option: _Option) -> Promotion:
    """Takes the option's draw from the pass's capacity and returns the promotion."""
    state.record(option.slot)
    amount = float(shape.gate.amount) if shape.gate is not None else 0.0
    epoch = None
    if option.pool is not None:
        option.pool.spent += amount
        availability = option.slot.backend.availability
        epoch = availability.observation_epoch_ms if availability is not None else None
    return Promotion(
        job_id=job.job_id,
        peer_id=option.slot.peer_id,
        backend_id=option.slot.backend.backend_id,
        token=option.token,
        amount=amount,
        reclaimed=option.reclaimed,
        observation_epoch_ms=epoch,
    )


# --- the pass -----------------------------------------------------------------------------------

_QUEUE_ORDER = attrgetter("band", "submitted_ms", "job_id")


def assign_queued(
    candidates: Iterable[QueuedJob],
    peers: Sequence[PeerSnapshot],
    ledger: ReservationLedger,
    max_per_peer: int,
) -> tuple[Promotion, ...]:
    """The promotions of one tick: queued jobs (band, then age) onto the peer backends with room."""
    if max_per_peer <= 0:
        return ()
    state = _Pass(peers, ledger, max_per_peer)
    # A job that fits nowhere says the same of every later job of its shape, band and pin: within a
    # pass capacity only shrinks and caps only fill. Remembering that keeps a long queue cheap.
    exhausted: set[tuple] = set()
    promotions: list[Promotion] = []
    for job in sorted(candidates, key=_QUEUE_ORDER):
        if state.open_peers <= 0:
            break
        shape = state.shape_of(job)
        dead_key = (id(shape), job.band)
        if dead_key in exhausted:
            continue
        option = _best_option(state, job, shape)
        if option is None:
            exhausted.add(dead_key)
            continue
        promotions.append(_promote(state, job, shape, option))
    return tuple(promotions)
