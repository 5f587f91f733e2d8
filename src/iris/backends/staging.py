"""Where a job's files land on the host that runs it: folder names derived from ids, and the
unpacking of a job's workspace (its bundle, then its workdir files on top) into a folder.

Every backend kind needs this on whichever host runs the attempt (the controller's for `local`, a
worker's or a Slurm node's otherwise), so it lives beside the contract rather than inside one
backend. Unpacking is idempotent: a marker written last makes a second call for the same folder a
no-op, so replicas and retries of one job share one unpacked copy.
"""

from __future__ import annotations

import hashlib
import io
import re
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

MARKER = ".iris-workspace"


def safe_dirname(ident: str) -> str:
    """A folder name for a job or attempt id: readable, filesystem-safe, and unique per id."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", ident.strip("/"))[:80]
    digest = hashlib.sha1(ident.encode()).hexdigest()[:10]
    return f"{readable}-{digest}"


@dataclass(frozen=True, slots=True)
class Workspace:
    """A job's files as bytes: `bundle` is a zip of its working directory, `files` maps relative
    paths to contents (validated at submit: no absolute paths, no `..`)."""

    job_id: str
    bundle: bytes = b""
    files: Mapping[str, bytes] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not self.bundle and not self.files


def is_staged(folder: Path) -> bool:
    return (folder / MARKER).exists()


def stage_workspace(workspace: Workspace, folder: Path) -> Path:
    """Unpacks the bundle, then the workdir files over it, into `folder` (once); returns `folder`."""
    if is_staged(folder):
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    if workspace.bundle:
        with zipfile.ZipFile(io.BytesIO(workspace.bundle)) as zf:
            zf.extractall(folder)
    for name, data in workspace.files.items():
        target = folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    (folder / MARKER).write_text(workspace.job_id)
    return folder
