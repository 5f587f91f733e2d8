"""A job of many replicas over a workspace of many files, on a real root controller whose tasks run
under uids of their own: its folders are made off the scheduling thread (another user's job runs
meanwhile), every replica shares one copy of the files, and no task's write reaches another."""

from __future__ import annotations

import io
import os
import tempfile
import zipfile
from pathlib import Path

import pytest

from iris.backends.staging import bundle_folder, content_id
from tests.conftest import wait_until
from tests.controller.helpers import client, launch, logs, status, user_token, wait_state

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="tasks get uids of their own only under a root controller")

FILES = 6_000
REPLICAS = 12
RUNNING_STATES = ("PENDING", "RUNNING")

# Each replica: a new file of its own, an attempt to overwrite a shared file (refused), a shared
# file replaced by one of its own; then it waits for the test's gate and shows what it sees.
REPLICA = (
    'echo "new-$IRIS_TASK_INDEX" > new.txt; '
    "if (echo hacked > d0/f0) 2>/dev/null; then echo WROTE; fi; "
    'rm -f d0/f1 && echo "mine-$IRIS_TASK_INDEX" > d0/f1; '
    'while [ ! -e "$GATE" ]; do sleep 0.05; done; '
    'echo "seen $IRIS_TASK_INDEX $(cat d0/f0) $(cat d0/f1) $(cat new.txt)"'
)


def _workspace(files: int) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        for i in range(files):
            zf.writestr(f"d{i // 100}/f{i % 100}", b"orig")
    return buf.getvalue()


def _regular_files(root: Path) -> list[os.stat_result]:
    out = []
    for folder, _, names in os.walk(root):
        for name in names:
            st = os.lstat(os.path.join(folder, name))
            if not os.path.islink(os.path.join(folder, name)):
                out.append(st)
    return out


@pytest.fixture
def controller(controller_factory):
    backend = {"id": "cpu", "kind": "local", "workers": 4, "capacity": {"cpu": 16, "memory": "64G", "disk": "100G"}}
    return controller_factory(backends=[backend], auth={"task_uids": {"enabled": True, "range": "200000-299999"}})


def test_many_replicas_of_a_big_workspace_share_one_copy_and_others_run_meanwhile(controller):
    alice = client(controller, user_token(controller, "alice"))
    bob = client(controller, user_token(controller, "bob"))
    gate_dir = Path(tempfile.mkdtemp(prefix="iris-gate-"))
    os.chmod(gate_dir, 0o755)  # the tasks' uids look for the gate in it
    gate = gate_dir / "open"
    bundle = _workspace(FILES)
    try:
        big = launch(
            alice, "big", ["sh", "-c", REPLICA], replicas=REPLICAS, workspace_bundle=bundle,
            env={"GATE": str(gate)}, resources={"cpu": 0.5, "memory_bytes": 64 * 1024**2},
        )  # fmt: skip
        # Another user's job right after: it starts and ends while the big one cannot have ended
        # (its replicas wait for the gate), staging or not.
        small = launch(bob, "small", ["true"], user="bob", resources={"cpu": 0.5, "memory_bytes": 64 * 1024**2})
        assert wait_state(bob, small).job.state == "SUCCEEDED"
        assert status(alice, big).job.state in RUNNING_STATES

        # Every replica has its folder and its process: the files under the attempts are the bundle's
        # own files, once, plus each replica's new ones.
        wait_until(
            lambda: sum(1 for t in status(alice, big).tasks if t.state == "RUNNING") == REPLICAS,
            timeout=60,
            message="every replica to run",
        )
        attempts = (controller.state_dir / "attempts").resolve()
        works = [f / "work" for f in attempts.iterdir() if (f / "work").is_dir()]
        assert len(works) == REPLICAS
        wait_until(lambda: all((w / "new.txt").exists() and (w / "d0" / "f1").stat().st_nlink == 1 for w in works))
        linked = [st for w in works for st in _regular_files(w)]
        assert len(linked) == REPLICAS * (FILES + 1)
        inodes = {(st.st_dev, st.st_ino): st.st_size for st in linked}
        shared = {
            (st.st_dev, st.st_ino) for st in _regular_files(bundle_folder(controller.state_dir, content_id(bundle)))
        }
        own = set(inodes) - shared  # each replica's new.txt and its replaced d0/f1
        assert len(own) == 2 * REPLICAS
        assert len(inodes) == FILES - 1 + 2 * REPLICAS  # d0/f1 is every replica's own: not linked any more
        print(f"\n{REPLICAS} replicas x {FILES} files: {len(linked)} names, {len(inodes)} distinct files,"
              f" {sum(inodes.values())} bytes (one copy of the bundle: {FILES * 4})")  # fmt: skip
        for w in works:
            assert oct(os.stat(w / "d0" / "f0").st_mode & 0o777) == "0o444"  # shared, sealed
            assert os.stat(w).st_uid not in (0, os.getuid())  # the folders are the task's own
    finally:
        gate.touch()
    assert wait_state(alice, big, timeout=60).job.state == "SUCCEEDED", logs(alice, big)
    seen = sorted(line for line in logs(alice, big) if line.startswith("seen") or line == "WROTE")
    assert seen == sorted(f"seen {i} orig mine-{i} new-{i}" for i in range(REPLICAS))
    # The shared copy is as it was unpacked, and every replica's folder went with its attempt.
    folder = bundle_folder(controller.state_dir, content_id(bundle))
    assert (folder / "d0" / "f0").read_bytes() == (folder / "d0" / "f1").read_bytes() == b"orig"
    wait_until(lambda: not [f for f in attempts.iterdir() if (f / "work").exists()])
    gate.unlink()
    gate_dir.rmdir()
