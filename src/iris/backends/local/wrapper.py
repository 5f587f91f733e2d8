"""Starts an attempt's wrapper, the one function the local backend and the worker daemon share.

It decides how an attempt's first process comes to exist: a tiny `sh` wrapper that records its pid
and exit code in the attempt's folder, with stdout and stderr appended to files there, started by
the spawner (born inside its cgroup, see `spawner`) where there is one, else directly with
`subprocess.Popen` (the wrapper then joins its cgroup itself). Both callers run attempts the same
way so that a restarted controller, or a restarted daemon, finds them by the same folder layout.
"""

from __future__ import annotations

import logging
import resource
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path

from iris.backends.local.containment import Containment
from iris.backends.local.spawner import Spawned, Spawner, SpawnerGone

log = logging.getLogger("iris.backends.local")

# $0 is the attempt folder, $1 the cgroup to join (or ""), $2 the number of workspace layer folders
# that follow (their contents are copied in order into the attempt's working folder, its cwd: the
# copy runs in the attempt's process, not on the caller's thread); the command comes last. Only shell
# builtins besides `cp` (and `mkdir`, should the attempt's cgroup have gone), so an attempt without a
# workspace costs one extra fork (the command's). A cgroup that cannot be joined leaves the attempt
# contained by its process group alone, and never puts a line in its output.
WRAPPER = (
    'cg=$1; shift; if [ -n "$cg" ]; then [ -d "$cg" ] || mkdir "$cg" 2>/dev/null; '
    '{ echo $$ > "$cg/cgroup.procs"; } 2>/dev/null; fi; '
    'echo $$ > "$0/pid"; n=$1; shift; '
    'while [ "$n" -gt 0 ] && cp -R "$1/." .; do shift; n=$((n-1)); done; '
    'if [ "$n" -ne 0 ]; then echo "iris: cannot copy the job\'s workspace into $PWD" >&2; echo 126 > "$0/exit"; exit 126; fi; '
    '"$@"; rc=$?; echo $rc > "$0/exit"; exit $rc'
)


def wrapper_argv(folder: Path, cgroup: str, argv: list[str]) -> list[str]:
    """The wrapper's own command line for the attempt in `folder` (see WRAPPER): it joins `cgroup`
    ("" when it is born in it), then runs `argv` (the layer count, the layers, the command)."""
    return ["/bin/sh", "-c", WRAPPER, str(folder), cgroup, *argv]


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
) -> tuple[int, Spawned | subprocess.Popen]:
    """Starts the wrapper of the attempt in `folder` on `argv` (the layer count, the layers, the
    command): through `spawner`, born in `cgroup`, or without one (or once it has gone, which
    `gone` is told) directly. Returns its pid and what started it; OSError when it cannot start.
    With `early`, a spawner answers before the wrapper has exec'd (see `Spawner.spawn`). With
    `nproc`, the wrapper and what it runs inherit that process limit (see `Spawner.spawn`), set in
    the child on both paths."""
    if spawner is not None:
        try:
            spawned = spawner.spawn(
                wrapper_argv(folder, "", argv),
                dict(env),
                workdir,
                str(folder / "stdout"),
                str(folder / "stderr"),
                cgroup=cgroup,
                umask=umask,
                subreaper=containment.kind == "subreaper",
                early=early,
                nproc=nproc,
            )
            return spawned.pid, spawned
        except SpawnerGone:
            gone(spawner)
    with open(folder / "stdout", "ab") as out, open(folder / "stderr", "ab") as err:
        popen = subprocess.Popen(
            wrapper_argv(folder, cgroup, argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            cwd=workdir,
            env=env,
            start_new_session=True,
            close_fds=True,
            preexec_fn=_preexec(containment.preexec(), nproc),
            umask=umask,
        )
    return popen.pid, popen


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
