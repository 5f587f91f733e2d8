"""Whether a process is alive, when it started, which port it listens on, and whether it was started
for a given attempt: the one place Iris asks the operating system about a pid.

Built on psutil rather than on parsing /proc by hand in every module that needs it: a zombie
counts as gone (its process has ended, only its exit status is left for a parent that may never
collect it), and a process that vanishes between two questions is simply gone.
"""

from __future__ import annotations

import psutil

ATTEMPT_ENV = "IRIS_ATTEMPT_ID"
_ENDED = (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)


def pid_alive(pid: int) -> bool:
    """Whether `pid` is a live, non-zombie process."""
    try:
        return psutil.Process(pid).status() not in _ENDED
    except (psutil.Error, ValueError):
        return False


def attempt_of(pid: int) -> str | None:
    """The attempt id a live process was started for (its IRIS_ATTEMPT_ID), or None when it is
    gone, unreadable, or not an attempt."""
    try:
        proc = psutil.Process(pid)
        if proc.status() in _ENDED:
            return None
        return proc.environ().get(ATTEMPT_ENV)
    except (psutil.Error, ValueError):
        return None


def is_attempt(pid: int, attempt_id: str | None = None) -> bool:
    """Whether `pid` is a live attempt process (of `attempt_id`, when given)."""
    found = attempt_of(pid)
    return found is not None and (attempt_id is None or found == attempt_id)


def started_at(pid: int) -> float | None:
    """When process `pid` started (seconds since the epoch), None when it is gone or a zombie."""
    try:
        proc = psutil.Process(pid)
        if proc.status() in _ENDED:
            return None
        return proc.create_time()
    except (psutil.Error, ValueError):
        return None


def listening_port(pid: int) -> int | None:
    """The TCP port process `pid` listens on (None when none, or it cannot be told)."""
    try:
        conns = psutil.Process(pid).net_connections(kind="tcp")
    except (psutil.Error, OSError, ValueError):
        return None
    return next((c.laddr.port for c in conns if c.status == psutil.CONN_LISTEN), None)
