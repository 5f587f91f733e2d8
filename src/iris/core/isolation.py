"""Says whether the users' tasks a process starts are isolated from each other and from it, and
why not: the one text the controller and a worker daemon both show (at start, in `iris cluster
status`, in `iris worker list`).

Only root can run a task under another uid, so the answer is the process's own euid (and, for a
controller, `auth.task_uids.enabled`); it lives below both, which share nothing else.
"""

from __future__ import annotations

import os


def not_isolated_reason(process: str, configured: bool = True, euid: int | None = None) -> str:
    """Why users' tasks are not kept apart from each other and from `process` (the controller, a
    worker daemon), or "" when they are.

    Per-user uids need `process` to run as root; started as anyone else, or (a controller) with
    `auth.task_uids.enabled: false`, every task runs as that process's own uid, where one user's
    task may read another's files, environment and task token, and the process's own secrets.
    Said at start and in `iris cluster status` / `iris worker list`, so that nobody shares such a
    cluster believing otherwise.
    """
    euid = os.geteuid() if euid is None else euid
    if euid != 0:
        return (
            f"the {process} runs as uid {euid}, not root: every task runs as that uid, so users' tasks are"
            f" not isolated from each other or from the {process} (run it as root for per-user uids;"
            " see docs/security.md)"
        )
    if not configured:
        return (
            "auth.task_uids.enabled is false: every task runs as root, so users' tasks are not isolated"
            f" from each other or from the {process}"
        )
    return ""
