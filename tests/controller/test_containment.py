"""Nothing an attempt starts outlives it: processes that leave its process group (`setsid`) end
when the job is stopped and when its command exits, with a cgroup or, without one, a subreaper."""

from __future__ import annotations

import os
import time

import psutil
import pytest

from iris.backends.local import containment as containment_mod
from iris.backends.local.backend import LocalBackend
from iris.backends.local.containment import Containment
from iris.backends.protocol import LaunchSpec
from iris.core.config import LocalBackendConfig
from iris.core.resources import Resources
from iris.rpc import controller_pb2 as pb
from tests.backends.local_events import spawned_pid
from tests.conftest import wait_until
from tests.controller.helpers import client, launch, logs, pid_alive, status, wait_state

ESCAPE = "setsid sleep 300 & echo escaped=$!"


def _escaped_pid(c, job: str) -> int:
    line = wait_until(lambda: [x for x in logs(c, job) if x.startswith("escaped=")], message="escaped pid")[0]
    return int(line.split("=")[1])


def test_stop_ends_a_process_that_left_the_process_group(controller):
    c = client(controller)
    job = launch(c, "escape", ["sh", "-c", f"{ESCAPE}; sleep 300"])
    wait_state(c, job, {"RUNNING"})
    escaped = _escaped_pid(c, job)
    wrapper = wait_until(lambda: status(c, job).tasks[0].attempts[0].pid, message="pid recorded")
    assert os.getsid(escaped) != os.getsid(wrapper)  # it really left the attempt's session
    c.terminate_job(pb.TerminateJobRequest(job_id=job))
    wait_until(lambda: not pid_alive(escaped), timeout=15, message="escaped process gone")
    assert status(c, job).job.state == "KILLED"


def test_exit_of_the_command_ends_what_it_left_running(controller):
    c = client(controller)
    job = launch(c, "leaver", ["sh", "-c", ESCAPE])
    assert wait_state(c, job).job.state == "SUCCEEDED"
    escaped = _escaped_pid(c, job)
    wait_until(lambda: not pid_alive(escaped), timeout=15, message="escaped process gone")


def test_graceful_controller_stop_ends_escaped_processes(controller):
    c = client(controller)
    job = launch(c, "escape", ["sh", "-c", f"{ESCAPE}; sleep 300"])
    escaped = _escaped_pid(c, job)
    cgroups = Containment(controller.state_dir / "attempts").base
    controller.stop()
    wait_until(lambda: not pid_alive(escaped), timeout=15, message="escaped process gone")
    if cgroups is not None:
        assert not cgroups.exists()  # the controller's cgroup folder goes with it


@pytest.fixture
def subreaper_backend(tmp_path, monkeypatch):
    monkeypatch.setattr(containment_mod, "cgroup_base", lambda root: None)
    backend = LocalBackend(LocalBackendConfig(id="cpu"), tmp_path)
    assert backend.containment.kind == "subreaper"
    yield backend
    backend.shutdown()


def _spec(attempt_id: str, command: str) -> LaunchSpec:
    job, _, rest = attempt_id.rpartition("/")
    return LaunchSpec(attempt_id, job, 0, 0, "cpu-0", ("sh", "-c", command), dict(os.environ), Resources(cpu=1))


def _escaped_from_spool(backend: LocalBackend, attempt_id: str) -> int:
    def find():
        for chunk in backend.poll().logs:
            for _, line in chunk.lines:
                if line.startswith("escaped="):
                    return int(line.split("=")[1])
        return None

    return wait_until(find, message="escaped pid")


def test_without_cgroups_a_subreaper_keeps_escaped_processes_and_stop_ends_them(subreaper_backend):
    # The shell that starts the escaping process exits at once, orphaning it.
    subreaper_backend.start(_spec("/u/a/0:0", f"sh -c '{ESCAPE}'; sleep 300"))
    wrapper = spawned_pid(subreaper_backend, "/u/a/0:0")
    escaped = _escaped_from_spool(subreaper_backend, "/u/a/0:0")
    # Orphaned and in its own session, it is re-parented to the wrapper, not to init.
    wait_until(lambda: psutil.Process(escaped).ppid() == wrapper, message="re-parented to the wrapper")
    t0 = time.monotonic()
    subreaper_backend.stop("/u/a/0:0")
    wait_until(lambda: not pid_alive(escaped) and not pid_alive(wrapper), timeout=15, message="tree gone")
    assert time.monotonic() - t0 < 5  # ended by SIGTERM, not by the escalation


def test_without_cgroups_exit_of_the_command_ends_what_it_left_running(subreaper_backend):
    subreaper_backend.start(_spec("/u/b/0:0", ESCAPE))
    escaped = _escaped_from_spool(subreaper_backend, "/u/b/0:0")
    wait_until(lambda: any(e.attempt_id == "/u/b/0:0" for e in subreaper_backend.poll().exits), message="exit")
    wait_until(lambda: not pid_alive(escaped), timeout=15, message="escaped process gone")


def test_a_backends_sweep_leaves_the_cgroup_another_backend_is_starting(tmp_path):
    """Two local backends of one state folder share its cgroup folder: one's sweep, while another
    has made an attempt's cgroup and not started its wrapper in it yet, left that attempt to fail
    with "No such file or directory"."""
    cpu, gpu = Containment(tmp_path), Containment(tmp_path)
    if cpu.base is None:
        pytest.skip("no writable cgroup v2 here: attempts are contained by a subreaper")
    try:
        path = gpu.prepare("alice_gpu-hog_0_0-abc")
        cpu.sweep(live=set())
        assert os.path.isdir(path)
        gpu.end("alice_gpu-hog_0_0-abc", "/alice/gpu-hog/0:0")
        cpu.sweep(live=set())
        assert not os.path.exists(path)
    finally:
        cpu.close()
        gpu.close()
