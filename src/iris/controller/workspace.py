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


def materialize(conn: Connection, job_id: str, folder: Path) -> Path | None:
    """Unpacks the job's workspace into `folder` (once); None when the job carried no files."""
    marker = folder / ".iris-workspace"
    if marker.exists():
        return folder
    rows = conn.execute(sql("SELECT name, data FROM job_files WHERE job_id = :j"), {"j": job_id}).all()
    if not rows:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in sorted(rows, key=lambda r: r[0] != BUNDLE):  # the bundle first, files on top
        if name == BUNDLE:
            with zipfile.ZipFile(io.BytesIO(data)) as zf:
                zf.extractall(folder)
        else:
            target = folder / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
    marker.write_text(job_id)
    return folder
