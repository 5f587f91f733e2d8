"""A full disk under the controller's state folder: writes fail whole with a clear error, /health
says why, nothing acknowledged is lost, and everything resumes once space is freed."""

from __future__ import annotations

import errno
import json
import os
import sqlite3
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from sqlalchemy import event

from iris.backends.local.backend import kill_leftover_attempts
from iris.controller.db.database import Database, sql
from iris.core.errors import DiskFull
from tests.conftest import wait_until
from tests.controller.helpers import client, error_code, launch, logs, status, wait_state


def _health(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url + "/health", timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _fill(folder: Path) -> Path:
    """Writes a file in `folder` until the filesystem has no space left."""
    filler = folder / "filler"
    with open(filler, "wb", buffering=0) as f:
        for size in (1 << 20, 4096, 512):
            try:
                while True:
                    f.write(b"\0" * size)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
    return filler


@pytest.fixture
def small_disk(tmp_path):
    """A 24 MB tmpfs (we run as root); skipped where mounting is not allowed."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_full_disk_refuses_writes_reports_it_and_recovers(controller_factory, small_disk, tmp_path):
    ctl = controller_factory(start=False)
    ctl.state_dir = small_disk / "state"
    ctl.rewrite(state_dir=str(ctl.state_dir))
    flag = tmp_path / "go"
    try:
        ctl.start()
        c = client(ctl)
        job = launch(c, "writer", ["sh", "-c", f"echo before; while [ ! -e {flag} ]; do sleep 0.05; done; echo after"])
        wait_until(lambda: logs(c, job) == ["before"], message="first line stored")
        # Make the next commit need new space: fold the WAL back into the database file.
        db = sqlite3.connect(str(ctl.state_dir / "controller.db"))
        wait_until(lambda: db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0, message="checkpoint")
        db.close()
        filler = _fill(small_disk)

        flag.touch()  # the job ends; its exit cannot be stored while the disk is full
        code, body = wait_until(lambda: (lambda h: h if h[0] == 503 else None)(_health(ctl.url)), message="unhealthy")
        assert "disk is full" in body["problems"][0]
        refused = error_code(lambda: launch(c, "refused", ["true"]))
        assert refused[0] == "unavailable" and "disk is full" in refused[1]
        assert status(c, job).job.state == "RUNNING"  # its exit is held, not lost

        filler.unlink()
        assert wait_state(c, job, timeout=30).job.state in ("SUCCEEDED", "FAILED")
        wait_until(lambda: _health(ctl.url)[0] == 200, message="healthy again")
        again = launch(c, "after", ["echo", "space is back"])
        assert wait_state(c, again).job.state == "SUCCEEDED" and logs(c, again) == ["space is back"]
        assert logs(c, job)[0] == "before"
    finally:
        ctl.stop()
        kill_leftover_attempts(ctl.state_dir)


def test_database_write_on_a_full_database_raises_disk_full_and_changes_nothing(tmp_path):
    db = Database(tmp_path / "controller.db")
    with db.write() as conn:
        conn.execute(sql("CREATE TABLE t (x TEXT)"))
    with db.read() as conn:
        pages = conn.execute(sql("PRAGMA page_count")).scalar()

    @event.listens_for(db.engine, "connect")
    def _limit(dbapi_conn, _record):  # a real SQLITE_FULL: the database may not grow past its size
        dbapi_conn.execute(f"PRAGMA max_page_count = {pages + 1}")

    db.engine.dispose()
    with pytest.raises(DiskFull, match="disk is full"):
        with db.write() as conn:
            conn.execute(sql("INSERT INTO t VALUES (:x)"), [{"x": "y" * 4000} for _ in range(100)])
    with db.read() as conn:
        assert conn.execute(sql("SELECT COUNT(*) FROM t")).scalar() == 0


def test_full_disk_refuses_a_submit_with_workdir_files_as_full_and_recovers(controller_factory, small_disk):
    """A submit's workdir files are staged in the state folder before its rows are written: a full
    disk there refuses it as a full database does (unavailable, retried), not as a fault."""
    ctl = controller_factory(start=False)
    ctl.state_dir = small_disk / "state"
    ctl.rewrite(state_dir=str(ctl.state_dir))
    try:
        ctl.start()
        c = client(ctl)
        filler = _fill(small_disk)
        files = {"data.bin": os.urandom(64 * 1024)}
        refused = error_code(lambda: launch(c, "staged", ["true"], workdir_files=files))
        assert refused[0] == "unavailable" and "disk is full" in refused[1], refused
        filler.unlink()
        job = launch(c, "staged", ["true"], workdir_files=files)
        assert wait_state(c, job).job.state == "SUCCEEDED"
    finally:
        ctl.stop()
        kill_leftover_attempts(ctl.state_dir)
