"""A whole pass whose scheduling inputs have not changed since the last scheduling step skips the
step, and every kind of change brings it back at once: a submit, an attempt's exit, a cancel, a
worker's change, a write by another path, a retry backoff or a scheduling deadline coming due."""

from __future__ import annotations

from dataclasses import replace

from iris.backends.protocol import AttemptExit, BackendDescription, BackendEvents, Started, WorkerSnapshot
from iris.controller.db.database import Database, sql
from iris.controller.db.jobs import insert_job
from iris.controller.state.applier import stop_job
from iris.controller.state.tick import ControlLoop
from iris.core.job import JobSpec
from iris.core.resources import Resources


class OneSlotBackend:
    """A backend of one worker with room for one 1-cpu task; attempts run until `exit` is called."""

    id = "cpu"
    kind = "fake"

    def __init__(self) -> None:
        self.worker = WorkerSnapshot("cpu-0", "cpu", Resources(cpu=1, memory=2**30, disk=2**30), {"region": "here"})
        self.more: tuple[WorkerSnapshot, ...] = ()  # workers that joined later
        self.live: set[str] = set()
        self._exits: list[AttemptExit] = []

    def describe(self) -> BackendDescription:
        return BackendDescription(self.id, self.kind)

    def workers(self) -> tuple[WorkerSnapshot, ...]:
        return (self.worker, *self.more)

    def start(self, spec) -> Started:
        self.live.add(spec.attempt_id)
        return Started(spec.attempt_id, pid=0)

    def stop(self, attempt_id: str) -> None:
        self.exit(attempt_id, -15)

    def exit(self, attempt_id: str, code: int) -> None:
        if attempt_id in self.live:
            self.live.discard(attempt_id)
            self._exits.append(AttemptExit(attempt_id, code))

    def running(self) -> frozenset[str]:
        return frozenset(self.live) | {e.attempt_id for e in self._exits}

    def holds(self, attempt_id: str) -> bool:
        return attempt_id in self.running()

    def poll(self) -> BackendEvents:
        return BackendEvents(exits=tuple(self._exits))

    def ack(self, events: BackendEvents) -> None:
        self._exits = [e for e in self._exits if e not in events.exits]

    def discard(self, attempt_ids) -> None:
        pass

    def leftovers(self) -> frozenset[str]:
        return frozenset()

    def adopt(self, records, settled=frozenset()) -> None:
        pass

    def shutdown(self) -> list[str]:
        return []


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def _setup(tmp_path):
    db = Database(tmp_path / "controller.db")
    backend = OneSlotBackend()
    clock = Clock()
    loop = ControlLoop(db, {"cpu": backend}, {}, clock=clock)
    return db, backend, clock, loop


def _submit(db: Database, clock: Clock, name: str, **fields) -> str:
    spec = JobSpec(
        job_id=f"/alice/{name}", user="alice", owner="alice", command=("true",), resources=Resources(cpu=1), **fields
    )
    with db.write() as conn:
        insert_job(conn, spec, int(clock() * 1000))
    return spec.job_id


def _state(db: Database, job_id: str) -> str:
    with db.read() as conn:
        return conn.execute(sql("SELECT state FROM jobs WHERE job_id = :j"), {"j": job_id}).scalar()


def _settle(loop: ControlLoop) -> int:
    """Runs passes until one skips its scheduling step; returns the steps run meanwhile."""
    before = loop.schedules
    for _ in range(10):
        ran = loop.schedules
        loop.tick_once()
        if loop.schedules == ran:
            return loop.schedules - before
    raise AssertionError("every pass scheduled again though nothing changed")


def test_tick_nothing_new_skips_scheduling_and_a_submit_or_exit_schedules_at_once(tmp_path):
    db, backend, clock, loop = _setup(tmp_path)
    first = _submit(db, clock, "first")
    waiting = _submit(db, clock, "waiting")
    _settle(loop)
    assert _state(db, first) == "RUNNING" and _state(db, waiting) == "PENDING"
    steps = loop.schedules
    for _ in range(3):
        clock.now += 1
        loop.tick_once()
    assert loop.schedules == steps  # a backlog with nowhere to go is not decided again each pass
    later = _submit(db, clock, "later")
    loop.tick_once()
    assert loop.schedules == steps + 1 and _state(db, later) == "PENDING"
    _settle(loop)
    (attempt,) = backend.live
    backend.exit(attempt, 0)
    loop.tick_once()  # the exit frees the slot: the waiting job is placed in the same pass
    assert _state(db, first) == "SUCCEEDED" and _state(db, waiting) == "RUNNING"
    db.close()


def test_tick_unchanged_a_cancel_by_another_path_frees_the_slot_at_the_next_pass(tmp_path):
    db, backend, clock, loop = _setup(tmp_path)
    first = _submit(db, clock, "first")
    waiting = _submit(db, clock, "waiting")
    _settle(loop)
    with db.write() as conn:  # as the API's TerminateJob does, outside the tick
        stop_job(conn, first, "stopped by a test", int(clock() * 1000))
    loop.tick_once()  # stops the process (its exit is reported to the next pass)
    loop.tick_once()
    assert _state(db, first) == "KILLED" and _state(db, waiting) == "RUNNING"
    db.close()


def test_tick_unchanged_a_worker_change_schedules_again(tmp_path):
    db, backend, clock, loop = _setup(tmp_path)
    _submit(db, clock, "first")
    waiting = _submit(db, clock, "waiting")
    _settle(loop)
    backend.worker = replace(backend.worker, last_contact_ms=123)  # a report: nothing to decide
    loop.tick_once()
    steps = loop.schedules
    backend.more = (replace(backend.worker, worker_id="cpu-1"),)  # a worker joins
    loop.tick_once()
    assert loop.schedules == steps + 1 and _state(db, waiting) == "RUNNING"
    db.close()


def test_tick_unchanged_a_scheduling_deadline_coming_due_ends_the_waiting_job(tmp_path):
    db, backend, clock, loop = _setup(tmp_path)
    _submit(db, clock, "first")
    waiting = _submit(db, clock, "waiting", scheduling_timeout_s=30.0)
    _settle(loop)
    clock.now += 10
    loop.tick_once()
    assert _state(db, waiting) == "PENDING"
    clock.now += 25  # past the deadline, with no row changed since the last step
    loop.tick_once()
    assert _state(db, waiting) == "UNSCHEDULABLE"
    db.close()


def test_tick_unchanged_a_retry_backoff_ending_places_the_task_again(tmp_path):
    db, backend, clock, loop = _setup(tmp_path)
    flaky = _submit(db, clock, "flaky", max_retries_failure=3)
    _settle(loop)
    (attempt,) = backend.live
    backend.exit(attempt, 1)
    loop.tick_once()
    _settle(loop)
    assert _state(db, flaky) == "PENDING" and not backend.live  # backing off, nothing changes
    clock.now += 3600
    loop.tick_once()
    assert _state(db, flaky) == "RUNNING" and len(backend.live) == 1
    db.close()


def test_tick_unchanged_the_version_ignores_reasons_and_output_but_moves_on_task_writes(tmp_path):
    db, _, clock, loop = _setup(tmp_path)
    job = _submit(db, clock, "one")
    version = loop.loader.inputs_version()
    with db.write() as conn:
        conn.execute(sql("UPDATE jobs SET pending_reason = 'x', log_chars = 5 WHERE job_id = :j"), {"j": job})
    assert loop.loader.inputs_version() == version
    with db.write() as conn:
        conn.execute(sql("UPDATE tasks SET failure_count = 1 WHERE job_id = :j"), {"j": job})
    assert loop.loader.inputs_version() > version
    db.close()


def test_a_pass_that_stores_an_exit_schedules_without_reading_the_inputs_version(tmp_path):
    db, backend, clock, loop = _setup(tmp_path)
    first, second = _submit(db, clock, "first"), _submit(db, clock, "second")
    loop.tick_once()
    (attempt,) = backend.live
    reads = []
    version = loop.loader.inputs_version
    loop.loader.inputs_version = lambda: reads.append(1) or version()  # type: ignore[method-assign]
    backend.exit(attempt, 0)
    loop.tick_once()
    assert reads == [] and _state(db, first) == "SUCCEEDED" and _state(db, second) == "RUNNING"
    loop.tick_once()  # nothing new: the version is read, and the step skipped
    assert reads == [1] and _settle(loop) == 0
