"""Attacks a user's task would try on a root worker daemon that runs tasks under their users' uids:
each runs as a real task of a real root controller and daemon, and each must fail."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest

from tests.controller.helpers import client, launch, logs, pb, user_token, wait_state
from tests.workers.test_workers_isolation import assigned_uids

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="tasks get uids of their own only under a root daemon")


@pytest.fixture
def closed_folder():
    """A folder others may enter (0755) holding a file others may read (0644), below a folder
    closed to them (0700): as a user's project in her 0700 home, or a file in root's."""
    top = Path(tempfile.mkdtemp(prefix="iris-closed-"))  # 0700, root's
    inner = top / "project"
    inner.mkdir(mode=0o755)
    os.chmod(inner, 0o755)
    (inner / "secret.txt").write_text("closed-secret\n")
    os.chmod(inner / "secret.txt", 0o644)
    try:
        yield inner
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_a_job_naming_a_folder_its_uid_cannot_reach_does_not_run_there(uid_pool, worker_factory, closed_folder):
    """The root daemon enters the job's workdir for it; the task must not end up inside a folder
    its own uid could never reach (and so read what only the closed folder above protects)."""
    worker_factory(uid_pool, "w1")
    alice = client(uid_pool, user_token(uid_pool, "alice"))
    job = launch(alice, "peek", ["sh", "-c", "cat secret.txt; pwd"], workdir=str(closed_folder))
    state = wait_state(alice, job).job.state
    out = logs(alice, job)
    assert "closed-secret" not in out and state == "FAILED", out
    assert any("can't cd" in line for line in out), out
    # A folder its uid may reach it runs in, as before.
    os.chmod(closed_folder.parent, 0o711)
    job = launch(alice, "peek2", ["sh", "-c", "cat secret.txt; pwd"], workdir=str(closed_folder))
    assert wait_state(alice, job).job.state == "SUCCEEDED"
    assert logs(alice, job) == ["closed-secret", str(closed_folder)]


def test_a_container_naming_a_folder_its_uid_cannot_reach_is_not_given_it(
    uid_pool, worker_factory, dockerd, closed_folder
):
    """The root daemon mounts a job's host workdir into its container: a folder below one closed to
    the task's uid must not be mounted (inside, nothing above it is closed any more)."""
    worker_factory(uid_pool, "boxes", "--runtime", "docker", env={"DOCKER_HOST": dockerd.host})
    alice = client(uid_pool, user_token(uid_pool, "alice"))
    req = pb.LaunchJobRequest(
        name="peek", user="alice", command=["sh", "-c", "cat secret.txt"], image=dockerd.image,
        workdir=str(closed_folder), resources=pb.Resources(cpu=0.5, memory_bytes=64 << 20),
    )  # fmt: skip
    job = alice.launch_job(req).job_id
    state = wait_state(alice, job, timeout=60)
    out = logs(alice, job)
    assert "closed-secret" not in out and state.job.state == "FAILED", (out, state.job.error)
    assert "is not a folder its uid" in state.job.error, state.job.error
    # A folder its uid may swap for a link (its own, in /tmp) is not mounted either: the daemon
    # would follow the link it became between the check and the mount.
    own = Path(tempfile.mkdtemp(prefix="iris-own-"))
    try:
        os.chown(own, assigned_uids(uid_pool)["alice"], -1)
        req.workdir, req.name = str(own), "own"
        state = wait_state(alice, alice.launch_job(req).job_id, timeout=60)
        assert state.job.state == "FAILED" and "could replace it with a link" in state.job.error, state.job.error
    finally:
        own.rmdir()
    # Once its uid may pass the folder above, the folder is mounted and the job runs there.
    os.chmod(closed_folder.parent, 0o711)
    req.workdir, req.name = str(closed_folder), "peek2"
    job = alice.launch_job(req).job_id
    assert wait_state(alice, job, timeout=60).job.state == "SUCCEEDED", logs(alice, job)
    assert logs(alice, job) == ["closed-secret"]


def test_a_temp_attempts_folder_someone_else_made_in_its_place_is_never_adopted(tmp_path):
    """A root daemon's (or controller's) attempts live in a `/tmp/iris-attempts-…` folder its tasks
    know the name of (it is in their working folder's path). Once that folder is gone (a reboot's
    empty /tmp, a temp cleaner, the daemon's own cleanup of its leftovers at start), anyone may make
    one of that name: the daemon must make a fresh one of its own rather than run its attempts,
    as root, in a folder another uid owns (and fills with links)."""
    from iris.backends.local.attempts_root import attempts_root

    state = tmp_path / "state"
    os.chmod(tmp_path, 0o700)  # closed to others: its attempts go to a temp folder
    first = attempts_root(state, True)
    assert first.parent == Path(tempfile.gettempdir()) and first.stat().st_uid == os.geteuid()
    shutil.rmtree(first)
    first.mkdir()
    os.chown(first, 200123, 200123)  # the task uid that knew its name made it again
    second = first
    try:
        second = attempts_root(state, True)
        assert second != first and second.stat().st_uid == os.geteuid()
        assert (state / "attempts").resolve() == second and stat.S_IMODE(second.stat().st_mode) == 0o711
        shutil.rmtree(second)
        os.symlink("/etc", second)  # nor a link of that name, to anywhere
        third = attempts_root(state, True)
        assert third not in (first, second) and not third.is_symlink() and third.stat().st_uid == os.geteuid()
        shutil.rmtree(third)
    finally:
        shutil.rmtree(first, ignore_errors=True)
        if second.is_symlink():
            second.unlink()
