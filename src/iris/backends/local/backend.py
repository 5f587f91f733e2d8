"""The local backend: simulated hosts whose attempts run as real subprocesses on this machine.

Each attempt runs in its own process group under a tiny `sh` wrapper (see `wrapper`), started by a helper process
so that it is born inside its cgroup (see `spawner`), that records its pid and exit code in the
attempt's folder, with stdout and stderr going to spool files there rather than to
pipes. That is what lets a restarted controller re-adopt attempts that outlived it: the process
keeps writing its output, the new controller resumes reading at the offsets it had committed, and
the exit code survives even though the process is no longer its child. A marker per attempt not
yet ended and stored (under `.live/<backend>/`, backends sharing the folder) tells a restarted
controller which processes to look at, without walking every finished attempt's folder: among them
are attempts whose stop was committed just before a crash, which it then stops, and those of a
local backend the config no longer has, which it kills. Each attempt is contained
(see `containment`), so stopping it ends every process it started. Exits are noticed at once,
from the helper's reports or through pidfds (one watcher thread, no polling); a pump reads the spools (see `iris.backends.spool`) every
100 ms, or at once when the tick has stored what it handed over, so lines carry timestamps close
to when they were written.

A start does not wait for its process: `start` sends the helper its request and returns, and the
pid comes back as a `spawned` event (read by `poll`, or with the exits the helper reports), which
the tick stores as the attempt's start. The round trip to the helper, a clone and the thread
switches of waiting for it, was most of the tick's time per attempt when jobs are short. Until its
pid is known an attempt is held all the same: a stop then signals what its cgroup holds and again
once the pid comes, and a helper that goes without answering leaves the attempt to be found by its
pid file or reported lost (see `_unanswered`).

Events are handed to the tick by `poll` and forgotten only on `ack`, after the tick has committed
them: a failed commit (a full disk) loses nothing, and the pump stops reading while
`MAX_PENDING_LINES` lines wait, so memory stays bounded however fast an attempt prints.
"""

from __future__ import annotations

import functools
import itertools
import logging
import os
import re
import selectors
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from iris.backends import gpus
from iris.backends.local.attempt_folder import AttemptFolder, prepare_attempt_folder
from iris.backends.local.attempts_root import attempts_root
from iris.backends.local.containment import Containment
from iris.backends.local.leftovers import MARKS, kill_folder
from iris.backends.local.leftovers import kill_leftover_attempts as kill_leftover_attempts  # callers import it here
from iris.backends.local.spawner import Spawner, SpawnerGone
from iris.backends.local.wrapper import start_spawner, start_wrapper, wrapper_start
from iris.backends.marks import LiveMarks
from iris.backends.protocol import (
    AdoptRecord,
    AttemptExit,
    AttemptHost,
    BackendDescription,
    BackendEvents,
    LaunchError,
    LaunchSpec,
    LogChunk,
    Spawned,
    Started,
    WorkerSnapshot,
)
from iris.backends.spool import OutputSpool
from iris.backends.staging import (
    StagingPool,
    drop_layer_copies,
    near_layer,
    safe_dirname,
)
from iris.core import spans
from iris.core.config import LocalBackendConfig
from iris.core.names import JobName
from iris.core.processes import is_attempt, pid_alive
from iris.core.resources import Device, Resources
from iris.core.states import TaskState

log = logging.getLogger("iris.backends.local")

_SPAWNER = object()  # the selector's key for the spawner's exit reports
_SHELL_CHARS = re.compile(r"[\s;&|<>$`'\"*?(){}]")
STOP_GRACE_S = 10.0
PUMP_INTERVAL_S = 0.1
THREAD_STALL_S = 60.0  # a loop iteration of a backend thread longer than this is a stall
# Lines read but not yet stored: beyond the first bound an attempt waits for the tick to store its
# lines; beyond the second every attempt does, except one with nothing pending (so a quiet job's
# last line and exit never queue behind a flooding one).
MAX_PENDING_PER_ATTEMPT = 50_000
MAX_PENDING_LINES = 200_000
# Lines handed to the tick per pass: one commit holds the database's write lock, so a flood is
# stored in slices that let submits in between.
POLL_LINES = 50_000
DEFAULT_OUTPUT_CAP = 100 * 1024**2
STAGING_REASON = "staging files: the job's workspace is being laid out for the attempt"
STAGING_THREADS = 2  # working folders made at once: more contend on the same files (measured)


def now_ms() -> int:
    return int(time.time() * 1000)


def worker_attributes(config: LocalBackendConfig) -> dict[str, str]:
    """The attributes every worker of this backend carries: configured ones plus device facts."""
    attrs = {k: str(v).lower() for k, v in config.attributes.items()}
    attrs.setdefault("pool", config.id)
    device = worker_capacity(config).device
    if device.is_accelerator:
        attrs["device-type"] = device.kind
        attrs["device-variant"] = device.variant
        if device.kind == "gpu":
            attrs["gpu-count"] = str(device.count)
        else:
            attrs["tpu-topology"] = f"{device.variant}-{device.count}"
    else:
        attrs["device-type"] = "cpu"
    return attrs


def worker_capacity(config: LocalBackendConfig) -> Resources:
    """What each worker of the backend holds: its configured capacity, and its `devices:` or, for a
    backend of one worker that names none, the GPUs this host has (found through NVML)."""
    device = Device()
    if config.devices:
        kind = "gpu" if config.devices.gpu else "tpu"
        device = Device(kind, (config.devices.gpu or config.devices.tpu or "").lower(), config.devices.count)
    elif config.workers == 1:
        device = gpus.as_device(host_gpus())
    return Resources(cpu=config.capacity.cpu, memory=config.capacity.memory, disk=config.capacity.disk, device=device)


@functools.cache
def host_gpus() -> tuple[gpus.Gpu, ...]:
    """The GPUs of this host that a local backend offers, found once per process."""
    return gpus.usable(gpus.detect())


def device_ids(config: LocalBackendConfig) -> tuple[str, ...]:
    """The UUIDs CUDA_VISIBLE_DEVICES names a task's GPUs by, when they were found; () when the
    config states its devices (they are then named by index, as configured)."""
    return tuple(g.uuid for g in host_gpus()) if not config.devices and config.workers == 1 else ()


def shell_argv(command: tuple[str, ...]) -> list[str]:
    """A single argument with shell syntax (`'echo a; echo b'`) runs through sh -c."""
    if len(command) == 1 and _SHELL_CHARS.search(command[0]):
        return ["/bin/sh", "-c", command[0]]
    return list(command)


def _process_alive(pid: int, attempt_id: str) -> bool:
    """True when `pid` is a live (non-zombie) process started for `attempt_id`."""
    return is_attempt(pid, attempt_id)


@dataclass
class _Attempt:
    attempt_id: str
    worker_id: str
    pid: int
    folder: Path
    devices: list[int]
    spool: OutputSpool
    popen: subprocess.Popen | None = None
    spawned: int = 0  # the serial the spawner reports its exit under (0: not started by the spawner)
    code: int | None = None  # that code, once reported
    start_error: str | None = None  # why the wrapper never ran (set up after the spawner answered)
    awaiting: bool = False  # asked of the spawner, not yet answered: its pid is not known yet
    lost: str = ""  # why its end is not known (its exit code and error are then None and this)
    workdir: str = ""
    pidfd: int | None = None
    ended: AttemptExit | None = None  # the process is gone; reported once its output is drained
    reported: bool = False
    stop_deadline: float | None = None
    emptied: bool = False  # nothing the attempt started is left running
    pending_lines: int = 0  # read, not yet acknowledged as stored

    @property
    def name(self) -> str:
        return self.folder.name


@dataclass(frozen=True, slots=True)
class _Launch:
    """How an attempt's wrapper is started once its working folder is ready."""

    command: list[str]
    env: dict[str, str]
    cgroup: str
    umask: int
    nproc: int
    uid: int | None
    gid: int | None


class LocalBackend:
    kind = "local"

    def __init__(
        self,
        config: LocalBackendConfig,
        state_dir: Path,
        wake: Callable[[], None] = lambda: None,
        output_cap: int = DEFAULT_OUTPUT_CAP,
        configured: frozenset[str] | None = None,
        note: Callable[[], None] | None = None,
        tasks_have_own_uids: bool = False,
    ):
        self.id = config.id
        self.config = config
        # Every backend of the config, when known: markers of a local backend no longer among them
        # are its leftovers, which no backend would ever take back (see `adopt`).
        self.configured = configured
        self.root = attempts_root(state_dir, tasks_have_own_uids)  # its real path: the one tasks can reach
        os.chmod(self.root, 0o711)  # tasks reach their own folder by name; none may list the others
        # One marker per attempt started and not yet ended and stored, named by its folder and
        # holding its id; one folder of markers per backend, as backends share `root`.
        (self.root / MARKS).mkdir(mode=0o700, exist_ok=True)  # no task may list which attempts run
        self.marks = LiveMarks(self.root / MARKS / config.id)
        self.output_cap = output_cap
        self.containment = Containment(self.root)
        self._wake = wake
        # Wakes the tick only to store events that free nothing (an attempt's process now runs).
        self._note = note or wake
        self._capacity = worker_capacity(config)
        self._device_ids = device_ids(config)
        attrs = worker_attributes(config)
        self._workers = tuple(
            WorkerSnapshot(f"{config.id}-{i}", config.id, self._capacity, dict(attrs, worker=f"{config.id}-{i}"))
            for i in range(config.workers)
        )
        self._attributes = attrs
        self._free_devices = {w.worker_id: set(range(self._capacity.device.count)) for w in self._workers}
        self._attempts: dict[str, _Attempt] = {}
        self._logs: list[LogChunk] = []
        self._pending_lines = 0
        self._exits: list[AttemptExit] = []
        self._finished: list[_Attempt] = []  # stored exits whose cgroup is still to clean
        self._lock = threading.Lock()
        self._pump_wake = threading.Event()
        self._pump_lock = threading.Lock()  # one reader of the spools at a time
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._closing = threading.Event()
        self._beats: dict[str, float] = {}  # thread name → when it last began a loop iteration
        self._spawner = start_spawner(f"backend {self.id}")
        self._by_serial: dict[int, _Attempt] = {}  # attempts the spawner started, by its serial
        # (code, why it never ran) reported before their attempt was registered, by serial
        self._early_codes: dict[int, tuple[int, str | None]] = {}
        self._answers_lock = threading.Lock()  # one reader of the spawner's answers at a time
        if self._spawner is not None:
            self._selector.register(self._spawner.exits_fd(), selectors.EVENT_READ, _SPAWNER)
        self._spawned: list[Spawned] = []  # processes known to run since the last `ack`
        self._waiting: list[tuple[str, str]] = []  # (attempt, why it has no process yet) since the last `ack`
        self._gone = itertools.count()  # names for folders moved aside to be removed (see `_remove_later`)
        self._stager = StagingPool(min(STAGING_THREADS, os.cpu_count() or 1), f"staging-{self.id}")
        self._threads = [
            threading.Thread(target=self._watch_exits, name=f"exits-{self.id}", daemon=True),
            threading.Thread(target=self._pump_logs, name=f"logs-{self.id}", daemon=True),
        ]
        for t in self._threads:
            t.start()

    def problems(self) -> tuple[str, ...]:
        """What is wrong with this backend's own threads (the exit watcher, the log reader): dead,
        or stuck inside one iteration of its loop for longer than `THREAD_STALL_S`."""
        if self._closing.is_set():
            return ()
        out = []
        now = time.monotonic()
        for t in self._threads:
            if not t.is_alive():
                out.append(f"backend {self.id}: its {t.name} thread has died; exits or logs are no longer collected")
            elif now - self._beats.get(t.name, now) > THREAD_STALL_S:
                out.append(
                    f"backend {self.id}: its {t.name} thread has been stuck for {now - self._beats[t.name]:.0f}s"
                )
        return tuple(out)

    def _beat(self) -> None:
        self._beats[threading.current_thread().name] = time.monotonic()

    # -- description ---------------------------------------------------------------------------

    def describe(self) -> BackendDescription:
        return BackendDescription(self.id, self.kind, dict(self._attributes), self._capacity)

    def workers(self) -> tuple[WorkerSnapshot, ...]:
        return self._workers

    def running(self) -> frozenset[str]:
        """Attempts this backend holds, including exits not yet acknowledged by the tick."""
        with self._lock:
            return frozenset(self._attempts)

    def holds(self, attempt_id: str) -> bool:
        with self._lock:
            return attempt_id in self._attempts

    def attempt_host(self, attempt_id: str, worker_id: str) -> AttemptHost:
        """Every attempt runs on the controller's own host (its workers are simulated)."""
        return AttemptHost(local=True)

    # -- start / stop --------------------------------------------------------------------------

    def start(self, spec: LaunchSpec) -> Started:
        folder = self.root / safe_dirname(spec.attempt_id)
        command = shell_argv(spec.command)
        devices = self._take_devices(
            spec.worker_id, spec.resources.device.count if spec.resources.device.kind == "gpu" else 0
        )
        env = dict(spec.env)
        env["IRIS_ATTEMPT_ID"] = spec.attempt_id
        # What it was given (by UUID where the GPUs were found); a task given none sees none.
        env["CUDA_VISIBLE_DEVICES"] = ",".join(self._device_ids[i] if self._device_ids else str(i) for i in devices)
        # Tasks start in a folder of their own (the job's workspace, or empty), removed when the
        # attempt ends; the attempt's own files (pid, exit, logs) stay beside it. The workspace is
        # staged by the staging pool, not here (see `_stage`): the tick only records the intent.
        layers = spec.workspace if not spec.workdir else ()
        try:
            # Under a uid of the task's own, the wrapper stays the controller's: it records pid and
            # exit code in the attempt folder, which the task cannot write. Only the command drops
            # to the task's uid (see `wrapper`), held to its uid's process limit, so one user's
            # tasks forking without end leave the host room for the controller and everyone else.
            place = prepare_attempt_folder(
                folder, spec.workdir, bool(layers), spec.uid, spec.gid, spec.max_processes, self._remove_later
            )
            # Marked before the process exists: a controller that dies at any later point finds it.
            self.marks.put(spec.attempt_id)
        except OSError as exc:
            raise self._not_started(spec, folder, devices, spec.workdir or str(folder / "work"), exc) from None
        workdir = place.workdir
        shown = ",".join(map(str, devices))
        launch = _Launch(
            command, place.task_env(env), self.containment.prepare(folder.name), place.umask, place.nproc,
            place.uid, place.gid,
        )  # fmt: skip
        record = _Attempt(spec.attempt_id, spec.worker_id, -1, folder, devices, OutputSpool(folder, self.output_cap))
        record.workdir = workdir
        if layers:
            with self._lock:  # held from now on: a stop while it is staged is seen by `_stage`
                self._attempts[spec.attempt_id] = record
                record.awaiting = True  # no process yet: its folder is being made (see `_stage`)
                self._waiting.append((spec.attempt_id, STAGING_REASON))
            self._stager.submit(JobName.parse(spec.job_id).user, lambda: self._stage(record, layers, place, launch))
            self._note()
            return Started(spec.attempt_id, 0, shown, running=False)
        try:
            return self._spawn(record, launch, shown, staged=False)
        except OSError as exc:
            raise self._not_started(spec, folder, devices, workdir, exc) from None

    def _stage(self, record: _Attempt, layers: Sequence[str], place: AttemptFolder, launch: _Launch) -> None:
        """Makes the working folder of an attempt the tick started, then its process (on a thread
        of the staging pool). A failure ends the attempt with an error that says why; a stop that
        came meanwhile ends it as a stopped process would."""
        try:
            if record.stop_deadline is None:
                near = [near_layer(layer, self.root) for layer in layers]
                place.stage(near)
                if near != list(layers):  # copies made on this filesystem: those whose layer has gone go
                    drop_layer_copies(self.root, lambda name: (Path(layers[0]).parent / name).is_dir())
        except OSError as exc:
            self._start_failed(record, f"the job's files cannot be staged into it ({exc.strerror or exc})")
            return
        with self._lock:
            stopped = record.stop_deadline is not None
            if stopped:
                record.awaiting = False
                record.code = 128 + signal.SIGTERM  # as its wrapper would have ended at the stop
        if stopped:
            self._finish(record)
            return
        try:
            self._spawn(record, launch, "", staged=True)
        except OSError as exc:
            self._start_failed(record, exc.strerror or str(exc))

    def _start_failed(self, record: _Attempt, why: str) -> None:
        """Ends an attempt the staging pool could not start, reporting `why` as its error."""
        with self._lock:
            self._attempts.setdefault(record.attempt_id, record)
            record.awaiting = False
            record.start_error = why
        self._finish(record)

    def _spawn(self, record: _Attempt, launch: _Launch, shown: str, staged: bool) -> Started:
        """Starts the wrapper of an attempt whose working folder is ready; OSError when it cannot
        be started (the caller undoes or reports it). `staged`: started by the staging pool, after
        `start` returned, so a pid known at once is reported as an event too."""
        spawner = self._spawner
        argv = launch.command
        if spawner is not None:
            with self._lock:  # held before it is asked for: the answer may be read at once
                self._attempts[record.attempt_id] = record
                record.awaiting = True
            try:
                start = wrapper_start(record.folder, "", argv, launch.env, launch.uid, launch.gid, record.workdir)
                spawner.submit(
                    record, start.argv, start.env, record.workdir, str(record.folder / "stdout"),
                    str(record.folder / "stderr"), cgroup=launch.cgroup, umask=launch.umask,
                    subreaper=self.containment.kind == "subreaper", nproc=launch.nproc, stdin=start.stdin,
                )  # fmt: skip
                # Its pid comes back as an event (see `poll`) once the helper has answered, read
                # by the tick's next pass, which the note makes come within its delay.
                self._note()
                return Started(record.attempt_id, 0, shown, running=False)
            except SpawnerGone:
                with self._lock:
                    self._attempts.pop(record.attempt_id, None)
                    record.awaiting = False
                self._spawner_gone(spawner)
        pid, popen = start_wrapper(
            None, self.containment, record.folder, launch.cgroup, argv, record.workdir, launch.env,
            umask=launch.umask, nproc=launch.nproc, uid=launch.uid, gid=launch.gid,
        )  # fmt: skip
        assert isinstance(popen, subprocess.Popen)  # started without a spawner
        with self._lock:
            record.awaiting = False
            if staged:  # an event before any exit of its own (`_register` may report one at once)
                self._spawned.append(Spawned(record.attempt_id, pid, now_ms()))
        record.pid, record.popen = pid, popen
        self._register(record)
        if staged:
            self._note()
        return Started(record.attempt_id, pid, shown)

    def _not_started(
        self, spec: LaunchSpec, folder: Path, devices: list[int], workdir: str, exc: OSError
    ) -> LaunchError:
        """Undoes a start that failed before its process existed; the error that says why."""
        self.marks.drop(spec.attempt_id)
        self.containment.end(folder.name, spec.attempt_id)
        with self._lock:
            self._free_devices[spec.worker_id].update(devices)
        return LaunchError(f"cannot start the attempt in {workdir}: {exc.strerror or exc}")

    def stop(self, attempt_id: str) -> None:
        with self._lock:
            record = self._attempts.get(attempt_id)
            if record is None or record.ended is not None:
                return
            first = record.stop_deadline is None
            if first:
                record.stop_deadline = time.monotonic() + STOP_GRACE_S
        if first:
            # The scheduler already counts this attempt's devices as free (it may have placed a
            # preemptor on them this very tick), so hand them back now, not when the process ends.
            self._release_devices(record)
            self._signal(record, signal.SIGTERM)

    def _live(self) -> list[str]:
        with self._lock:
            return sorted(a for a, rec in self._attempts.items() if rec.ended is None)

    def shutdown(self) -> list[str]:
        ids = self._live()
        for attempt_id in ids:
            self.stop(attempt_id)
        for work in self._stager.close():
            work()  # each was stopped above: it ends its attempt without staging it
        deadline = time.monotonic() + 5
        while self._live() and time.monotonic() < deadline:
            time.sleep(0.02)
        with self._lock:
            left = [r for r in self._attempts.values() if r.ended is None]
        for record in left:
            self._signal(record, signal.SIGKILL)
        with self._lock:
            lingering = [r for r in self._attempts.values() if not r.emptied]
        for record in lingering:
            self.containment.end(record.name, record.attempt_id)
        self.containment.close()
        self._closing.set()
        self._pump_wake.set()
        os.write(self._wake_w, b"x")
        for t in self._threads:
            t.join(timeout=2)
        spawner = self._spawner
        if spawner is not None:
            self._spawner_gone(spawner)
        return ids

    def _signal(self, record: _Attempt, sig: int) -> None:
        self.containment.signal(record.name, record.pid, record.attempt_id, sig)

    # -- devices -------------------------------------------------------------------------------

    def _take_devices(self, worker_id: str, count: int) -> list[int]:
        if count <= 0:
            return []
        with self._lock:
            free = sorted(self._free_devices.get(worker_id, set()))
            if len(free) < count:
                raise LaunchError(
                    f"worker {worker_id} has {len(free)} free devices; the attempt needs {count}", retryable=True
                )
            taken = free[:count]
            self._free_devices[worker_id].difference_update(taken)
            return taken

    def _release_devices(self, record: _Attempt) -> None:
        with self._lock:
            self._free_devices.setdefault(record.worker_id, set()).update(record.devices)
            record.devices = []

    # -- watching --------------------------------------------------------------------------------

    def _register(self, record: _Attempt) -> None:
        if record.spawned:
            # The spawner reports the exit (maybe already has); no pidfd needed.
            with self._lock:
                self._attempts[record.attempt_id] = record
                record.code, record.start_error = self._early_codes.pop(record.spawned, (None, None))
                gone = self._spawner is None  # it went between the start and now
                if record.code is None and not gone:
                    self._by_serial[record.spawned] = record
            if record.code is not None:
                self._finish(record)
            elif gone:
                self._watch_orphan(record)
            return
        try:
            record.pidfd = os.pidfd_open(record.pid)
        except ProcessLookupError:
            record.pidfd = None
        with self._lock:
            self._attempts[record.attempt_id] = record
            if record.pidfd is not None:
                self._selector.register(record.pidfd, selectors.EVENT_READ, record.attempt_id)
        if record.pidfd is None:
            self._finish(record)
        else:
            os.write(self._wake_w, b"x")

    def _watch_orphan(self, record: _Attempt) -> None:
        """Watches an attempt whose spawner has gone as a re-adopted one: by pidfd, code from its exit file.

        Its pid came from that spawner in this process's life, so any live process with it is the
        attempt's, even one that does not name its attempt yet: answered early, it may still be
        setting itself up when the spawner goes (it names its attempt from its exec on)."""
        record.spawned = 0
        if pid_alive(record.pid):
            self._register(record)
        else:
            self._finish(record)

    def _spawner_gone(self, spawner: Spawner) -> None:
        """The helper has exited: later attempts start directly, and those it started are watched by pidfd."""
        with self._lock:
            if self._spawner is not spawner:
                return
            self._spawner = None
        self._take_answers(spawner)  # the answers it gave before it went still count (read to its end)
        with self._lock:
            orphans = [r for r in self._by_serial.values() if r.ended is None]
            self._by_serial.clear()
            self._early_codes.clear()
        if not self._closing.is_set():
            log.warning("backend %s: the helper that starts attempts has exited; starting them directly", self.id)
        try:
            self._selector.unregister(spawner.exits_fd())
        except (KeyError, ValueError):
            pass
        unanswered = [r for r in spawner.unanswered() if isinstance(r, _Attempt)]
        spawner.close()
        for record in orphans:
            self._watch_orphan(record)
        for record in unanswered:
            self._unanswered(record)

    def _unanswered(self, record: _Attempt) -> None:
        """An attempt the helper went without answering for: it may have started its process or not.

        A wrapper records its pid as its first act: one found is watched as a re-adopted attempt is.
        Without one, whatever the attempt started is ended through its cgroup, and the attempt is
        reported lost, so the tick runs it again (nothing of it reached the command, or its wrapper
        would have written its pid)."""
        with self._lock:
            record.awaiting = False
        try:
            pid = int((record.folder / "pid").read_text().strip())
        except (OSError, ValueError):
            pid = -1
        if pid > 0 and _process_alive(pid, record.attempt_id):
            record.pid = pid
            with self._lock:
                self._spawned.append(Spawned(record.attempt_id, pid, now_ms()))
            self._register(record)
            return
        if pid <= 0:
            record.lost = "the helper that starts attempts exited before this attempt's process was known"
        self._finish(record)

    def _take_answers(self, spawner: Spawner, wait: bool = True) -> bool:
        """Takes the pids the spawner answered with so far: each becomes a `spawned` event, and an
        attempt stopped before its pid was known is signalled again now that it is. False once the
        helper has gone.

        Read when asked for, not by a thread woken for each answer: by `poll` (the tick comes back
        for them within its note delay, see `start`) and before each batch of exits the helper
        reports (it answers for a process before it can report its exit). A wake-up per answer
        cost a thread switch per start, taken from the tick in the middle of its pass."""
        with self._answers_lock:
            answers = spawner.read_answers(wait)
            if answers is None:
                return False
            ended, stopped = [], []
            with self._lock:
                for token, answer in answers:
                    record = token
                    assert isinstance(record, _Attempt)
                    record.awaiting = False
                    if isinstance(answer, OSError):
                        record.start_error = answer.strerror or str(answer)
                        ended.append(record)
                        continue
                    record.pid, record.spawned = answer.pid, answer.serial
                    self._spawned.append(Spawned(record.attempt_id, answer.pid, answer.at_ms or now_ms()))
                    record.code, record.start_error = self._early_codes.pop(answer.serial, (None, None))
                    if record.code is not None:
                        ended.append(record)
                        continue
                    self._by_serial[answer.serial] = record
                    if record.stop_deadline is not None:
                        stopped.append(record)
        for record in stopped:
            self._signal(record, signal.SIGTERM)
        for record in ended:
            self._finish(record)
        return True

    def _spawned_exits(self, spawner: Spawner) -> None:
        """Finishes the attempts whose exits the spawner reported."""
        # The pids of those it reports on come first, unless a start is sending meanwhile (its
        # helper may be waiting for these exits to be read): the codes then wait for their pids.
        self._take_answers(spawner, wait=False)
        reports = spawner.read_exits()
        if reports is None:
            self._spawner_gone(spawner)
            return
        done = []
        with self._lock:
            for serial, code in reports:
                error = spawner.start_error(serial)
                record = self._by_serial.pop(serial, None)
                if record is None:
                    self._early_codes[serial] = (code, error)  # its start has not registered it yet
                else:
                    record.code, record.start_error = code, error
                    done.append(record)
        for record in done:
            self._finish(record)

    def _watch_exits(self) -> None:
        while not self._closing.is_set():
            self._beat()
            for key, _ in self._selector.select(timeout=1.0):
                if key.data is None:
                    try:
                        os.read(self._wake_r, 4096)
                    except BlockingIOError:
                        pass
                    continue
                if key.data is _SPAWNER:
                    spawner = self._spawner
                    if spawner is not None:
                        self._spawned_exits(spawner)
                    continue
                with self._lock:
                    record = self._attempts.get(key.data)
                    self._selector.unregister(key.fd)
                if record is not None:
                    self._finish(record)
            self._escalate_stops()

    def _escalate_stops(self) -> None:
        now = time.monotonic()
        with self._lock:
            late = [r for r in self._attempts.values() if r.stop_deadline and r.stop_deadline < now and not r.emptied]
            lingering = [r for r in self._attempts.values() if r.ended is not None and not r.emptied]
        for record in late:
            if record.ended is None:
                self._signal(record, signal.SIGKILL)
        overdue = {id(r) for r in late}
        for record in lingering:
            if id(record) in overdue or not self.containment.members(record.name, -1, record.attempt_id):
                self._empty(record)

    def _empty(self, record: _Attempt, wake: bool = True) -> None:
        self.containment.end(record.name, record.attempt_id)
        record.emptied = True
        if wake:
            self._pump_wake.set()

    def _finish(self, record: _Attempt) -> None:
        """Notes the exit of an attempt whose wrapper is gone, and reports it once its output is read."""
        with spans.span("local.exits"):
            self._note_exit(record)
        self._pump_ended(record)

    def _note_exit(self, record: _Attempt) -> None:
        code: int | None = None
        if record.popen is not None:
            code = record.popen.wait()
        else:  # reported by the spawner, or set by a stop while its files were staged
            code = record.code
        # A wrapper that exited by itself exited with its command's code, which it also wrote to
        # its exit file: read only when the wrapper was killed, or its code is unknown (adopted).
        if code is None or code < 0:
            try:
                code = int((record.folder / "exit").read_text().strip())
            except (OSError, ValueError):
                pass
        if code is not None and code < 0:
            code = 128 - code  # killed by a signal: report it the way a shell does
        error = (
            "" if code is not None else record.lost or "the attempt's process vanished while the controller was down"
        )
        if record.pidfd is not None:
            os.close(record.pidfd)
            record.pidfd = None
        if record.start_error is not None:  # what `start` raised before its spawner answered early
            error = f"cannot start the attempt in {record.workdir}: {record.start_error}"
            record.ended = AttemptExit(record.attempt_id, None, error, outcome=TaskState.FAILED)
        else:
            record.ended = AttemptExit(record.attempt_id, code, error)
        # Nothing the attempt started outlives it. A stopped attempt's processes keep their grace
        # period to end on their own (the wrapper dies at the first SIGTERM; they may not).
        if record.stop_deadline is None or not self.containment.members(record.name, -1, record.attempt_id):
            self._empty(record, wake=False)  # reported just below
        self._release_devices(record)
        self._remove_later(record.folder / "work")  # the workspace copy ends with the attempt

    def _remove_later(self, folder: Path) -> None:
        """Removes `folder` on a staging thread, after moving it out of the way at once: a tree of
        20,000 links takes a while to remove, and neither exits nor the tick wait for it, while a
        new attempt of the same id may make a folder of that name meanwhile."""
        try:
            folder.rmdir()  # most are empty or absent: nothing to hand over
            return
        except FileNotFoundError:
            return
        except OSError:
            pass
        gone = folder.with_name(f".gone-{folder.name}-{next(self._gone)}")
        try:
            os.rename(folder, gone)
            self._stager.submit("", lambda: shutil.rmtree(gone, ignore_errors=True))
        except (OSError, RuntimeError):  # RuntimeError: shutting down, no staging thread is left
            shutil.rmtree(gone if gone.exists() else folder, ignore_errors=True)

    # -- output ----------------------------------------------------------------------------------

    def _pump_logs(self) -> None:
        while not self._closing.is_set():
            self._beat()
            self._pump_wake.wait(PUMP_INTERVAL_S)
            self._pump_wake.clear()
            with self._pump_lock:
                self._pump_guarded()

    def _pump_guarded(self, only: _Attempt | None = None) -> None:
        try:
            with spans.span("local.logs"):
                self._pump_once(only)
        except Exception:  # one attempt's unreadable spool must not stop every attempt's output
            log.exception("reading attempt output failed; retrying")
            self._pump_wake.set()

    def _pump_ended(self, record: _Attempt) -> None:
        """Reads the last output of an attempt that has just ended and reports its exit, here and
        now when the reader is idle: one thread switch less between an exit and the tick, and a
        switch can wait a whole GIL interval on a busy controller. Otherwise the reader does it."""
        if not self._pump_lock.acquire(blocking=False):
            self._pump_wake.set()
            return
        try:
            self._pump_guarded(record)
        finally:
            self._pump_lock.release()

    def _pump_once(self, only: _Attempt | None = None) -> None:
        """Reads every attempt's spool (or `only` that one's) round-robin until each is caught up or
        the pending lines reach their bound, then reports the exits whose output is all read."""
        with self._lock:
            if only is None:
                records = [r for r in self._attempts.values() if not r.reported]
                finished, self._finished = self._finished, []
            else:
                records, finished = ([] if only.reported else [only]), []
        active = list(records)
        while active:
            still = []
            for record in active:
                if record.pending_lines >= MAX_PENDING_PER_ATTEMPT or (
                    record.pending_lines and self._pending_lines >= MAX_PENDING_LINES
                ):
                    continue
                pieces = record.spool.read(complete=record.ended is not None)
                if not pieces:
                    continue
                ts = now_ms()
                chunks = [
                    LogChunk(record.attempt_id, p.stream, tuple((ts, line) for line in p.lines), p.end_offset)
                    for p in pieces
                ]
                count = sum(len(c.lines) for c in chunks)
                with self._lock:
                    self._logs.extend(chunks)
                    self._pending_lines += count
                    record.pending_lines += count
                still.append(record)
            active = still
        for record in records:
            record.spool.release()
        if self._pending_lines >= MAX_PENDING_PER_ATTEMPT // 2:
            self._wake()  # much to store: do not wait for the next timed pass
        done = [r for r in records if r.ended is not None and r.emptied and r.spool.drained()]
        if done:
            with self._lock:
                for record in done:
                    record.reported = True
                    self._exits.append(record.ended)  # type: ignore[arg-type]  # `done` holds ended ones
            self._wake()
        if self.containment.kind == "cgroup" and finished:
            with self._lock:
                live = {r.name for r in self._attempts.values()}
            self.containment.sweep(live)

    # -- reporting -----------------------------------------------------------------------------

    def poll(self) -> BackendEvents:
        """What happened since the last `ack`, oldest first and at most about POLL_LINES lines: the
        same events again until they are acknowledged. An exit comes only with (or after) the
        last lines of its attempt."""
        spawner = self._spawner
        if spawner is not None and not self._take_answers(spawner):
            self._spawner_gone(spawner)
        elif spawner is not None and spawner.waiting():
            self._note()  # answers still to come (a busy host): the tick comes back for them
        with self._lock:
            logs: list[LogChunk] = []
            count = 0
            for chunk in self._logs:
                if logs and count + len(chunk.lines) > POLL_LINES:
                    break
                logs.append(chunk)
                count += len(chunk.lines)
            later = {c.attempt_id for c in self._logs[len(logs) :]}
            exits = tuple(e for e in self._exits if e.attempt_id not in later)
            # An attempt's pid is known before its exit: the exit is never polled without it.
            return BackendEvents(exits, tuple(logs), waiting=tuple(self._waiting), spawned=tuple(self._spawned))

    def ack(self, events: BackendEvents) -> None:
        """The tick committed `events`: forget them, and free the spool bytes they came from."""
        with self._lock:
            held_back = self._pending_lines >= MAX_PENDING_LINES or any(
                self._attempts[c.attempt_id].pending_lines >= MAX_PENDING_PER_ATTEMPT
                for c in events.logs
                if c.attempt_id in self._attempts
            )
            del self._logs[: len(events.logs)]
            del self._spawned[: len(events.spawned)]
            del self._waiting[: len(events.waiting)]
            stored = {id(e) for e in events.exits}
            self._exits = [e for e in self._exits if id(e) not in stored]
            self._pending_lines -= sum(len(c.lines) for c in events.logs)
            for chunk in events.logs:
                record = self._attempts.get(chunk.attempt_id)
                if record is not None:
                    record.pending_lines -= len(chunk.lines)
                    record.spool.commit(chunk.stream, chunk.end_offset)
            ended = [r for e in events.exits if (r := self._attempts.pop(e.attempt_id, None)) is not None]
            self._finished += ended
        # Removed here, on the tick's thread, which is also the one that starts attempts: a job
        # replaced under the same id reuses the attempt's folder, and its new spool must never be
        # removed by a cleanup of the old one that runs late.
        for record in ended:
            record.spool.remove()
            self.marks.drop(record.attempt_id)
        # Waking the reader costs a thread switch per pass; it is worth it only when the bounds
        # held it back.
        if held_back:
            self._pump_wake.set()

    def discard(self, attempt_ids: Sequence[str]) -> None:
        """Removes the folders of finished attempts (never of one this backend still holds)."""
        with self._lock:
            held = set(self._attempts)
        for attempt_id in attempt_ids:
            if attempt_id not in held:
                shutil.rmtree(self.root / safe_dirname(attempt_id), ignore_errors=True)

    def leftovers(self) -> frozenset[str]:
        """Attempts this backend started, in an earlier life too, whose end it has not seen stored:
        one marker each, so the cost follows the attempts that ran at the restart, not all there were."""
        return frozenset(self.marks.read())

    def adopt(self, records: list[AdoptRecord], settled: frozenset[str] = frozenset()) -> None:
        """Takes over `records`; a leftover (see `leftovers`) whose end is stored (`settled`) is
        forgotten, and one the database no longer holds at all is killed with everything it started,
        and nothing of it reported. So is every leftover of a local backend of this state folder that
        the config no longer has: the database files those attempts as lost, to be run again elsewhere."""
        kept = {rec.attempt_id for rec in records}
        self._kill_marked(self.marks, self.marks.forget(self.marks.read(), kept, settled))
        if self.configured is not None:
            for entry in os.scandir(self.marks.folder.parent):
                if entry.is_dir(follow_symlinks=False) and entry.name not in self.configured | {self.id}:
                    log.warning("stopping the attempts left running by backend %s, no longer configured", entry.name)
                    gone = LiveMarks(Path(entry.path))
                    self._kill_marked(gone, gone.read())
                    shutil.rmtree(entry.path, ignore_errors=True)
        for rec in records:
            folder = self.root / safe_dirname(rec.attempt_id)
            pid = rec.pid
            if pid is None and (folder / "pid").exists():
                try:
                    pid = int((folder / "pid").read_text().strip())
                except ValueError:
                    pid = None
            devices = [int(d) for d in rec.devices.split(",") if d.strip().isdigit()]
            spool = OutputSpool(folder, self.output_cap, {"stdout": rec.stdout_offset, "stderr": rec.stderr_offset})
            attempt = _Attempt(rec.attempt_id, rec.worker_id, pid or -1, folder, devices, spool)
            with self._lock:
                self._free_devices.setdefault(rec.worker_id, set()).difference_update(devices)
            if pid is not None and _process_alive(pid, rec.attempt_id):
                with self._lock:  # an attempt a crash left ASSIGNED is recorded as running now
                    self._spawned.append(Spawned(rec.attempt_id, pid, now_ms()))
                self._register(attempt)
            else:
                with self._lock:
                    self._attempts[rec.attempt_id] = attempt
                self._finish(attempt)

    def _kill_marked(self, marks: LiveMarks, strays: Iterable[str]) -> None:
        """Kills the attempt of each of the `strays` marked in `marks`, and drops its marker."""
        for attempt_id in strays:
            kill_folder(self.containment, self.root / safe_dirname(attempt_id), attempt_id)
            marks.drop(attempt_id)
