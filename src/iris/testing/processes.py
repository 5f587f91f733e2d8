"""Which processes belong to a folder or a process group, and what is left of those once stopped.

Through psutil rather than by parsing /proc by hand, like `iris.core.processes`: a zombie counts as
gone, and a process that vanishes mid-question is simply gone.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil

from iris.core.processes import pid_alive

_ENDED = (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
__all__ = ["leftovers", "pid_alive", "process_group", "processes_under"]


def process_group(pgid: int) -> list[int]:
    """The live processes whose process group is `pgid` (a job's process tree on the local backend)."""
    members = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() not in _ENDED:
                members.append(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError, PermissionError):
            continue
    return members


def processes_under(folder: Path) -> list[dict]:
    """Live processes whose command line or working directory lies in `folder` (not this one)."""
    root = str(folder.resolve())
    found = []
    for proc in psutil.process_iter():
        if proc.pid == os.getpid():
            continue
        try:
            command = " ".join(proc.cmdline())
            try:
                cwd = proc.cwd()
            except psutil.AccessDenied:
                cwd = ""
            inside = root in command or cwd == root or cwd.startswith(root + "/")
            if inside and proc.status() not in _ENDED:
                found.append({"pid": proc.pid, "command": command})
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def leftovers(folder: Path, pids: list[int], timeout: float = 5.0) -> list[dict]:
    """What still runs of what was started in `folder` (or as one of `pids`), after giving stopped
    processes up to `timeout` seconds to exit."""
    deadline = time.monotonic() + timeout
    while True:
        left = {p["pid"]: p for p in processes_under(folder)}
        for pid in pids:
            if pid not in left and pid_alive(pid):
                left[pid] = {"pid": pid, "command": "(started here)"}
        if not left or time.monotonic() > deadline:
            return sorted(left.values(), key=lambda p: p["pid"])
        time.sleep(0.05)
