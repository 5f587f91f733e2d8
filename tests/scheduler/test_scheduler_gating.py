"""Gating: per-user budgets downgrade interactive work to batch; scheduling deadlines fail tasks."""

from __future__ import annotations

from dataclasses import replace

from iris.core.bands import Band
from iris.scheduler import schedule
from iris.scheduler.gating import effective_band, resource_value, user_spend
from iris.scheduler.tick import run_tick
from tests.scheduler.scheduler_builders import (
    G,
    cpu_request,
    cpu_worker,
    gpu_request,
    gpu_worker,
    job,
    placements,
    running,
    snapshot,
)


def test_resource_value_weights_accelerators_memory_and_cores():
    assert resource_value(gpu_request(8, cpu=16, memory=64 * G)) == 8000 + 64 + 80
    assert resource_value(cpu_request(cpu=1.5, memory=G + 1)) == 1 + 5


def test_user_spend_excludes_batch_work():
    tasks = [
        running("/alice/a/0", "w", cpu_request(cpu=2, memory=0), band=Band.INTERACTIVE, user="alice"),
        running("/alice/b/0", "w", cpu_request(cpu=4, memory=0), band=Band.BATCH, user="alice"),
        running("/bob/c/0", "w", cpu_request(cpu=1, memory=0), band=Band.PRODUCTION, user="bob"),
    ]
    assert user_spend(tasks) == {"alice": 10, "bob": 5}


def test_user_spend_adds_work_held_on_federation_peers():
    tasks = [running("/alice/a/0", "w", cpu_request(cpu=2, memory=0), band=Band.INTERACTIVE, user="alice")]
    assert user_spend(tasks, {"alice": 8000, "carol": 3}) == {"alice": 8010, "carol": 3}


def test_effective_band_default_budget_applies_to_users_without_their_own():
    spend = {"alice": 50, "bob": 50}
    assert effective_band(Band.INTERACTIVE, "bob", spend, {"alice": 100}, 10) is Band.BATCH
    assert effective_band(Band.INTERACTIVE, "alice", spend, {"alice": 100}, 10) is Band.INTERACTIVE


def test_schedule_peer_spend_counts_toward_the_budget():
    workers = [cpu_worker("w0", cpu=2)]
    pending = [job("/alice/new", cpu_request(cpu=1), user="alice")]
    result = schedule(replace(snapshot(workers, pending, [], budgets={"alice": 100}), peer_spend={"alice": 8000}))
    assert result.pending_reasons == {} and placements(result) == {"/alice/new/0": "w0"}  # batch still fits
    over = run_tick(replace(snapshot(workers, pending, [], budgets={"alice": 100}), peer_spend={"alice": 8000}))
    assert over.outcomes["/alice/new"].request.band is Band.BATCH


def test_effective_band_over_budget_interactive_downgraded():
    assert effective_band(Band.INTERACTIVE, "alice", {"alice": 11}, {"alice": 10}) is Band.BATCH


def test_effective_band_at_budget_not_downgraded():
    assert effective_band(Band.INTERACTIVE, "alice", {"alice": 10}, {"alice": 10}) is Band.INTERACTIVE


def test_effective_band_production_exempt_from_budget():
    assert effective_band(Band.PRODUCTION, "alice", {"alice": 99}, {"alice": 1}) is Band.PRODUCTION


def test_effective_band_no_budget_unlimited():
    assert effective_band(Band.INTERACTIVE, "alice", {"alice": 10**9}, {}) is Band.INTERACTIVE


def test_schedule_over_budget_user_queues_behind_older_batch_work():
    workers = [cpu_worker("w0", cpu=2), cpu_worker("busy", cpu=1)]
    spent = [running("/alice/old/0", "busy", cpu_request(cpu=1, memory=0), band=Band.INTERACTIVE, user="alice")]
    pending = [
        job("/alice/new", cpu_request(cpu=2), user="alice", root_submitted_ms=1),
        job("/bob/batch", cpu_request(cpu=2), user="bob", band=Band.BATCH, root_submitted_ms=0),
    ]
    result = schedule(snapshot(workers, pending, spent, budgets={"alice": 1}))
    assert placements(result) == {"/bob/batch/0": "w0"}
    assert "; user alice is over budget, so it competes as batch." in result.pending_reasons["/alice/new"]


def test_schedule_over_budget_user_cannot_preempt_batch():
    workers = [gpu_worker("g0", count=8)]
    held = [
        running("/alice/old/0", "g0", gpu_request(4), band=Band.INTERACTIVE, user="alice"),
        running("/bob/batch/0", "g0", gpu_request(4), band=Band.BATCH, user="bob"),
    ]
    result = schedule(
        snapshot(workers, [job("/alice/new", gpu_request(4), user="alice")], held, budgets={"alice": 100})
    )
    assert result.preemptions == ()
    assert result.assignments == ()


def test_schedule_deadline_passed_unschedulable_with_reason():
    workers = [cpu_worker("w0", cpu=1)]
    held = [running("/b/x/0", "w0", cpu_request(cpu=1))]
    pending = [job("/a/late", cpu_request(cpu=1), scheduling_deadline_ms=500)]
    result = schedule(snapshot(workers, pending, held, now_ms=1000))
    assert [u.task_id for u in result.unschedulable] == ["/a/late/0"]
    assert result.unschedulable[0].reason.startswith(
        "Scheduling timeout reached before it could be placed. Waiting for 1 cpu"
    )
    assert result.pending_reasons == {}


def test_schedule_deadline_not_reached_places_normally():
    pending = [job("/a/ok", cpu_request(cpu=1), scheduling_deadline_ms=2000)]
    result = schedule(snapshot([cpu_worker("w0")], pending, now_ms=1000))
    assert placements(result) == {"/a/ok/0": "w0"}
    assert result.unschedulable == ()


def test_schedule_expired_task_holds_no_capacity_for_others():
    pending = [
        job("/a/late", cpu_request(cpu=1), scheduling_deadline_ms=1, insertion=0),
        job("/a/next", cpu_request(cpu=1), insertion=1),
    ]
    result = schedule(snapshot([cpu_worker("w0", cpu=1)], pending, now_ms=1000))
    assert placements(result) == {"/a/next/0": "w0"}
    assert [u.task_id for u in result.unschedulable] == ["/a/late/0"]
