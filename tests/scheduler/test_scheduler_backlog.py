"""Behind a backlog that fills the cluster, a pass tries to place a job only while a job of its
shape and band could still place something: once one placed fewer than all its tasks, the later
ones of that shape and band are passed over, with the same decisions as the reference scheduler."""

from __future__ import annotations

import pytest

import iris.scheduler.tick as scheduler_tick
from iris.core.bands import Band
from iris.scheduler.reference import decide
from iris.scheduler.tick import run_tick

from .scheduler_builders import cpu_request, cpu_worker, decisions_of, job, running, snapshot


def backlog_snapshot():
    workers = [cpu_worker("w0", cpu=2), cpu_worker("w1", cpu=2)]
    victims = [running(f"/bob/b{i}/0", f"w{i % 2}", started_ms=i) for i in range(3)]  # 1 cpu free on w1
    pending = []
    for i in range(40):
        band = (Band.INTERACTIVE, Band.BATCH, Band.PRODUCTION)[i % 3]
        resources = cpu_request(2) if i % 5 == 0 else cpu_request(1)
        pending.append(job(f"/alice/j{i:02d}", resources, band=band, insertion=i))
    return snapshot(workers, pending, victims)


@pytest.fixture
def attempts(monkeypatch):
    calls: list[str] = []
    place = scheduler_tick.place_independent

    def counted(ledger, memo, shape, band, tasks, now_ms, *rest):
        calls.append(tasks[0].job_id)
        return place(ledger, memo, shape, band, tasks, now_ms, *rest)

    monkeypatch.setattr(scheduler_tick, "place_independent", counted)
    return calls


def test_backlog_jobs_past_a_full_shape_and_band_are_not_tried(attempts):
    snap = backlog_snapshot()
    fast = run_tick(snap).result()
    assert decisions_of(fast) == decide(snap)
    assert fast.assignments and fast.preemptions  # the free cpu is taken and batch work is evicted
    assert set(fast.pending_reasons) == {f"/alice/j{i:02d}" for i in range(40)} - {
        a.task_id.rsplit("/", 1)[0] for a in fast.assignments
    }
    # Each (shape, band) is tried until it comes up short, and so are the jobs placed before that.
    assert len(attempts) <= len(fast.assignments) + 2 * 3
