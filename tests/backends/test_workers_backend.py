"""The workers backend's bookkeeping, driven through its two worker calls without a server:
exactly-once log offsets, exits held back until their output arrived, liveness and re-registration."""

from __future__ import annotations

import asyncio

import pytest

from iris.backends.protocol import AdoptRecord, BackendContext, LaunchSpec
from iris.backends.workers.backend import WorkersBackend
from iris.core.config import WorkersBackendConfig
from iris.core.errors import AlreadyExists, PermissionDenied
from iris.core.resources import Resources
from iris.rpc import controller_pb2 as pb


def _backend(tmp_path, grace: float = 30.0) -> WorkersBackend:
    return WorkersBackend(
        WorkersBackendConfig(id="pool", kind="workers"),
        BackendContext("c", tmp_path, "http://x", worker_grace_period=grace),
    )


def _register(backend, name="w1", boot="b1", previous="", attempts=(), principal="w1") -> pb.RegisterWorkerResponse:
    req = pb.RegisterWorkerRequest(
        backend_id="pool", name=name, boot_id=boot, previous_boot_id=previous, attempts=list(attempts),
        capacity=pb.Resources(cpu=4, memory_bytes=1 << 30),
    )  # fmt: skip
    return backend.register_worker(req, principal, False)


def _poll(backend, session, principal="w1", **fields) -> pb.WorkerPollResponse:
    return asyncio.run(backend.worker_poll(pb.WorkerPollRequest(session=session, **fields), principal, False))


def _spec(attempt_id="/u/j/0:0", worker="w1") -> LaunchSpec:
    return LaunchSpec(attempt_id, "/u/j", 0, 0, worker, ("true",), {}, Resources(cpu=1, memory=1))


def test_workers_backend_logs_accepted_once_at_the_held_offset(tmp_path):
    b = _backend(tmp_path)
    session = _register(b).session
    b.start(_spec())
    commands = _poll(b, session).commands
    assert [c.start.attempt_id for c in commands] == ["/u/j/0:0"]
    batch = pb.WorkerLogBatch(attempt_id="/u/j/0:0", stream="stdout", offset=0, data=b"a\nb\n")
    resp = _poll(b, session, acked_seq=commands[0].seq, logs=[batch])
    assert {(o.stream, o.offset) for o in resp.log_offsets} == {("stdout", 4), ("stderr", 0)}
    _poll(b, session, logs=[batch])  # sent again after a lost answer: taken once
    overlap = pb.WorkerLogBatch(attempt_id="/u/j/0:0", stream="stdout", offset=2, data=b"b\nc\n")
    _poll(b, session, logs=[overlap])
    gap = pb.WorkerLogBatch(attempt_id="/u/j/0:0", stream="stdout", offset=99, data=b"z\n")
    assert [o.offset for o in _poll(b, session, logs=[gap]).log_offsets if o.stream == "stdout"] == [6]
    lines = [text for chunk in b.poll().logs for _, text in chunk.lines]
    assert lines == ["a", "b", "c"]


def test_workers_backend_exit_waits_for_its_output(tmp_path):
    b = _backend(tmp_path)
    session = _register(b).session
    b.start(_spec())
    early = pb.WorkerAttemptExit(attempt_id="/u/j/0:0", exit_code=0, has_exit_code=True, stdout_size=2)
    assert not _poll(b, session, exits=[early]).accepted_exits
    assert not b.poll().exits
    batch = pb.WorkerLogBatch(attempt_id="/u/j/0:0", stream="stdout", offset=0, data=b"x\n")
    assert list(_poll(b, session, logs=[batch], exits=[early]).accepted_exits) == ["/u/j/0:0"]
    events = b.poll()
    assert [e.exit_code for e in events.exits] == [0] and events.logs[0].lines[0][1] == "x"
    # held until the tick has recorded the exit, so its reconcile never takes it for a lost attempt
    assert b.running() == frozenset({"/u/j/0:0"})
    b.ack(events)
    assert b.running() == frozenset()


def test_workers_backend_silent_worker_dies_and_is_told_to_kill_on_return(tmp_path):
    b = _backend(tmp_path, grace=0.0)
    session = _register(b).session
    b.start(_spec())
    exits = b.poll().exits  # grace 0: already silent too long
    assert [(e.attempt_id, e.exit_code) for e in exits] == [("/u/j/0:0", None)]
    assert not b.workers()[0].alive
    assert _poll(b, session).reregister
    again = _register(b, attempts=["/u/j/0:0"])
    assert list(again.kill) == ["/u/j/0:0"]


def test_workers_backend_restarted_controller_resumes_from_committed_offsets(tmp_path):
    b = _backend(tmp_path)
    b.adopt([AdoptRecord("/u/j/0:0", "w1", 0, "", 10, 3), AdoptRecord("/u/j/1:0", "w1", 0, "", 0, 0)])
    resp = _register(b, attempts=["/u/j/0:0"])
    assert {(o.attempt_id, o.stream, o.offset) for o in resp.resume} == {
        ("/u/j/0:0", "stdout", 10),
        ("/u/j/0:0", "stderr", 3),
    }
    assert [(e.attempt_id, e.exit_code) for e in b.poll().exits] == [("/u/j/1:0", None)]


def test_workers_backend_name_taken_by_another_daemon_or_principal(tmp_path):
    b = _backend(tmp_path)
    _register(b, boot="b1")
    with pytest.raises(AlreadyExists):
        _register(b, boot="b2")
    _register(b, boot="b3", previous="b1")  # the same daemon's next life takes over at once
    with pytest.raises(PermissionDenied):
        _register(b, boot="b4", previous="b3", principal="intruder")


def test_workers_backend_held_poll_wakes_when_an_attempt_is_placed(tmp_path):
    b = _backend(tmp_path)
    session = _register(b).session

    async def scenario():
        held = asyncio.ensure_future(b.worker_poll(pb.WorkerPollRequest(session=session, wait_ms=10_000), "w1", False))
        await asyncio.sleep(0)  # let the poll park on its event
        await asyncio.to_thread(b.start, _spec())
        return await asyncio.wait_for(held, timeout=5)

    resp = asyncio.run(scenario())
    assert [c.start.attempt_id for c in resp.commands] == ["/u/j/0:0"]


def test_workers_backend_keeps_at_most_the_output_cap_of_an_attempt(tmp_path):
    b = WorkersBackend(
        WorkersBackendConfig(id="pool", kind="workers"), BackendContext("c", tmp_path, "http://x", output_cap=10)
    )
    session = _register(b).session
    b.start(_spec())
    _poll(b, session, acked_seq=_poll(b, session).commands[0].seq)
    first = pb.WorkerLogBatch(attempt_id="/u/j/0:0", stream="stdout", offset=0, data=b"abc\ndef\n")
    flood = pb.WorkerLogBatch(attempt_id="/u/j/0:0", stream="stderr", offset=0, data=b"x" * 200_000 + b"\n")
    offsets = _poll(b, session, logs=[first, flood]).log_offsets
    # Everything sent is taken, so the daemon does not send it again, but past 10 bytes it is dropped.
    assert {(o.stream, o.offset) for o in offsets} == {("stdout", 8), ("stderr", 200_001)}
    more = pb.WorkerLogBatch(attempt_id="/u/j/0:0", stream="stdout", offset=8, data=b"ghi\n" * 1000)
    _poll(b, session, logs=[more])
    lines = [(chunk.stream, text) for chunk in b.poll().logs for _, text in chunk.lines]
    assert lines[:3] == [("stdout", "abc"), ("stdout", "def"), ("stderr", "xx")]
    assert len(lines) == 4 and "output truncated" in lines[3][1] and lines[3][0] == "stderr"
