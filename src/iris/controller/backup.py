"""Backups of a cluster's state: one file holding a consistent copy of a live controller's database
and its signing key, and the restore that starts a stopped cluster from one.

The database is copied with SQLite's online backup (`sqlite3.Connection.backup`): it reads one
consistent snapshot while the controller goes on writing (a WAL reader never blocks the writer),
so a backup can be taken at any moment without stopping anything, and every job the API had
acknowledged before it began is in it. Copying the file instead could catch a write half-done, or
miss what still sits in the write-ahead log. The signing key goes with it: without it, every token
the cluster minted (users', workers', peers' trust in it) would be void after a restore.

A backup is a tar file of three members, written 0600 (the key mints any token and the database
holds jobs' env): `controller.db` (journal mode DELETE, one self-contained file), `signing_key.pem`
and `manifest.json` (format, cluster, when, schema version, job count). A restore refuses a running
cluster, a backup of another cluster, and a state folder that already holds a database (unless
forced, which moves the old one aside), and checks the copy's integrity before it takes its place;
the controller then migrates it forward at its next start like any older database.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import sqlite3
import tarfile
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO

from iris.controller import process
from iris.controller.auth.keys import SIGNING_KEY_FILE
from iris.core.config import ClusterConfig
from iris.core.errors import FailedPrecondition, InvalidArgument, NotFound

FORMAT = 1
DATABASE = "controller.db"
MANIFEST = "manifest.json"
_MEMBERS = frozenset({DATABASE, SIGNING_KEY_FILE, MANIFEST})
_MAX_MANIFEST_BYTES = 64 * 1024
_BACKUP_PAGES = 1024  # pages copied per step: the controller's writes interleave between steps


@dataclass(frozen=True)
class BackupInfo:
    """What a backup holds, as its manifest says."""

    format: int
    cluster: str
    created_ms: int
    schema_version: int
    jobs: int
    has_signing_key: bool


def take(config: ClusterConfig, dest: Path) -> BackupInfo:
    """Writes a backup of `config`'s cluster to `dest` (replaced whole, never left half-written)."""
    source = config.state_path / DATABASE
    if not source.exists():
        raise NotFound(
            f"cluster {config.name} has no database at {source}: it has never started, so there is nothing to back up"
        )
    dest = dest.absolute()
    if dest.is_dir():
        raise InvalidArgument(
            f"--to {dest} is a folder; name the backup file to write, e.g. {dest / (config.name + '.iris-backup')}"
        )
    if not dest.parent.is_dir():
        raise InvalidArgument(f"--to {dest}: the folder {dest.parent} does not exist")
    key = config.state_path / SIGNING_KEY_FILE
    with tempfile.TemporaryDirectory(prefix=".iris-backup-", dir=dest.parent) as scratch:
        copy = Path(scratch) / DATABASE
        _online_copy(source, copy)
        schema, jobs = _check(copy)
        info = BackupInfo(FORMAT, config.name, int(time.time() * 1000), schema, jobs, key.exists())
        partial = Path(scratch) / "backup.tar"
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out, tarfile.open(fileobj=out, mode="w") as tar:
            manifest = json.dumps(asdict(info), indent=2).encode()
            entry = tarfile.TarInfo(MANIFEST)
            entry.size, entry.mode, entry.mtime = len(manifest), 0o600, info.created_ms // 1000
            tar.addfile(entry, io.BytesIO(manifest))
            tar.add(copy, arcname=DATABASE, filter=_private)
            if key.exists():
                tar.add(key, arcname=SIGNING_KEY_FILE, filter=_private)
            out.flush()
            os.fsync(out.fileno())
        os.replace(partial, dest)
    return info


def restore(config: ClusterConfig, source: Path, force: bool = False) -> BackupInfo:
    """Puts the backup at `source` in place as `config`'s cluster state; the cluster must be stopped.

    With `force`, a backup of a cluster of another name is taken, and a database already in the
    state folder is moved aside (`controller.db.before-restore-<ms>`) rather than refused."""
    holder = process.lock_holder(config)
    if holder is not None:
        raise FailedPrecondition(
            f"cluster {config.name} is running (pid {holder}, state in {config.state_path}); stop it first"
            " (iris cluster stop), then restore"
        )
    info, _ = _read(source)
    if info.cluster != config.name and not force:
        raise FailedPrecondition(
            f"{source} is a backup of cluster {info.cluster!r}, and this config is cluster {config.name!r};"
            " job ids and tokens name their cluster, so restore it under its own name (or pass --force)"
        )
    state = config.state_path
    target = state / DATABASE
    if target.exists() and not force:
        raise FailedPrecondition(
            f"{state} already holds a database; restore into an empty state folder, or pass --force to"
            f" move it aside (to {DATABASE}.before-restore-<time>) and restore over it"
        )
    process.check_state_dir(config)
    with tempfile.TemporaryDirectory(prefix=".iris-restore-", dir=state) as scratch:
        staged = Path(scratch)
        _, members = _read(source, into=staged)
        _check(staged / DATABASE)
        if target.exists():
            aside = f"{DATABASE}.before-restore-{int(time.time() * 1000)}"
            for suffix in ("", "-wal", "-shm"):
                old = state / (DATABASE + suffix)
                if old.exists():
                    os.replace(old, state / (aside + suffix))
        for suffix in ("-wal", "-shm"):  # a stale log beside the new file would be replayed into it
            (state / (DATABASE + suffix)).unlink(missing_ok=True)
        if SIGNING_KEY_FILE in members:
            os.replace(staged / SIGNING_KEY_FILE, state / SIGNING_KEY_FILE)
        os.replace(staged / DATABASE, target)
    return info


def describe(source: Path) -> BackupInfo:
    """The manifest of the backup at `source`, after checking that it is one."""
    return _read(source)[0]


def _online_copy(source: Path, copy: Path) -> None:
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True, timeout=30)
    try:
        dst = sqlite3.connect(copy)
        try:
            src.backup(dst, pages=_BACKUP_PAGES)
            dst.execute("PRAGMA journal_mode=DELETE")  # one self-contained file, no -wal beside it
        finally:
            dst.close()
    finally:
        src.close()
    os.chmod(copy, 0o600)


def _check(path: Path) -> tuple[int, int]:
    """(schema version, jobs) of the database at `path`; FailedPrecondition when it is damaged."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        verdict = conn.execute("PRAGMA integrity_check").fetchone()[0]
        if verdict != "ok":
            raise FailedPrecondition(f"the database in the backup is damaged ({verdict}); use another backup")
        try:
            schema = conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations").fetchone()[0]
            jobs = conn.execute("SELECT COUNT(*) FROM jobs").fetchone()[0]
        except sqlite3.DatabaseError as exc:
            raise FailedPrecondition(f"the backup's database is not an Iris controller's ({exc})") from None
        return int(schema), int(jobs)
    except sqlite3.DatabaseError as exc:
        raise FailedPrecondition(f"the backup's database cannot be read ({exc}); use another backup") from None
    finally:
        conn.close()


def _read(source: Path, into: Path | None = None) -> tuple[BackupInfo, set[str]]:
    """The manifest and member names of a backup file, refusing anything that is not one of ours;
    with `into`, its database and key are written there (0600), streamed rather than held."""
    not_one = f"{source} is not an Iris backup (iris cluster backup --to FILE writes one)"
    try:
        tar = tarfile.open(source, mode="r:")
    except FileNotFoundError:
        raise NotFound(f"there is no backup at {source}") from None
    except (tarfile.TarError, OSError) as exc:
        raise InvalidArgument(f"{not_one}: {exc}") from None
    seen: set[str] = set()
    manifest = b""
    with tar:
        try:
            for entry in tar:
                if entry.name not in _MEMBERS or not entry.isfile() or entry.name in seen:
                    raise InvalidArgument(f"{not_one}: it holds {entry.name!r}")
                seen.add(entry.name)
                if entry.name == MANIFEST:
                    if entry.size > _MAX_MANIFEST_BYTES:
                        raise InvalidArgument(f"{not_one}: its manifest is {entry.size} bytes")
                    manifest = _member(tar, entry).read()
                elif into is not None:
                    fd = os.open(into / entry.name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                    with os.fdopen(fd, "wb") as out:
                        shutil.copyfileobj(_member(tar, entry), out, 1024 * 1024)
                        out.flush()
                        os.fsync(out.fileno())
        except tarfile.TarError as exc:
            raise InvalidArgument(f"{not_one}: {exc}") from None
    if MANIFEST not in seen or DATABASE not in seen:
        raise InvalidArgument(f"{not_one}: it lacks its {MANIFEST if MANIFEST not in seen else DATABASE}")
    try:
        info = BackupInfo(**json.loads(manifest))
    except (ValueError, TypeError) as exc:
        raise InvalidArgument(f"{not_one}: its manifest cannot be read ({exc})") from None
    if info.format != FORMAT:
        raise FailedPrecondition(f"{source} is a backup of format {info.format}; this Iris reads format {FORMAT}")
    return info, seen


def _member(tar: tarfile.TarFile, entry: tarfile.TarInfo) -> IO[bytes]:
    extracted = tar.extractfile(entry)
    assert extracted is not None  # a regular file, checked by the caller
    return extracted


def _private(entry: tarfile.TarInfo) -> tarfile.TarInfo:
    entry.mode, entry.uid, entry.gid, entry.uname, entry.gname = 0o600, 0, 0, "", ""
    return entry
