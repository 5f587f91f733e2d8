"""Which Slurm jobs this backend submitted whose end it has not yet seen stored, across restarts.

A restarted controller adopts the attempts its database holds as live. An attempt whose stop (a
cancel, a preemption) was committed just before a crash is no longer live there, yet its Slurm job
still runs and holds its allocation. So the backend keeps one small file per attempt it handed to
Slurm, written before `sbatch` runs (a crash in between leaves a marker and no job, which costs
one `scancel --name` that finds nothing) and removed once the attempt's exit is stored. The files
hold the attempt id and, once known, the Slurm job id, so a leftover is cancelled by id.

Files, not a table: the backend never writes the database, and a folder of markers costs a
restart only as many reads as attempts were running, however many ran before.
"""

from __future__ import annotations

import os
from pathlib import Path

from iris.backends.staging import safe_dirname


class LiveMarks:
    """One marker per attempt submitted and not yet ended and stored, in `folder`."""

    def __init__(self, folder: Path):
        self.folder = folder
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)

    def _path(self, attempt_id: str) -> Path:
        return self.folder / safe_dirname(attempt_id)

    def put(self, attempt_id: str, slurm_id: int | None = None) -> None:
        """Records (or updates) the attempt's marker; written whole, so a reader never sees half."""
        path = self._path(attempt_id)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(f"{attempt_id}\n{slurm_id or ''}\n")
        os.replace(tmp, path)

    def drop(self, attempt_id: str) -> None:
        self._path(attempt_id).unlink(missing_ok=True)

    def read(self) -> dict[str, int | None]:
        """Every marked attempt, with its Slurm job id where one was recorded."""
        found: dict[str, int | None] = {}
        for entry in os.scandir(self.folder):
            if entry.name.endswith(".tmp"):
                continue
            try:
                with open(entry.path) as f:
                    attempt_id, _, slurm_id = f.read().partition("\n")
            except OSError:
                continue
            if attempt_id:
                found[attempt_id] = int(slurm_id) if slurm_id.strip().isdigit() else None
        return found
