"""Decides what a process holding the controller's (or a daemon's) privileges starts with: a fixed
environment, programs named by absolute path, and the job's own environment handed over as data
for the process that has already dropped to the task's uid.

Why. A job's environment is the user's input. Given to a root process, it is the user's code in
that process: `LD_PRELOAD` and `LD_LIBRARY_PATH` choose what the loader maps into it, `PATH`
chooses which `sbatch` or `cp` a bare name runs, `SBATCH_*` and `SLURM_CONF` become options of the
Slurm tools, `BASH_ENV` is a script bash runs first. Filtering names out cannot be complete (each
tool reads its own), so nothing privileged gets the job's env at all: the wrapper, `setpriv`,
the spawner and the Slurm tools run with `fixed_env()`, and the job's env reaches the task as a
script (`shell_exports`) sourced by a shell that already runs under the task's uid, or as the
NUL-separated file `sbatch --export-file` reads (`nul_separated`). Values are secrets, so they
never appear on a command line, which every user can read in /proc/PID/cmdline.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
from collections.abc import Mapping

# Where a privileged step finds the programs it runs by name (it names most by absolute path).
FIXED_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
SETPRIV = "/usr/bin/setpriv"  # util-linux: runs a command under another uid, gid and no extra groups
SH = "/bin/sh"
# A name a POSIX shell can export: the only names that reach a command through a shell, so the
# only ones a job may set (see `iris.controller.api.job_spec.check_env`).
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# The command's shell, under the task's uid: takes its env from the script on fd 3, closes it, and
# becomes the command (a name is looked up on the job's own PATH).
APPLY_ENV = '. /proc/self/fd/3 && exec "$@" 3<&-'
# The same under a uid of the task's own, entering its working folder ($1) first as that uid: the
# root process that started it stood there already, which would leave the task inside a folder its
# uid cannot reach (one below a closed folder, such as another account's 0700 home), and so reading
# what only the closed folder protects. `cd -P` resolves it as the task's uid sees it.
ENTER_APPLY_ENV = 'cd -P -- "$1" && shift && ' + APPLY_ENV


def fixed_env(**extra: str) -> dict[str, str]:
    """The whole environment of a privileged step: FIXED_PATH and `extra` (nothing of the job's)."""
    return {"PATH": FIXED_PATH, **extra}


def program(name: str, search: str | None = None) -> str:
    """The absolute path of `name` on `search` (the controller's own PATH, set by its operator, by
    default), else on FIXED_PATH; `name` itself when it is on neither (running it then fails with
    "not found", which callers report)."""
    if os.path.isabs(name):
        return name
    for path in (os.environ.get("PATH", "") if search is None else search, FIXED_PATH):
        found = shutil.which(name, path=path)
        if found:
            return os.path.abspath(found)
    return name


def shell_exports(env: Mapping[str, str], inherited: Mapping[str, str]) -> str:
    """A script that, sourced by a shell started with `inherited`, leaves exactly `env` exported,
    but for a PATH: one `env` lacks stays `inherited`'s, without which no command would be found.

    Each value is quoted so the shell reads it back byte for byte, newlines and quotes included; a
    name no shell can export (none is admitted since names were checked at submit) is left out, as
    a shell would drop it anyway."""
    lines = [f"unset {name}\n" for name in inherited if name not in env and name != "PATH"]
    lines += [f"export {name}={shlex.quote(value)}\n" for name, value in env.items() if ENV_NAME.match(name)]
    return "".join(lines)


def nul_separated(env: Mapping[str, str]) -> bytes:
    """`env` as NAME=value entries each ended by a NUL byte: what `sbatch --export-file` reads."""
    return b"".join(f"{name}={value}".encode() + b"\0" for name, value in env.items() if ENV_NAME.match(name))


def memfd(data: bytes, name: str = "iris-env") -> int:
    """An anonymous in-memory file holding `data`, open for reading at its start (close-on-exec):
    how an environment is handed to a process without a file on disk or a pipe that could fill."""
    fd = os.memfd_create(name)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
