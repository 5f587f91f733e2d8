"""What output may take of the controller's database, on real controllers: caps count the bytes a
line takes there (not the bytes it was), one user's retained output is bounded, and a disk nearly
full refuses the largest writers' output first while everyone else's work goes on."""

from __future__ import annotations

import sqlite3
import subprocess

import pytest

from iris.controller.db.attempts import stored_size
from tests.conftest import ControllerFactory, wait_until
from tests.controller.helpers import client, launch, logs, pb, wait_state

# One-character lines: the costliest output per byte, about 60 bytes of database per byte printed.
TINY_LINES = "yes | head -c {n}"


def _database(ctl):
    return sqlite3.connect(f"file:{ctl.state_dir / 'controller.db'}?mode=ro", uri=True)


def _stored(ctl, job: str) -> tuple[int, list[str]]:
    """What `job`'s lines take in the database (as the caps count it) and their texts."""
    db = _database(ctl)
    try:
        texts = [t for (t,) in db.execute("SELECT text FROM logs WHERE job_id = ? ORDER BY seq", (job,))]
    finally:
        db.close()
    return sum(stored_size(job, t) for t in texts if not t.startswith("[iris] output")), texts


def _database_bytes(ctl) -> int:
    db = sqlite3.connect(ctl.state_dir / "controller.db")
    try:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        used = db.execute("PRAGMA page_count").fetchone()[0] - db.execute("PRAGMA freelist_count").fetchone()[0]
        return used * db.execute("PRAGMA page_size").fetchone()[0]
    finally:
        db.close()


def test_one_character_lines_are_held_to_the_job_cap_in_database_bytes(controller_factory):
    cap = 1024**2
    ctl = controller_factory(controller={"tick_interval": "1s", "log_max_job_output": cap})
    c = client(ctl)
    before = _database_bytes(ctl)
    # 2 MB of output as one-character lines would be about 120 MB of database, uncapped.
    job = launch(c, "tiny", ["sh", "-c", TINY_LINES.format(n=2_000_000)])
    assert wait_state(c, job, timeout=120).job.state == "SUCCEEDED"
    stored, texts = _stored(ctl, job)
    assert cap - stored_size(job, "y") < stored <= cap
    assert "this job's output over all its attempts takes more than 1 MiB" in texts[-1]
    # And the database grew by about that much, not by 30 times the bytes printed.
    assert _database_bytes(ctl) - before < 2 * cap
    after = launch(c, "after", ["echo", "still here"])
    assert wait_state(c, after).job.state == "SUCCEEDED" and logs(c, after) == ["still here"]


def test_one_users_output_is_bounded_and_others_keep_storing_theirs(controller_factory):
    ctl = controller_factory(
        controller={"tick_interval": "1s", "max_user_log_bytes": "256K", "log_retention": "3s"},
    )
    c = client(ctl)
    first = launch(c, "first", ["sh", "-c", "seq 1 3000"], user="alice")  # about 220 KB stored
    assert wait_state(c, first).job.state == "SUCCEEDED"
    second = launch(c, "second", ["sh", "-c", "seq 1 3000"], user="alice")
    assert wait_state(c, second).job.state == "SUCCEEDED"
    stored_first, _ = _stored(ctl, first)
    stored_second, texts = _stored(ctl, second)
    assert stored_first + stored_second <= 256 * 1024
    assert "the jobs of alice hold" in texts[-1] and "controller.max_user_log_bytes" in texts[-1]
    # Another user's output is stored whole meanwhile.
    bobs = launch(c, "bobs", ["sh", "-c", "seq 1 3000"], user="bob")
    assert wait_state(c, bobs).job.state == "SUCCEEDED"
    assert logs(c, bobs) == [str(i) for i in range(1, 3001)]
    # Once alice's old logs expire, what they counted is hers again.
    wait_until(lambda: not logs(c, first) and not logs(c, second), timeout=30, message="retention")
    third = launch(c, "third", ["sh", "-c", "seq 1 3000"], user="alice")
    assert wait_state(c, third).job.state == "SUCCEEDED"
    assert logs(c, third) == [str(i) for i in range(1, 3001)]


@pytest.fixture
def small_disk(tmp_path):
    """A 48 MB tmpfs (we run as root); skipped where mounting is not allowed."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_nearly_full_disk_refuses_the_largest_writers_output_first(controller_factory, small_disk):
    factory = ControllerFactory(small_disk)
    try:
        ctl = factory(
            "tight",
            controller={"tick_interval": "1s", "min_free_disk": "36M"},
        )
        c = client(ctl)
        # At a pace the controller keeps up with (its spool is given back as it is stored), so that
        # what fills the disk is the database.
        flood = launch(c, "flood", ["sh", "-c", "while :; do seq 1 500; sleep 0.01; done"], user="alice")
        db = ctl.state_dir / "controller.db"

        def refused() -> list[str]:
            with _database(ctl) as conn:
                return [
                    t
                    for (t,) in conn.execute(
                        "SELECT text FROM logs WHERE job_id = ? AND text LIKE '[iris] output dropped%'", (flood,)
                    )
                ]

        wait_until(refused, timeout=120, message="the flood's output refused for the disk")
        assert "the controller's disk has" in refused()[0] and "controller.min_free_disk (36 MiB)" in refused()[0]
        assert len(refused()) == 1  # told once
        # A small writer still gets its output stored, and submits still work.
        small = launch(c, "small", ["echo", "a line of bob's"], user="bob")
        assert wait_state(c, small).job.state == "SUCCEEDED"
        assert logs(c, small) == ["a line of bob's"]
        grown = db.stat().st_size
        c.terminate_job(pb.TerminateJobRequest(job_id=flood))
        assert wait_state(c, flood).job.state == "KILLED"
        assert db.stat().st_size <= grown + 8 * 1024**2  # it stopped growing with the flood
    finally:
        factory.close()
