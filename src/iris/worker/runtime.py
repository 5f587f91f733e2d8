"""How a worker runs attempts as processes: one process group each, output in files, exits recorded.

Each attempt gets a folder under `<work_dir>/attempts/` with its `stdout` and `stderr` files and the
`pid` and `exit` files that the local backend's shell wrapper writes, and is contained the way the
local backend contains its attempts (its own cgroup where the host allows, else a subreaper), so the
layout, the stopping of every process an attempt started, and the cleanup of a previous life's
leftovers (`kill_leftover_attempts`) are the local backend's own functions. Output
goes to files, not pipes, because the daemon sends it from byte offsets the controller acknowledges:
a line can be sent again after a controller restart only if it is still on disk.

A thread waits on each attempt's process (a worker runs tens of attempts, not thousands), and a
stop escalates from SIGTERM to SIGKILL of the whole group after `STOP_GRACE_S`.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from iris.backends.local.backend import _WRAPPER, kill_leftover_attempts, shell_argv
from iris.backends.local.containment import Containment
from iris.backends.staging import safe_dirname
from iris.core.resources import Device
from iris.rpc import controller_pb2 as pb

STOP_GRACE_S = 10.0
STREAMS = ("stdout", "stderr")


@dataclass
class AttemptRun:
    """One attempt on this worker: where its files are and how it ended (once it has)."""

    attempt_id: str
    folder: Path
    devices: list[int] = field(default_factory=list)
    pid: int = 0
    exited: bool = False
    exit_code: int | None = None
    error: str = ""
    stopping: bool = False
    handle: subprocess.Popen | None = None
    container: str = ""  # the container's name, when it runs in one

    def path(self, stream: str) -> Path:
        return self.folder / stream


class StartFailed(Exception):
    """The attempt cannot start here (a missing executable, a missing image); the job is at fault."""


class ProcessRuntime:
    """Runs attempts as process groups on this host."""

    name = "process"

    def __init__(self, work_dir: Path, device: Device, on_exit: Callable[[], None] = lambda: None):
        self.root = work_dir / "attempts"
        self.root.mkdir(parents=True, exist_ok=True)
        self.device = device
        self._free = set(range(device.count)) if device.kind == "gpu" else set()
        self._on_exit = on_exit
        self._lock = threading.Lock()
        self.attempts: dict[str, AttemptRun] = {}
        self.containment = Containment(self.root)

    # -- lifecycle of the daemon ----------------------------------------------------------------

    def cleanup_leftovers(self) -> list[int]:
        """Kills what a previous life of this daemon left running and clears its folders."""
        killed = kill_leftover_attempts(self.root.parent)
        shutil.rmtree(self.root, ignore_errors=True)
        self.root.mkdir(parents=True, exist_ok=True)
        return killed

    def shutdown(self) -> list[str]:
        with self._lock:
            live = [a for a in self.attempts.values() if not a.exited]
        for run in live:
            self._signal(run, signal.SIGKILL)
        return [r.attempt_id for r in live]

    # -- attempts -------------------------------------------------------------------------------

    def start(self, launch: pb.AttemptLaunch, layers: tuple[str, ...] = ()) -> AttemptRun:
        """Starts an attempt in its own working folder, a copy of `layers` (the workspace) in order."""
        folder = self.root / safe_dirname(launch.attempt_id)
        folder.mkdir(parents=True, exist_ok=True)
        run = AttemptRun(launch.attempt_id, folder)
        with self._lock:
            if launch.attempt_id in self.attempts:
                return self.attempts[launch.attempt_id]
            want = launch.resources.device.count if launch.resources.device.kind == "gpu" else 0
            if want > len(self._free):
                raise StartFailed(f"the attempt needs {want} GPUs; this worker has {len(self._free)} free")
            run.devices = sorted(self._free)[:want]
            self._free.difference_update(run.devices)
            self.attempts[launch.attempt_id] = run
        env = {**os.environ, **dict(launch.env), "IRIS_ATTEMPT_ID": launch.attempt_id}
        if launch.resources.device.kind == "gpu":
            env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, run.devices))
        if launch.workdir and Path(launch.workdir).is_dir():
            workdir, layers = launch.workdir, ()
        else:
            work = folder / "work"
            work.mkdir(exist_ok=True)
            workdir = str(work)
        try:
            self._launch(run, launch, env, workdir, layers)
        except (OSError, StartFailed) as exc:
            self._release(run)
            with self._lock:
                self.attempts.pop(launch.attempt_id, None)
            raise StartFailed(
                f"cannot start the attempt on this worker: {getattr(exc, 'strerror', None) or exc}"
            ) from None
        threading.Thread(target=self._wait, args=(run,), name=f"wait-{run.pid}", daemon=True).start()
        return run

    def _launch(
        self, run: AttemptRun, launch: pb.AttemptLaunch, env: dict, workdir: str, layers: tuple[str, ...]
    ) -> None:
        cgroup = self.containment.prepare(run.folder.name)
        argv = [_WRAPPER, str(run.folder), cgroup, str(len(layers)), *layers, *shell_argv(tuple(launch.command))]
        with open(run.path("stdout"), "ab") as out, open(run.path("stderr"), "ab") as err:
            popen = subprocess.Popen(
                ["/bin/sh", "-c", *argv],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                cwd=workdir,
                env=env,
                start_new_session=True,
                close_fds=True,
                preexec_fn=self.containment.preexec(),
            )
        run.pid, run.handle = popen.pid, popen

    def _wait(self, run: AttemptRun) -> None:
        assert run.handle is not None
        code = run.handle.wait()
        if code < 0:
            code = 128 - code  # killed by a signal: report it the way a shell does
        try:
            code = int((run.folder / "exit").read_text().strip())
        except (OSError, ValueError):
            pass
        self.containment.end(run.folder.name, run.attempt_id)  # what it left behind goes with it
        self._finish(run, code, "")

    def _finish(self, run: AttemptRun, code: int | None, error: str) -> None:
        with self._lock:
            run.exit_code, run.error, run.exited = code, error, True
        self._release(run)
        self._on_exit()

    def _release(self, run: AttemptRun) -> None:
        with self._lock:
            self._free.update(run.devices)
            run.devices = []

    def stop(self, attempt_id: str) -> None:
        with self._lock:
            run = self.attempts.get(attempt_id)
            if run is None or run.exited or run.stopping:
                return
            run.stopping = True
        self._signal(run, signal.SIGTERM)

        def escalate() -> None:
            if not run.exited:
                self._signal(run, signal.SIGKILL)

        timer = threading.Timer(STOP_GRACE_S, escalate)
        timer.daemon = True
        timer.start()

    def kill(self, attempt_id: str) -> None:
        """Kills an attempt the controller gave up on, at once, and forgets it."""
        with self._lock:
            run = self.attempts.get(attempt_id)
        if run is not None and not run.exited:
            self._signal(run, signal.SIGKILL)
        self.forget(attempt_id)

    def _signal(self, run: AttemptRun, sig: int) -> None:
        self.containment.signal(run.folder.name, run.pid, run.attempt_id, sig)

    def forget(self, attempt_id: str) -> None:
        with self._lock:
            run = self.attempts.pop(attempt_id, None)
        if run is not None:
            shutil.rmtree(run.folder, ignore_errors=True)

    def snapshot(self) -> list[AttemptRun]:
        with self._lock:
            return list(self.attempts.values())
