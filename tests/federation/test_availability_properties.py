"""Properties of the placement pass over random queues and peers, checked against a plain replay."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from iris.core.bands import Band
from iris.federation.availability import ReservationLedger, assign_queued
from iris.federation.model import PeerSnapshot, Promotion, QueuedJob
from tests.federation.federation_builders import EPOCH, availability, gpu, gpu_backend, job, peer

VARIANTS = ("h100", "gb200")
LOWEST_FIRST = (Band.BATCH, Band.INTERACTIVE, Band.PRODUCTION)


@st.composite
def peers_strategy(draw) -> list[PeerSnapshot]:
    peers = []
    for i in range(draw(st.integers(1, 4))):
        backends = []
        for b in range(draw(st.integers(1, 3))):
            variant = draw(st.sampled_from(VARIANTS))
            held = {band: {variant: draw(st.integers(0, 16))} for band in Band if draw(st.booleans())}
            avail = availability({variant: draw(st.integers(0, 24))}, held) if draw(st.integers(0, 5)) else None
            backends.append(gpu_backend(f"b{b}", variant, avail))
        peers.append(peer(f"p{i}", *backends, reachable=draw(st.integers(0, 6)) > 0))
    return peers


@st.composite
def queue_strategy(draw) -> list[QueuedJob]:
    return [
        job(
            f"/u/j{i}",
            gpu(draw(st.sampled_from(VARIANTS)), draw(st.sampled_from((1, 2, 4, 8)))),
            band=draw(st.sampled_from(list(Band))),
            submitted_ms=draw(st.integers(0, 50)),
            replicas=draw(st.integers(1, 3)),
            pin=draw(st.sampled_from((None, None, None, "p0"))),
        )
        for i in range(draw(st.integers(0, 25)))
    ]


def _levels(backend, token: str) -> list[float]:
    """Free, then free + held by the lowest band, and so on upward."""
    a = backend.availability
    levels = [float(a.amounts.get(token, 0.0))]
    for band in LOWEST_FIRST:
        levels.append(levels[-1] + a.held(band, token))
    return levels


def _reach(levels: list[float], band: Band, spent: float) -> float:
    return levels[sum(1 for other in LOWEST_FIRST if band.outranks(other))] - spent


@settings(max_examples=300, deadline=None)
@given(peers_strategy(), queue_strategy(), st.integers(1, 4), st.data())
def test_assign_random_queue_respects_capacity_caps_and_skips_only_what_fits_nowhere(peers, queue, cap, data):
    in_flight = {p.peer_id: data.draw(st.integers(0, cap + 1)) for p in peers if data.draw(st.booleans())}
    promotions = assign_queued(queue, peers, ReservationLedger(), cap, in_flight)
    by_id = {j.job_id: j for j in queue}
    backends = {(p.peer_id, b.backend_id): (p, b) for p in peers for b in p.backends}
    spent: dict[tuple[str, str], float] = {}
    per_peer: dict[str, int] = dict(in_flight)  # handoffs not yet accepted hold their slots
    for promotion in promotions:
        queued = by_id[promotion.job_id]
        owner, backend = backends[(promotion.peer_id, promotion.backend_id)]
        assert owner.reachable
        assert queued.pinned_peer in (None, owner.peer_id)
        assert backend.attributes["device-variant"] == queued.resources.device.variant
        assert promotion.amount == queued.replicas * queued.resources.device.count
        per_peer[owner.peer_id] = per_peer.get(owner.peer_id, 0) + 1
        if backend.availability is None:
            continue
        key = (promotion.peer_id, promotion.backend_id)
        levels, used = _levels(backend, promotion.token), spent.get(key, 0.0)
        assert promotion.amount <= _reach(levels, queued.band, used)
        assert promotion.reclaimed == max(0.0, promotion.amount - max(0.0, levels[0] - used))
        spent[key] = used + promotion.amount
    assert all(count <= max(cap, in_flight.get(peer_id, 0)) for peer_id, count in per_peer.items())
    assert all(per_peer[p] == n for p, n in in_flight.items() if n >= cap)  # a full peer takes nothing
    placed = {p.job_id for p in promotions}
    for queued in queue:
        if queued.job_id not in placed:
            assert not _fits_now(queued, peers, spent, per_peer, cap)


def _fits_now(queued: QueuedJob, peers, spent, per_peer, cap) -> bool:
    """Whether a job would fit on some backend in the pass's final state (it must not, if skipped)."""
    variant, amount = queued.resources.device.variant, queued.replicas * queued.resources.device.count
    for p in peers:
        if not p.reachable or per_peer.get(p.peer_id, 0) >= cap or queued.pinned_peer not in (None, p.peer_id):
            continue
        for b in p.backends:
            if b.attributes["device-variant"] != variant:
                continue
            if b.availability is None:
                return True
            if _reach(_levels(b, variant), queued.band, spent.get((p.peer_id, b.backend_id), 0.0)) >= amount:
                return True
    return False


@settings(max_examples=100, deadline=None)
@given(peers_strategy(), queue_strategy())
def test_assign_with_ledger_charged_each_tick_never_exceeds_one_observation(peers, queue):
    ledger = ReservationLedger()
    delivered: list[Promotion] = []
    remaining = list(queue)
    for _ in range(4):  # four ticks against the same observation
        promotions = assign_queued(remaining, peers, ledger, 3)
        for promotion in promotions:
            ledger.charge(promotion)
        delivered.extend(promotions)
        placed = {p.job_id for p in promotions}
        remaining = [j for j in remaining if j.job_id not in placed]
    totals: dict[tuple[str, str, str], float] = {}
    for promotion in delivered:
        if promotion.observation_epoch_ms == EPOCH:
            key = (promotion.peer_id, promotion.backend_id, promotion.token)
            totals[key] = totals.get(key, 0.0) + promotion.amount
    backends = {(p.peer_id, b.backend_id): b for p in peers for b in p.backends}
    for (peer_id, backend_id, token), total in totals.items():
        assert total <= _levels(backends[(peer_id, backend_id)], token)[-2]  # all a production job may reach
