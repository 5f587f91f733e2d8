"""Decides the PATH a task under a uid of its own is given: the controller's, less the folders that
uid cannot enter.

A root controller often has tools of its own first on its PATH from folders closed to others (a
`pyenv` or `cargo` folder in root's 0700 home). A task under its own uid that looks `python3` up
there finds the shim first and fails with "Permission denied" instead of going on to
`/usr/bin/python3`, because the shell stops at the first match it cannot run. Leaving those folders
out lets the lookup reach a program the task can run; they were of no use to it anyway.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from iris.backends.local.attempts_root import closed_to_others

FALLBACK = "/usr/local/bin:/usr/bin:/bin"  # where none of the controller's folders is open to others


@functools.lru_cache(maxsize=16)
def task_path(path: str) -> str:
    """`path` without the folders other users cannot enter (a folder, or one above it, not o+x)."""
    kept = [p for p in path.split(os.pathsep) if p and _open_to_others(Path(p))]
    return os.pathsep.join(kept) or FALLBACK


def _open_to_others(folder: Path) -> bool:
    try:
        return bool(os.stat(folder).st_mode & 0o001) and closed_to_others(folder) is None
    except OSError:
        return False  # missing: nothing to find there
