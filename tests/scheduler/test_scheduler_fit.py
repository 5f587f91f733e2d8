"""Fit: hard constraints, capacity, best fit, soft constraints, and the unschedulable reasons."""

from __future__ import annotations

import pytest

from iris.core.bands import Band
from iris.core.constraints import Constraint, Op
from iris.scheduler import schedule
from iris.scheduler.fit import compile_shape, failing_constraints, fits, preference_score
from tests.scheduler.scheduler_builders import (
    G,
    cpu_request,
    cpu_worker,
    gpu_request,
    gpu_worker,
    job,
    placements,
    prefer,
    require,
    running,
    snapshot,
)


@pytest.mark.parametrize(
    ("constraint", "attributes", "passes"),
    [
        (require("region", Op.EQ, "us-east5"), {"region": "US-EAST5"}, True),
        (require("region", Op.EQ, "us-east5"), {"region": "eu-west4"}, False),
        (require("region", Op.NE, "us-east5"), {"region": "eu-west4"}, True),
        (require("region", Op.NE, "us-east5"), {}, False),
        (require("zone", Op.IN, "a", "b"), {"zone": "b"}, True),
        (require("zone", Op.IN, "a", "b"), {"zone": "c"}, False),
        (require("preemptible", Op.EXISTS), {"preemptible": "true"}, True),
        (require("preemptible", Op.NOT_EXISTS), {"preemptible": "true"}, False),
        (require("preemptible", Op.NOT_EXISTS), {}, True),
        (require("gpu-count", Op.GE, "8"), {"gpu-count": "8"}, True),
        (require("gpu-count", Op.GT, "8"), {"gpu-count": "8"}, False),
        (require("gpu-count", Op.LT, "8"), {"gpu-count": "4"}, True),
        (require("gpu-count", Op.LE, "4"), {"gpu-count": "8"}, False),
    ],
)
def test_failing_constraints_each_op_matches_registry_semantics(constraint, attributes, passes):
    shape = compile_shape(cpu_request(), (constraint,))
    assert (failing_constraints(shape.hard, attributes) == ()) is passes


def test_compile_shape_gpu_request_adds_device_constraints():
    shape = compile_shape(gpu_request(8, "H100"), ())
    assert {str(c) for c in shape.hard} == {"device-type EQ gpu", "device-variant EQ h100"}
    assert shape.need[0] == 8


def test_compile_shape_federation_keys_ignored_locally():
    shape = compile_shape(cpu_request(), (require("cluster", Op.EQ, "peer-a"), require("available:h100", Op.GE, "8")))
    assert shape.hard == ()


def test_fits_every_dimension_required():
    assert fits((8, 8000, 10, 10), (8, 8000, 10, 10))
    assert not fits((8, 8000, 9, 10), (8, 8000, 10, 10))


def test_preference_score_counts_satisfied_preferences():
    prefs = (prefer("region", Op.EQ, "a"), prefer("zone", Op.EQ, "a-1"))
    assert preference_score(prefs, {"region": "a", "zone": "a-1"}) == 2
    assert preference_score(prefs, {"region": "a"}) == 1


def test_schedule_region_constraint_places_on_matching_worker_only():
    workers = [cpu_worker("w-east", region="us-east5"), cpu_worker("w-west", region="eu-west4")]
    result = schedule(snapshot(workers, [job("/a/j", constraints=(require("region", Op.EQ, "EU-WEST4"),))]))
    assert placements(result) == {"/a/j/0": "w-west"}


def test_schedule_capacity_subtracts_running_tasks():
    workers = [cpu_worker("w0", cpu=8), cpu_worker("w1", cpu=8)]
    busy = [running("/b/x/0", "w0", cpu_request(cpu=6))]
    result = schedule(snapshot(workers, [job("/a/j", cpu_request(cpu=4))], busy))
    assert placements(result) == {"/a/j/0": "w1"}


def test_schedule_capacity_subtracts_this_ticks_assignments():
    workers = [cpu_worker("w0", cpu=8)]
    result = schedule(snapshot(workers, [job("/a/j", cpu_request(cpu=3), replicas=3)]))
    assert placements(result) == {"/a/j/0": "w0", "/a/j/1": "w0"}
    reason = result.pending_reasons["/a/j"]
    assert reason.startswith("Waiting for 3 cpu on one worker; at most 2 cpu free (backend cpu). ")
    assert "Holds a reservation on w0" in reason


def test_schedule_task_bigger_than_any_worker_unschedulable_with_reason():
    workers = [cpu_worker("w0", cpu=8), cpu_worker("w1", cpu=4)]
    result = schedule(snapshot(workers, [job("/a/big", cpu_request(cpu=64))]))
    assert result.assignments == ()
    assert [(u.task_id, u.reason) for u in result.unschedulable] == [
        ("/a/big/0", "needs 64 cpu; the largest worker has 8 cpu")
    ]


def test_schedule_memory_bigger_than_any_worker_names_memory():
    result = schedule(snapshot([cpu_worker("w0", memory=32 * G)], [job("/a/j", cpu_request(memory=64 * G))]))
    assert result.unschedulable[0].reason == "needs 64G memory; the largest worker has 32G memory"


def test_schedule_unknown_variant_unschedulable_names_constraint():
    workers = [gpu_worker("g0", variant="a100")]
    result = schedule(snapshot(workers, [job("/a/j", gpu_request(8, "h100"))]))
    assert result.unschedulable[0].reason == "no worker satisfies device-variant EQ h100"


def test_schedule_constraints_satisfied_only_separately_unschedulable_names_all():
    workers = [cpu_worker("w0", region="a", zone="x"), cpu_worker("w1", region="b", zone="y")]
    constraints = (require("region", Op.EQ, "a"), require("zone", Op.EQ, "y"))
    result = schedule(snapshot(workers, [job("/a/j", constraints=constraints)]))
    assert result.unschedulable[0].reason.startswith("no single worker satisfies all of:")


def test_schedule_gpu_count_larger_than_host_unschedulable():
    result = schedule(snapshot([gpu_worker("g0", count=4)], [job("/a/j", gpu_request(8))]))
    assert result.unschedulable[0].reason == "needs 8 h100; the largest worker has 4 h100"


def test_schedule_any_variant_gpu_places_on_any_gpu_worker():
    workers = [cpu_worker("c0"), gpu_worker("g0", variant="a100", count=4)]
    result = schedule(snapshot(workers, [job("/a/j", gpu_request(4, variant=""))]))
    assert placements(result) == {"/a/j/0": "g0"}


def test_schedule_gpu_count_constraint_consumable_filters_hosts():
    workers = [gpu_worker("g4", count=4), gpu_worker("g8", count=8)]
    result = schedule(snapshot(workers, [job("/a/j", gpu_request(1), constraints=(require("gpu-count", Op.GE, "8"),))]))
    assert placements(result) == {"/a/j/0": "g8"}


def test_schedule_gpu_waiting_reason_names_free_devices():
    workers = [gpu_worker("g0", count=8)]
    busy = [running("/b/x/0", "g0", gpu_request(4), band=Band.INTERACTIVE)]
    result = schedule(snapshot(workers, [job("/a/j", gpu_request(8))], busy))
    assert list(result.pending_reasons) == ["/a/j"]
    assert result.pending_reasons["/a/j"].startswith("Waiting for 8 h100 on one worker; at most 4 free (backend gpu). ")


def test_schedule_best_fit_prefers_fullest_worker_that_fits():
    workers = [cpu_worker("empty", cpu=8), cpu_worker("half", cpu=8)]
    busy = [running("/b/x/0", "half", cpu_request(cpu=4))]
    result = schedule(snapshot(workers, [job("/a/j", cpu_request(cpu=2))], busy))
    assert placements(result) == {"/a/j/0": "half"}


def test_schedule_best_fit_cpu_task_avoids_idle_gpu_host():
    workers = [gpu_worker("g0"), cpu_worker("c0", backend="gpu")]
    result = schedule(snapshot(workers, [job("/a/j", cpu_request(cpu=1))]))
    assert placements(result) == {"/a/j/0": "c0"}


def test_schedule_preferred_constraint_beats_best_fit():
    workers = [cpu_worker("w-a", zone="a"), cpu_worker("w-b", zone="b")]
    busy = [running("/b/x/0", "w-a", cpu_request(cpu=4))]
    result = schedule(snapshot(workers, [job("/a/j", constraints=(prefer("zone", Op.EQ, "b"),))], busy))
    assert placements(result) == {"/a/j/0": "w-b"}


def test_schedule_preferred_constraint_unmet_still_places():
    workers = [cpu_worker("w-a", zone="a")]
    result = schedule(snapshot(workers, [job("/a/j", constraints=(prefer("zone", Op.EQ, "b"),))]))
    assert placements(result) == {"/a/j/0": "w-a"}


def test_schedule_backend_pin_restricts_to_backend():
    workers = [cpu_worker("c0", backend="cpu"), cpu_worker("o0", backend="other")]
    result = schedule(snapshot(workers, [job("/a/j", constraints=(require("backend", Op.EQ, "other"),))]))
    assert placements(result) == {"/a/j/0": "o0"}


def test_schedule_preferred_backend_from_a_handoff_beats_best_fit_and_yields_when_full():
    # A handed-off job carries the backend its parent chose as a preference, not a pin.
    workers = [cpu_worker("c0", backend="cpu"), cpu_worker("o0", backend="other")]
    busy = [running("/b/x/0", "c0", cpu_request(cpu=4))]  # best fit alone would pick c0
    chosen = (prefer("backend", Op.EQ, "other"),)
    assert placements(schedule(snapshot(workers, [job("/a/j", constraints=chosen)], busy))) == {"/a/j/0": "o0"}
    full = [*busy, running("/b/y/0", "o0", cpu_request(cpu=8))]
    assert placements(schedule(snapshot(workers, [job("/a/j", constraints=chosen)], full))) == {"/a/j/0": "c0"}


def test_schedule_worker_pin_restricts_to_worker():
    workers = [cpu_worker("w0"), cpu_worker("w1")]
    result = schedule(snapshot(workers, [job("/a/j", constraints=(require("worker", Op.EQ, "w1"),))]))
    assert placements(result) == {"/a/j/0": "w1"}


def test_schedule_cluster_pin_ignored_on_the_pinned_cluster():
    result = schedule(snapshot([cpu_worker("w0")], [job("/a/j", constraints=(Constraint("cluster", Op.EQ, ("me",)),))]))
    assert placements(result) == {"/a/j/0": "w0"}


def test_schedule_dead_worker_never_used():
    workers = [cpu_worker("dead", alive=False), cpu_worker("live", cpu=2)]
    result = schedule(snapshot(workers, [job("/a/j", cpu_request(cpu=2), replicas=2)]))
    assert placements(result) == {"/a/j/0": "live"}


def test_schedule_only_dead_workers_fit_task_waits_not_unschedulable():
    workers = [gpu_worker("g0", alive=False), cpu_worker("c0")]
    result = schedule(snapshot(workers, [job("/a/j", gpu_request(8))]))
    assert result.unschedulable == ()
    assert "every such worker is down" in result.pending_reasons["/a/j"]


def test_schedule_no_alive_workers_waits():
    result = schedule(snapshot([cpu_worker("w0", alive=False)], [job("/a/j")]))
    assert result.unschedulable == ()
    assert result.pending_reasons == {"/a/j": "Waiting for a worker to come up; no worker is alive"}


def test_schedule_disk_counts_as_capacity():
    workers = [cpu_worker("w0", disk=10 * G)]
    result = schedule(snapshot(workers, [job("/a/j", cpu_request(disk=8 * G), replicas=2)]))
    assert placements(result) == {"/a/j/0": "w0"}
    assert result.pending_reasons["/a/j"].startswith(
        "Waiting for 8G disk on one worker; at most 2G disk free (backend cpu). "
    )


def test_schedule_fractional_cpu_packs_exactly():
    result = schedule(snapshot([cpu_worker("w0", cpu=1)], [job("/a/j", cpu_request(cpu=0.1, memory=0), replicas=11)]))
    assert len(result.assignments) == 10


def test_schedule_run_of_one_job_held_by_one_worker_goes_there_whole():
    workers = [cpu_worker("roomy", cpu=16), cpu_worker("tight", cpu=8)]
    result = schedule(snapshot(workers, [job("/a/j", cpu_request(cpu=2), replicas=4)]))
    assert placements(result) == {f"/a/j/{i}": "tight" for i in range(4)}
    assert [a.backend_id for a in result.assignments] == ["cpu"] * 4


def test_schedule_run_split_across_workers_fills_tightest_first_then_waits():
    workers = [cpu_worker("roomy", cpu=8), cpu_worker("tight", cpu=8)]
    busy = [running("/b/x/0", "tight", cpu_request(cpu=4))]
    # A batch job: it may not evict the running task to take the last one.
    result = schedule(snapshot(workers, [job("/a/j", cpu_request(cpu=2), replicas=7, band=Band.BATCH)], busy))
    expected = {f"/a/j/{i}": "tight" for i in range(2)} | {f"/a/j/{i}": "roomy" for i in range(2, 6)}
    assert placements(result) == expected
    assert [a.task_id for a in result.assignments] == [f"/a/j/{i}" for i in range(6)]
    assert result.pending_reasons["/a/j"].startswith("Waiting for 2 cpu on one worker")
