"""A log follower gets every line and the end of the log, and a read asks the backends only about
the job's own attempts, and only once the job reads as finished."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace

import pytest

from iris.backends.protocol import LogChunk
from iris.controller.api.service import ControllerServiceImpl
from iris.controller.app import Controller
from iris.controller.db import attempts as attempt_db
from iris.controller.db import reads
from iris.core.config import parse_config
from iris.rpc import controller_pb2 as pb
from tests.conftest import wait_until
from tests.controller.helpers import client, launch, wait_state


def test_follower_of_a_stopped_job_gets_every_line_and_the_end(controller, tmp_path):
    go = tmp_path / "go"
    c = client(controller)
    # Many lines at once, then a last one printed only as the job is being stopped.
    script = (
        f"seq 1 3000; trap 'echo stopping; exit 0' TERM; echo ready; "
        f"while [ ! -e {go} ]; do sleep 0.05; done; sleep 30 & wait"
    )
    job = launch(c, "chatty", ["sh", "-c", script])
    result: list = []
    follower = threading.Thread(target=lambda: result.append(controller.cli("job", "logs", "-f", job, timeout=60)))
    follower.start()
    wait_until(lambda: any(ln.text == "ready" for ln in c.fetch_logs(pb.FetchLogsRequest(job_id=job, tail=1)).lines))
    go.touch()
    c.terminate_job(pb.TerminateJobRequest(job_id=job))
    follower.join(timeout=90)
    assert not follower.is_alive() and result, "the follower ends with the job"
    assert result[0].returncode == 0, result[0].stderr
    lines = result[0].stdout.splitlines()
    assert lines[:3001] == [*map(str, range(1, 3001)), "ready"]
    assert "stopping" in lines[3001:], lines[3001:]  # the shell may report its killed sleep around it
    assert wait_state(c, job).job.state == "KILLED"


class _Spy:
    """Counts the calls the reading thread makes on a real backend."""

    def __init__(self, backend):
        self.backend, self.reader = backend, threading.current_thread()
        self.walks, self.lookups = 0, 0
        running, holds = backend.running, backend.holds

        def walk():
            self.walks += threading.current_thread() is self.reader
            return running()

        def lookup(attempt_id):
            self.lookups += threading.current_thread() is self.reader
            return holds(attempt_id)

        backend.running, backend.holds = walk, lookup


@pytest.fixture
def in_process(tmp_path):
    config = parse_config(
        {
            "name": "solo",
            "state_dir": str(tmp_path / "state"),
            "backends": [{"id": "cpu", "kind": "local", "workers": 1, "capacity": {"cpu": 8, "memory": "8G"}}],
            # Its calls are made in process, as from 127.0.0.1 without a token: loopback is opted in.
            "auth": {"task_uids": {"enabled": False}, "trusted_cidrs": ["127.0.0.0/8"]},
            "controller": {"tick_interval": "0.2s"},
        }
    )
    controller = Controller(config)
    controller.start()
    try:
        yield controller, ControllerServiceImpl(controller)
    finally:
        controller.shutdown()


def test_log_read_asks_only_about_the_jobs_own_attempts_once_it_reads_as_finished(in_process):
    controller, service = in_process
    ctx = SimpleNamespace(request_headers={}, client_address="127.0.0.1:1")
    admin = controller.identities.identify(None, "127.0.0.1:1")

    def submit(name: str, command: str) -> str:
        req = pb.LaunchJobRequest(name=name, user="alice", command=["sh", "-c", command])
        return asyncio.run(service.launch_job(req, ctx)).job_id

    others = [submit(f"busy{i}", "sleep 60") for i in range(3)]
    job = submit("short", "echo one; echo two")
    spy = _Spy(controller.backends["cpu"])

    def read() -> pb.FetchLogsResponse:
        return service._fetch_logs(pb.FetchLogsRequest(job_id=job, task_index=-1), admin)

    wait_until(lambda: read().job_finished, message="the job's log to end")
    assert [ln.text for ln in read().lines] == ["one", "two"]
    assert spy.walks == 0, "a read never lists every attempt a backend runs"
    before = spy.lookups
    read()
    assert spy.lookups - before == 1, "a finished job's read asks about its one attempt"
    running = service._fetch_logs(pb.FetchLogsRequest(job_id=others[0], task_index=-1), admin)
    assert not running.job_finished and spy.lookups - before == 1, "a running job's read asks nothing"


def test_finished_jobs_read_returns_each_line_once_in_order_reading_on_only_after_its_page(in_process, monkeypatch):
    controller, service = in_process
    ctx = SimpleNamespace(request_headers={}, client_address="127.0.0.1:1")
    admin = controller.identities.identify(None, "127.0.0.1:1")
    req = pb.LaunchJobRequest(name="counts", user="alice", command=["seq", "1", "20"])
    job = asyncio.run(service.launch_job(req, ctx)).job_id
    wait_until(lambda: service._fetch_logs(pb.FetchLogsRequest(job_id=job, task_index=-1), admin).job_finished)
    attempt_id = f"{job}/0:0"
    backend = controller.backends["cpu"]
    holds, late = backend.holds, iter(range(1000))

    def holds_and_store_more(attempt: str) -> bool:
        # Two lines land between the page's read and the question to the backend.
        with controller.db.write() as conn:
            lines = tuple((0, f"late {next(late)}") for _ in range(2))
            attempt_db.store_logs(conn, [LogChunk(attempt_id, "stdout", lines, 0)])
        return holds(attempt)

    backend.holds = holds_and_store_more
    real, reads_made = reads.fetch_logs, []

    def counted(conn, job_id, task_index, after_seq, tail, limit):
        resp = real(conn, job_id, task_index, after_seq, tail, limit)
        reads_made.append((after_seq, [ln.seq for ln in resp.lines]))
        return resp

    monkeypatch.setattr(reads, "fetch_logs", counted)

    def read(after_seq: int = 0, tail: int = 0, limit: int = 0) -> pb.FetchLogsResponse:
        reads_made.clear()
        request = pb.FetchLogsRequest(job_id=job, task_index=-1, after_seq=after_seq, tail=tail, limit=limit)
        return service._fetch_logs(request, admin)

    def stored() -> list[pb.LogLine]:
        with controller.db.read() as conn:
            return list(real(conn, job, -1, 0, 0, 0).lines)

    whole = read()
    assert [ln.text for ln in whole.lines] == [*map(str, range(1, 21)), "late 0", "late 1"]
    assert whole.job_finished and whole.next_seq == whole.lines[-1].seq
    first, second = reads_made
    assert second == (first[1][-1], [ln.seq for ln in whole.lines[-2:]]), (
        "the second read starts after the first read's last line and returns only the new ones"
    )

    after = stored()[14].seq  # 7 lines follow it; 2 more land during the read: 9, of which 8 fit
    bounded = read(after_seq=after, limit=8)
    assert list(bounded.lines) == [ln for ln in stored() if ln.seq > after][:8]
    assert not bounded.job_finished and bounded.next_seq == bounded.lines[-1].seq, "a line remains to read"
    assert reads_made[1][0] == reads_made[0][1][-1]

    tailed = read(tail=5)
    assert list(tailed.lines) == stored()[-5:] and tailed.job_finished
    assert [ln.text for ln in tailed.lines][-2:] == ["late 4", "late 5"]
    assert reads_made[1] == (reads_made[0][1][-1], [ln.seq for ln in tailed.lines[-2:]])
