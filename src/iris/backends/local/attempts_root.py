"""Decides where a local backend's attempt folders live: `<state_dir>/attempts`, or a folder of the
controller's own in the temp folder, reached through a link of that name, when tasks could not
reach `<state_dir>` by its path.

A root controller runs each task under a uid of its user's own, in a `work` folder inside its
attempt folder. Many programs turn their working folder into an absolute path and open files by
it (`python3 train.py` does), which needs every folder above it to be searchable by the task's uid.
A state directory under a home folder of mode 0700 (root's own `~/.iris/local`, a `mktemp -d`
folder) is not, so such a task could not open its own workspace. The controller keeps using
`<state_dir>/attempts` by name, now a link; tasks are given the folder's real path, which they can
reach. The folder is made by `mkdtemp` (a fresh name no one else can have made) and, like the state
directory, is passable but not listable by others; once it is gone (a reboot empties /tmp), a folder of that
name someone else made is never adopted, only one this process owns. A state directory every user can pass through,
or a controller whose tasks share its uid, keeps its attempts where they always were.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path


def closed_to_others(folder: Path) -> Path | None:
    """The first folder above `folder` that other users may not pass through, if any."""
    for parent in folder.resolve().parents:
        try:
            if not os.stat(parent).st_mode & 0o001:
                return parent
        except OSError:
            return parent
    return None


def remove_attempts_root(state_dir: Path) -> None:
    """Removes the temp folder `state_dir/attempts` links to, if it is such a link (a cluster thrown away)."""
    link = state_dir / "attempts"
    if link.is_symlink():
        shutil.rmtree(link.resolve(), ignore_errors=True)
        link.unlink(missing_ok=True)


def _own_folder(path: str) -> bool:
    """Whether `path` is a folder (not a link) of this process's uid that no one else may write:
    the temp folder made for the attempts, rather than one of that name someone made since."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o022


def attempts_root(state_dir: Path, tasks_have_own_uids: bool) -> Path:
    """The real folder a local backend keeps its attempt folders in (made when missing)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    link = state_dir / "attempts"
    if link.is_symlink():
        if _own_folder(os.path.join(link.parent, os.readlink(link))):
            return link.resolve()
        # Its folder went (the temp folder was cleared at a reboot, or by a cleaner), and maybe
        # another uid, which knew the name, made one there: make another of this process's own.
        link.unlink()
    elif link.is_dir():
        return link
    if tasks_have_own_uids and closed_to_others(state_dir) is not None:
        folder = Path(tempfile.mkdtemp(prefix="iris-attempts-"))
        os.chmod(folder, 0o711)
        os.symlink(folder, link)
        return folder
    link.mkdir(parents=True, exist_ok=True)
    return link
