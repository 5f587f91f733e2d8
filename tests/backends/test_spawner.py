"""The spawner starts each wrapper in its session, files, folder and cgroup, and reports its exit;
when its helper dies, the local backend still sees the exits of what it started and starts
attempts directly."""

from __future__ import annotations

import errno
import os
import select
import signal
import subprocess
from pathlib import Path

import pytest

from iris.backends.local.backend import LocalBackend
from iris.backends.local.containment import Containment
from iris.backends.local.spawner import Spawned, Spawner, SpawnerGone
from iris.backends.local.wrapper import start_wrapper
from iris.backends.protocol import AttemptExit, LaunchSpec
from iris.core.config import LocalBackendConfig
from iris.core.resources import Resources
from tests.backends.local_events import spawned_pid
from tests.conftest import wait_until


@pytest.fixture
def spawner():
    s = Spawner()
    yield s
    s.close()


def _exit_of(spawner: Spawner, started: Spawned) -> int:
    """Waits (the helper's reports, not a timer) for the exit code the helper reports for `started`."""
    found: dict[int, int] = {}

    def reported() -> bool:
        select.select([spawner.exits_fd()], [], [], 0.2)
        reports = spawner.read_exits()
        assert reports is not None, "the helper went away"
        found.update(reports)
        return started.serial in found

    wait_until(reported, message=f"exit of {started.pid} reported")
    return found[started.serial]


def test_spawner_runs_the_command_with_its_env_folder_umask_and_files_and_reports_its_code(spawner, tmp_path):
    out, err = tmp_path / "out", tmp_path / "err"
    started = spawner.spawn(
        ["/bin/sh", "-c", 'echo "$FOO $(pwd) $(umask)"; echo oops >&2; exit 3'],
        {"FOO": "bar", "PATH": os.environ["PATH"]},
        str(tmp_path),
        str(out),
        str(err),
        umask=0o027,
    )
    assert _exit_of(spawner, started) == 3
    assert out.read_text() == f"bar {tmp_path} 0027\n"
    assert err.read_text() == "oops\n"
    assert oct(out.stat().st_mode & 0o777) == "0o600"


def test_spawned_process_and_its_children_hold_the_process_limit_it_is_given(spawner, tmp_path):
    out = tmp_path / "out"
    # The shell's child (`cat`) reads its own limits: inherited from the process the helper started.
    started = spawner.spawn(
        ["/bin/sh", "-c", "/bin/cat /proc/self/limits; true"], {}, str(tmp_path), str(out), str(out), nproc=77
    )
    assert _exit_of(spawner, started) == 0
    (line,) = [line for line in out.read_text().splitlines() if line.startswith("Max processes")]
    assert line.split()[2:4] == ["77", "77"], line


@pytest.mark.parametrize("kind", ["cgroup", "subreaper"])
def test_wrapper_started_directly_hands_its_command_the_process_limit(tmp_path, kind):
    containment = Containment(tmp_path)
    if kind == "subreaper":  # contained by its own pre-exec step, which the limit must not replace
        containment.base, containment.kind = None, "subreaper"
    elif containment.base is None:
        pytest.skip("no writable cgroup v2 here")
    folder = tmp_path / "attempt"
    folder.mkdir()
    argv = ["/bin/cat", "/proc/self/limits"]
    cgroup = containment.prepare(folder.name)
    pid, popen = start_wrapper(None, containment, folder, cgroup, argv, str(tmp_path), {}, nproc=77)
    assert isinstance(popen, subprocess.Popen) and popen.wait(timeout=30) == 0
    out = (folder / "stdout").read_text()
    (line,) = [line for line in out.splitlines() if line.startswith("Max processes")]
    assert line.split()[2:4] == ["77", "77"], line
    assert (folder / "exit").read_text().strip() == "0"
    containment.end(folder.name, "attempt")


def test_spawned_process_leads_its_own_session_and_a_signal_is_reported_as_negative(spawner, tmp_path):
    started = spawner.spawn(["/bin/sleep", "300"], {}, str(tmp_path), os.devnull, os.devnull)
    assert os.getsid(started.pid) == started.pid
    os.kill(started.pid, signal.SIGKILL)
    assert _exit_of(spawner, started) == -signal.SIGKILL


def test_spawner_refuses_a_missing_folder_with_its_errno_and_goes_on_serving(spawner, tmp_path):
    with pytest.raises(OSError) as caught:
        spawner.spawn(["/bin/true"], {}, str(tmp_path / "missing"), os.devnull, os.devnull)
    assert caught.value.errno == errno.ENOENT
    started = spawner.spawn(["/bin/true"], {}, str(tmp_path), os.devnull, os.devnull)
    assert _exit_of(spawner, started) == 0


def test_early_answered_spawn_reports_a_failed_set_up_with_its_exit_and_goes_on_serving(spawner, tmp_path):
    failed = spawner.spawn(["/bin/true"], {}, str(tmp_path / "missing"), os.devnull, os.devnull, early=True)
    assert _exit_of(spawner, failed) == 127
    assert spawner.start_error(failed.serial) == "No such file or directory"
    assert spawner.start_error(failed.serial) is None, "told once"
    out = tmp_path / "out"
    started = spawner.spawn(["/bin/sh", "-c", "echo ran; exit 5"], {}, str(tmp_path), str(out), os.devnull, early=True)
    assert _exit_of(spawner, started) == 5
    assert spawner.start_error(started.serial) is None
    assert out.read_text() == "ran\n"


def test_spawned_process_is_born_in_the_cgroup_it_names(spawner, tmp_path):
    containment = Containment(tmp_path)
    if containment.kind != "cgroup":
        pytest.skip("no writable cgroup v2 on this host")
    cgroup = containment.prepare("a")
    out = tmp_path / "out"
    try:
        started = spawner.spawn(
            ["/bin/cat", "/proc/self/cgroup"], {}, str(tmp_path), str(out), os.devnull, cgroup=cgroup
        )
        assert _exit_of(spawner, started) == 0
        own = [line for line in out.read_text().splitlines() if line.startswith("0::")]
        assert own and cgroup.endswith(own[0][3:])
    finally:
        containment.end("a", "")
        containment.close()


def test_a_cgroup_left_by_an_earlier_controller_is_replaced_not_reused(spawner, tmp_path):
    # An earlier controller of this state folder killed an attempt through its cgroup, then the
    # folder was emptied (a user starting afresh, a test's reused folder) while the cgroup stayed.
    # A process born into a cgroup once killed is killed at birth by some kernels.
    containment = Containment(tmp_path)
    if containment.kind != "cgroup":
        pytest.skip("no writable cgroup v2 on this host")
    stale = Path(containment.prepare("a"))
    (stale / "cgroup.kill").write_text("1")
    containment._claimed.clear()  # as a new controller of the same folder finds it
    cgroup = containment.prepare("a")
    try:
        started = spawner.spawn(["/bin/sh", "-c", "exit 4"], {}, str(tmp_path), os.devnull, os.devnull, cgroup=cgroup)
        assert _exit_of(spawner, started) == 4, "the attempt was killed at birth"
    finally:
        containment.end("a", "")
        containment.close()


def test_spawn_after_the_helper_died_raises_spawner_gone(spawner, tmp_path):
    os.kill(spawner.pid, signal.SIGKILL)
    wait_until(lambda: spawner.read_exits() is None, message="the helper's end seen")
    with pytest.raises(SpawnerGone):
        spawner.spawn(["/bin/true"], {}, str(tmp_path), os.devnull, os.devnull)


def _spec(attempt_id: str, command: str) -> LaunchSpec:
    job = attempt_id.rpartition("/")[0]
    return LaunchSpec(attempt_id, job, 0, 0, "cpu-0", ("sh", "-c", command), dict(os.environ), Resources(cpu=1))


def _exits(backend: LocalBackend, count: int) -> dict[str, AttemptExit]:
    """The first `count` exits the backend reports, by attempt (each acknowledged)."""
    found: dict[str, AttemptExit] = {}

    def reported() -> bool:
        events = backend.poll()
        found.update({e.attempt_id: e for e in events.exits})
        backend.ack(events)
        return len(found) >= count

    wait_until(reported, message=f"{count} exits reported")
    return found


def test_local_backend_outlives_its_helper_exits_are_still_seen_and_attempts_start_directly(tmp_path):
    backend = LocalBackend(LocalBackendConfig(id="cpu", workers=2), tmp_path / "state")
    go = tmp_path / "go"
    wait_for_go = f"while [ ! -e {go} ]; do sleep 0.02; done; exit 4"
    try:
        assert backend._spawner is not None
        started = backend.start(_spec("/u/a/0:0", wait_for_go))
        assert not started.running, "its pid comes later, as an event"
        first = spawned_pid(backend, "/u/a/0:0")
        os.kill(backend._spawner.pid, signal.SIGKILL)
        wait_until(lambda: backend._spawner is None, message="the backend noticed its helper's end")
        second = backend.start(_spec("/u/b/0:0", wait_for_go))  # started directly now
        assert second.running and second.pid not in (0, first)
        Path(go).touch()
        assert {a: e.exit_code for a, e in _exits(backend, 2).items()} == {"/u/a/0:0": 4, "/u/b/0:0": 4}
    finally:
        backend.shutdown()


def test_an_attempt_stopped_before_its_pid_is_known_is_ended_once_its_process_exists(tmp_path):
    backend = LocalBackend(LocalBackendConfig(id="cpu", workers=1), tmp_path / "state")
    ran = tmp_path / "ran"
    try:
        assert backend._spawner is not None
        helper = backend._spawner.pid
        os.kill(helper, signal.SIGSTOP)  # the request waits, unanswered, until the stop is in
        try:
            backend.start(_spec("/u/a/0:0", f"sleep 5; touch {ran}; sleep 300"))
            backend.stop("/u/a/0:0")
        finally:
            os.kill(helper, signal.SIGCONT)
        ended = _exits(backend, 1)["/u/a/0:0"]
        assert ended.exit_code == 128 + signal.SIGTERM, "ended by the stop's SIGTERM, not by its escalation"
        assert not ran.exists()
    finally:
        backend.shutdown()


def test_an_attempt_its_helper_went_without_answering_for_is_reported_lost_and_nothing_of_it_runs(tmp_path):
    backend = LocalBackend(LocalBackendConfig(id="cpu", workers=1), tmp_path / "state")
    ran = tmp_path / "ran"
    try:
        assert backend._spawner is not None
        helper = backend._spawner.pid
        os.kill(helper, signal.SIGSTOP)
        backend.start(_spec("/u/a/0:0", f"touch {ran}"))
        os.kill(helper, signal.SIGKILL)  # it never read the request
        ended = _exits(backend, 1)["/u/a/0:0"]
        assert ended.exit_code is None and "exited before this attempt's process was known" in ended.error
        assert not ran.exists()
        assert backend.running() == frozenset()
        # Attempts after it start directly.
        backend.start(_spec("/u/b/0:0", "exit 6"))
        assert _exits(backend, 1)["/u/b/0:0"].exit_code == 6
    finally:
        backend.shutdown()
