"""The placement pass and the reservation ledger: one test per rule of DESIGN §6."""

from __future__ import annotations

from iris.core.bands import Band
from iris.core.constraints import Constraint, Op
from iris.core.resources import Device, Resources
from iris.federation.availability import ReservationLedger, assign_queued
from iris.federation.model import Promotion
from iris.federation.shape import capacity_gate
from tests.federation.federation_builders import (
    EPOCH,
    availability,
    cpu,
    cpu_backend,
    gpu,
    gpu_backend,
    h100_peer,
    job,
    peer,
)


def placements(promotions: tuple[Promotion, ...]) -> dict[str, str]:
    return {p.job_id: p.peer_id for p in promotions}


# --- the gate -----------------------------------------------------------------------------------


def test_gate_gpu_request_becomes_available_ge_replicas_times_count():
    gate = capacity_gate(gpu("h100", 8), replicas=3)
    assert gate is not None
    assert gate.constraint == Constraint("available:h100", Op.GE, ("24",))


def test_gate_tpu_request_counts_chips():
    gate = capacity_gate(Resources(device=Device("tpu", "v5p", 8, "v5p-8")), replicas=2)
    assert gate is not None and gate.constraint == Constraint("available:v5p", Op.GE, ("16",))


def test_gate_cpu_job_carries_none():
    assert capacity_gate(cpu(), replicas=4) is None


def test_assign_any_variant_request_draws_from_the_backends_variant():
    peers = [peer("cw", gpu_backend("gb200", "gb200", availability({"gb200": 8})))]
    (promotion,) = assign_queued([job("/u/a", gpu("", 8))], peers, ReservationLedger(), 8)
    assert (promotion.token, promotion.amount) == ("gb200", 8)


# --- the ledger ---------------------------------------------------------------------------------


def test_ledger_within_one_generation_accumulates_reservations():
    ledger = ReservationLedger()
    promotion = Promotion("/u/a", "cw", "h100", "h100", 8, observation_epoch_ms=EPOCH)
    ledger.charge(promotion)
    ledger.charge(Promotion("/u/b", "cw", "h100", "h100", 4, observation_epoch_ms=EPOCH))
    assert ledger.reserved("cw", "h100", "h100", EPOCH) == 12


def test_ledger_newer_observation_resets_reservations():
    ledger = ReservationLedger()
    ledger.charge(Promotion("/u/a", "cw", "h100", "h100", 8, observation_epoch_ms=EPOCH))
    assert ledger.reserved("cw", "h100", "h100", EPOCH + 1) == 0
    ledger.charge(Promotion("/u/b", "cw", "h100", "h100", 4, observation_epoch_ms=EPOCH + 1))
    assert ledger.reserved("cw", "h100", "h100", EPOCH + 1) == 4


def test_ledger_older_observation_keeps_reservations():
    ledger = ReservationLedger()
    ledger.charge(Promotion("/u/a", "cw", "h100", "h100", 8), amount=8, epoch_ms=EPOCH)
    assert ledger.reserved("cw", "h100", "h100", EPOCH - 1) == 8


def test_ledger_promotion_without_metric_charges_nothing():
    ledger = ReservationLedger()
    ledger.charge(Promotion("/u/a", "cw", "h100", "h100", 8, observation_epoch_ms=None))
    assert len(ledger) == 0


def test_ledger_prune_drops_superseded_generations():
    ledger = ReservationLedger()
    ledger.charge(Promotion("/u/a", "cw", "h100", "h100", 8, observation_epoch_ms=EPOCH))
    ledger.prune([h100_peer("cw", 8, epoch=EPOCH)])
    assert len(ledger) == 1
    ledger.prune([h100_peer("cw", 8, epoch=EPOCH + 1)])
    assert len(ledger) == 0


def test_assign_pass_never_writes_the_ledger():
    ledger = ReservationLedger()
    assert assign_queued([job("/u/a")], [h100_peer("cw", 8)], ledger, 8)
    assert len(ledger) == 0


# --- placement ----------------------------------------------------------------------------------


def test_assign_peer_with_room_is_placed():
    (promotion,) = assign_queued([job("/u/a")], [h100_peer("cw", 8)], ReservationLedger(), 8)
    assert (promotion.peer_id, promotion.backend_id, promotion.amount) == ("cw", "h100", 8)
    assert promotion.observation_epoch_ms == EPOCH and not promotion.reclaims


def test_assign_no_peer_with_room_stays_queued():
    assert assign_queued([job("/u/a")], [h100_peer("cw", 7)], ReservationLedger(), 8) == ()


def test_assign_capacity_split_across_backends_is_never_summed():
    peers = [
        peer(
            "cw",
            gpu_backend("east", "h100", availability({"h100": 6})),
            gpu_backend("west", "h100", availability({"h100": 4})),
        )
    ]
    assert assign_queued([job("/u/a")], peers, ReservationLedger(), 8) == ()


def test_assign_two_jobs_one_pass_do_not_double_book():
    promotions = assign_queued(
        [job("/u/a"), job("/u/b", submitted_ms=1)], [h100_peer("cw", 12)], ReservationLedger(), 8
    )
    assert placements(promotions) == {"/u/a": "cw"}


def test_assign_two_same_shape_peers_share_two_jobs():
    peers = [h100_peer("cw-a", 64), h100_peer("cw-b", 64)]
    promotions = assign_queued([job("/u/a"), job("/u/b", submitted_ms=1)], peers, ReservationLedger(), 8)
    assert sorted(placements(promotions).values()) == ["cw-a", "cw-b"]


def test_assign_equal_peers_spread_single_jobs_by_stable_hash():
    peers = [h100_peer("cw-a", 64), h100_peer("cw-b", 64)]
    chosen = {assign_queued([job(f"/u/job-{i}")], peers, ReservationLedger(), 8)[0].peer_id for i in range(16)}
    assert chosen == {"cw-a", "cw-b"}
    again = assign_queued([job("/u/job-3")], peers, ReservationLedger(), 8)
    assert again == assign_queued([job("/u/job-3")], list(reversed(peers)), ReservationLedger(), 8)


def test_assign_burst_one_job_per_pass_spreads_over_peers_that_reported_the_same_room():
    ledger = ReservationLedger()
    peers = [h100_peer("cw-0", 480), h100_peer("cw-1", 480), h100_peer("cw-2", 480)]
    per_peer: dict[str, int] = {}
    for i in range(60):  # one job per pass, as submits arriving one by one wake the tick
        (promotion,) = assign_queued([job(f"/u/burst-{i}")], peers, ledger, 8)
        ledger.charge(promotion)
        per_peer[promotion.peer_id] = per_peer.get(promotion.peer_id, 0) + 1
    assert sorted(per_peer) == ["cw-0", "cw-1", "cw-2"]
    assert min(per_peer.values()) >= 10
    assert ledger.reserved("cw-0", "h100", "h100", EPOCH) == 8 * per_peer["cw-0"]  # still charged


def test_assign_prefers_best_fit_among_idle_backends():
    peers = [h100_peer("cw-big", 64), h100_peer("cw-snug", 8)]
    (promotion,) = assign_queued([job("/u/a")], peers, ReservationLedger(), 8)
    assert promotion.peer_id == "cw-snug"


def test_assign_across_ticks_ledger_bounds_one_stale_observation():
    ledger = ReservationLedger()
    stale = [h100_peer("cw", 8, epoch=EPOCH)]
    first = assign_queued([job("/u/a")], stale, ledger, 8)
    for promotion in first:  # the shell confirms the promotion, then charges it
        ledger.charge(promotion)
    assert assign_queued([job("/u/b")], stale, ledger, 8) == ()
    assert assign_queued([job("/u/b")], stale, ledger, 8) == ()
    fresh = [h100_peer("cw", 8, epoch=EPOCH + 30_000)]
    assert placements(assign_queued([job("/u/b")], fresh, ledger, 8)) == {"/u/b": "cw"}


def test_assign_pin_confines_job_to_its_peer():
    peers = [h100_peer("cw-a", 64), h100_peer("cw-b", 0)]
    assert assign_queued([job("/u/a", pin="cw-b")], peers, ReservationLedger(), 8) == ()
    peers = [h100_peer("cw-a", 64), h100_peer("cw-b", 8)]
    assert placements(assign_queued([job("/u/a", pin="cw-b")], peers, ReservationLedger(), 8)) == {"/u/a": "cw-b"}


def test_assign_backend_without_metric_matches_on_shape_and_ranks_after_metric():
    bare = peer("cw-bare", gpu_backend("h100", "h100", None))
    assert placements(assign_queued([job("/u/a")], [bare], ReservationLedger(), 8)) == {"/u/a": "cw-bare"}
    metered = h100_peer("cw-metered", 8)
    promotions = assign_queued([job("/u/a"), job("/u/b", submitted_ms=1)], [bare, metered], ReservationLedger(), 8)
    assert placements(promotions) == {"/u/a": "cw-metered", "/u/b": "cw-bare"}
    assert promotions[1].observation_epoch_ms is None


def test_assign_unreachable_peer_hosts_nothing():
    peers = [peer("cw", gpu_backend("h100", "h100", availability({"h100": 64})), reachable=False)]
    assert assign_queued([job("/u/a"), job("/u/b", cpu())], peers, ReservationLedger(), 8) == ()


def test_assign_routing_key_the_peer_does_not_advertise_fails():
    region = (Constraint("region", Op.EQ, ("us-east5",)),)
    assert assign_queued([job("/u/a", constraints=region)], [h100_peer("cw", 64)], ReservationLedger(), 8) == ()


def test_assign_cpu_job_matches_on_shape_without_a_gate():
    peers = [peer("cw", cpu_backend("cpu", availability({})))]
    (promotion,) = assign_queued([job("/u/a", cpu())], peers, ReservationLedger(), 8)
    assert (promotion.peer_id, promotion.token, promotion.amount) == ("cw", "", 0)


# --- bands --------------------------------------------------------------------------------------


def test_assign_interactive_reaches_peer_saturated_by_batch():
    peers = [h100_peer("cw", 0, held={Band.BATCH: {"h100": 64}})]
    (promotion,) = assign_queued([job("/u/a", band=Band.INTERACTIVE)], peers, ReservationLedger(), 8)
    assert promotion.reclaims and promotion.reclaimed == 8
    assert assign_queued([job("/u/b", band=Band.BATCH)], peers, ReservationLedger(), 8) == ()


def test_assign_interactive_never_reclaims_own_band_or_above():
    held = {Band.INTERACTIVE: {"h100": 64}, Band.PRODUCTION: {"h100": 64}}
    peers = [h100_peer("cw", 0, held=held)]
    assert assign_queued([job("/u/a", band=Band.INTERACTIVE)], peers, ReservationLedger(), 8) == ()


def test_assign_idle_capacity_beats_preempting():
    peers = [h100_peer("cw-busy", 0, held={Band.BATCH: {"h100": 8}}), h100_peer("cw-idle", 64)]
    (promotion,) = assign_queued([job("/u/a")], peers, ReservationLedger(), 8)
    assert promotion.peer_id == "cw-idle" and not promotion.reclaims


def test_assign_peer_without_band_split_reclaims_nothing():
    assert assign_queued([job("/u/a", band=Band.PRODUCTION)], [h100_peer("cw", 4)], ReservationLedger(), 8) == ()


def test_assign_spends_idle_then_reclaims_lowest_band_first():
    held = {Band.BATCH: {"h100": 4}, Band.INTERACTIVE: {"h100": 8}}
    peers = [h100_peer("cw", 4, held=held)]
    production = job("/u/prod", band=Band.PRODUCTION)  # takes 4 idle + 4 batch
    interactive = job("/u/inter", band=Band.INTERACTIVE, submitted_ms=1, resources=gpu(count=1))
    promotions = assign_queued([production, interactive], peers, ReservationLedger(), 8)
    assert placements(promotions) == {"/u/prod": "cw"}
    assert promotions[0].reclaimed == 4


def test_assign_ledger_reservation_spends_idle_before_held():
    ledger = ReservationLedger()
    ledger.charge(Promotion("/u/x", "cw", "h100", "h100", 8, observation_epoch_ms=EPOCH))
    peers = [h100_peer("cw", 8, held={Band.BATCH: {"h100": 8}})]
    (promotion,) = assign_queued([job("/u/a")], peers, ledger, 8)
    assert promotion.reclaimed == 8


# --- the queue ----------------------------------------------------------------------------------


def test_assign_orders_by_band_then_age():
    peers = [h100_peer("cw", 8)]
    queued = [
        job("/u/old-batch", band=Band.BATCH, submitted_ms=0),
        job("/u/young", band=Band.INTERACTIVE, submitted_ms=5),
        job("/u/old", band=Band.INTERACTIVE, submitted_ms=1),
    ]
    assert placements(assign_queued(queued, peers, ReservationLedger(), 8)) == {"/u/old": "cw"}


def test_assign_per_peer_cap_limits_promotions():
    queued = [job(f"/u/j{i}", gpu(count=1), submitted_ms=i) for i in range(10)]
    promotions = assign_queued(queued, [h100_peer("cw-a", 64), h100_peer("cw-b", 64)], ReservationLedger(), 3)
    counts = {p: list(placements(promotions).values()).count(p) for p in ("cw-a", "cw-b")}
    assert counts == {"cw-a": 3, "cw-b": 3}
    assert [p.job_id for p in promotions] == [f"/u/j{i}" for i in range(6)]


def test_assign_in_flight_handoffs_take_their_peers_slots():
    queued = [job(f"/u/j{i}", gpu(count=1), submitted_ms=i) for i in range(10)]
    peers = [h100_peer("cw-a", 64), h100_peer("cw-b", 64), h100_peer("cw-c", 64)]
    promotions = assign_queued(queued, peers, ReservationLedger(), 3, {"cw-a": 3, "cw-b": 2, "cw-c": 7})
    counts = {p: list(placements(promotions).values()).count(p) for p in ("cw-a", "cw-b", "cw-c")}
    assert counts == {"cw-a": 0, "cw-b": 1, "cw-c": 0}  # only the slot cw-b's acceptances have freed


def test_assign_job_fitting_nowhere_does_not_block_later_jobs():
    queued = [job("/u/huge", gpu(count=8), replicas=16), job("/u/small", gpu(count=8), submitted_ms=1)]
    assert placements(assign_queued(queued, [h100_peer("cw", 8)], ReservationLedger(), 8)) == {"/u/small": "cw"}


def test_assign_no_peers_or_no_cap_promotes_nothing():
    assert assign_queued([job("/u/a")], [], ReservationLedger(), 8) == ()
    assert assign_queued([job("/u/a")], [h100_peer("cw", 8)], ReservationLedger(), 0) == ()
