"""An attempt's working folder is made off the starting thread: one sealed copy of each file shared
by links, a folder of the task's own, a failure or a stop while it is made reported as the
attempt's end, and the staging threads shared fairly between users."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from pathlib import Path

import pytest

from iris.backends.local.backend import STAGING_REASON, LocalBackend
from iris.backends.protocol import AttemptExit, LaunchSpec
from iris.backends.staging import StagingPool, drop_layer_copies, near_layer, stage_tree, write_files
from iris.core.config import LocalBackendConfig
from iris.core.resources import Resources
from iris.core.states import TaskState
from tests.conftest import wait_until

UID = 232_000


def _layers(tmp_path: Path) -> tuple[Path, Path]:
    lower = tmp_path / "bundles" / "lower"
    lower.mkdir(parents=True)
    (lower / "pkg").mkdir()
    (lower / "pkg" / "a.py").write_text("lower")
    (lower / "run.sh").write_text("echo hi")
    (lower / "run.sh").chmod(0o755)
    (lower / "clash").mkdir()
    upper = tmp_path / "bundles" / write_files(tmp_path, {"pkg/a.py": b"upper", "clash": b"file"}).split(":")[1]
    return lower, tmp_path / "bundles" / upper.name


@pytest.mark.skipif(os.geteuid() != 0, reason="handing folders to another uid needs root")
def test_stage_tree_links_sealed_files_into_folders_of_the_tasks_own(tmp_path):
    lower, upper = _layers(tmp_path)
    dest = tmp_path / "work"
    dest.mkdir(mode=0o700)
    stage_tree((str(lower), str(upper)), dest, UID, UID)
    assert (dest / "pkg" / "a.py").read_text() == "upper" and (dest / "clash").read_text() == "file"
    # The same inode as the shared file, sealed: no write bit, owned by the controller.
    assert os.stat(dest / "run.sh").st_ino == os.stat(lower / "run.sh").st_ino
    assert oct(os.stat(dest / "run.sh").st_mode & 0o777) == "0o555"
    assert oct(os.stat(dest / "pkg" / "a.py").st_mode & 0o777) == "0o444"
    assert os.stat(dest / "run.sh").st_uid == os.getuid()
    assert {os.stat(p).st_uid for p in (dest, dest / "pkg")} == {UID}  # the task may add and remove names


def test_stage_tree_copies_each_file_for_a_task_that_runs_as_root(tmp_path):
    lower, upper = _layers(tmp_path)
    dest = tmp_path / "work"
    dest.mkdir()
    stage_tree((str(lower), str(upper)), dest)
    linked = os.stat(dest / "run.sh").st_ino == os.stat(lower / "run.sh").st_ino
    assert linked == (os.geteuid() != 0)  # permission bits do not stop root: it gets copies
    if not linked:
        (dest / "run.sh").write_text("changed")
        assert (lower / "run.sh").read_text() == "echo hi"


def _spec(attempt_id: str, workspace: tuple[str, ...]) -> LaunchSpec:
    job = attempt_id.split(":")[0].rsplit("/", 1)[0]
    return LaunchSpec(attempt_id, job, 0, 0, "cpu-0", ("true",), {}, Resources(cpu=1), workspace=workspace)


def _exit(backend: LocalBackend, attempt_id: str) -> AttemptExit:
    def ended():
        events = backend.poll()
        backend.ack(events)
        return next((e for e in events.exits if e.attempt_id == attempt_id), None)

    return wait_until(ended, message=f"{attempt_id} to end")


def test_a_workspace_that_cannot_be_staged_ends_its_attempt_with_the_reason(tmp_path):
    backend = LocalBackend(LocalBackendConfig(id="cpu", kind="local"), tmp_path)
    try:
        started = backend.start(_spec("/u/job/0:0", (str(tmp_path / "bundles" / "gone"),)))
        assert not started.running and started.pid == 0  # the tick only recorded it
        assert (("/u/job/0:0", STAGING_REASON)) in backend.poll().waiting
        end = _exit(backend, "/u/job/0:0")
        assert end.outcome == TaskState.FAILED
        assert "the job's files cannot be staged" in end.error and "No such file" in end.error, end.error
    finally:
        backend.shutdown()


def test_an_attempt_stopped_while_its_files_wait_to_be_staged_ends_without_a_process(tmp_path):
    lower, _ = _layers(tmp_path)
    backend = LocalBackend(LocalBackendConfig(id="cpu", kind="local"), tmp_path)
    hold = threading.Event()
    try:
        for _ in range(4):  # every staging thread busy, with room to spare
            backend._stager.submit("other", hold.wait)
        backend.start(_spec("/u/job/0:0", (str(lower),)))
        backend.stop("/u/job/0:0")
        hold.set()
        end = _exit(backend, "/u/job/0:0")
        assert (end.exit_code, end.error) == (143, "")  # as a process stopped by SIGTERM
        assert not list((tmp_path / "attempts").glob("*/work"))
    finally:
        hold.set()
        backend.shutdown()


def test_staging_pool_takes_each_owners_work_in_turn():
    pool = StagingPool(1, "test")
    hold, done = threading.Event(), []
    pool.submit("first", hold.wait)
    for i in range(3):
        pool.submit("alice", lambda i=i: done.append(f"alice-{i}"))
    pool.submit("bob", lambda: done.append("bob"))
    hold.set()
    wait_until(lambda: len(done) == 4)
    assert done == ["alice-0", "bob", "alice-1", "alice-2"]  # bob's one waits for one of alice's, not all
    assert pool.close() == []


def test_a_layer_on_another_filesystem_is_copied_once_and_linked_from_there(tmp_path):
    lower, _ = _layers(tmp_path)
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("no second filesystem (a tmpfs /dev/shm) beside the test's folder")
    root = Path(tempfile.mkdtemp(dir=shm))
    try:
        near = near_layer(str(lower), root)
        assert near != str(lower) and near_layer(str(lower), root) == near  # made once
        works = [root / "a", root / "b"]
        for work in works:
            work.mkdir()
            stage_tree((near,), work, UID, UID)
        assert len({os.stat(w / "pkg" / "a.py").st_ino for w in works}) == 1  # one copy on this filesystem
        drop_layer_copies(root, lambda name: name == lower.name)
        assert Path(near).is_dir()
        shutil.rmtree(lower)
        drop_layer_copies(root, lambda name: (lower.parent / name).is_dir())
        assert not Path(near).exists() and (works[0] / "pkg" / "a.py").read_text() == "lower"
    finally:
        shutil.rmtree(root)
