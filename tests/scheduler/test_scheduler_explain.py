"""explain: the summary is the pending reason; details per backend and per group of identical workers."""

from __future__ import annotations

from iris.core.bands import Band
from iris.core.constraints import Op
from iris.scheduler import explain, schedule
from tests.scheduler.scheduler_builders import (
    cpu_request,
    cpu_worker,
    gpu_request,
    gpu_worker,
    job,
    require,
    running,
    snapshot,
)


def gpu_cluster():
    workers = [cpu_worker("c0"), cpu_worker("c1")] + [gpu_worker(f"g{i}", count=8) for i in range(3)]
    held = [running(f"/i/x/{i}", f"g{i}", gpu_request(6), band=Band.INTERACTIVE) for i in range(3)]
    return workers, held


def test_explain_summary_equals_pending_reason():
    workers, held = gpu_cluster()
    snap = snapshot(workers, [job("/a/j", gpu_request(8))], held)
    assert explain(snap, "/a/j").summary == schedule(snap).pending_reasons["/a/j"]


def test_explain_groups_identical_workers_per_backend():
    workers, held = gpu_cluster()
    explanation = explain(snapshot(workers, [job("/a/j", gpu_request(8))], held), "/a/j")
    by_backend = {b.backend_id: b.groups for b in explanation.backends}
    (cpu_group,) = by_backend["cpu"]
    assert cpu_group.workers == 2
    assert "constraint device-type EQ gpu fails (device-type=cpu)" in cpu_group.reasons
    (gpu_group,) = by_backend["gpu"]
    assert gpu_group.workers == 3
    assert gpu_group.fits_now == 0
    assert gpu_group.reasons[0] == "needs 8 h100 free; at most 2 h100 free"
    assert "held by interactive work it does not outrank" in gpu_group.reasons[1]


def test_explain_notes_what_preemption_could_free():
    workers = [gpu_worker("g0")]
    held = [
        running("/b/x/0", "g0", gpu_request(2), band=Band.BATCH),
        running("/i/y/0", "g0", gpu_request(6), band=Band.INTERACTIVE),
    ]
    explanation = explain(snapshot(workers, [job("/a/j", gpu_request(8))], held), "/a/j")
    reasons = explanation.backends[0].groups[0].reasons
    assert reasons[1] == (
        "preempting the lower-band work here would free at most 2 h100; "
        "the rest is held by interactive work it does not outrank"
    )


def test_explain_capacity_never_enough_names_worker_total():
    explanation = explain(snapshot([cpu_worker("c0", cpu=8)], [job("/a/j", cpu_request(cpu=64))]), "/a/j")
    assert explanation.summary == "Unschedulable: needs 64 cpu; the largest worker has 8 cpu"
    assert explanation.backends[0].groups[0].reasons == ("needs 64 cpu; these workers have 8 cpu",)


def test_explain_placed_job_says_it_fits_now():
    explanation = explain(snapshot([cpu_worker("c0")], [job("/a/j", replicas=2)]), "/a/j")
    assert explanation.summary == "Fits now: 2 tasks placed by this tick"


def test_explain_unknown_job_has_no_pending_tasks():
    explanation = explain(snapshot([cpu_worker("c0")]), "/a/none")
    assert explanation.summary == "No pending tasks"
    assert explanation.backends == ()


def test_explain_render_lists_backends_and_groups():
    workers = [cpu_worker("c0", region="us"), cpu_worker("c1", region="eu")]
    snap = snapshot(workers, [job("/a/j", constraints=(require("region", Op.EQ, "asia"),))])
    text = explain(snap, "/a/j").render()
    assert text.splitlines() == [
        "/a/j: Unschedulable: no worker satisfies region EQ asia",
        "  backend cpu:",
        "    1 worker like c0: constraint region EQ asia fails (region=us)",
        "    1 worker like c1: constraint region EQ asia fails (region=eu)",
    ]


def test_explain_dead_workers_counted_in_group():
    workers = [gpu_worker("g0", alive=False), gpu_worker("g1", alive=False)]
    explanation = explain(snapshot(workers + [cpu_worker("c0")], [job("/a/j", gpu_request(8))]), "/a/j")
    gpu_group = [b for b in explanation.backends if b.backend_id == "gpu"][0].groups[0]
    assert gpu_group.reasons == ("2 of them not alive",)


def test_explain_groups_carry_verdict_and_description():
    workers = [cpu_worker("c0", cpu=1), cpu_worker("c1", cpu=1)]
    held = [running("/b/x/0", "c0", cpu_request(cpu=1), band=Band.INTERACTIVE)]
    explanation = explain(
        snapshot(workers, [job("/a/j", cpu_request(cpu=1), replicas=2, coschedule=True)], held), "/a/j"
    )
    (group,) = explanation.groups
    assert group.group == "2 workers like c0"
    assert group.verdict == "fits"
    assert explanation.lines == (
        "backend cpu:",
        "  2 workers like c0: 1 could take a replica now, but its replicas must start together",
    )
