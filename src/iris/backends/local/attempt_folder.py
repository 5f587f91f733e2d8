"""Lays out an attempt's folder before its wrapper starts, and decides whom each part belongs to:
the one preparation the local backend and the worker daemon share.

An attempt's folder holds what its wrapper writes (`pid`, `exit`, `stdout`, `stderr`) and its
`work` folder, where the task starts unless its job names a folder of the host. Under a uid of the
task's own (a root controller or daemon), the folder stays the caller's (root's) and becomes 0711:
the task cannot write it, so it cannot plant a link there for the root wrapper to write through,
yet it can pass through to `work`, which is 0700 and its own. A `work` that will be filled with the
job's workspace stays the caller's until the copy is done (`AttemptFolder.stage`): a folder given
to the task's uid first could be filled with links by another task of the same user, and the copy,
running as root, would follow them. The task gets 0077 as its umask, so what it writes stays its
own, and the process limit of its uid (`nproc`), which the wrapper sets before the command drops
to that uid.

Both callers run attempts the same way (see `wrapper`), so that the same layout, permissions and
cleanup hold on every host that runs Iris's attempts as processes.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from iris.backends.local.own_uid import uid_task_env
from iris.backends.staging import stage_tree

WRAPPER_FILES = ("pid", "exit", "stdout", "stderr")
TASK_UMASK = 0o077


@dataclass(frozen=True, slots=True)
class AttemptFolder:
    """An attempt's folder made ready: where its command starts, and as whom."""

    folder: Path
    workdir: str  # where the command starts: the job's own folder on the host, else `home`
    uid: int | None = None  # None: the caller's own uid
    gid: int | None = None
    nproc: int = 0  # the process limit of the task's uid (0: none)

    @property
    def home(self) -> Path:
        """The task's own folder: its working folder unless the job names one, and its HOME."""
        return self.folder / "work"

    @property
    def as_task(self) -> bool:
        return self.uid is not None

    @property
    def umask(self) -> int:
        return TASK_UMASK if self.as_task else -1

    def task_env(self, env: Mapping[str, str]) -> dict[str, str]:
        """`env` as the task gets it: under a uid of its own, with its HOME, PATH and PYTHONPATH
        (see `own_uid.uid_task_env`)."""
        out = dict(env)
        if self.as_task:
            out.update(uid_task_env(out, str(self.home)))
        return out

    def stage(self, layers: Sequence[str], copies: bool = False) -> None:
        """Fills `home` with the job's workspace `layers`, then hands it to the task's uid; with
        `copies`, every file is copied (see `staging.stage_tree`)."""
        stage_tree(layers, self.home, self.uid, self.gid, copies)


def prepare_attempt_folder(
    folder: Path,
    workdir: str = "",
    staged: bool = False,
    uid: int | None = None,
    gid: int | None = None,
    max_processes: int = 0,
    remove: Callable[[Path], None] = lambda path: shutil.rmtree(path, ignore_errors=True),
) -> AttemptFolder:
    """Makes `folder` ready for an attempt that runs under `uid` and `gid` (None: the caller's),
    in `workdir` (a folder of the host; "" for its own `work` folder, filled by `AttemptFolder.stage`
    afterwards when `staged`). A folder left by a start that did not complete is reused, its
    wrapper's files and its `work` folder (maybe altered by the task since, removed by `remove`)
    cleared first. OSError when it cannot be made, or `workdir` is missing."""
    try:
        folder.mkdir(mode=0o700, parents=True)
        stale = False
    except FileExistsError:
        stale = True
        for name in WRAPPER_FILES:
            (folder / name).unlink(missing_ok=True)
    as_task = uid is not None
    group = None if uid is None else (uid if gid is None else gid)
    if as_task:
        os.chmod(folder, 0o711)  # passable to the task's `work`; never writable by it
    home = folder / "work"
    if stale and (staged or as_task):
        remove(home)
    if staged or as_task:
        home.mkdir(mode=0o700)  # the caller's until it is filled and handed over (see the module's doc)
        if as_task and not staged:
            os.chown(home, uid, group)  # type: ignore[arg-type]  # as_task: uid is set
    else:
        home.mkdir(exist_ok=True)
    # Absolute: the task's uid enters it again from where its root wrapper started (see `wrapper`).
    target = os.path.abspath(workdir) if workdir else str(home)
    # Checked here: a spawner answers before the wrapper has entered its folder, and a job's own
    # workdir that is missing is the job's fault, said as such.
    if not os.path.isdir(target):
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), target)
    return AttemptFolder(folder, target, uid, group, max_processes if as_task else 0)
