"""The `workers` backend: hosts running `iris worker start` join a pool by dialing the controller.

It decides which daemons are members (registration checks the pool's required attributes and who
may act as a worker name), which are alive (a daemon silent longer than the grace period is dead
and its attempts are reported lost), which attempts each daemon must start or stop, and which log
bytes and exits it accepts.

Why it is built this way:

- Workers sit behind NAT, so the controller never dials them. A daemon long-polls `WorkerPoll`
  (a Connect unary call over HTTP/1.1, which any proxy passes and which needs no streaming support
  in the client); the call is held on an asyncio event that `start`/`stop` set from the tick's
  thread, so a placed attempt reaches its worker at once, never a poll interval later. Reports
  (exits, log bytes) travel on the same call made without waiting, sent whenever the daemon has
  something to say, so they never queue behind a held poll.
- Commands carry a sequence number and stay queued until the daemon acknowledges applying them, so
  a response lost on the way (a stopped daemon, a dropped connection) costs nothing: the next poll
  gets the same commands again, and starting or stopping twice is a no-op on the daemon.
- Log bytes are accepted only at the offset the controller holds for the stream, and every answer
  tells the daemon that offset; after a controller restart the offsets come from the database (the
  adopt records), so what the daemon sends again from there arrives exactly once.
- An exit is taken only once every byte of the attempt's output has arrived, so the tick stores
  the last lines in the same transaction that ends the attempt.
- A daemon that comes back after being declared dead, or a restarted one, registers anew: every
  attempt it reports that the controller no longer holds is answered with "kill", and every
  attempt the controller holds on it that it no longer reports is lost (and retried).
- At most one attempt of a task is live. An attempt is retried elsewhere only once it is fenced:
  its daemon confirmed its end (an exit, a restart that no longer reports it, a stop), or the
  daemon's lease has certainly run out. Each daemon holds a lease of `lease_s` (`fence_lease`, a
  share of the grace period) from every call the controller answers; its fence
  (`iris.worker.fence`) kills every attempt of the daemon the moment the daemon dies, and when the
  lease runs out unrenewed (a stopped daemon, a lost network). A worker is declared dead only a
  grace period after its last call, past the lease, so its attempts have ended by then.

The backend keeps its state in memory: after a controller restart the database's live attempts
are handed to `adopt` and held for one grace period, waiting for their daemons to re-register.
Only a marker per started attempt outlives it (see `iris.backends.marks`), so an attempt whose
stop was committed just before a crash is adopted too and stopped as any stop is, its daemon then
sending its last output and its exit code, rather than being killed unseen as one the controller
gave up.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from iris.backends.marks import LiveMarks
from iris.backends.protocol import (
    AdoptRecord,
    AttemptExit,
    AttemptHost,
    BackendContext,
    BackendDescription,
    BackendEvents,
    LaunchError,
    LaunchSpec,
    LogChunk,
    Started,
    WorkerSnapshot,
)
from iris.backends.spool import line_pieces, truncation_marker
from iris.backends.staging import safe_dirname
from iris.core.config import WorkersBackendConfig
from iris.core.errors import AlreadyExists, InvalidArgument, PermissionDenied
from iris.core.names import validate_worker_name
from iris.core.resources import Resources
from iris.rpc import controller_pb2 as pb
from iris.rpc.bounds import check_number
from iris.rpc.codec import resources_from_proto, resources_to_proto

log = logging.getLogger("iris.workers")

STREAMS = ("stdout", "stderr")
DEVICE_KEYS = ("device-type", "device-variant", "gpu-count", "tpu-topology")  # set by `--devices`
RUNTIMES = ("process", "docker")
MAX_HOLD_S = 10.0
# After a controller restart, daemons come back on their own back-off (up to 5 s between tries):
# adopted attempts wait one grace period plus this before they are given up.
RECONNECT_ALLOWANCE_S = 10.0
# A daemon's lease, as a share of the grace period: the rest is the margin between its fence
# killing its attempts and the controller retrying them elsewhere.
LEASE_SHARE = 0.75


def fence_lease(grace_s: float) -> float:
    """How long a daemon's attempts may outlive its last answered call (see the module's doc)."""
    return grace_s * LEASE_SHARE


def _iso_ms(epoch_ms: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch_ms / 1000)) + f".{int(epoch_ms % 1000):03d}Z"


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class _Attempt:
    attempt_id: str
    worker: str
    offsets: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STREAMS, 0))
    stopping: bool = False
    adopt_deadline: float | None = None  # set while waiting for its daemon after a restart
    job_id: str = ""
    layers: frozenset[str] = frozenset()  # the workspace content ids its worker may fetch


@dataclass
class _Worker:
    name: str
    principal: str
    boot_id: str
    session: str
    capacity: Resources
    attributes: dict[str, str]
    runtime: str
    last_contact: float  # monotonic
    last_contact_ms: int
    alive: bool = True
    dead_since: float | None = None  # monotonic; set when it is declared dead
    next_seq: int = 1
    commands: list[pb.WorkerCommand] = field(default_factory=list)
    waiter: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None
    address: str = ""  # the address its latest call came from, as the controller saw it
    isolation_warning: str = ""  # why its users' tasks are not isolated there (a daemon not root)


def _notify(worker: _Worker) -> None:
    if worker.waiter is not None:
        loop, event = worker.waiter
        loop.call_soon_threadsafe(event.set)


class Bindings:
    """Keys bound once to a value, in one JSON file written whole (and synced) when a key is first
    bound, so writes are rare: worker name → the principal that first registered it, and worker
    token id → the one name a token minted without `--worker` registered first.

    A file that cannot be read as such (a disk fault, a hand edit) is moved aside with a warning
    and the bindings start empty, as they were before they were kept: the controller still starts,
    and each key is bound again by the first daemon that registers."""

    def __init__(self, path: Path, what: str):
        self.path = path
        self.what = what  # what the file holds, for the warning
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._owners: dict[str, str] = {}
        try:
            loaded = json.loads(path.read_text())
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            self._set_aside(f"{type(exc).__name__}: {exc}")
            return
        if not isinstance(loaded, dict) or not all(isinstance(v, str) for v in loaded.values()):
            self._set_aside(f"not a mapping of {what}")
            return
        self._owners = loaded

    def _set_aside(self, why: str) -> None:
        aside = self.path.with_name(f"{self.path.name}.unreadable-{int(time.time())}")
        try:
            os.replace(self.path, aside)
        except OSError:
            aside = self.path
        log.warning(
            "cannot read the %s in %s (%s): kept as %s; they are bound again as workers register",
            self.what, self.path, why, aside,
        )  # fmt: skip

    def get(self, name: str) -> str | None:
        return self._owners.get(name)

    def bind(self, name: str, principal: str) -> None:
        """Binds an unbound key `name` to `principal`, durably before it returns (OSError otherwise,
        with nothing bound)."""
        if name in self._owners:
            return
        owners = {**self._owners, name: principal}
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "w") as f:
            json.dump(owners, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        folder = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)
        self._owners = owners


class WorkersBackend:
    kind = "workers"
    runs_images = True  # on its workers started with --runtime docker

    def __init__(self, config: WorkersBackendConfig, context: BackendContext):
        self.id = config.id
        self.config = config
        self._context = context
        self.grace = context.worker_grace_period
        self.lease = fence_lease(self.grace)
        self.retention = config.forget_dead_after
        self.hold = max(0.05, min(MAX_HOLD_S, self.grace / 3))
        self._required = {k: str(v).lower() for k, v in config.attributes.items()}
        self._attributes = {**self._required, "pool": config.id}
        self._workers: dict[str, _Worker] = {}
        # Who registered each worker name, kept in the state folder: attempts in the database keep
        # naming a worker after it is forgotten, and the controller restarts before its daemons
        # reconnect, so a name stays its owner's: a daemon of another principal taking it would make
        # that history read as if its own host had run them, and would be handed its attempts.
        folder = context.state_dir / "workers"
        self._owners = Bindings(folder / "owners" / f"{safe_dirname(config.id)}.json", "worker names to principals")
        # A worker token minted without `--worker` registers one name only, its first: one stolen
        # token would otherwise join the pool under any number of names.
        self._token_names = Bindings(folder / "tokens" / f"{safe_dirname(config.id)}.json", "worker tokens to names")
        self._sessions: dict[str, _Worker] = {}  # a session token → the registration it belongs to
        self._attempts: dict[str, _Attempt] = {}
        self._exits: list[AttemptExit] = []
        self._logs: list[LogChunk] = []
        self._lock = threading.Lock()
        self._inherited = dict(os.environ)
        self.marks = LiveMarks(context.state_dir / "workers" / ".live" / config.id)
        self._marked: dict[str, int | None] = {}  # what `leftovers` found, for `adopt`

    # -- what the scheduler sees -----------------------------------------------------------------

    def describe(self) -> BackendDescription:
        """The pool's attributes: those it requires, plus those every live worker shares (so a pool
        of H100 hosts advertises device-variant h100 to peers without saying so in its config)."""
        with self._lock:
            live = [w.attributes for w in self._workers.values() if w.alive]
        shared = dict(live[0]) if live else {}
        for attrs in live[1:]:
            shared = {k: v for k, v in shared.items() if attrs.get(k) == v}
        shared.pop("worker", None)
        return BackendDescription(self.id, self.kind, {**shared, **self._attributes}, None)

    def workers(self) -> tuple[WorkerSnapshot, ...]:
        with self._lock:
            return tuple(
                WorkerSnapshot(
                    w.name,
                    self.id,
                    w.capacity,
                    w.attributes,
                    w.alive,
                    last_contact_ms=w.last_contact_ms,
                    runtime=w.runtime,
                    isolation_warning=w.isolation_warning,
                )
                for w in self._workers.values()
            )

    def running(self) -> frozenset[str]:
        """Attempts this backend holds, including exits not yet acknowledged by the tick (an exit
        that arrives between the tick's poll and its reconcile must not read as a lost attempt)."""
        with self._lock:
            return frozenset(self._attempts).union(e.attempt_id for e in self._exits)

    def holds(self, attempt_id: str) -> bool:
        with self._lock:
            return attempt_id in self._attempts or any(e.attempt_id == attempt_id for e in self._exits)

    def attempt_host(self, attempt_id: str, worker_id: str) -> AttemptHost:
        """The address the controller last saw the attempt's worker call from, while it is alive."""
        with self._lock:
            attempt = self._attempts.get(attempt_id)
            worker = self._workers.get(attempt.worker) if attempt is not None else None
            if worker is None or not worker.alive:
                return AttemptHost(unknown=f"attempt {attempt_id} is not running on a connected worker of {self.id}")
            if not worker.address:
                return AttemptHost(unknown=f"worker {worker.name} of {self.id} has no known network address")
            return AttemptHost(address=worker.address)

    # -- start / stop (the tick's thread) ---------------------------------------------------------

    def start(self, spec: LaunchSpec) -> Started:
        launch = pb.AttemptLaunch(
            attempt_id=spec.attempt_id,
            job_id=spec.job_id,
            task_index=spec.task_index,
            attempt=spec.attempt,
            command=list(spec.command),
            # The controller's own environment stays on its host; the job's and Iris's travel.
            env={k: v for k, v in spec.env.items() if k.startswith("IRIS_") or self._inherited.get(k) != v},
            resources=resources_to_proto(spec.resources),
            workdir=spec.workdir,
            image=spec.image,
            # A job that names a folder on the host runs there; any other fetches its workspace.
            bundle_id="" if spec.workdir else spec.bundle_id,
            files_id="" if spec.workdir else spec.files_id,
            # Who the task runs as, the same uid a local backend would give it: a root daemon
            # switches to it (see `iris.worker.runtime`), any other runs the task as itself.
            uid=spec.uid or 0,
            gid=(spec.uid if spec.gid is None else spec.gid) or 0,
            max_processes=spec.max_processes if spec.uid else 0,
        )
        with self._lock:
            worker = self._workers.get(spec.worker_id)
            if worker is None or not worker.alive:
                raise LaunchError(f"worker {spec.worker_id} is not connected to backend {self.id}", retryable=True)
            if spec.image and worker.runtime != "docker":
                raise LaunchError(
                    f"the job names image {spec.image!r}, but worker {worker.name} runs attempts as processes; "
                    "start workers with --runtime docker to run images",
                    retryable=False,
                )
            layers = frozenset(i for i in (launch.bundle_id, launch.files_id) if i)
            self.marks.put(spec.attempt_id)
            self._attempts[spec.attempt_id] = _Attempt(spec.attempt_id, worker.name, job_id=spec.job_id, layers=layers)
            self._command(worker, pb.WorkerCommand(start=launch))
        return Started(spec.attempt_id, 0, "")

    def stop(self, attempt_id: str) -> None:
        with self._lock:
            attempt = self._attempts.get(attempt_id)
            if attempt is None or attempt.stopping:
                return
            attempt.stopping = True
            worker = self._workers.get(attempt.worker)
            if worker is not None and worker.alive:
                self._command(worker, pb.WorkerCommand(stop=attempt_id))

    def _command(self, worker: _Worker, command: pb.WorkerCommand) -> None:
        command.seq = worker.next_seq
        worker.next_seq += 1
        worker.commands.append(command)
        _notify(worker)

    # -- events (the tick's thread) -------------------------------------------------------------

    def poll(self) -> BackendEvents:
        """What happened since the last `ack` (the same events again until acknowledged)."""
        with self._lock:
            self._expire(time.monotonic())
            return BackendEvents(tuple(self._exits), tuple(self._logs))

    def ack(self, events: BackendEvents) -> None:
        with self._lock:
            del self._logs[: len(events.logs)]
            del self._exits[: len(events.exits)]
        for ex in events.exits:
            self.marks.drop(ex.attempt_id)

    def discard(self, attempt_ids: Sequence[str]) -> None:
        """Nothing to delete here: a worker removes an attempt's files once its exit is accepted."""

    def _expire(self, now: float) -> None:
        """Declares silent workers dead, forgets those dead longer than the retention, and gives up
        adopted attempts nobody came back for."""
        for worker in [
            w for w in self._workers.values() if w.dead_since is not None and now - w.dead_since > self.retention
        ]:
            self._forget(worker)
        for worker in self._workers.values():
            if worker.alive and now - worker.last_contact > self.grace:
                log.warning(
                    "worker %s of backend %s is silent for %.1fs: declared dead", worker.name, self.id, self.grace
                )
                fenced = _iso_ms(worker.last_contact_ms + self.lease * 1000)
                self._declare_dead(
                    worker,
                    now,
                    f"worker {worker.name} lost: it stopped answering for more than {self.grace:g}s; attempt "
                    f"fenced at {fenced}, when the worker's lease ran out",
                )
        for a in [a for a in self._attempts.values() if a.adopt_deadline is not None and a.adopt_deadline < now]:
            self._lose(a, f"worker {a.worker} did not reconnect after the controller restarted")

    def _leave(self, worker: _Worker) -> None:
        """A daemon stopping on purpose says so: it is dead from now on (nothing more is placed on
        it, as a worker silent past the grace period), and what it still held is given up here at
        once instead of a grace period later, to be retried elsewhere."""
        log.info("worker %s of backend %s is stopping: it takes no more work", worker.name, self.id)
        self._declare_dead(
            worker, time.monotonic(), f"worker {worker.name} was stopped; attempt fenced at {_iso_ms(now_ms())}"
        )

    def _declare_dead(self, worker: _Worker, now: float, why: str) -> None:
        """Nothing more is placed on `worker`, its held poll answers, and its attempts are given up."""
        worker.alive = False
        worker.dead_since = now
        worker.commands.clear()
        _notify(worker)
        for a in [a for a in self._attempts.values() if a.worker == worker.name]:
            self._lose(a, why)

    def _forget(self, worker: _Worker) -> None:
        """Drops a dead worker's record: its attempts were given up when it died, and those that
        ran on it keep its name in the database, so the name stays its owner's to register again."""
        del self._workers[worker.name]
        if self._sessions.get(worker.session) is worker:
            del self._sessions[worker.session]
        log.info("worker %s of backend %s is dead for more than %gs: forgotten", worker.name, self.id, self.retention)

    def _lose(self, attempt: _Attempt, why: str) -> None:
        del self._attempts[attempt.attempt_id]
        self._exits.append(AttemptExit(attempt.attempt_id, None, why))

    def leftovers(self) -> frozenset[str]:
        """Attempts this backend started, in an earlier life too, whose end it has not seen stored
        (read here once; `adopt` sorts out the same markers)."""
        self._marked = self.marks.read()
        return frozenset(self._marked)

    def adopt(self, records: list[AdoptRecord], settled: frozenset[str] = frozenset()) -> None:
        """Holds `records` until their daemons register again (the tick stops those it no longer
        wants, and their daemons are told so then); a leftover the database no longer holds at all,
        or holds as ended and stored, is forgotten, and its daemon told to kill it when it registers
        (an attempt that ended is no longer among what a daemon reports)."""
        deadline = time.monotonic() + self.grace + RECONNECT_ALLOWANCE_S
        kept = {rec.attempt_id for rec in records}
        marked, self._marked = self._marked, {}
        for attempt_id in self.marks.forget(marked, kept, settled):
            self.marks.drop(attempt_id)
        for attempt_id in kept:
            self.marks.put(attempt_id)
        with self._lock:
            for rec in records:
                self._attempts[rec.attempt_id] = _Attempt(
                    rec.attempt_id,
                    rec.worker_id,
                    {"stdout": rec.stdout_offset, "stderr": rec.stderr_offset},
                    adopt_deadline=deadline,
                )

    def shutdown(self) -> list[str]:
        """Tells every daemon to stop its attempts and waits briefly for them to take the order."""
        ids = sorted(self.running())
        for attempt_id in ids:
            self.stop(attempt_id)
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            with self._lock:
                if not any(w.commands for w in self._workers.values() if w.alive):
                    break
            time.sleep(0.02)
        return ids

    # -- the worker calls (the server's event loop) ---------------------------------------------

    def register_worker(
        self,
        req: pb.RegisterWorkerRequest,
        principal: str,
        admin: bool,
        address: str = "",
        token_id: str = "",
        bound: str | None = None,
    ) -> pb.RegisterWorkerResponse:
        name, capacity, attributes = self._check_registration(req)
        with self._lock:
            first_of_token = self._token_binding(name, admin, token_id, bound)
            old = self._workers.get(name)
            # An admin's daemon may take any name, and leaves it bound to whoever had it.
            owner = self._owners.get(name) or (old.principal if old is not None else None)
            if owner is not None and owner != principal and not admin:
                history = (
                    ""
                    if old is not None
                    else " (it registered here before: it was forgotten after"
                    f" {self.retention:g}s dead, or has not reconnected since a restart, and the attempts"
                    " it ran still name it)"
                )
                raise PermissionDenied(
                    f"worker name {name!r} in backend {self.id} belongs to {owner}{history}; "
                    f"{principal} may not register as it. Pick another --name"
                )
            now = time.monotonic()
            # Another daemon's registration holds the name while its attempts may still run: until
            # it has been silent past the grace period, which outlasts its lease (see `fence_lease`).
            if (
                old is not None
                and old.alive
                and now - old.last_contact <= self.grace
                and req.boot_id != old.boot_id
                and req.previous_boot_id != old.boot_id
            ):
                raise AlreadyExists(
                    f"a worker named {name!r} is already connected to backend {self.id} from another daemon; "
                    "give this one another --name (or stop the other one)"
                )
            self._owners.bind(name, principal)  # first: a write that fails leaves everything as it was
            if first_of_token:
                self._token_names.bind(token_id, name)
            if old is not None:
                old.alive = False
                _notify(old)
            worker = _Worker(
                name, principal, req.boot_id, secrets.token_hex(16), capacity, attributes,
                req.runtime or "process", now, now_ms(), address=address,
                isolation_warning=req.isolation_warning,
            )  # fmt: skip
            self._workers[name] = worker
            if old is not None:
                self._sessions.pop(old.session, None)
            self._sessions[worker.session] = worker
            resp = pb.RegisterWorkerResponse(
                session=worker.session,
                grace_period_s=self.grace,
                poll_hold_s=self.hold,
                worker_id=name,
                lease_s=self.lease,
            )
            reported = set(req.attempts)
            for attempt_id in sorted(reported):
                a = self._attempts.get(attempt_id)
                if a is None or a.worker != name:
                    resp.kill.append(attempt_id)
                    continue
                a.adopt_deadline = None
                for stream in STREAMS:
                    resp.resume.add(attempt_id=attempt_id, stream=stream, offset=a.offsets[stream])
                if a.stopping:
                    self._command(worker, pb.WorkerCommand(stop=attempt_id))
            lost = [a for a in self._attempts.values() if a.worker == name and a.attempt_id not in reported]
            for a in lost:
                self._lose(
                    a,
                    f"worker {name} restarted and no longer runs it; attempt fenced at {_iso_ms(now_ms())}, "
                    "when the worker confirmed its end",
                )
        log.info("worker %s joined backend %s (%s, %s)", name, self.id, capacity, worker.runtime)
        if worker.isolation_warning:
            log.warning("worker %s of backend %s: %s", name, self.id, worker.isolation_warning)
        if lost:
            self._context.wake()
        return resp

    def _token_binding(self, name: str, admin: bool, token_id: str, bound: str | None) -> bool:
        """Refuses a worker token's registration of a name other than its own: the one it was
        minted for, or (minted without one) the first it registered. True when this registration
        is the first of such a token, whose name is then bound to it."""
        if bound is not None:
            if name != bound:
                raise PermissionDenied(
                    f"this worker token was minted for worker {bound!r}; it may not register worker {name!r}. "
                    f"Start the daemon with --name {bound}, or mint a token for {name!r} with "
                    f"`iris token create --role worker --user {name} --worker {name}`"
                )
            return False
        if admin or not token_id:
            return False
        first = self._token_names.get(token_id)
        if first is not None and first != name:
            raise PermissionDenied(
                f"this worker token registered worker {first!r} first and is bound to that name; it may not "
                f"register worker {name!r}. Mint one token per worker: "
                f"`iris token create --role worker --user {name} --worker {name}`"
            )
        return first is None

    def _check_registration(self, req: pb.RegisterWorkerRequest) -> tuple[str, Resources, dict[str, str]]:
        name = req.name
        validate_worker_name(name)
        if req.runtime and req.runtime not in RUNTIMES:
            raise InvalidArgument(f"runtime {req.runtime!r} is not known; use one of: {', '.join(RUNTIMES)}")
        if not req.boot_id:
            raise InvalidArgument("a worker registration needs its boot_id")
        if not (req.capacity.cpu > 0 and req.capacity.memory_bytes > 0):
            raise InvalidArgument(f"worker {name} advertises no cpu or memory; give it --cpu N and --memory SIZE")
        check_number("capacity.cpu", req.capacity.cpu, 0, 100_000)
        check_number("capacity.device.count", req.capacity.device.count, 0, 4096)
        capacity = resources_from_proto(req.capacity)
        attributes = {k.lower(): str(v).lower() for k, v in req.attributes.items()}
        for key, want in self._required.items():
            have = attributes.get(key)
            if have != want:
                # Device keys follow from --devices; any other is an --attr of the worker's own.
                fix = (
                    "with --devices KIND:VARIANT:COUNT of that device"
                    if key in DEVICE_KEYS
                    else f"with --attr {key}={want}"
                )
                raise InvalidArgument(
                    f"backend {self.id} takes only workers with {key}={want}; worker {name} advertises "
                    f"{key}={have if have is not None else '(nothing)'}: start it {fix}"
                )
        # `runtime` lets a job's image steer it to workers that run containers (a hard constraint).
        attributes.update(pool=self.id, worker=name, runtime=req.runtime or "process")
        return name, capacity, attributes

    async def worker_poll(
        self, req: pb.WorkerPollRequest, principal: str, admin: bool, address: str = ""
    ) -> pb.WorkerPollResponse:
        resp = pb.WorkerPollResponse()
        with self._lock:
            worker = self._session(req, principal, admin)
            if worker is None:
                return pb.WorkerPollResponse(reregister=True)
            worker.last_contact = time.monotonic()
            worker.last_contact_ms = now_ms()
            worker.address = address
            worker.commands = [c for c in worker.commands if c.seq > req.acked_seq]
            woke = self._take_reports(worker, req, resp)
            if req.leaving:
                self._leave(worker)
                woke = True
            waiter = None
            if not worker.commands and req.wait_ms > 0 and worker.alive:
                if worker.waiter is not None:
                    _notify(worker)  # an older held poll of this worker answers now
                waiter = (asyncio.get_running_loop(), asyncio.Event())
                worker.waiter = waiter
            else:
                resp.commands.extend(worker.commands)
        if woke:
            self._context.wake()
        if waiter is None:
            return resp
        try:
            await asyncio.wait_for(waiter[1].wait(), timeout=min(req.wait_ms / 1000, self.hold))
        except TimeoutError:
            pass
        with self._lock:
            if worker.waiter is waiter:
                worker.waiter = None
            if not worker.alive or self._workers.get(worker.name) is not worker:
                return pb.WorkerPollResponse(reregister=True)
            resp.commands.extend(worker.commands)
        return resp

    def workspace_grant(self, req: pb.FetchBundleRequest, principal: str, admin: bool) -> str:
        """The job whose workspace layer a worker asks for, if the attempt it names is assigned to
        that worker and carries that layer; PermissionDenied otherwise."""
        with self._lock:
            worker = self._session(req, principal, admin)
            attempt = self._attempts.get(req.attempt_id)
            if worker is None or attempt is None or attempt.worker != worker.name or attempt.stopping:
                raise PermissionDenied(
                    f"attempt {req.attempt_id!r} is not running on this worker; a worker fetches only the "
                    "workspace of an attempt it was given"
                )
            if req.content_id not in attempt.layers:
                raise PermissionDenied(f"{req.content_id!r} is not part of the workspace of attempt {req.attempt_id}")
            return attempt.job_id

    def _session(
        self, req: pb.WorkerPollRequest | pb.FetchBundleRequest, principal: str, admin: bool
    ) -> _Worker | None:
        worker = self._sessions.get(req.session)
        if worker is None:
            return None
        if worker.principal != principal and not admin:
            raise PermissionDenied(f"this session belongs to worker {worker.name}, not to {principal}")
        return worker if worker.alive else None

    def _take_reports(self, worker: _Worker, req: pb.WorkerPollRequest, resp: pb.WorkerPollResponse) -> bool:
        """Accepts the log bytes and exits a worker reports; True when the tick should run now."""
        touched: set[str] = set()
        ts = now_ms()
        cap = self._context.output_cap
        for batch in req.logs:
            a = self._attempts.get(batch.attempt_id)
            if a is None or a.worker != worker.name or batch.stream not in STREAMS:
                continue  # an attempt the controller gave up: its output never reaches the job
            touched.add(a.attempt_id)
            held = a.offsets[batch.stream]
            end = batch.offset + len(batch.data)
            if batch.offset > held or end <= held:
                continue  # a gap (the worker rewinds to `held`) or bytes already taken
            data = batch.data[held - batch.offset :]
            # Output past the attempt's cap is taken (the daemon need not send it again) and dropped.
            room = cap - sum(a.offsets.values()) if cap > 0 else len(data)
            a.offsets[batch.stream] = end
            text = data[: max(room, 0)].decode("utf-8", "replace")
            lines = tuple((ts, piece) for line in text.splitlines() for piece in line_pieces(line))
            if 0 <= room < len(data):
                lines += ((ts, truncation_marker(cap)),)
            if lines:
                self._logs.append(LogChunk(a.attempt_id, batch.stream, lines, end))
        woke = False
        for ex in req.exits:
            a = self._attempts.get(ex.attempt_id)
            if a is None or a.worker != worker.name:
                resp.accepted_exits.append(ex.attempt_id)
                continue
            touched.add(a.attempt_id)
            if a.offsets["stdout"] < ex.stdout_size or a.offsets["stderr"] < ex.stderr_size:
                continue  # output still in flight: the worker sends it, then the exit again
            del self._attempts[a.attempt_id]
            code = ex.exit_code if ex.has_exit_code else None
            self._exits.append(AttemptExit(a.attempt_id, code, ex.error))
            resp.accepted_exits.append(ex.attempt_id)
            woke = True
        for attempt_id in sorted(touched):
            holding = self._attempts.get(attempt_id)
            if holding is None:
                continue
            for stream in STREAMS:
                resp.log_offsets.add(attempt_id=attempt_id, stream=stream, offset=holding.offsets[stream])
        return woke or bool(self._logs)
