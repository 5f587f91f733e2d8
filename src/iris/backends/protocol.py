"""The contract every backend meets: its workers, starting and stopping attempts, and the events
(attempt exits, log lines) it reports back to the control tick.

Backends never write the database. The tick is the only caller: it asks a backend to start what
the scheduler placed, stops what the database says must not run, and commits what `poll` returns,
then `ack`s it; a backend keeps an event until it is acknowledged, so a failed commit loses none.

Every type a backend exchanges with the controller and the scheduler lives here, below both, so a
backend imports nothing above it: the scheduler reads `WorkerSnapshot` from this module rather
than backends reaching up into the scheduler.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from iris.core.resources import Resources
from iris.core.states import TaskState


@dataclass(frozen=True, slots=True)
class WorkerSnapshot:
    """One unit of placement: its total capacity and attributes (device-type, region, pool, …)."""

    worker_id: str
    backend_id: str
    capacity: Resources  # total; device.count is the number of devices on the host
    attributes: Mapping[str, str]
    alive: bool = True
    last_contact_ms: int = 0  # a worker daemon: when it last reached the controller (0: not a daemon)
    runtime: str = ""  # a worker daemon: how it runs attempts (process | docker)
    isolation_warning: str = ""  # a worker daemon: why its users' tasks are not isolated there ("" if they are)


@dataclass(frozen=True, slots=True)
class BackendContext:
    """What the controller hands every backend it builds, whatever its kind."""

    cluster: str  # this cluster's name
    state_dir: Path  # the cluster's state folder; a backend keeps its files under it
    controller_url: str  # how processes the backend starts reach the controller
    wake: Callable[[], None] = lambda: None  # wakes the control tick (an attempt exited, …)
    # Wakes the tick to store events that free nothing (an attempt's process now runs): it stores
    # them without scheduling again. None: `wake`.
    note: Callable[[], None] | None = None
    output_cap: int = 100 * 1024**2  # bytes of output kept per attempt (controller.log_max_output); 0: all
    worker_grace_period: float = 30.0  # a worker daemon silent longer than this is dead
    backend_ids: frozenset[str] | None = None  # every backend of the config (None: not known)
    tasks_have_own_uids: bool = False  # a root controller runs each user's tasks under a uid of their own


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    attempt_id: str
    job_id: str
    task_index: int
    attempt: int
    worker_id: str
    command: tuple[str, ...]
    env: Mapping[str, str]
    resources: Resources
    workdir: str = ""  # run here (a folder on the host) instead of in a copy of the workspace
    image: str = ""  # a container image (backends with a container runtime)
    # Folders (unpacked bundle, then workdir files) whose contents, copied in this order, make
    # the attempt's own working folder; the backend removes the copy when the attempt ends.
    workspace: tuple[str, ...] = ()
    # The uid and gid the attempt runs as; None: the controller's own (it is not root).
    uid: int | None = None
    gid: int | None = None
    max_processes: int = 0  # processes and threads the uid may hold at once (RLIMIT_NPROC); 0: no limit
    timeout_s: float = 0.0  # the job's run-time limit (0: none); the tick enforces it, a backend may too
    # The same layers by content id, for a backend whose hosts fetch them (a worker daemon).
    bundle_id: str = ""
    files_id: str = ""


@dataclass(frozen=True, slots=True)
class Started:
    attempt_id: str
    pid: int  # the process id, or the id the backend's own scheduler gave it (a Slurm job id)
    devices: str = ""  # e.g. "0,1" — the device indices given to the attempt
    running: bool = True  # False: handed to a queue of the backend's own; `poll` reports when it runs


@dataclass(frozen=True, slots=True)
class Spawned:
    """An attempt's process, known to run since `at_ms` (wall clock), after its start returned."""

    attempt_id: str
    pid: int
    at_ms: int


@dataclass(frozen=True, slots=True)
class AttemptExit:
    """An attempt that ended. `exit_code` None means it was lost (the host or process vanished)."""

    attempt_id: str
    exit_code: int | None
    error: str = ""
    outcome: TaskState | None = None  # set when the backend knows better than the exit code (a time limit)


@dataclass(frozen=True, slots=True)
class LogChunk:
    attempt_id: str
    stream: str  # stdout | stderr
    lines: tuple[tuple[int, str], ...]  # (ts_ms, text)
    end_offset: int  # byte offset after these lines: stored with them, resumed from after a restart


@dataclass(frozen=True, slots=True)
class AdoptRecord:
    """An attempt the database believes is live on this backend, handed over after a restart."""

    attempt_id: str
    worker_id: str
    pid: int | None
    devices: str
    stdout_offset: int
    stderr_offset: int


@dataclass(frozen=True, slots=True)
class BackendEvents:
    exits: tuple[AttemptExit, ...] = ()
    logs: tuple[LogChunk, ...] = ()
    started: tuple[str, ...] = ()  # attempts that left the backend's own queue and now run
    waiting: tuple[tuple[str, str], ...] = ()  # (attempt, why the backend's queue holds it), when it changes
    # Attempts whose process now runs, from a backend that learns the pid after `start` returned
    # (`Started.running` False, no queue of its own); each reported before any exit of its own.
    spawned: tuple[Spawned, ...] = ()


@dataclass(frozen=True, slots=True)
class AttemptHost:
    """Where an attempt runs, as far as its backend knows: the controller's own host (`local`), or
    the network address the controller sees that host at (`address`, an IP literal), or neither
    (`unknown` says why). The controller relays a task's endpoint only to the host it runs on."""

    local: bool = False
    address: str = ""
    unknown: str = ""


@dataclass(frozen=True, slots=True)
class BackendDescription:
    id: str
    kind: str
    attributes: Mapping[str, str] = field(default_factory=dict)
    worker_capacity: Resources | None = None


class Backend(Protocol):
    id: str
    kind: str

    def describe(self) -> BackendDescription: ...

    def workers(self) -> tuple[WorkerSnapshot, ...]: ...

    def start(self, spec: LaunchSpec) -> Started:
        """Starts an attempt; raises `LaunchError` when it cannot be started at all."""

    def stop(self, attempt_id: str) -> None: ...

    def running(self) -> frozenset[str]:
        """Every attempt the backend holds, including exits not yet reported by `poll`."""

    def holds(self, attempt_id: str) -> bool:
        """Whether `running` would list this attempt, at the cost of one lookup."""

    def attempt_host(self, attempt_id: str, worker_id: str) -> AttemptHost:
        """The host attempt `attempt_id` (placed on `worker_id`) runs on now."""

    def poll(self) -> BackendEvents:
        """Events not yet acknowledged: the same ones are returned again until `ack`."""

    def ack(self, events: BackendEvents) -> None:
        """The tick has committed `events` (a prefix of what `poll` returned): forget them."""

    def discard(self, attempt_ids: Sequence[str]) -> None:
        """Deletes what the backend keeps for these finished attempts (their retention ran out)."""

    def leftovers(self) -> frozenset[str]:
        """Attempts started before a restart whose end this backend has not seen stored, so their
        processes may still run (asked once, before `adopt`; empty where another party reconciles)."""

    def adopt(self, records: list[AdoptRecord], settled: frozenset[str] = frozenset()) -> None:
        """Takes over attempts that were live before a restart, and the leftovers the database holds
        in any state (the tick stops those it no longer wants, and their ends are recorded as usual);
        those already gone are reported by the next `poll` as exits (with their exit code when it
        was recorded). A leftover in `settled` already has its end stored: it is forgotten, nothing
        stopped. Any other leftover not among `records` is killed and nothing of it is reported."""

    def shutdown(self) -> list[str]:
        """Stops every attempt (the controller is stopping); returns their ids."""


@runtime_checkable
class WorkerHub(Protocol):
    """A backend that worker daemons join over the API (kind `workers`): the controller's service
    hands it the two worker calls as they arrive, with the caller's principal."""

    def register_worker(
        self,
        request: Any,
        principal: str,
        admin: bool,
        address: str = "",
        token_id: str = "",
        bound: str | None = None,
    ) -> Any:
        """Admits a daemon; `address` is where its call came from (the host its attempts run on),
        `token_id` the id of the token it called with, and `bound` the worker name that token was
        minted for (None: a token that names none)."""

    async def worker_poll(self, request: Any, principal: str, admin: bool, address: str = "") -> Any: ...

    def workspace_grant(self, request: Any, principal: str, admin: bool) -> str:
        """The job whose workspace layer the calling worker may fetch (PermissionDenied if none)."""


class LaunchError(Exception):
    """An attempt could not be started. Not retryable: the job itself is at fault (bad workdir,
    missing executable); retryable: the backend was (a host out of step with the scheduler);
    unschedulable: the backend can never host the request (more than any of its nodes has)."""

    def __init__(self, message: str, retryable: bool = False, unschedulable: bool = False):
        super().__init__(message)
        self.retryable = retryable
        self.unschedulable = unschedulable
