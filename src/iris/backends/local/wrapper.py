"""Starts an attempt's wrapper, the one function the local backend and the worker daemon share.

It decides how an attempt's first process comes to exist: a tiny `sh` wrapper that records its pid
and exit code in the attempt's folder, with stdout and stderr appended to files there, started by
the spawner (born inside its cgroup, see `spawner`) where there is one, else directly with
`subprocess.Popen` (the wrapper then joins its cgroup itself). Both callers run attempts the same
way so that a restarted controller, or a restarted daemon, finds them by the same folder layout.

The wrapper keeps the caller's uid (root, under a controller that runs tasks as their users): it
writes the attempt's files, which the task must not reach. So it gets none of the job's
environment (see `iris.backends.privileged`): it runs with a fixed one, names every program by
absolute path, and reads the task's environment as a script on its stdin, which it hands on as
fd 3. The command goes through `setpriv` (under a uid of the task's own), also with the fixed
environment, to a shell that now runs as the task: it enters the attempt's working folder as the
task (see `privileged.ENTER_APPLY_ENV`), sources the script and becomes the command.
"""

from __future__ import annotations

import logging
import os
import resource
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from iris.backends.local.containment import Containment
from iris.backends.local.spawner import Spawned, Spawner, SpawnerGone
from iris.backends.privileged import APPLY_ENV, ENTER_APPLY_ENV, SETPRIV, SH, fixed_env, memfd, shell_exports
from iris.core.processes import ATTEMPT_ENV

log = logging.getLogger("iris.backends.local")

# Its stdin is the task's environment (a script, see `privileged.shell_exports`), moved to fd 3 for
# the command. $0 is the attempt folder, $1 the cgroup to join (or ""); the command follows. Its
# working folder is ready before it starts (see `staging.stage_tree`). Only shell builtins (and
# `mkdir`, should the attempt's cgroup have gone), so an attempt costs one extra fork (the
# command's). A cgroup that cannot be joined leaves the attempt contained by its process group
# alone, and never puts a line in its output.
WRAPPER = (
    "exec 3<&0 </dev/null; "
    'cg=$1; shift; if [ -n "$cg" ]; then [ -d "$cg" ] || /bin/mkdir "$cg" 2>/dev/null; '
    '{ echo $$ > "$cg/cgroup.procs"; } 2>/dev/null; fi; '
    'echo $$ > "$0/pid"; '
    '"$@"; rc=$?; echo $rc > "$0/exit"; exit $rc'
)


@dataclass(frozen=True, slots=True)
class WrapperStart:
    """What the wrapper of one attempt is started with: its command line, its own (fixed)
    environment, and the task's environment as the script it reads on stdin."""

    argv: list[str]
    env: dict[str, str]
    stdin: str


def wrapper_start(
    folder: Path,
    cgroup: str,
    argv: list[str],
    env: Mapping[str, str],
    uid: int | None = None,
    gid: int | None = None,
    workdir: str = "",
) -> WrapperStart:
    """How to start the wrapper of the attempt in `folder` on the command `argv` with the task's
    environment `env`: it joins `cgroup` ("" when it is born in it), and runs the command under
    `uid` and `gid` (None: the caller's own), which enters `workdir` itself before anything else
    (the wrapper starts there already, chosen by a process that may enter any folder)."""
    task = [SH, "-c", APPLY_ENV, "sh", *argv]
    if uid is not None:
        group = uid if gid is None else gid
        task = [SH, "-c", ENTER_APPLY_ENV, "sh", workdir or ".", *argv]
        task = [SETPRIV, f"--reuid={uid}", f"--regid={group}", "--clear-groups", "--", *task]
    # The attempt's id stays in the wrapper's own environment: a restarted controller tells the
    # attempt's processes by it (`iris.core.processes.attempt_of`).
    own = fixed_env(**({ATTEMPT_ENV: env[ATTEMPT_ENV]} if ATTEMPT_ENV in env else {}))
    return WrapperStart([SH, "-c", WRAPPER, str(folder), cgroup, *task], own, shell_exports(env, own))


def start_spawner(what: str) -> Spawner | None:
    """A spawner, or None (attempts then start directly) when its helper cannot start."""
    try:
        return Spawner()
    except OSError as exc:
        log.warning("%s starts attempts directly (slower): its helper cannot start: %s", what, exc)
        return None


def start_wrapper(
    spawner: Spawner | None,
    containment: Containment,
    folder: Path,
    cgroup: str,
    argv: list[str],
    workdir: str,
    env: Mapping[str, str],
    umask: int = -1,
    gone: Callable[[Spawner], None] = lambda spawner: None,
    early: bool = False,
    nproc: int = 0,
    uid: int | None = None,
    gid: int | None = None,
) -> tuple[int, Spawned | subprocess.Popen]:
    """Starts the wrapper of the attempt in `folder` on the command `argv`, the command with the task's environment `env` under `uid` and `gid` (None: this
    process's own): through `spawner`, born in `cgroup`, or without one (or once it has gone, which
    `gone` is told) directly. Returns its pid and what started it; OSError when it cannot start.
    With `early`, a spawner answers before the wrapper has exec'd (see `Spawner.spawn`). With
    `nproc`, the wrapper and what it runs inherit that process limit (see `Spawner.spawn`), set in
    the child on both paths."""
    if spawner is not None:
        start = wrapper_start(folder, "", argv, env, uid, gid, workdir)
        try:
            spawned = spawner.spawn(
                start.argv,
                start.env,
                workdir,
                str(folder / "stdout"),
                str(folder / "stderr"),
                cgroup=cgroup,
                umask=umask,
                subreaper=containment.kind == "subreaper",
                early=early,
                nproc=nproc,
                stdin=start.stdin,
            )
            return spawned.pid, spawned
        except SpawnerGone:
            gone(spawner)
    start = wrapper_start(folder, cgroup, argv, env, uid, gid, workdir)
    script = memfd(start.stdin.encode())
    try:
        with output_file(folder / "stdout") as out, output_file(folder / "stderr") as err:
            popen = subprocess.Popen(
                start.argv,
                stdin=script,
                stdout=out,
                stderr=err,
                cwd=workdir,
                env=start.env,
                start_new_session=True,
                close_fds=True,
                preexec_fn=_preexec(containment.preexec(), nproc),
                umask=umask,
            )
    finally:
        os.close(script)
    return popen.pid, popen


def output_file(path: Path) -> BinaryIO:
    """An attempt's output file, opened to append and made 0600 (as the spawner makes it): its
    folder lets the tasks of every uid pass (0711), so only the file's mode keeps one user's output
    from another's tasks, which can name it."""
    return open(path, "ab", opener=lambda name, flags: os.open(name, flags, 0o600))


def _preexec(then: Callable[[], None] | None, nproc: int) -> Callable[[], None] | None:
    """What the directly started wrapper runs before its exec: `then`, after setting the process
    limit `nproc` (none when 0), which its root self is exempt from and a command that drops to a
    task's uid is held to."""
    if not nproc:
        return then

    def limit() -> None:  # runs in the child between fork and exec
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
        if then is not None:
            then()

    return limit
