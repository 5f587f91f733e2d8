"""A job's workspace: the bundle (a zip of its working directory) and workdir files it carried,
stored by job in the database and unpacked once into a folder its attempts run in.

Keeping the bytes in the database, not in a path on the submitter's machine, is what lets a job
be handed to a peer (the files travel inline) and rerun after a restart.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path, PurePosixPath

from sqlalchemy.engine import Connection

from iris.backends.staging import Workspace, is_staged, stage_workspace
from iris.controller.db.database import sql
from iris.core.errors import InvalidArgument

BUNDLE = "__bundle__"
MAX_WORKSPACE_BYTES = 64 * 1024**2


def validate_files(bundle: bytes, files: dict[str, bytes]) -> None:
    """Refuses a workspace that could not be unpacked safely (bad zip, paths escaping the folder)."""
    total = len(bundle) + sum(len(v) for v in files.values())
    if total > MAX_WORKSPACE_BYTES:
        raise InvalidArgument(f"the workspace is {total} bytes; at most {MAX_WORKSPACE_BYTES} may travel with a job")
    names = list(files)
    if bundle:
        try:
            with zipfile.ZipFile(io.BytesIO(bundle)) as zf:
                names += zf.namelist()
        except zipfile.BadZipFile:
            raise InvalidArgument("workspace_bundle must be a zip archive") from None
    for name in names:
        path = PurePosixPath(name)
        if not name or path.is_absolute() or ".." in path.parts or name == BUNDLE:
            raise InvalidArgument(f"workspace file name {name!r} must be a relative path inside the workspace")


def store_files(conn: Connection, job_id: str, bundle: bytes, files: dict[str, bytes]) -> None:
    rows = [{"j": job_id, "n": n, "d": d} for n, d in files.items()]
    if bundle:
        rows.append({"j": job_id, "n": BUNDLE, "d": bundle})
    if rows:
        conn.execute(sql("INSERT INTO job_files (job_id, name, data) VALUES (:j, :n, :d)"), rows)


def load_workspace(conn: Connection, job_id: str) -> Workspace:
    """The job's stored files; empty when it carried none."""
    rows = conn.execute(sql("SELECT name, data FROM job_files WHERE job_id = :j"), {"j": job_id}).all()
    bundle = next((bytes(d) for n, d in rows if n == BUNDLE), b"")
    return Workspace(job_id, bundle, {n: bytes(d) for n, d in rows if n != BUNDLE})


def materialize(conn: Connection, job_id: str, folder: Path) -> Path | None:
    """Unpacks the job's workspace into `folder` (once); None when the job carried no files."""
    if is_staged(folder):
        return folder
    workspace = load_workspace(conn, job_id)
    return None if workspace.empty else stage_workspace(workspace, folder)
