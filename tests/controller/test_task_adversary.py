"""Attacks a user's task would try on a root controller's local backend, which runs tasks under
their users' uids: each runs as a real task, and each must fail."""

from __future__ import annotations

import os

import pytest

from tests.controller.helpers import client, launch, logs, user_token, wait_state
from tests.workers.test_workers_adversary import closed_folder  # noqa: F401  # a fixture

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="tasks get uids of their own only under a root controller")


def test_a_job_naming_a_folder_its_uid_cannot_reach_does_not_run_there(controller_factory, closed_folder):  # noqa: F811
    """The controller's spawner (root) starts the wrapper in the job's workdir; the task's uid must
    enter it itself, so a folder below one closed to it stays out of its reach."""
    ctl = controller_factory(auth={"task_uids": {"enabled": True, "range": "200000-299999"}})
    alice = client(ctl, user_token(ctl, "alice"))
    job = launch(alice, "peek", ["sh", "-c", "cat secret.txt; pwd"], workdir=str(closed_folder))
    state = wait_state(alice, job).job.state
    out = logs(alice, job)
    assert "closed-secret" not in out and state == "FAILED", out
    assert any("can't cd" in line for line in out), out
    # Named relative to the controller's folder (this test's), it is the same folder.
    job = launch(alice, "peek-relative", ["cat", "secret.txt"], workdir=os.path.relpath(closed_folder))
    assert wait_state(alice, job).job.state == "FAILED" and any("can't cd" in line for line in logs(alice, job))
    # A folder its uid may reach it runs in, as before.
    os.chmod(closed_folder.parent, 0o711)
    job = launch(alice, "peek2", ["sh", "-c", "cat secret.txt; pwd"], workdir=str(closed_folder))
    assert wait_state(alice, job).job.state == "SUCCEEDED"
    assert logs(alice, job) == ["closed-secret", str(closed_folder)]
