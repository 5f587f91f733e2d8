"""A log follower gets every line and the end of the log, and a read asks the backends only about
the job's own attempts, and only once the job reads as finished."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace

import pytest

from iris.controller.app import Controller
from iris.controller.service import ControllerServiceImpl
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
            "auth": {"task_uids": {"enabled": False}},
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
