"""Ordering: band, then the user's dominant share, then depth, then root submit time, then insertion;
deterministic."""

from __future__ import annotations

import random
from dataclasses import replace

from iris.core.bands import Band
from iris.scheduler import RunningTask, schedule
from iris.scheduler.index import ClusterIndex
from iris.scheduler.reference import decide
from iris.scheduler.tick import pending_by_job
from tests.scheduler.scheduler_builders import (
    cpu_request,
    cpu_worker,
    decisions_of,
    job,
    placements,
    running,
    snapshot,
)

ONE_SLOT = [cpu_worker("w0", cpu=1)]


def winner(*jobs) -> str:
    result = schedule(snapshot(ONE_SLOT, [job(job_id, cpu_request(cpu=1), **fields) for job_id, fields in jobs]))
    (task_id,) = placements(result)
    return task_id.rsplit("/", 1)[0]


def test_order_production_before_interactive_before_batch():
    assert (
        winner(("/a/batch", {"band": Band.BATCH}), ("/a/inter", {}), ("/a/prod", {"band": Band.PRODUCTION}))
        == "/a/prod"
    )
    assert winner(("/a/batch", {"band": Band.BATCH, "insertion": 0}), ("/a/inter", {"insertion": 9})) == "/a/inter"


def test_order_deeper_job_first_within_band():
    assert winner(("/a/root", {"insertion": 0}), ("/a/root/child", {"depth": 1, "insertion": 5})) == "/a/root/child"


def test_order_older_root_first_within_depth():
    assert winner(("/a/new", {"root_submitted_ms": 200}), ("/a/old", {"root_submitted_ms": 100})) == "/a/old"


def test_order_insertion_breaks_ties():
    assert winner(("/a/second", {"insertion": 2}), ("/a/first", {"insertion": 1})) == "/a/first"


def test_order_band_beats_depth_and_age():
    assert (
        winner(
            ("/a/old-batch-child", {"band": Band.BATCH, "depth": 3, "root_submitted_ms": 1}),
            ("/a/new-interactive", {"root_submitted_ms": 999}),
        )
        == "/a/new-interactive"
    )


def test_order_input_order_does_not_change_decisions():
    workers = [cpu_worker(f"w{i}", cpu=4) for i in range(5)]
    jobs = [
        job(f"/u/j{i}", cpu_request(cpu=1 + i % 3), replicas=1 + i % 4, insertion=i, band=list(Band)[i % 3])
        for i in range(12)
    ]
    tasks = [t for j in jobs for t in j]
    expected = schedule(snapshot(workers, tasks))
    for seed in range(5):
        shuffled = list(tasks)
        random.Random(seed).shuffle(shuffled)
        assert schedule(snapshot(list(reversed(workers)), shuffled)) == expected


def test_pending_tasks_grouped_by_job_in_replica_order_however_interleaved():
    first, second = job("/a/one", cpu_request(1), replicas=3), job("/a/two", cpu_request(1), replicas=2)
    rng = random.Random(4)
    mixed = [*first, *second]
    rng.shuffle(mixed)
    by_job = pending_by_job(snapshot(ONE_SLOT, mixed))
    assert by_job == {"/a/one": sorted(first, key=lambda t: t.index), "/a/two": sorted(second, key=lambda t: t.index)}
    # Every task of a job goes in, even when its tasks come in several separate runs.
    runs = [first[0], second[0], first[1], second[1], first[2]]
    assert [t.index for t in pending_by_job(snapshot(ONE_SLOT, runs))["/a/one"]] == [0, 1, 2]


def test_order_user_holding_least_first_within_band():
    workers = [cpu_worker("w0", cpu=1), cpu_worker("w1", cpu=4)]
    held = [running("/alice/old/0", "w1", cpu_request(cpu=4), band=Band.INTERACTIVE, user="alice")]
    pending = [job("/alice/big", cpu_request(cpu=1), user="alice", insertion=0), job("/bob/small", user="bob")]
    assert set(placements(schedule(snapshot(workers, pending, held)))) == {"/bob/small/0"}
    # The band still comes first: alice's production job goes before bob's interactive one.
    pending[0] = job("/alice/big", cpu_request(cpu=1), user="alice", band=Band.PRODUCTION)
    assert set(placements(schedule(snapshot(workers, pending, held)))) == {"/alice/big/0"}


def test_order_follows_shares_that_move_between_ticks_with_carried_requests():
    """The same pending tasks tick after tick, while the users' shares swap: the order moves with
    them (the kernel re-sorts the requests it carries)."""
    workers = [cpu_worker(f"w{i}", cpu=1) for i in range(4)]
    pending = (*job("/alice/a", user="alice", insertion=0), *job("/bob/b", user="bob", insertion=1))

    def holding(user: str, worker: str) -> RunningTask:
        return running(f"/{user}/on-{worker}/0", worker, band=Band.INTERACTIVE, user=user)

    # Every worker is full; alice holds two of four, bob one: bob's job is ahead.
    first = replace(
        snapshot(
            workers, (), [holding("carol", "w0"), holding("alice", "w1"), holding("alice", "w2"), holding("bob", "w3")]
        ),
        pending=pending,
    )
    index = ClusterIndex(first.workers, first.running)
    assert not schedule(replace(first, index=index)).assignments
    # carol's task ended (w0 is free) and one of alice's gave way to bob's: alice holds less now.
    moved = (holding("bob", "w1"), holding("alice", "w2"), holding("bob", "w3"))
    second = replace(first, now_ms=first.now_ms + 1000, running=moved)
    result = schedule(replace(second, index=index.advance(second.workers, second.running)))
    assert placements(result) == {"/alice/a/0": "w0"}
    assert decisions_of(result) == decide(second)
