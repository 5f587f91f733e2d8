"""Decides whether a request's workspace may be stored, and keeps it: bundles once by content id
(`sha256:<hex>` of the zip) in the `bundles` table, workdir files per job in `job_files`; and when
retention may let a job's workspace go.

The checks of names, sizes and expansion, and the unpacking itself, live in
`iris.backends.staging`, shared with every host that runs attempts; here the API applies them
before anything is written, and unpacks in the request's handler thread, never on the control
tick. Keeping the bytes in the database is what lets a job be handed to a peer (the bundle
travels inline) and rerun after a restart.

A layer (an unpacked bundle, or a set of workdir files) is shared by every job that ships the same
content, so retention removes it, stored bytes and unpacked folder, only once no job still within
retention names it. A submit unpacks its layers before its write transaction names them; the
`LayerPins` it holds meanwhile keep retention from removing a layer between those two steps. A
replaced job's tree is deleted at once, so the layers it named are recorded in `released_layers`
(`delete_job_tree`) for retention to release when it would have released a finished job's.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.engine import Connection

from iris.backends.staging import (
    BundleInfo,
    check_tree,
    files_id,
    inspect_bundle,
    unpack_bundle,
    write_files,
)
from iris.controller.db.database import run_many, sql
from iris.core.errors import InvalidArgument
from iris.core.states import TERMINAL_JOB_STATES

BUNDLE = "__bundle__"  # the name older versions stored a job's bundle under in job_files
MAX_WORKSPACE_BYTES = 64 * 1024**2  # what may travel with one request (bundle + workdir files)

__all__ = ["BundleInfo", "files_id", "inspect_bundle", "unpack_bundle", "write_files"]


def validate_files(bundle: bytes, files: dict[str, bytes]) -> None:
    """Refuses a request whose workspace (bundle plus workdir files) may not travel or be unpacked."""
    total = len(bundle) + sum(len(v) for v in files.values())
    if total > MAX_WORKSPACE_BYTES:
        raise InvalidArgument(f"the workspace is {total} bytes; at most {MAX_WORKSPACE_BYTES} may travel with a job")
    check_tree((name, False) for name in files)
    if any(name == BUNDLE for name in files):
        raise InvalidArgument(f"workspace file name {BUNDLE!r} is reserved")


# -- storage --------------------------------------------------------------------------------------


def bundle_known(conn: Connection, bundle_id: str) -> bool:
    row = conn.execute(
        sql("SELECT 1 FROM bundles WHERE content_id = :c AND data IS NOT NULL"), {"c": bundle_id}
    ).first()
    return row is not None


def load_bundle(conn: Connection, bundle_id: str) -> bytes | None:
    row = conn.execute(sql("SELECT data FROM bundles WHERE content_id = :c"), {"c": bundle_id}).first()
    return None if row is None or row[0] is None else bytes(row[0])


def store_bundle(conn: Connection, info: BundleInfo, data: bytes, now_ms: int) -> None:
    conn.execute(
        sql(
            "INSERT INTO bundles (content_id, size, created_ms, data) VALUES (:c, :s, :now, :d)"
            " ON CONFLICT(content_id) DO UPDATE SET data = excluded.data WHERE bundles.data IS NULL"
        ),
        {"c": info.content_id, "s": info.size, "now": now_ms, "d": data},
    )


def store_files(conn: Connection, job_id: str, files: dict[str, bytes]) -> None:
    """Stores the workdir files of a job `insert_job` has just created, which holds none yet: a
    replaced job's went with its tree (`delete_job_tree`). A job without files costs no statement."""
    if files:
        run_many(
            conn,
            "INSERT INTO job_files (job_id, name, data) VALUES (:j, :n, :d)",
            [{"j": job_id, "n": n, "d": d} for n, d in files.items()],
        )


def job_bundle_id(conn: Connection, job_id: str) -> str:
    """The bundle a job carries ("" for none): a child job without its own runs in its parent's."""
    row = conn.execute(sql("SELECT bundle_id FROM job_config WHERE job_id = :j"), {"j": job_id}).first()
    return row[0] if row else ""


def job_files(conn: Connection, job_id: str) -> dict[str, bytes]:
    rows = conn.execute(sql("SELECT name, data FROM job_files WHERE job_id = :j"), {"j": job_id}).all()
    return {name: bytes(data) for name, data in rows if name != BUNDLE}


# -- retention ------------------------------------------------------------------------------------

_FINISHED = tuple(sorted(s.value for s in TERMINAL_JOB_STATES))


class LayerPins:
    """The layers that requests in flight are about to name, which retention must leave alone.

    A submit holds its layers from before it unpacks them until its job is committed; retention
    removes a layer only while nobody holds it, and holds the lock while it does, so a submit that
    comes second finds the layer gone and unpacks it again (or asks for its bytes). Submits and
    retention run in this one process, so a lock and a count are all it takes.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: Counter[str] = Counter()

    @contextmanager
    def hold(self, *content_ids: str) -> Iterator[None]:
        ids = [c for c in content_ids if c]
        with self._lock:
            self._held.update(ids)
        try:
            yield
        finally:
            with self._lock:
                self._held.subtract(ids)
                for c in ids:
                    if self._held[c] <= 0:
                        del self._held[c]

    @contextmanager
    def removable(self, content_id: str) -> Iterator[bool]:
        """Yields whether `content_id` may be removed now; no submit can take it up until the block ends."""
        with self._lock:
            yield not self._held.get(content_id)


def release_job_files(conn: Connection, job_id: str) -> tuple[str, ...]:
    """Deletes a finished job's own workdir files; returns the layers (bundle, files) it named."""
    row = conn.execute(sql("SELECT bundle_id, workdir_files FROM job_config WHERE job_id = :j"), {"j": job_id}).first()
    conn.execute(sql("DELETE FROM job_files WHERE job_id = :j"), {"j": job_id})
    if row is None:
        return ()
    return tuple(c for c in row if c and c.startswith("sha256:"))


def layer_in_use(conn: Connection, content_id: str, cutoff_ms: int) -> bool:
    """Whether a job within retention (not finished, or finished after `cutoff_ms`) names the layer."""
    return (
        conn.execute(
            sql(
                "SELECT 1 FROM job_config c JOIN jobs j ON j.job_id = c.job_id"
                " WHERE (c.bundle_id = :c OR c.workdir_files = :c)"
                f" AND (j.state NOT IN {_FINISHED} OR j.finished_ms IS NULL OR j.finished_ms > :cutoff) LIMIT 1"
            ),
            {"c": content_id, "cutoff": cutoff_ms},
        ).first()
        is not None
    )


def released_layers_due(conn: Connection, cutoff_ms: int, limit: int) -> list[tuple[str, int]]:
    """Layers of deleted job trees (`delete_job_tree`) released at or before `cutoff_ms`, oldest first."""
    rows = conn.execute(
        sql(
            "SELECT content_id, released_ms FROM released_layers WHERE released_ms <= :cutoff"
            " ORDER BY released_ms LIMIT :n"
        ),
        {"cutoff": cutoff_ms, "n": limit},
    ).all()
    return [(r[0], r[1]) for r in rows]


def forget_released(conn: Connection, content_id: str, released_ms: int) -> None:
    """Drops a layer's release record, unless a later replace has recorded it again since."""
    conn.execute(
        sql("DELETE FROM released_layers WHERE content_id = :c AND released_ms = :r"),
        {"c": content_id, "r": released_ms},
    )


def forget_bundle(conn: Connection, content_id: str) -> None:
    conn.execute(sql("DELETE FROM bundles WHERE content_id = :c"), {"c": content_id})
