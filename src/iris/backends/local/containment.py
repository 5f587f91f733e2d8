"""Keeps every process an attempt starts findable, so stopping the attempt ends all of them.

It decides how an attempt is contained and which processes belong to it. A process group is not
enough: `setsid cmd &` leaves it, and the process would outlive the attempt (holding its GPU). So:

- **cgroup v2** where this host lets us create one (we run as root; the unified hierarchy is found
  through /proc/self/mounts, also in a hybrid layout): each attempt gets its own cgroup, in which
  its wrapper is born (see `spawner`), or which the wrapper joins before it starts the command
  when it had to be started directly. Nothing inside can leave it, `cgroup.procs` lists
  every member, and `cgroup.kill` ends them all at once. The cgroup's path follows from the state
  folder and the attempt's folder name, so a restarted controller finds the cgroups of the attempts
  it re-adopts.
- otherwise, a **child subreaper**: the wrapper is marked with PR_SET_CHILD_SUBREAPER before it
  execs, so a process whose parent dies is re-parented to the wrapper and stays its descendant
  (found with psutil); what is left when the wrapper itself has exited is found by the
  IRIS_ATTEMPT_ID every attempt process inherits.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
import os
import signal
import threading
import time
from pathlib import Path

import psutil

PR_SET_CHILD_SUBREAPER = 36
_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


def _make_subreaper() -> None:  # runs in the child between fork and exec; survives the exec
    _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def cgroup2_mount() -> Path | None:
    """Where the unified (v2) cgroup hierarchy is mounted, if it is."""
    try:
        with open("/proc/self/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) > 2 and parts[2] == "cgroup2":
                    return Path(parts[1])
    except OSError:
        pass
    return None


def _own_cgroup() -> str:
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                if line.startswith("0::"):
                    return line[3:].strip().lstrip("/")
    except OSError:
        pass
    return ""


def cgroup_base(state_root: Path) -> Path | None:
    """The folder under which this state folder's attempts get their cgroups, or None when no cgroup
    can be made here (no cgroup v2, not writable)."""
    mount = cgroup2_mount()
    if mount is None:
        return None
    key = hashlib.sha1(str(state_root.resolve()).encode()).hexdigest()[:12]
    base = mount / _own_cgroup() / f"iris-{key}"
    try:
        base.mkdir(exist_ok=True)
    except OSError:
        return None
    return base if (base / "cgroup.procs").exists() else None


# The cgroups being started under each base, shared by every backend of this process whose
# attempts live under that base (the local backends of one state folder share it): one backend's
# `sweep` must not take another's cgroup made and not joined yet.
_CLAIMS: dict[Path, tuple[threading.Lock, set[str]]] = {}
_CLAIMS_LOCK = threading.Lock()


def _claims(base: Path | None) -> tuple[threading.Lock, set[str]]:
    if base is None:
        return threading.Lock(), set()
    with _CLAIMS_LOCK:
        return _CLAIMS.setdefault(base, (threading.Lock(), set()))


class Containment:
    """One backend's way of containing attempts; `name` is the attempt's folder name."""

    def __init__(self, state_root: Path):
        self.base = cgroup_base(state_root)
        self.kind = "cgroup" if self.base is not None else "subreaper"
        self._claims_lock, self._claimed = _claims(self.base)

    # -- spawn -------------------------------------------------------------------------------------

    def prepare(self, name: str) -> str:
        """Makes the attempt's cgroup; returns the path the wrapper joins ("" with no cgroup)."""
        if self.base is None:
            return ""
        path = self.base / name
        # Until the attempt ends, `sweep` leaves its cgroup alone: between this call and the
        # backend's registering the attempt, the cgroup is empty and held by no record. Made and
        # claimed under the lock a sweep removes under, so no sweep can take it in between.
        with self._claims_lock:
            try:
                try:
                    path.mkdir()
                except FileNotFoundError:  # the folder of this state folder's cgroups was removed
                    self.base.mkdir(exist_ok=True)
                    path.mkdir()
            except FileExistsError:
                if not _renew(path):
                    return ""
            except OSError:
                return ""
            self._claimed.add(name)
        return str(path)

    def preexec(self):
        """The function run in the wrapper before exec, or None when the cgroup contains it."""
        return None if self.base is not None else _make_subreaper

    # -- membership --------------------------------------------------------------------------------

    def members(self, name: str, pid: int, attempt_id: str) -> set[int]:
        """Every live process of the attempt, the wrapper `pid` included while it lives."""
        found: set[int] = set()
        if self.base is not None:
            # The cgroup lists every member, however it left the process group: one small read,
            # where walking the process tree costs a scan of every process on the host.
            try:
                found.update(int(p) for p in (self.base / name / "cgroup.procs").read_text().split())
            except (OSError, ValueError):
                pass
            if pid > 0:
                found.add(pid)
            return found
        if pid > 0:
            try:
                root = psutil.Process(pid)
                found.add(pid)
                found.update(child.pid for child in root.children(recursive=True))
            except psutil.Error:
                pass
        found.update(_marked(attempt_id))
        return found

    def signal(self, name: str, pid: int, attempt_id: str, sig: int) -> None:
        """Sends `sig` to the whole attempt: its process group, and every member however it left it."""
        if sig == signal.SIGKILL and self.base is not None:
            try:
                (self.base / name / "cgroup.kill").write_text("1")
            except OSError:
                pass
        if pid > 0:
            try:
                os.killpg(pid, sig)
            except OSError:
                pass
        for member in self.members(name, pid, attempt_id):
            try:
                os.kill(member, sig)
            except OSError:
                pass

    def end(self, name: str, attempt_id: str) -> None:
        """Kills whatever the attempt left behind after its wrapper exited, and removes its cgroup."""
        if self.base is not None:
            # Most attempts leave nothing behind: their cgroup is then removed at once, and
            # nothing is signalled. Only a populated cgroup refuses, and it is killed below.
            with self._claims_lock:
                try:
                    (self.base / name).rmdir()
                except FileNotFoundError:  # never made: no member can be found through it
                    self._claimed.discard(name)
                    return
                except OSError:
                    pass
                else:
                    self._claimed.discard(name)
                    return
        self.signal(name, -1, attempt_id, signal.SIGKILL)
        with self._claims_lock:
            self._claimed.discard(name)
        if self.base is not None:
            try:
                (self.base / name).rmdir()
            except OSError:
                pass  # members still dying; `sweep` retries

    def sweep(self, live: set[str]) -> None:
        """Removes empty cgroups of attempts no longer held (a retry of `end`). Each is checked
        against the claims at the moment it is removed, not against a list read before: an attempt
        may be starting meanwhile, and its wrapper is born in its cgroup."""
        if self.base is None:
            return
        try:
            paths = list(self.base.iterdir())
        except FileNotFoundError:  # removed by another backend of this state folder that closed first
            return
        for path in paths:
            if path.name in live or not path.is_dir():
                continue
            with self._claims_lock:
                if path.name in self._claimed:
                    continue
                try:
                    path.rmdir()
                except OSError:
                    pass

    def close(self) -> None:
        """Removes this state folder's cgroup folder once every attempt in it has ended."""
        if self.base is None:
            return
        self.sweep(set())
        try:
            self.base.rmdir()
        except OSError:
            pass  # an attempt outlived the stop (it is re-adopted by the next controller)


def _renew(path: Path) -> bool:
    """Replaces a cgroup an earlier controller of this state folder left under an attempt's name
    (its state folder since emptied, or a start that never completed) with a new one. Never reused:
    a process born into a cgroup once ended through `cgroup.kill` may be killed at birth by this
    kernel, and whatever still runs in it belongs to no attempt this controller holds."""
    for _ in range(100):
        try:
            path.rmdir()
        except FileNotFoundError:
            pass
        except OSError:  # still populated: end what is left, then try again
            try:
                (path / "cgroup.kill").write_text("1")
            except OSError:
                pass
            time.sleep(0.01)
            continue
        try:
            path.mkdir()
            return True
        except OSError:
            return False
    return False


def _marked(attempt_id: str) -> set[int]:
    """Processes carrying IRIS_ATTEMPT_ID=`attempt_id` in their environment."""
    marker = f"IRIS_ATTEMPT_ID={attempt_id}".encode()
    found = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as f:
                if marker in f.read().split(b"\0"):
                    found.add(int(entry.name))
        except OSError:
            pass
    found.discard(os.getpid())
    return found
