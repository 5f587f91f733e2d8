"""The worker daemon's exchange with its controller: register, long-poll for commands, report.

Two threads talk to the controller, both through `WorkerPoll`:

- the poller holds a long poll open (`wait_ms` > 0) and applies the start/stop commands it returns;
  the controller answers it the moment an attempt is placed on this worker;
- the reporter sends exits and new log bytes as soon as there are any (an exit wakes it at once,
  output is gathered every `REPORT_INTERVAL_S`), with `wait_ms` = 0, so a report never waits
  behind a held poll.

Log bytes are sent from the offset the controller last acknowledged for each stream, and every
answer carries the controller's offsets, which the daemon adopts (forward after an accepted batch,
backward after a controller restart that lost what it had not committed). An exit is sent with the
streams' full sizes and repeated until the controller accepts it, which it does only once every
byte has arrived. A connection error is retried with capped exponential back-off; an answer that
the session is unknown makes the daemon register again, reporting the attempts it still runs so
the controller can re-adopt them (or order them killed).

An attempt's workspace (the job's bundle and workdir files) is fetched by content id with
`FetchBundle`, checked and unpacked by `iris.backends.staging` (the same bounds the controller
applies) into `<work_dir>/bundles/<id>/`, where it stays as a cache shared by every attempt of the
same tree; each attempt runs in its own copy, removed with the attempt's folder.

A daemon running as root runs each attempt under the uid the controller assigned to the task's
user (see `iris.worker.runtime`); one that is not root says at start, and in its registration,
that its users' tasks are not isolated from each other or from it.

The daemon keeps a `boot_id` in its work dir: a restarted daemon presents the previous one, which
lets it take over its own name at once, while a second daemon under the same name is refused.

Its attempts never outlive it: a guard process (`iris.worker.fence`) kills them all the moment the
daemon dies, or when the lease that every answered call renews runs out (a stopped daemon, one cut
off from its controller), and the daemon starts nothing once its lease has run out. The controller
retries a lost worker's attempts only after that lease has ended.
"""

from __future__ import annotations

import fcntl
import logging
import os
import random
import secrets
import signal
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from connectrpc.code import Code
from connectrpc.errors import ConnectError

from iris.backends import staging
from iris.core.errors import FailedPrecondition, InvalidArgument, IrisError, Unavailable
from iris.core.processes import pid_alive
from iris.rpc import controller_pb2 as pb
from iris.rpc.codec import resources_to_proto
from iris.rpc.controller_connect import ControllerServiceClientSync
from iris.rpc.errors import from_connect
from iris.rpc.transport import tls_refusal
from iris.rpc.worker_text import clip_error
from iris.worker import metrics
from iris.worker.fence import Fence
from iris.worker.runtime import STREAMS, AttemptRun, ProcessRuntime, StartFailed
from iris.worker.settings import WorkerSettings

log = logging.getLogger("iris.worker")
REPORT_INTERVAL_S = 0.2
MAX_BATCH_BYTES = 512 * 1024
BACKOFF_START_S = 0.1
BACKOFF_MAX_S = 5.0
FENCE_WAIT_S = 10.0  # how long a new daemon waits for the fence of the last one to finish its kills
FATAL = {Code.PERMISSION_DENIED, Code.INVALID_ARGUMENT, Code.ALREADY_EXISTS, Code.UNAUTHENTICATED}


class Backoff:
    """Capped exponential back-off with jitter, reset by a success."""

    def __init__(self) -> None:
        self.delay = BACKOFF_START_S

    def wait(self, stop: threading.Event) -> None:
        stop.wait(self.delay * (0.5 + random.random()))
        self.delay = min(BACKOFF_MAX_S, self.delay * 2)

    def reset(self) -> None:
        self.delay = BACKOFF_START_S


def _read(path: Path, offset: int, final: bool) -> tuple[bytes, int]:
    """New bytes of a stream from `offset`: whole lines, or everything once the attempt ended;
    returns them with the stream's current size."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            if size <= offset:
                return b"", size
            f.seek(offset)
            data = f.read(MAX_BATCH_BYTES)
    except OSError:
        return b"", 0
    if not final and len(data) < MAX_BATCH_BYTES:
        data = data[: data.rfind(b"\n") + 1]
    return data, size


def _http_client(settings: WorkerSettings):  # -> pyqwest.SyncClient | None
    """The HTTP client for an https controller, checking its certificate as `settings.tls` says
    (its CA file, else the system's store) and presenting the client certificate it names; None
    (the Connect client's default) for plain http."""
    if not settings.controller.startswith("https://"):
        return None
    from pyqwest import SyncClient, SyncHTTPTransport

    ca, certificate, key = settings.tls.pem()
    return SyncClient(
        SyncHTTPTransport(tls_ca_cert=ca, tls_include_system_certs=ca is None, tls_cert=certificate, tls_key=key)
    )


class WorkerDaemon:
    def __init__(
        self,
        settings: WorkerSettings,
        runtime=None,
        on_joined: Callable[[pb.RegisterWorkerResponse], None] | None = None,
    ):
        """`on_joined` is called once, with the controller's answer, when the first registration
        succeeds (a re-registration after a controller restart calls it no more)."""
        self.settings = settings
        self._on_joined = on_joined
        self._stop = threading.Event()
        self._report_now = threading.Event()
        self.runtime = runtime or self._runtime()
        self._lock = threading.RLock()
        self._session: str | None = None
        self._acked = 0
        self._sent: dict[str, dict[str, int]] = {}
        self._failed: dict[str, str] = {}  # attempts that could not start, with why
        self._unstarted: dict[str, str] = {}  # attempts not started for a reason of the worker's own
        self.hold_s = 10.0
        self.boot_id = secrets.token_hex(8)
        self.previous_boot_id = ""
        self._lockfile: TextIO | None = None
        self.fence: Fence | None = None
        self.lease_s = 0.0  # how long an answered call keeps the lease, as the controller says
        self.registered = threading.Event()
        self._http = _http_client(settings)

    def _runtime(self):
        if self.settings.runtime == "docker":
            from iris.worker.docker import DockerRuntime

            return DockerRuntime(self.settings, self._report_now.set)
        return ProcessRuntime(
            self.settings.work_dir, self.settings.capacity.device, self._report_now.set, self.settings.device_ids
        )

    def _client(self, timeout_s: float) -> ControllerServiceClientSync:
        return ControllerServiceClientSync(
            self.settings.controller, timeout_ms=int(timeout_s * 1000), http_client=self._http
        )

    def _headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.settings.token}"} if self.settings.token else {}

    # -- life -----------------------------------------------------------------------------------

    def claim_work_dir(self) -> None:
        """Locks the work dir for this daemon's life and rolls its boot id; cleans up leftovers."""
        folder = self.settings.work_dir
        folder.mkdir(parents=True, exist_ok=True)
        self._lockfile = lockfile = open(folder / "worker.lock", "w")
        self._lock_work_dir(folder, lockfile)
        (folder / "daemon.pid").write_text(str(os.getpid()))
        boot = folder / "boot_id"
        self.previous_boot_id = boot.read_text().strip() if boot.exists() else ""
        boot.write_text(self.boot_id)
        killed = self.runtime.cleanup_leftovers()
        if killed:
            log.warning("killed %d attempts left running by this worker's previous life", len(killed))
        self.fence = Fence(folder, lockfile.fileno(), self._fence_containers())

    @staticmethod
    def _lock_work_dir(folder: Path, lockfile: TextIO) -> None:
        """Takes the work dir's lock. The fence of a daemon that just died holds it while it kills
        that daemon's attempts: this one waits for it, and refuses at once only a live daemon's."""
        deadline = time.monotonic() + FENCE_WAIT_S
        while True:
            try:
                fcntl.flock(lockfile, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                pass
            try:
                holder = int((folder / "daemon.pid").read_text().strip())
            except (OSError, ValueError):
                holder = 0
            if (holder > 0 and holder != os.getpid() and pid_alive(holder)) or time.monotonic() > deadline:
                raise FailedPrecondition(f"another worker daemon uses {folder}; give this one its own --work-dir")
            time.sleep(0.05)

    def _fence_containers(self) -> tuple[str, ...]:
        """What the fence needs to remove this daemon's containers: none for a process runtime."""
        from iris.worker.docker import LABEL_WORKER, DockerRuntime

        if not isinstance(self.runtime, DockerRuntime):
            return ()
        host = self.runtime.env.get("DOCKER_HOST")
        return (f"label={LABEL_WORKER}={self.settings.name}", self.runtime.docker, *(("--host", host) if host else ()))

    def _renew(self, since: float, lease_s: float | None = None) -> None:
        """A call sent at `since` (monotonic) was answered: the lease holds from then."""
        if lease_s is not None:
            self.lease_s = lease_s
        if self.fence is not None:
            self.fence.renew(since, self.lease_s)

    def run(self) -> None:
        """Serves until `stop()` (or SIGTERM/SIGINT when run as the program)."""
        if self.runtime.isolation_warning:
            log.warning("worker %s: %s", self.settings.name, self.runtime.isolation_warning)
        self.claim_work_dir()
        reporter = threading.Thread(target=self._report_loop, name="worker-report", daemon=True)
        reporter.start()
        # The long poll runs on a thread of its own, so that a stop does not wait out the poll the
        # controller holds open (up to `hold_s`): the daemon leaves at once, and a poll answered
        # after that starts nothing (`_apply` skips starts once stopping).
        failed: list[BaseException] = []

        def poll() -> None:
            try:
                self._poll_loop()
            except BaseException as exc:  # a refused registration: the daemon's own error
                failed.append(exc)
            finally:
                self._stop.set()

        poller = threading.Thread(target=poll, name="worker-poll", daemon=True)
        poller.start()
        try:
            while not self._stop.wait(1.0):
                pass
            if failed:
                raise failed[0]
        finally:
            self._stop.set()
            with self._lock:  # an answer being applied now finishes first; later ones start nothing
                pass
            self._report_now.set()
            reporter.join(timeout=5)
            killed = self.runtime.shutdown()
            if self.fence is not None:
                self.fence.retire()
            if self._session:
                self._say_lost(killed)

    def stop(self) -> None:
        self._stop.set()

    def session_open(self) -> bool:
        """Whether the daemon holds a session with the controller now (registered, not yet left)."""
        return self._session is not None and not self._stop.is_set()

    def install_signal_handlers(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self.stop())

    # -- registration ---------------------------------------------------------------------------

    def _register(self, client: ControllerServiceClientSync) -> None:
        s = self.settings
        held = [r.attempt_id for r in self.runtime.snapshot()]
        req = pb.RegisterWorkerRequest(
            backend_id=s.backend,
            name=s.name,
            capacity=resources_to_proto(s.capacity),
            attributes=s.attributes,
            runtime=s.runtime,
            boot_id=self.boot_id,
            previous_boot_id=self.previous_boot_id,
            attempts=held,
            isolation_warning=self.runtime.isolation_warning,
        )
        sent = time.monotonic()
        resp = client.register_worker(req, headers=self._headers())
        self._renew(sent, resp.lease_s)
        with self._lock:
            for attempt_id in resp.kill:
                log.warning("the controller gave up on %s: killing it", attempt_id)
                self.runtime.kill(attempt_id)
                self._sent.pop(attempt_id, None)
            for lo in resp.resume:
                self._sent.setdefault(lo.attempt_id, dict.fromkeys(STREAMS, 0))[lo.stream] = lo.offset
            self._session, self._acked = resp.session, 0
            self.hold_s = resp.poll_hold_s or self.hold_s
        self.previous_boot_id = self.boot_id  # from now on a re-registration is this same life
        first = not self.registered.is_set()
        self.registered.set()
        if first and self._on_joined is not None:
            self._on_joined(resp)
        log.info("worker %s registered with backend %s at %s", s.name, s.backend, s.controller)
        self._report_now.set()

    def _poll_loop(self) -> None:
        backoff = Backoff()
        client = None
        while not self._stop.is_set():
            try:
                client = client or self._client(self.hold_s + 15)
                if self._session is None:
                    self._register(client)
                session, acked = self._session, self._acked
                req = pb.WorkerPollRequest(
                    backend_id=self.settings.backend, session=session, acked_seq=acked, wait_ms=int(self.hold_s * 1000)
                )
                sent = time.monotonic()
                resp = client.worker_poll(req, headers=self._headers())
                metrics.POLLS.labels("ok").inc()
                if not resp.reregister:
                    self._renew(sent)
                self._apply(resp, session)
                backoff.reset()
            except ConnectError as exc:
                if exc.code in FATAL:
                    metrics.POLLS.labels("refused").inc()
                    raise from_connect(exc) from None
                metrics.POLLS.labels("unreachable").inc()
                refused = tls_refusal(exc.message)
                if refused and not self.registered.is_set():
                    # A certificate that does not verify will not on the next try: say so and stop.
                    raise Unavailable(f"cannot join the controller at {self.settings.controller}: {refused}") from None
                log.log(
                    logging.WARNING if refused else logging.INFO,
                    "controller unreachable (%s); retrying",
                    refused or exc.message,
                )
                client = None
                self._renew_if_down()
                backoff.wait(self._stop)
            except (OSError, TimeoutError) as exc:
                metrics.POLLS.labels("unreachable").inc()
                log.info("controller unreachable (%s); retrying", exc)
                client = None
                self._renew_if_down()
                backoff.wait(self._stop)

    def _renew_if_down(self) -> None:
        """Renews the lease while no controller runs at all: a connection to its address that is
        refused proves nothing listens there, and a controller that starts later holds the attempts
        it finds for longer than a lease before it retries any (see `iris.backends.workers`), so a
        controller's restart does not end the attempts. A timeout proves nothing (a controller cut
        off from this host may be retrying them already): the lease runs out."""
        url = urllib.parse.urlsplit(self.settings.controller)
        since = time.monotonic()
        try:
            port = url.port or (443 if url.scheme == "https" else 80)
            socket.create_connection((url.hostname or "127.0.0.1", port), timeout=1.0).close()
        except ConnectionRefusedError:
            self._renew(since)
        except (OSError, ValueError):
            pass

    def _apply(self, resp: pb.WorkerPollResponse, session: str | None) -> None:
        with self._lock:
            if session != self._session:
                return  # an answer to a session this daemon has already left
            if resp.reregister:
                self._session = None
                return
            for cmd in resp.commands:
                if cmd.seq <= self._acked:
                    continue
                self._acked = cmd.seq
                if cmd.HasField("start"):
                    if self._stop.is_set():
                        continue  # stopping: the leaving report gives it back to be placed elsewhere
                    if self.fence is not None and not self.fence.valid():
                        # Answered too late: the controller may be retrying it elsewhere already.
                        self._unstarted[cmd.start.attempt_id] = (
                            f"worker {self.settings.name} did not start it: its lease had run out"
                        )
                        continue
                    self._start(cmd.start)
                elif cmd.stop:
                    self.runtime.stop(cmd.stop)
            for lo in resp.log_offsets:
                if lo.attempt_id in self._sent:
                    self._sent[lo.attempt_id][lo.stream] = lo.offset
            for attempt_id in resp.accepted_exits:
                self._sent.pop(attempt_id, None)
                self.runtime.forget(attempt_id)

    def _start(self, launch: pb.AttemptLaunch) -> None:
        self._sent.setdefault(launch.attempt_id, dict.fromkeys(STREAMS, 0))
        try:
            self.runtime.start(launch, self._workspace(launch))
            metrics.ATTEMPTS_STARTED.labels("started").inc()
        except StartFailed as exc:
            metrics.ATTEMPTS_STARTED.labels("refused").inc()
            log.warning("cannot start %s: %s", launch.attempt_id, exc)
            self._failed[launch.attempt_id] = clip_error(str(exc))
        self._report_now.set()

    def _workspace(self, launch: pb.AttemptLaunch) -> tuple[str, ...]:
        """The unpacked layers of an attempt's workspace, fetched from the controller unless cached."""
        root = self.settings.work_dir
        layers = []
        for content_id in (launch.bundle_id, launch.files_id):
            if not content_id:
                continue
            try:
                folder = staging.bundle_folder(root, content_id)
                if not folder.is_dir():
                    resp = self._client(60).fetch_bundle(
                        pb.FetchBundleRequest(
                            backend_id=self.settings.backend,
                            session=self._session,
                            attempt_id=launch.attempt_id,
                            content_id=content_id,
                        ),
                        headers=self._headers(),
                    )
                    if content_id == launch.bundle_id:
                        staging.unpack_bundle(root, content_id, resp.data)
                    else:
                        self._write_files(content_id, dict(resp.files))
                layers.append(str(folder))
            except (ConnectError, IrisError, OSError) as exc:
                why = exc.message if isinstance(exc, (ConnectError, IrisError)) else str(exc)
                raise StartFailed(f"cannot fetch the job's workspace {content_id}: {why}") from None
        return tuple(layers)

    def _write_files(self, content_id: str, files: dict[str, bytes]) -> None:
        staging.check_tree((name, False) for name in files)
        if staging.files_id(files) != content_id:
            raise InvalidArgument(f"the workdir files sent for {content_id} do not match that id")
        staging.write_files(self.settings.work_dir, files)

    # -- reports --------------------------------------------------------------------------------

    def _report_loop(self) -> None:
        backoff = Backoff()
        client = None
        while not self._stop.is_set():
            self._report_now.wait(REPORT_INTERVAL_S)
            self._report_now.clear()
            try:
                client = client or self._client(30)
                while self._report_once(client) and not self._stop.is_set():
                    pass  # more output waiting than one batch holds
                backoff.reset()
            except ConnectError as exc:
                if exc.code in FATAL:
                    log.error("the controller refused a report: %s", exc.message)
                client = None
                backoff.wait(self._stop)
            except (OSError, TimeoutError):
                client = None
                backoff.wait(self._stop)

    def _gather(self) -> pb.WorkerPollRequest | None:
        with self._lock:
            if self._session is None:
                return None
            req = pb.WorkerPollRequest(backend_id=self.settings.backend, session=self._session, acked_seq=self._acked)
            for attempt_id, why in list(self._failed.items()):
                req.exits.add(attempt_id=attempt_id, exit_code=127, has_exit_code=True, error=why)
            for attempt_id, why in list(self._unstarted.items()):
                req.exits.add(attempt_id=attempt_id, has_exit_code=False, error=why)  # lost: retried
            runs: list[AttemptRun] = self.runtime.snapshot()
            for run in runs:
                sent = self._sent.get(run.attempt_id)
                if sent is None:
                    continue
                exited = run.exited
                complete, sizes = True, {}
                for stream in STREAMS:
                    data, size = _read(run.path(stream), sent[stream], exited)
                    sizes[stream] = size
                    if data:
                        req.logs.add(attempt_id=run.attempt_id, stream=stream, offset=sent[stream], data=data)
                    complete = complete and sent[stream] + len(data) >= size
                if exited and complete:
                    req.exits.add(
                        attempt_id=run.attempt_id,
                        exit_code=run.exit_code if run.exit_code is not None else 0,
                        has_exit_code=run.exit_code is not None,
                        error=clip_error(run.error),
                        stdout_size=sizes["stdout"],
                        stderr_size=sizes["stderr"],
                    )
            return req if (req.logs or req.exits) else None

    def _report_once(self, client: ControllerServiceClientSync) -> bool:
        """Sends one batch of reports; True when more output may be waiting."""
        req = self._gather()
        if req is None:
            return False
        sent = time.monotonic()
        resp = client.worker_poll(req, headers=self._headers())
        if not resp.reregister:
            self._renew(sent)
        with self._lock:
            for attempt_id in resp.accepted_exits:
                self._failed.pop(attempt_id, None)
                self._unstarted.pop(attempt_id, None)
        self._apply(resp, req.session)
        return any(len(b.data) >= MAX_BATCH_BYTES for b in req.logs)

    def _say_lost(self, attempt_ids: list[str]) -> None:
        """On a graceful stop: tells the controller that this worker is leaving (it places nothing
        more here) and that these attempts are lost here, at once instead of a grace period later."""
        req = pb.WorkerPollRequest(
            backend_id=self.settings.backend, session=self._session, acked_seq=self._acked, leaving=True
        )
        for attempt_id in attempt_ids:
            req.exits.add(attempt_id=attempt_id, has_exit_code=False, error=f"worker {self.settings.name} was stopped")
        try:
            self._client(5).worker_poll(req, headers=self._headers())
        except (ConnectError, OSError, TimeoutError):
            pass
