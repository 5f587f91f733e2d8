"""How a worker runs attempts as processes: one process group each, output in files, exits recorded.

Each attempt gets a folder under `<work_dir>/attempts/` with its `stdout` and `stderr` files and the
`pid` and `exit` files that the local backend's shell wrapper writes, and is contained the way the
local backend contains its attempts (its own cgroup where the host allows, else a subreaper), so the
layout, the stopping of every process an attempt started, and the cleanup of a previous life's
leftovers (`kill_leftover_attempts`) are the local backend's own functions. Output
goes to files, not pipes, because the daemon sends it from byte offsets the controller acknowledges:
a line can be sent again after a controller restart only if it is still on disk.

Attempts start the way the local backend starts them (`wrapper.start_wrapper`): through the
spawner, so each is born inside its cgroup, else directly, in a folder laid out by the same
function (`attempt_folder.prepare_attempt_folder`). A daemon running as root runs each task under
the uid the controller assigned to its user (`AttemptLaunch.uid`, from `auth.task_uids` /
`auth.task_accounts`): the wrapper stays root with a fixed environment, and only the command, after
`setpriv` has dropped to that uid, gets the job's env. Tasks of different users then cannot read
each other's `/proc/PID/environ` or attempt folders, nor the daemon's own environment (its token).
A daemon started as anyone else cannot switch uids: every task runs as the daemon, which it says
at start and in its registration (`isolation_warning`, shown by `iris worker list`).

A thread waits on each attempt (a worker runs tens of attempts, not thousands) for the exit code
the spawner reports, or for its process to end when the spawner has gone; a stop escalates from
SIGTERM to SIGKILL of the whole group after `STOP_GRACE_S`. The SIGTERM reaches the wrapper too,
which ends at once; what the attempt runs may still be printing its last lines (a handler of its
own), so, as the local backend does, a stopped attempt's exit waits for its processes to end, up
to the stop's grace, before whatever is left is killed and the exit reported.
"""

from __future__ import annotations

import logging
import os
import select
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from iris.backends.local.attempt_folder import AttemptFolder, prepare_attempt_folder
from iris.backends.local.attempts_root import attempts_root
from iris.backends.local.backend import kill_leftover_attempts, shell_argv
from iris.backends.local.containment import Containment
from iris.backends.local.spawner import Spawned, Spawner
from iris.backends.local.wrapper import start_spawner, start_wrapper
from iris.backends.staging import safe_dirname
from iris.core.isolation import not_isolated_reason
from iris.core.resources import Device
from iris.rpc import controller_pb2 as pb

log = logging.getLogger("iris.worker")
STOP_GRACE_S = 10.0
LINGER_POLL_S = 0.02
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
    stop_deadline: float = 0.0  # monotonic: when a stop's grace ends
    handle: subprocess.Popen | None = None  # what started it, when not the spawner
    serial: int = 0  # the serial the spawner reports its exit under (0: not started by the spawner)
    container: str = ""  # the container's name, when it runs in one

    def path(self, stream: str) -> Path:
        return self.folder / stream


class StartFailed(Exception):
    """The attempt cannot start here (a missing executable, a missing image); the job is at fault."""


class ProcessRuntime:
    """Runs attempts as process groups on this host."""

    name = "process"

    def __init__(
        self,
        work_dir: Path,
        device: Device,
        on_exit: Callable[[], None] = lambda: None,
        device_ids: tuple[str, ...] = (),
    ):
        self.work_dir = work_dir
        # Only root can run a task under another uid; any other daemon runs every task as itself.
        self.switches_uids = os.geteuid() == 0
        self.isolation_warning = not_isolated_reason("worker daemon")
        self._said_no_uid = False
        self.root = self._attempts_root()
        # The daemon's own environment, less its own Iris settings (its token above all): what
        # every task starts from, the job's env on top.
        self.base_env = {k: v for k, v in os.environ.items() if not k.startswith("IRIS_")}
        self.device = device
        self.device_ids = device_ids  # the UUIDs of the found GPUs, by index; () where --devices said
        self._free = set(range(device.count)) if device.kind == "gpu" else set()
        self._on_exit = on_exit
        self._lock = threading.Lock()
        self.attempts: dict[str, AttemptRun] = {}
        self.containment = Containment(self.root)
        self._codes: dict[int, int] = {}  # exit codes the spawner reported, by serial, until waited for
        self._exits = threading.Condition()
        self._spawner = start_spawner("this worker")
        if self._spawner is not None:
            spawner = self._spawner
            threading.Thread(target=self._read_exits, args=(spawner,), name="spawner-exits", daemon=True).start()

    # -- lifecycle of the daemon ----------------------------------------------------------------

    def cleanup_leftovers(self) -> list[int]:
        """Kills what a previous life of this daemon left running and clears its folders."""
        killed = kill_leftover_attempts(self.work_dir)
        shutil.rmtree(self.root, ignore_errors=True)
        self.root = self._attempts_root()
        # The cleanup removed the folder of this state folder's cgroups with the last one in it;
        # attempts from now on get theirs under a new one.
        self.containment = Containment(self.root)
        return killed

    def _attempts_root(self) -> Path:
        """The folder of the attempts' folders, `<work_dir>/attempts`: passable by the tasks' uids,
        even with the work dir in a folder closed to them (see `attempts_root`), never listable."""
        root = attempts_root(self.work_dir, self.switches_uids)
        os.chmod(root, 0o711)
        return root

    def levels(self) -> tuple[int, int]:
        """(attempts running, devices they hold) now, for `/metrics`."""
        with self._lock:
            live = [a for a in self.attempts.values() if not a.exited]
            return len(live), sum(len(a.devices) for a in live)

    def shutdown(self) -> list[str]:
        with self._lock:
            live = [a for a in self.attempts.values() if not a.exited]
        for run in live:
            self._signal(run, signal.SIGKILL)
        spawner = self._spawner
        if spawner is not None:
            self._spawner_gone(spawner)
            spawner.close()
        return [r.attempt_id for r in live]

    # -- attempts -------------------------------------------------------------------------------

    def start(self, launch: pb.AttemptLaunch, layers: tuple[str, ...] = ()) -> AttemptRun:
        """Starts an attempt in its own working folder, holding `layers` (the workspace) in order,
        under the uid the launch names where this daemon can switch to it (see the module's doc)."""
        folder = self.root / safe_dirname(launch.attempt_id)
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
        env = {**self.base_env, **dict(launch.env), "IRIS_ATTEMPT_ID": launch.attempt_id}
        # What it was given, by UUID where the GPUs were found (indexes otherwise); a task given none
        # is told so, and does not see every GPU of the host.
        env["CUDA_VISIBLE_DEVICES"] = ",".join(self.device_ids[i] if self.device_ids else str(i) for i in run.devices)
        # A job naming a folder of this host runs there; any other in its own copy of its workspace.
        workdir = launch.workdir if launch.workdir and Path(launch.workdir).is_dir() else ""
        layers = () if workdir else layers
        uid = self.task_uid(launch)
        gid = None if uid is None else (launch.gid or uid)
        try:
            place = prepare_attempt_folder(folder, workdir, bool(layers), uid, gid, launch.max_processes)
            self._launch(run, launch, place, place.task_env(env), layers)
        except (OSError, StartFailed) as exc:
            self._release(run)
            with self._lock:
                self.attempts.pop(launch.attempt_id, None)
            raise StartFailed(
                f"cannot start the attempt on this worker: {getattr(exc, 'strerror', None) or exc}"
            ) from None
        threading.Thread(target=self._wait, args=(run,), name=f"wait-{run.pid}", daemon=True).start()
        return run

    def task_uid(self, launch: pb.AttemptLaunch) -> int | None:
        """The uid the attempt runs as: the one the controller assigned, where this daemon (root)
        can switch to it; None (the daemon's own) otherwise, which `isolation_warning` says."""
        if not self.switches_uids:
            return None
        if not launch.uid:
            if not self._said_no_uid:
                self._said_no_uid = True
                log.warning(
                    "attempt %s came with no uid to run as (the controller assigns none: it does not run as"
                    " root, or auth.task_uids.enabled is false), so it runs as root on this worker, as will"
                    " every such attempt",
                    launch.attempt_id,
                )
            return None
        return launch.uid

    def _launch(
        self,
        run: AttemptRun,
        launch: pb.AttemptLaunch,
        place: AttemptFolder,
        env: dict[str, str],
        layers: tuple[str, ...],
    ) -> None:
        place.stage(layers)  # links to the cached layers' sealed files, as the local backend
        cgroup = self.containment.prepare(run.folder.name)
        argv = shell_argv(tuple(launch.command))
        run.pid, started = start_wrapper(
            self._spawner, self.containment, run.folder, cgroup, argv, place.workdir, env,
            umask=place.umask, gone=self._spawner_gone, nproc=place.nproc, uid=place.uid, gid=place.gid,
        )  # fmt: skip
        if isinstance(started, Spawned):
            run.serial = started.serial
        else:
            run.handle = started

    def _read_exits(self, spawner: Spawner) -> None:
        """Hands the exit codes the spawner reports to the threads waiting for them, until it goes."""
        while True:
            try:
                select.select([spawner.exits_fd()], [], [])
                reports = spawner.read_exits()
            except (OSError, ValueError):  # closed under us: the daemon is stopping
                reports = None
            if reports is None:
                self._spawner_gone(spawner)
                return
            with self._exits:
                self._codes.update(reports)
                self._exits.notify_all()

    def _spawner_gone(self, spawner: Spawner) -> None:
        """Later attempts start directly; those the spawner started are waited for by pid."""
        with self._exits:
            if self._spawner is spawner:
                self._spawner = None
            self._exits.notify_all()

    def _wait_code(self, run: AttemptRun) -> int | None:
        """The exit code of the attempt's wrapper once it has exited (as `Popen.returncode` gives
        it), or None when the spawner went before reporting it."""
        if run.handle is not None:
            return run.handle.wait()
        with self._exits:
            self._exits.wait_for(lambda: run.serial in self._codes or self._spawner is None)
            code = self._codes.pop(run.serial, None)
        if code is None:
            try:
                pidfd = os.pidfd_open(run.pid)
            except ProcessLookupError:
                return None
            try:
                select.select([pidfd], [], [])
            finally:
                os.close(pidfd)
        return code

    def _wait(self, run: AttemptRun) -> None:
        code = self._wait_code(run)
        if code is not None and code < 0:
            code = 128 - code  # killed by a signal: report it the way a shell does
        try:
            code = int((run.folder / "exit").read_text().strip())
        except (OSError, ValueError):
            pass
        while (
            run.stopping
            and time.monotonic() < run.stop_deadline
            and self.containment.members(run.folder.name, -1, run.attempt_id)
        ):
            time.sleep(LINGER_POLL_S)  # its processes finish their last lines (see the module's doc)
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
            run.stopping, run.stop_deadline = True, time.monotonic() + STOP_GRACE_S
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
