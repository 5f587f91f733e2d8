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
  best fit (least left over of what the peer reported), then spread (fewer handoffs in flight to
  that peer, then a stable per-job hash), then peer id. Best fit is judged against the reported
  capacity, not the in-pass remainder nor the ledger's reservations, because every promotion made
  since the last report is made against the same stale observation: spreading a burst across peers
  that reported the same room limits how far any one of them is over-promised, and lets them admit
  it side by side. (Judged net of reservations, the peer that took the last job always looked the
  tightest, and a burst arriving one job per pass packed onto one peer.) A backend with no availability block is matched on shape alone and
  ranks after every backend with a metric; a peer that reports no band split reclaims nothing;
- unreachable peers host nothing; a pin confines a job to its peer; a job that fits nowhere is
  skipped, never blocking the jobs behind it; each peer has at most `max_per_peer` handoffs in
  flight (promoted and not yet accepted there), counting those of earlier passes, so a pass
  promotes only into the slots that the peer's acceptances have freed.

Why an in-flight cap, not a per-pass one. A cap per pass both throttles and fails to protect: a
burst moves at `max_per_peer` per peer per tick however fast the peers accept, while a peer that
stops answering is sent another `max_per_peer` every tick. Counting what is still unaccepted bounds
what any peer holds undelivered at `max_per_peer`, and lets the next pass (the shell wakes the tick
when a slot frees) refill at the pace the peer admits.

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
from collections.abc import Iterable, Mapping, Sequence
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
_INF = float("inf")


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
    `prefix[i] - spent`: free + held below it − reserved − taken this pass.
    """

    __slots__ = ("prefix", "spent", "epoch")

    def __init__(self, availability: Availability, token: str, reserved: float):
        total = max(0.0, float(availability.amounts.get(token, 0.0)))
        prefix = [total]
        for band in _RECLAIM_ORDER:
            total += max(0.0, float(availability.held(band, token)))
            prefix.append(total)
        self.prefix = prefix
        self.spent = reserved
        self.epoch = availability.observation_epoch_ms


@dataclass(frozen=True, slots=True)
class _Entry:
    """A backend a shape may go to: where it is, how it ranks among equals, and its pool (None:
    matched on shape alone)."""

    peer_index: int
    peer_id: str
    backend_id: str
    salt: int
    token: str
    pool: _TokenPool | None


@dataclass(frozen=True, slots=True)
class _Shape:
    """What the pass needs of a distinct (resources, replicas, constraints, pin)."""

    amount: float  # the gate's amount; 0 for a job without a gate
    gated: bool
    entries: tuple[_Entry, ...]  # the reachable backends whose attributes host the shape


class _Pass:
    """The mutable state of one placement pass: capacity pools, per-peer counts, shapes seen."""

    def __init__(
        self,
        peers: Sequence[PeerSnapshot],
        ledger: ReservationLedger,
        max_per_peer: int,
        in_flight: Mapping[str, int],
    ):
        self.ledger = ledger
        self.max_per_peer = max_per_peer
        self.peers = tuple(peers)
        self.peer_by_name = {p.peer_id.lower(): i for i, p in enumerate(self.peers)}
        self.reachable = [i for i, p in enumerate(self.peers) if p.reachable]
        # Handoffs still unaccepted from earlier passes occupy their peer's slots.
        self.placed = [max(0, in_flight.get(p.peer_id, 0)) for p in self.peers]
        self.open_peers = sum(1 for i in self.reachable if self.placed[i] < max_per_peer)
        self._salts: dict[tuple[int, str], int] = {}
        self._pools: dict[tuple[int, str, str], _TokenPool] = {}
        self._shapes: dict[tuple, _Shape] = {}
        self._live: dict[tuple[int, Band], list[_Entry]] = {}

    def shape_of(self, job: QueuedJob) -> _Shape:
        key = (job.resources, job.replicas, job.constraints, job.pinned_peer, job.excluded_peers)
        shape = self._shapes.get(key)
        if shape is None:
            shape = self._shapes[key] = self._build_shape(job)
        return shape

    def _build_shape(self, job: QueuedJob) -> _Shape:
        gate = capacity_gate(job.resources, job.replicas)
        routing = routing_constraints(job.resources, job.constraints)
        entries = []
        for peer_index in self._peers_for(job):
            peer = self.peers[peer_index]
            for backend in peer.backends:
                if peer_backend_hosts(backend, routing):
                    entry = self._entry(peer_index, backend, gate)
                    if entry is not None:
                        entries.append(entry)
        return _Shape(float(gate.amount) if gate else 0.0, gate is not None, tuple(entries))

    def _peers_for(self, job: QueuedJob) -> list[int]:
        """The peers a job may go to: the reachable ones it was not withdrawn from, or only its pinned peer."""
        pin = job.pinned_peer or constraint_value(job.constraints, "cluster")
        if pin is None:
            if job.excluded_peers:
                return [i for i in self.reachable if self.peers[i].peer_id not in job.excluded_peers]
            return self.reachable
        index = self.peer_by_name.get(pin.lower())
        return [index] if index is not None and self.peers[index].reachable else []

    def _entry(self, peer_index: int, backend: PeerBackend, gate: Gate | None) -> _Entry | None:
        peer_id = self.peers[peer_index].peer_id
        salt_key = (peer_index, backend.backend_id)
        salt = self._salts.get(salt_key)
        if salt is None:
            salt = self._salts[salt_key] = _stable_hash(f"{peer_id}/{backend.backend_id}")
        token = gate.token_on(backend) if gate is not None else ""
        if gate is None or backend.availability is None:
            return _Entry(peer_index, peer_id, backend.backend_id, salt, token, None)
        if not token:
            return None  # a metric backend that cannot say how much of this request is free
        return _Entry(peer_index, peer_id, backend.backend_id, salt, token, self._pool(peer_index, backend, token))

    def _pool(self, peer_index: int, backend: PeerBackend, token: str) -> _TokenPool:
        key = (peer_index, backend.backend_id, token)
        pool = self._pools.get(key)
        if pool is None:
            availability = backend.availability
            assert availability is not None
            reserved = self.ledger.reserved(
                self.peers[peer_index].peer_id, backend.backend_id, token, availability.observation_epoch_ms
            )
            pool = self._pools[key] = _TokenPool(availability, token, reserved)
        return pool

    def live(self, shape: _Shape, band: Band) -> list[_Entry]:
        """The backends still open to `shape` at `band` in this pass (shrinks as they fill)."""
        key = (id(shape), band)
        entries = self._live.get(key)
        if entries is None:
            entries = self._live[key] = list(shape.entries)
        return entries

    def record(self, peer_index: int) -> None:
        self.placed[peer_index] += 1
        if self.placed[peer_index] == self.max_per_peer:
            self.open_peers -= 1


# --- choosing a backend -------------------------------------------------------------------------


def _best_entry(state: _Pass, job: QueuedJob, shape: _Shape, live: list[_Entry]) -> tuple[_Entry, float] | None:
    """The best backend for `job` and what it would reclaim there, or None when none fits.

    Lower is better on, in turn: the amount preempted (0 when idle capacity suffices; infinite for
    a gated job on a backend without a metric, which therefore ranks after every metric backend),
    the slack left of what the peer reported, handoffs in flight to the peer, the per-job hash,
    then peer id and backend id. `live` holds the backends still open to this shape and band; the
    ones found full are dropped from it for good, since within a pass capacity only shrinks and caps
    only fill. This is the pass's inner loop: one loop, scalar comparisons, no allocation per entry.
    """
    job_hash = _stable_hash(job.job_id)
    placed, cap = state.placed, state.max_per_peer
    reach, amount = _REACH[job.band], shape.amount
    unmetered = _INF if shape.gated else 0.0
    best: _Entry | None = None
    b_reclaimed = b_slack = 0.0
    b_load = b_hash = 0
    closed: list[int] = []
    for position, entry in enumerate(live):
        load = placed[entry.peer_index]
        if load >= cap:
            closed.append(position)
            continue
        pool = entry.pool
        if pool is None:
            reclaimed, slack = unmetered, 0.0
        else:
            prefix, spent = pool.prefix, pool.spent
            if prefix[reach] - spent < amount:
                closed.append(position)
                continue
            idle = prefix[0] - spent
            if idle >= amount:
                reclaimed, slack = 0.0, prefix[0] - amount
            else:
                reclaimed, slack = amount - max(idle, 0.0), prefix[reach] - amount
        if best is not None:
            if reclaimed != b_reclaimed:
                if reclaimed > b_reclaimed:
                    continue
            elif slack != b_slack:
                if slack > b_slack:
                    continue
            elif load != b_load:
                if load > b_load:
                    continue
            else:
                spread = job_hash ^ entry.salt
                if spread > b_hash or (
                    spread == b_hash and (entry.peer_id, entry.backend_id) > (best.peer_id, best.backend_id)
                ):
                    continue
        best, b_reclaimed, b_slack, b_load, b_hash = entry, reclaimed, slack, load, job_hash ^ entry.salt
    for position in reversed(closed):
        del live[position]
    if best is None:
        return None
    return best, (b_reclaimed if b_reclaimed != _INF else 0.0)


def _promote(state: _Pass, job: QueuedJob, shape: _Shape, entry: _Entry, reclaimed: float) -> Promotion:
    """Takes the draw from the pass's capacity and returns the promotion."""
    state.record(entry.peer_index)
    epoch = None
    if entry.pool is not None:
        entry.pool.spent += shape.amount
        epoch = entry.pool.epoch
    return Promotion(
        job_id=job.job_id,
        peer_id=entry.peer_id,
        backend_id=entry.backend_id,
        token=entry.token,
        amount=shape.amount,
        reclaimed=reclaimed,
        observation_epoch_ms=epoch,
    )


# --- the pass -----------------------------------------------------------------------------------

_QUEUE_ORDER = attrgetter("band", "submitted_ms", "job_id")


def assign_queued(
    candidates: Iterable[QueuedJob],
    peers: Sequence[PeerSnapshot],
    ledger: ReservationLedger,
    max_per_peer: int,
    in_flight: Mapping[str, int] | None = None,
) -> tuple[Promotion, ...]:
    """The promotions of one tick: queued jobs (band, then age) onto the peer backends with room.

    `in_flight` counts, per peer, the handoffs promoted earlier and not yet accepted there; with
    them, a peer takes at most `max_per_peer` minus that many in this pass."""
    if max_per_peer <= 0:
        return ()
    state = _Pass(peers, ledger, max_per_peer, in_flight or {})
    promotions: list[Promotion] = []
    for job in sorted(candidates, key=_QUEUE_ORDER):
        if state.open_peers <= 0:
            break
        shape = state.shape_of(job)
        live = state.live(shape, job.band)
        if not live:
            # A job that fits nowhere says the same of every later job of its shape, band and
            # pin, so a long queue behind it costs one lookup per job.
            continue
        best = _best_entry(state, job, shape, live)
        if best is not None:
            promotions.append(_promote(state, job, shape, *best))
    return tuple(promotions)
