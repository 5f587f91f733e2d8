"""Backups and upgrades on real controllers: a backup of a live controller restores every job and
log on a fresh state folder, a restore refuses what would lose state, and a database made by an
earlier release opens and is migrated forward."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sqlite3
import tarfile
from pathlib import Path

from iris.controller.db.schema import MIGRATIONS
from tests.conftest import ControllerFactory
from tests.controller.helpers import client, launch, logs, pb, status, wait_state

RELEASES = Path(__file__).parent / "releases"


def _jobs(c) -> dict[str, str]:
    return {j.job_id: j.state for j in c.list_jobs(pb.ListJobsRequest(limit=1000)).jobs}


def test_backup_of_a_live_controller_restores_every_job_and_log_on_a_fresh_state_folder(tmp_path, controller_factory):
    ctl = controller_factory("keep")
    c = client(ctl)
    done = launch(c, "done", ["sh", "-c", "echo first line; echo second line"])
    failed = launch(c, "failed", ["sh", "-c", "echo before failing; exit 4"], user="bob")
    wait_state(c, done), wait_state(c, failed)
    before = _jobs(c)
    backup = tmp_path / "keep.iris-backup"
    taken = ctl.cli("-o", "json", "cluster", "backup", "--config", str(ctl.config_path), "--to", str(backup))
    assert taken.returncode == 0, taken.stderr
    doc = json.loads(taken.stdout)
    assert doc["cluster"] == "keep" and doc["jobs"] == 2 and doc["has_signing_key"] is True
    assert backup.stat().st_mode & 0o777 == 0o600  # it holds the signing key and jobs' env
    # The controller went on serving while it was copied, and a job submitted after is not in it.
    after = launch(c, "after", ["true"])
    wait_state(c, after)
    ctl.stop()

    fresh = ControllerFactory(tmp_path / "elsewhere")
    try:
        again = fresh("keep", start=False)
        assert not (again.state_dir / "controller.db").exists()
        restored = again.cli("cluster", "restore", "--config", str(again.config_path), "--from", str(backup))
        assert restored.returncode == 0, restored.stderr
        assert "iris cluster start --config" in restored.stdout
        again.start()
        c2 = client(again)
        assert _jobs(c2) == before
        assert logs(c2, done) == ["first line", "second line"]
        assert logs(c2, failed) == ["before failing"]
        assert "exit code 4" in status(c2, failed).job.error
        # The key came back with it: a token minted before the backup is still good.
        key = (ctl.state_dir / "signing_key.pem").read_bytes()
        assert (again.state_dir / "signing_key.pem").read_bytes() == key
        # And the restored cluster runs new work.
        assert wait_state(c2, launch(c2, "new", ["true"])).job.state == "SUCCEEDED"
    finally:
        fresh.close()


def test_restore_refuses_a_running_cluster_another_cluster_and_a_state_folder_in_use(tmp_path, controller_factory):
    ctl = controller_factory("solo")
    c = client(ctl)
    wait_state(c, launch(c, "one", ["true"]))
    backup = tmp_path / "solo.iris-backup"
    assert ctl.cli("cluster", "backup", "--config", str(ctl.config_path), "--to", str(backup)).returncode == 0
    config = str(ctl.config_path)

    running = ctl.cli("cluster", "restore", "--config", config, "--from", str(backup), "--force")
    assert running.returncode == 1 and "is running" in running.stderr and "iris cluster stop" in running.stderr
    assert wait_state(c, launch(c, "two", ["true"])).job.state == "SUCCEEDED"  # untouched, still serving
    ctl.stop()

    in_use = ctl.cli("cluster", "restore", "--config", config, "--from", str(backup))
    assert in_use.returncode == 1 and "already holds a database" in in_use.stderr and "--force" in in_use.stderr

    other = controller_factory("other", start=False)
    wrong = other.cli("cluster", "restore", "--config", str(other.config_path), "--from", str(backup))
    assert wrong.returncode == 1 and "backup of cluster 'solo'" in wrong.stderr
    assert not (other.state_dir / "controller.db").exists()

    junk = tmp_path / "junk.tar"
    with tarfile.open(junk, "w") as tar:
        tar.add(__file__, arcname="../../etc/evil")
    for bad, says in ((junk, "is not an Iris backup"), (tmp_path / "missing", "there is no backup")):
        refused = other.cli("cluster", "restore", "--config", str(other.config_path), "--from", str(bad))
        assert refused.returncode == 3 and says in refused.stderr, refused.stderr
    assert not (other.state_dir / "controller.db").exists()

    # --force moves the database in the way aside rather than losing it.
    forced = ctl.cli("cluster", "restore", "--config", config, "--from", str(backup), "--force")
    assert forced.returncode == 0, forced.stderr
    aside = [p.name for p in ctl.state_dir.iterdir() if p.name.startswith("controller.db.before-restore-")]
    assert len([n for n in aside if not n.endswith(("-wal", "-shm"))]) == 1
    ctl.start()
    assert set(_jobs(client(ctl))) == {"/alice/one"}  # as it was when the backup was taken


def test_controller_opens_a_database_from_an_earlier_release_and_migrates_it(controller_factory):
    ctl = controller_factory("old", start=False)
    ctl.state_dir.mkdir(parents=True, exist_ok=True)
    with gzip.open(RELEASES / "46c86a4.db.gz") as packed, open(ctl.state_dir / "controller.db", "wb") as out:
        shutil.copyfileobj(packed, out)
    os.chmod(ctl.state_dir / "controller.db", 0o600)
    ctl.start()
    c = client(ctl)
    assert _jobs(c) == {"/alice/hello": "SUCCEEDED", "/alice/broken": "FAILED", "/bob/pair": "SUCCEEDED"}
    assert logs(c, "/alice/hello") == ["hello from an older release", "to stderr"]
    assert sorted(logs(c, "/bob/pair")) == ["task 0", "task 1"]
    assert "exit code 3" in status(c, "/alice/broken").job.error
    assert wait_state(c, launch(c, "today", ["true"])).job.state == "SUCCEEDED"
    ctl.stop()
    db = sqlite3.connect(ctl.state_dir / "controller.db")
    applied = {v for (v,) in db.execute("SELECT version FROM schema_migrations")}
    db.close()
    assert applied == {version for version, _, _ in MIGRATIONS}
    newer = sorted(applied - {v for v in applied if v <= 15})
    if newer:  # the log says what the start applied
        assert f"applied migrations {', '.join(map(str, newer))}" in ctl.log.read_text()
