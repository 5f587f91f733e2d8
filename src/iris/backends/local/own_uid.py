"""Decides what a task under a uid of its own is given besides its job's env: a PATH of folders that
uid can enter, the SDK on its PYTHONPATH, a HOME, and its workspace copy, owned by it.

A root controller often has tools of its own first on its PATH from folders closed to others (a
`pyenv` or `cargo` folder in root's 0700 home). A task under its own uid that looks `python3` up
there finds the shim first and fails with "Permission denied" instead of going on to
`/usr/bin/python3`, because the shell stops at the first match it cannot run. Leaving those folders
out lets the lookup reach a program the task can run; they were of no use to it anyway.

The workspace is copied by the controller (the layers sit in its state folder, which the task's
uid may not read) into a folder that is the controller's until the copy is done: a folder handed
to the task's uid first could be filled with links by another of that user's tasks, and the copy,
running as root, would write through them.
"""

from __future__ import annotations

import functools
import os
import shutil
import site
from collections.abc import Mapping, Sequence
from pathlib import Path

import iris
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


def sdk_pythonpath(current: str) -> str:
    """`current` with Iris's own package folder and its dependencies' folder appended.

    A task under its user's uid may be unable to run the interpreter that runs the controller (a
    Python installed under a home folder closed to others), so `python3` on its PATH can be another
    one of the same version: with these folders it can still import the SDK (`iris.client`) that
    tasks use to submit children and register endpoints. Appended, so the task's own choices win.
    """
    parts = [p for p in current.split(os.pathsep) if p]
    return os.pathsep.join(parts + [p for p in _sdk_folders() if p not in parts])


@functools.cache
def _sdk_folders() -> tuple[str, ...]:
    """Iris's package folder and its dependencies' folder (fixed for the process's life)."""
    return (str(Path(iris.__file__).resolve().parent.parent), *site.getsitepackages())


def uid_task_env(env: Mapping[str, str], home: str) -> dict[str, str]:
    """What a task under a uid of its own gets in place of `env`'s HOME, PYTHONPATH and PATH."""
    return {
        "HOME": home,  # the controller's home is not the task's to write
        "PYTHONPATH": sdk_pythonpath(env.get("PYTHONPATH", "")),
        "PATH": task_path(env.get("PATH", "")),
    }


def give_workspace(home: Path, layers: Sequence[str], uid: int, gid: int, fresh: bool = False) -> None:
    """Makes `home` the task's working folder, holding a copy of `layers` in order, owned by `uid`
    and `gid` and closed to everyone else. `fresh`: a folder of that name may be left by a start
    that did not complete (maybe altered by the task since), and is removed first."""
    if fresh:
        shutil.rmtree(home, ignore_errors=True)  # never follows a link out of it
    home.mkdir(mode=0o700)  # the controller's until the copy is done: no one else can enter it
    for layer in layers:
        shutil.copytree(layer, home, dirs_exist_ok=True, symlinks=True)
    if layers:
        for root, dirs, files in os.walk(home):
            for name in (*dirs, *files):
                os.lchown(os.path.join(root, name), uid, gid)
    os.chown(home, uid, gid)
