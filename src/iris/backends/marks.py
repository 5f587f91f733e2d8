"""Which attempts a backend handed on whose end it has not yet seen stored, across restarts.

A restarted controller adopts the attempts its database holds as live. An attempt whose stop (a
cancel, a preemption) was committed just before a crash is no longer live there, yet it still runs
where the backend sent it (a Slurm job holding its allocation, a worker daemon's process). So a
backend that hands attempts to another party keeps one small file per attempt, written before the
attempt is handed on (a crash in between leaves a marker and nothing running, which costs one stop
that finds nothing) and removed once the attempt's exit is stored. `leftovers` reads them back, so
the restarted controller takes those attempts back to stop them and record their ends. A file holds
the attempt id and, where the other party gave one, its own id for it (a Slurm job id).

A crash can come between two steps here too. One between writing a marker's temporary file and
renaming it leaves the temporary file: the store removes those when it is opened (the controller's
lock on its state folder means no other writer is half-way through one then). One between storing
an attempt's end and removing its marker leaves a marker of an attempt already ended: the controller
finds that end stored and passes the attempt as settled, whose marker is then dropped, nothing
stopped (`forget`).

Files, not a table: backends never write the database, and a folder of markers costs a restart
only as many reads as attempts were running, however many ran before.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from iris.backends.staging import safe_dirname

TMP = ".tmp"  # the suffix of a marker being written


class LiveMarks:
    """One marker per attempt handed on and not yet ended and stored, in `folder`."""

    def __init__(self, folder: Path):
        self.folder = folder
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        for entry in os.scandir(folder):
            if entry.name.endswith(TMP):  # a `put` cut short by a crash, never renamed into place
                Path(entry.path).unlink(missing_ok=True)

    def _path(self, attempt_id: str) -> Path:
        return self.folder / safe_dirname(attempt_id)

    def put(self, attempt_id: str, external_id: int | None = None) -> None:
        """Records (or updates) the attempt's marker; written whole, so a reader never sees half."""
        path = self._path(attempt_id)
        tmp = path.with_name(path.name + TMP)
        tmp.write_text(f"{attempt_id}\n{external_id or ''}\n")
        os.replace(tmp, path)

    def drop(self, attempt_id: str) -> None:
        self._path(attempt_id).unlink(missing_ok=True)

    def forget(
        self, marked: Mapping[str, int | None], kept: Iterable[str], settled: Iterable[str]
    ) -> dict[str, int | None]:
        """Of the `marked` attempts (what `read` found), drops the markers of those `settled` (their
        ends are stored, nothing of them runs) and returns those neither `kept` nor settled: the
        leftovers the database no longer holds, which the backend stops."""
        settled = set(settled)
        for attempt_id in settled & marked.keys():
            self.drop(attempt_id)
        kept = set(kept)
        return {a: i for a, i in marked.items() if a not in kept and a not in settled}

    def read(self) -> dict[str, int | None]:
        """Every marked attempt, with the other party's id for it where one was recorded."""
        found: dict[str, int | None] = {}
        for entry in os.scandir(self.folder):
            if entry.name.endswith(TMP):
                continue
            try:
                with open(entry.path) as f:
                    attempt_id, _, external_id = f.read().partition("\n")
            except OSError:
                continue
            if attempt_id:
                found[attempt_id] = int(external_id) if external_id.strip().isdigit() else None
        return found
