"""Which attempts a backend handed on whose end it has not yet seen stored, across restarts.

A restarted controller adopts the attempts its database holds as live. An attempt whose stop (a
cancel, a preemption) was committed just before a crash is no longer live there, yet it still runs
where the backend sent it (a Slurm job holding its allocation, a worker daemon's process). So a
backend that hands attempts to another party keeps one small file per attempt, written before the
attempt is handed on (a crash in between leaves a marker and nothing running, which costs one stop
that finds nothing) and removed once the attempt's exit is stored. `leftovers` reads them back, so
the restarted controller takes those attempts back to stop them and record their ends. A file holds
the attempt id and, where the other party gave one, its own id for it (a Slurm job id).

Files, not a table: backends never write the database, and a folder of markers costs a restart
only as many reads as attempts were running, however many ran before.
"""

from __future__ import annotations

import os
from pathlib import Path

from iris.backends.staging import safe_dirname


class LiveMarks:
    """One marker per attempt handed on and not yet ended and stored, in `folder`."""

    def __init__(self, folder: Path):
        self.folder = folder
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)

    def _path(self, attempt_id: str) -> Path:
        return self.folder / safe_dirname(attempt_id)

    def put(self, attempt_id: str, external_id: int | None = None) -> None:
        """Records (or updates) the attempt's marker; written whole, so a reader never sees half."""
        path = self._path(attempt_id)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(f"{attempt_id}\n{external_id or ''}\n")
        os.replace(tmp, path)

    def drop(self, attempt_id: str) -> None:
        self._path(attempt_id).unlink(missing_ok=True)

    def read(self) -> dict[str, int | None]:
        """Every marked attempt, with the other party's id for it where one was recorded."""
        found: dict[str, int | None] = {}
        for entry in os.scandir(self.folder):
            if entry.name.endswith(".tmp"):
                continue
            try:
                with open(entry.path) as f:
                    attempt_id, _, external_id = f.read().partition("\n")
            except OSError:
                continue
            if attempt_id:
                found[attempt_id] = int(external_id) if external_id.strip().isdigit() else None
        return found
