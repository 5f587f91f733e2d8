"""Ends what attempts left running in a state folder: the one way the local backend, a restarted
worker daemon and a worker's fence (`iris.worker.fence`) kill an attempt they no longer hold.

It imports little (no configuration, no database), so that a worker's fence, a process of its
own, starts in a few tens of milliseconds and can end its daemon's attempts the moment the daemon
dies.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from iris.backends.local.containment import Containment
from iris.backends.staging import LAYER_COPIES
from iris.core.processes import is_attempt

MARKS = ".live"  # under the attempts root: each backend's markers of the attempts it has not seen end


def kill_folder(containment: Containment, folder: Path, attempt_id: str = "") -> int:
    """SIGKILLs the attempt started in `folder` (its cgroup, its wrapper's process group, checked
    to be an attempt's, of `attempt_id` when given): the wrapper's pid, or -1 when none was running."""
    try:
        pid = int((folder / "pid").read_text().strip())
        if not is_attempt(pid, attempt_id or None):
            pid = -1
    except (OSError, ValueError):
        pid = -1
    containment.end(folder.name, attempt_id)
    if pid > 0:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pid = -1
    return pid


def kill_leftover_attempts(state_dir: Path) -> list[int]:
    """SIGKILLs every process of every attempt still running from `state_dir`.

    Attempts outlive a controller that was killed, by design (the next one re-adopts them). When
    no controller will come back for a state folder (a test or a benchmark tearing down), this
    stops what is left: each attempt's cgroup where there is one, and each wrapper's process group,
    checking each pid really is an attempt before signalling it.
    """
    killed: list[int] = []
    root = state_dir / "attempts"
    if not root.exists():
        return killed
    containment = Containment(root)
    # Every attempt folder, not only those with a pid file: a wrapper joins its cgroup before it
    # writes its pid, so one caught in between is still ended through its cgroup.
    for folder in (f for f in root.iterdir() if f.is_dir() and f.name not in (MARKS, LAYER_COPIES)):
        pid = kill_folder(containment, folder)
        if pid > 0:
            killed.append(pid)
    containment.close()
    return killed
