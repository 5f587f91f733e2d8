"""The Slurm backend: each attempt is one Slurm batch job in one partition; Slurm places it.

Placement is split as Slurm users expect. Iris decides only whether to send work to the
partition: the partition appears to Iris's scheduler as one worker per GPU type whose capacity is
the sum of its usable nodes (cpus, memory, GPUs), and Iris counts the work it has sent against
that. So Iris never has more in the partition than the partition could run at once, and never
picks a node: Slurm does, inside the partition. Work Iris did not send (other Slurm users) is
Slurm's to arbitrate: an Iris job behind it waits in Slurm's queue, in Slurm's priority order,
and shows Slurm's pending reason (`Resources`, `Priority`, …) as its own; for federation, free
capacity subtracts what other users hold, so a peer hands off only what can start now. A request
larger than any node passes Iris's summed view and is refused by Slurm, which Iris reports as
UNSCHEDULABLE with Slurm's own words.

One background thread polls: per `poll_interval` one `squeue` call for every live attempt (not one
per job), every few seconds one `sinfo` for capacity, and in between it reads each attempt's
stdout and stderr files (written by Slurm into the staging folder) through the shared output
spool, as the local backend does. Events are kept until the tick acknowledges them (`ack`), and an
exit is reported only once all of its output has been read.

Stop: a stop sends one `scancel` at once. Slurm can lose it (a cancel that lands while the batch
step is still starting, a controller that restarts), so as long as that same `squeue` still lists a
stopped job as waiting or running, the poller cancels it again, 1 s after the first, then 2 s, 4 s,
8 s and every 10 s, until Slurm no longer lists it alive. A job Slurm has itself already marked
cancelled (COMPLETING) refuses any further cancel or signal, so there the resends are harmless and
few, and the job leaves once its node reports its processes gone. The jobs of attempts the database
no longer holds (found on restart) are cancelled the same way before their markers go.

Restart: a Slurm job is named by its attempt id, and the attempt row is committed before `sbatch`
runs; the Slurm job id is committed after. A restarted controller adopts attempts by job id, and
looks the ones without an id up by name, so a crash between `sbatch` and the commit leaves no
orphan: the job is found and adopted, or it was never submitted and the attempt is retried. A
marker per submitted attempt (see `iris.backends.marks`) names the jobs whose end is not yet
stored, so one whose stop was committed just before a crash is taken back and cancelled, and its
end recorded, and one the database no longer holds at all is cancelled.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import pwd
import shutil
import socket
import stat
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from iris.backends.local.attempts_root import closed_to_others
from iris.backends.local.backend import shell_argv
from iris.backends.local.own_uid import give_workspace, uid_task_env
from iris.backends.marks import LiveMarks
from iris.backends.privileged import memfd, nul_separated
from iris.backends.protocol import (
    AdoptRecord,
    AttemptExit,
    AttemptHost,
    BackendDescription,
    BackendEvents,
    LaunchError,
    LaunchSpec,
    LogChunk,
    Started,
    WorkerSnapshot,
)
from iris.backends.slurm.commands import MB, SlurmCommandError, SlurmCommands, SlurmJob, SlurmNode, sbatch_argv
from iris.backends.slurm.states import RUNNING, WAITING, judge
from iris.backends.spool import OutputSpool
from iris.backends.staging import publish_folder, safe_dirname
from iris.core.config import SlurmBackendConfig
from iris.core.errors import InvalidArgument
from iris.core.resources import Device, Resources

log = logging.getLogger("iris.slurm")
# $1 is the attempt folder, $2 the number of workspace layer folders that follow (copied in order
# into the job's working folder, on the node, as the local backend does); the command comes last.
# The exit code is kept in a file so it survives Slurm forgetting the job (MinJobAge) while no
# controller was watching. The wrapper runs as the job's user: the attempt folder is the
# controller's, and holds only the files it made for the job (its output, its exit code, `work`),
# which the job can write but never replace with a link the controller would follow.
# A SIGTERM (Slurm's cancel, its time limit) ends the wrapper only once the command has ended, and
# by that signal as before (no exit file, no new command): a wrapper that died at once would leave a
# command it had just started (one Slurm's signal missed) or one still shutting down outside the
# job's process tree, where Slurm's proctrack/linuxproc no longer finds it to kill.
WRAPPER = """#!/bin/sh
d="$1"; n="$2"; shift 2
term=
trap 'term=1' TERM
ended() { if [ -n "$term" ]; then trap - TERM; kill -TERM $$; fi; }
while [ -z "$term" ] && [ "$n" -gt 0 ] && cp -R "$1/." .; do shift; n=$((n-1)); done
ended
if [ "$n" -ne 0 ]; then echo "iris: cannot copy the job's workspace into $PWD" >&2; echo 126 > "$d/exit"; exit 126; fi
"$@"
rc=$?
ended
echo $rc > "$d/exit"
exit $rc
"""
TAIL_INTERVAL_S = 0.1
RESEND_FIRST_S = 1.0  # a stopped job Slurm still lists alive is cancelled again after this,
RESEND_MAX_S = 10.0  # then after twice as long each time, up to this
CAPACITY_INTERVAL_S = 10.0
MAX_PENDING_LINES = 100_000  # lines read but not yet stored: tailing waits beyond this
DISK = 1 << 50  # Slurm does not schedule disk, so Iris must not gate on it either


def _named(job: SlurmJob | None, attempt_id: str) -> SlurmJob | None:
    """`job`, found by the Slurm job id an attempt recorded, when it is that attempt's (a Slurm job is
    named by its attempt id); None when the id now names another job, as for one Slurm has forgotten."""
    return job if job is not None and job.name == attempt_id else None


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class _Resend:
    """When a stopped job that Slurm still lists alive is cancelled again: `delay` after the last
    cancel, the delay doubling each time up to RESEND_MAX_S, so a job stuck in Slurm costs a
    bounded number of `scancel` calls."""

    at: float
    delay: float = RESEND_FIRST_S

    @classmethod
    def after_cancel(cls) -> _Resend:
        return cls(time.monotonic() + RESEND_FIRST_S, RESEND_FIRST_S)

    def due(self) -> bool:
        now = time.monotonic()
        if now < self.at:
            return False
        self.delay = min(self.delay * 2, RESEND_MAX_S)
        self.at = now + self.delay
        return True


@dataclass
class _Attempt:
    attempt_id: str
    folder: Path
    slurm_id: int | None
    spool: OutputSpool
    running: bool = False
    waiting: str = ""
    stop_requested: bool = False
    resend: _Resend | None = None  # set with stop_requested once a cancel went out
    gpus: tuple[str, int] | None = None  # (GRES type, count) it asked for
    node: str = ""  # the node Slurm started it on (squeue's NodeList)
    exited: AttemptExit | None = None  # how it ended (Slurm's verdict)
    reported: bool = False  # its exit is handed to the tick (all its output read first)


class SlurmBackend:
    kind = "slurm"

    def __init__(
        self,
        config: SlurmBackendConfig,
        cluster: str,
        state_dir: Path,
        wake: Callable[[], None] = lambda: None,
        output_cap: int = 0,
        tasks_have_own_uids: bool = False,
    ):
        self.id = config.id
        self.config = config
        self.cluster = cluster
        self.slurm = SlurmCommands(config)
        self.root = Path(config.staging_dir) if config.staging_dir else state_dir / "slurm" / config.id
        (self.root / "attempts").mkdir(parents=True, exist_ok=True)
        closed = None
        if tasks_have_own_uids:
            os.chmod(self.root / "attempts", 0o711)  # jobs reach their own folder by name; none lists the others
            closed = closed_to_others(self.root / "attempts")
        if closed is not None:
            raise InvalidArgument(
                f"backend {config.id}: Slurm runs each job under its user's uid, which cannot reach"
                f" {self.root} ({closed} is closed to other users); set staging_dir to a folder that"
                " every user can pass through (and every node reads)"
            )
        self.script = self.root / "iris-attempt.sh"
        self.script.write_text(WRAPPER)
        self.script.chmod(0o755)
        # In the state folder, not the staging folder (which nodes read and backends may share).
        self.marks = LiveMarks(state_dir / "slurm" / ".live" / config.id)
        self._marked: dict[str, int | None] = {}  # what `leftovers` found, for `adopt`
        self._wake = wake
        self.output_cap = output_cap
        self._attributes = {k: str(v).lower() for k, v in config.attributes.items()}
        self._attributes.setdefault("pool", config.id)
        self._attributes["slurm-partition"] = config.partition
        self._attempts: dict[str, _Attempt] = {}
        # Jobs of attempts the database no longer holds: attempt id -> (Slurm job id, resend), cancelled
        # until Slurm no longer lists them alive, then their markers go.
        self._strays: dict[str, tuple[int | None, _Resend]] = {}
        self._started: list[str] = []
        self._waiting: list[tuple[str, str]] = []
        self._exits: list[AttemptExit] = []
        self._logs: list[LogChunk] = []
        self._pending_lines = 0
        self._lock = threading.Lock()
        self._kick = threading.Event()  # wakes the poller: read output now
        self._query_due = threading.Event()  # ask Slurm now, not at the next poll_interval
        self._closing = threading.Event()
        self._nodes: list[SlurmNode] = []
        self._nodes_ok = False
        self._node_hosts: dict[str, AttemptHost] = {}  # node name → where its attempts run
        self._node_ips: dict[str, ipaddress.IPv4Address | ipaddress.IPv6Address] = {}  # NodeAddr → its IP
        self.capacity_error = ""
        self._refresh_capacity()
        self._thread = threading.Thread(target=self._loop, name=f"slurm-{self.id}", daemon=True)
        self._thread.start()

    # -- capacity ------------------------------------------------------------------------------

    def _refresh_capacity(self) -> None:
        try:
            nodes = self.slurm.sinfo(self.config.partition)
        except SlurmCommandError as exc:
            self.capacity_error = str(exc)
            with self._lock:
                self._nodes_ok = False
            return
        self.capacity_error = "" if nodes else f"Slurm partition {self.config.partition} has no nodes"
        hosts = {n.node_name: self._node_host(n) for n in nodes if n.node_name}
        with self._lock:
            self._nodes, self._nodes_ok = nodes, True
            self._node_hosts = hosts

    def _node_host(self, node: SlurmNode) -> AttemptHost:
        """Where the controller reaches `node`: its NodeAddr as an IP address (a name is resolved
        here, on the poller's thread, and the answer kept), loopback meaning the controller's host."""
        address = node.address or node.name
        ip = self._node_ips.get(address)
        if ip is None:
            try:
                ip = ipaddress.ip_address(address)
            except ValueError:
                try:
                    ip = ipaddress.ip_address(socket.getaddrinfo(address, None, type=socket.SOCK_STREAM)[0][4][0])
                except (OSError, UnicodeError, ValueError, IndexError):
                    return AttemptHost(unknown=f"Slurm node {node.node_name}'s address {address!r} does not resolve")
            self._node_ips[address] = ip
        return AttemptHost(local=True) if ip.is_loopback else AttemptHost(address=str(ip))

    def _groups(self) -> dict[str, list[SlurmNode]]:
        groups: dict[str, list[SlurmNode]] = {}
        for node in self._nodes:
            if node.usable:
                groups.setdefault(next(iter(node.gpus), "") if node.gpus else "", []).append(node)
        return groups

    def workers(self) -> tuple[WorkerSnapshot, ...]:
        """One worker per GPU type of the partition, of its usable nodes' summed capacity."""
        with self._lock:
            groups, alive = self._groups(), self._nodes_ok
        out = []
        for gpu_type, nodes in sorted(groups.items()):
            count = sum(n.gpus.get(gpu_type, 0) for n in nodes)
            device = Device("gpu", gpu_type, count) if gpu_type or count else Device()
            capacity = Resources(
                cpu=float(sum(n.cpus for n in nodes)),
                memory=sum(n.memory_mb for n in nodes) * MB,
                disk=DISK,
                device=device,
            )
            attrs = dict(self._attributes, **self._device_attributes(device, nodes))
            worker_id = f"{self.id}-{gpu_type or 'cpu'}"
            out.append(WorkerSnapshot(worker_id, self.id, capacity, dict(attrs, worker=worker_id), alive))
        return tuple(out)

    @staticmethod
    def _device_attributes(device: Device, nodes: list[SlurmNode]) -> dict[str, str]:
        if device.kind != "gpu":
            return {"device-type": "cpu"}
        return {
            "device-type": "gpu",
            "device-variant": device.variant,
            "gpu-count": str(max(n.gpus.get(device.variant, 0) for n in nodes)),
        }

    def held_outside(self) -> dict[str, float]:
        """GPUs per device token held by Slurm jobs Iris did not send (other users of the partition):
        what Slurm reports in use, less what Iris's own running attempts asked for."""
        with self._lock:
            groups = self._groups()
            ours = [a.gpus for a in self._attempts.values() if a.running and a.exited is None and a.gpus]
        held = {t: float(sum(n.gpus_used.get(t, 0) for n in nodes)) for t, nodes in groups.items() if t}
        for token, count in ours:
            token = token or next(iter(held), "")
            if token in held:
                held[token] = max(0.0, held[token] - count)
        return held

    def describe(self) -> BackendDescription:
        workers = self.workers()
        capacity = max((w.capacity for w in workers), key=lambda c: c.device.count, default=None)
        attrs = dict(workers[0].attributes) if len(workers) == 1 else dict(self._attributes)
        attrs.pop("worker", None)
        return BackendDescription(self.id, self.kind, attrs, capacity)

    # -- start / stop --------------------------------------------------------------------------

    def start(self, spec: LaunchSpec) -> Started:
        folder = self.root / "attempts" / safe_dirname(spec.attempt_id)
        folder.mkdir(parents=True, exist_ok=True)
        for name in ("exit", "stdout", "stderr"):
            (folder / name).unlink(missing_ok=True)
        r = spec.resources
        if r.device.kind not in ("", "cpu", "gpu"):
            raise LaunchError(
                f"Slurm partition {self.config.partition} runs CPU and GPU jobs, not {r.device.kind}",
                unschedulable=True,
            )
        env = {**spec.env, **self.slurm.conf_env, "IRIS_ATTEMPT_ID": spec.attempt_id}
        if spec.uid is not None:
            self._check_account(spec)
            workdir, layers = self._give_to_task(spec, folder)
            env.update(uid_task_env(env, str(folder / "work")))
        else:
            workdir, layers = self._workdir(spec, folder)
        env_fd = memfd(nul_separated(env))
        argv = sbatch_argv(
            self.config,
            self.cluster,
            spec,
            str(self.script),
            str(folder),
            workdir,
            [str(len(layers)), *layers, *shell_argv(spec.command)],
            env_fd,
        )
        gpus = (r.device.variant.lower(), r.device.count) if r.device.kind == "gpu" and r.device.count else None
        record = _Attempt(spec.attempt_id, folder, None, OutputSpool(folder, self.output_cap), gpus=gpus)
        self.marks.put(spec.attempt_id)
        try:
            out = self.slurm.run(argv, pass_fds=(env_fd,))
        except SlurmCommandError as exc:
            if "did not answer" in str(exc):
                # sbatch may have submitted it: adopt by name on the next poll, or report it lost.
                self._add(record)
                return Started(spec.attempt_id, 0, running=False)
            self.marks.drop(spec.attempt_id)
            if exc.transient:
                raise LaunchError(f"Slurm did not take the job: {exc}", retryable=True) from None
            raise LaunchError(f"Slurm cannot run this job: {exc}", unschedulable=True) from None
        finally:
            os.close(env_fd)
        try:
            record.slurm_id = int(out.strip().split(";")[0])
        except ValueError:
            self._add(record)
            return Started(spec.attempt_id, 0, running=False)
        self.marks.put(spec.attempt_id, record.slurm_id)
        self._add(record)
        return Started(spec.attempt_id, record.slurm_id, running=False)

    def _workdir(self, spec: LaunchSpec, folder: Path) -> tuple[str, list[str]]:
        """Where the job starts, and the workspace layers its wrapper copies there first: a folder
        of the attempt's own (removed when it ends), or the job's explicit working directory.

        Layers are content-addressed and never change, so with a `staging_dir` (a folder the nodes
        read) each is copied there once and shared by every attempt that uses it."""
        if spec.workdir:
            return spec.workdir, []
        work = folder / "work"
        work.mkdir(exist_ok=True)
        layers = [self._stage_layer(Path(layer)) for layer in spec.workspace]
        return str(work), layers

    @staticmethod
    def _check_account(spec: LaunchSpec) -> None:
        """Refuses a uid this host has no account for: sbatch submits only as a known user."""
        try:
            pwd.getpwuid(spec.uid or 0)
        except KeyError:
            user = spec.job_id.split("/")[1] if spec.job_id.count("/") > 1 else spec.job_id
            raise LaunchError(
                f"Slurm runs a job only as an account this host knows, and uid {spec.uid} (user {user}'s,"
                f" from auth.task_uids.range) has none: map {user} to an account in auth.task_accounts",
                unschedulable=True,
            ) from None

    def _give_to_task(self, spec: LaunchSpec, folder: Path) -> tuple[str, list[str]]:
        """The working folder of a job under its user's uid, and no layers for its wrapper: the
        folder stays the controller's, passable by the job; the files Slurm and the wrapper write
        (output, exit code) are made here, owned by the job's uid, and `work` holds the workspace,
        copied by the controller (the layers sit where the job cannot read them)."""
        assert spec.uid is not None
        gid = spec.uid if spec.gid is None else spec.gid
        os.chmod(folder, 0o711)
        for name in ("stdout", "stderr", "exit"):
            fd = os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            os.fchown(fd, spec.uid, gid)
            os.close(fd)
        work = folder / "work"
        try:
            give_workspace(work, () if spec.workdir else spec.workspace, spec.uid, gid, fresh=work.exists())
        except OSError as exc:
            raise LaunchError(f"cannot prepare the job's working folder {work}: {exc.strerror or exc}") from None
        return spec.workdir or str(work), []

    def _stage_layer(self, source: Path) -> str:
        if not self.config.staging_dir or source.is_relative_to(self.root):
            return str(source)
        target = self.root / "layers" / source.name
        if not target.is_dir():
            publish_folder(target, lambda tmp: shutil.copytree(source, tmp, dirs_exist_ok=True))
        return str(target)

    def _add(self, record: _Attempt) -> None:
        with self._lock:
            self._attempts[record.attempt_id] = record
        self._kick.set()

    def stop(self, attempt_id: str) -> None:
        with self._lock:
            record = self._attempts.get(attempt_id)
            if record is None or record.exited is not None or record.stop_requested:
                return
            record.stop_requested = True
        try:
            if record.slurm_id:
                self.slurm.scancel(job_ids=[record.slurm_id])
            else:
                self.slurm.scancel(names=[attempt_id])
        except SlurmCommandError:
            with self._lock:
                record.stop_requested = False  # retried by the tick's next reconcile
        else:
            with self._lock:
                record.resend = _Resend.after_cancel()  # the poller cancels again while Slurm lists it alive
        self._query_due.set()
        self._kick.set()

    def running(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._attempts)

    def holds(self, attempt_id: str) -> bool:
        with self._lock:
            return attempt_id in self._attempts

    def attempt_host(self, attempt_id: str, worker_id: str) -> AttemptHost:
        """The node Slurm started the attempt on, as the last `sinfo` gave its address."""
        with self._lock:
            record = self._attempts.get(attempt_id)
            node = record.node if record is not None else ""
            host = self._node_hosts.get(node) if node else None
        if host is None:
            where = f"on node {node!r}, which partition {self.config.partition} does not list" if node else "yet"
            return AttemptHost(unknown=f"Slurm has not reported where attempt {attempt_id} runs {where}")
        return host

    def await_attempt_host(self, attempt_id: str, timeout_s: float) -> None:
        """Waits, up to `timeout_s`, until Slurm has said which node runs the attempt, asking it now:
        a task registers its endpoint as soon as it starts, often before the next poll."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                record = self._attempts.get(attempt_id)
                if record is None or record.node or record.exited is not None:
                    return
            self._query_due.set()
            self._kick.set()
            time.sleep(0.05)

    def shutdown(self) -> list[str]:
        with self._lock:
            live = [a for a in self._attempts.values() if a.exited is None]
        ids = [a.slurm_id for a in live if a.slurm_id]
        try:
            self.slurm.scancel(job_ids=ids, names=[a.attempt_id for a in live if not a.slurm_id])
        except SlurmCommandError:
            pass
        with self._lock:
            for a in live:
                a.stop_requested = True
                a.resend = a.resend or _Resend.after_cancel()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(a.exited is None for a in live):
            self._query_due.set()
            self._kick.set()
            time.sleep(0.05)
        self._closing.set()
        self._kick.set()
        self._thread.join(timeout=5)
        for a in live:
            if a.exited is not None:  # its end is stored by the stopping controller
                self.marks.drop(a.attempt_id)
        return [a.attempt_id for a in live]

    # -- polling ---------------------------------------------------------------------------------

    def _loop(self) -> None:
        next_query, next_capacity = 0.0, time.monotonic() + CAPACITY_INTERVAL_S
        while not self._closing.is_set():
            now = time.monotonic()
            try:
                if now >= next_query or self._query_due.is_set():
                    self._query_due.clear()
                    next_query = now + self.config.poll_interval
                    self._query()
                if now >= next_capacity:
                    next_capacity = now + CAPACITY_INTERVAL_S
                    self._refresh_capacity()
                self._tail()
            except Exception:  # noqa: BLE001 - the poller must outlive one bad answer
                log.exception("Slurm poll failed; retrying")
            self._kick.wait(min(TAIL_INTERVAL_S, self.config.poll_interval))
            self._kick.clear()

    def _query(self) -> None:
        with self._lock:
            live = [a for a in self._attempts.values() if a.exited is None]
            strays = dict(self._strays)
        if not live and not strays:
            return
        ids = [a.slurm_id for a in live if a.slurm_id] + [i for i, _ in strays.values() if i]
        names = [a.attempt_id for a in live if not a.slurm_id] + [a for a, (i, _) in strays.items() if not i]
        try:
            rows = self.slurm.squeue(job_ids=ids) if ids else []
            if names:
                rows += [j for j in self.slurm.squeue(names=names) if j.name in names]
        except SlurmCommandError:
            return  # Slurm's controller is unreachable: jobs keep running; ask again next poll
        by_id = {j.job_id: j for j in rows}
        by_name: dict[str, int] = {}
        for j in rows:
            if j.name in names:
                by_name[j.name] = max(by_name.get(j.name, 0), j.job_id)
        changed = False
        for record in live:
            if not record.slurm_id and record.attempt_id in by_name:
                record.slurm_id = by_name[record.attempt_id]
            job = _named(by_id.get(record.slurm_id) if record.slurm_id else None, record.attempt_id)
            changed |= self._apply(record, job)
        for attempt_id, (slurm_id, resend) in strays.items():
            job = _named(by_id.get(slurm_id or by_name.get(attempt_id, 0)), attempt_id)
            if job is not None and (job.state in WAITING or job.state in RUNNING):
                self._cancel_again(attempt_id, job, resend)
                continue
            with self._lock:
                del self._strays[attempt_id]
            self.marks.drop(attempt_id)  # Slurm has ended it (or forgotten it): nothing of it runs
        if changed:
            self._wake()

    def _cancel_again(self, attempt_id: str, job: SlurmJob, resend: _Resend) -> None:
        """Slurm still lists a job alive after its cancel: cancel it again, if its resend is due."""
        if not resend.due():
            return
        log.info(
            "cancelling Slurm job %d of attempt %s again: Slurm still lists it %s (next try in %gs)",
            job.job_id,
            attempt_id,
            job.state,
            resend.delay,
        )
        try:
            self.slurm.scancel(job_ids=[job.job_id])
        except SlurmCommandError as exc:
            log.info("cancelling Slurm job %d of attempt %s again failed: %s", job.job_id, attempt_id, exc)

    def _apply(self, record: _Attempt, job: SlurmJob | None) -> bool:
        exit_file = self._exit_file(record)
        if job is None:
            # Slurm no longer knows it (or never did): the wrapper's exit file says how it ended.
            if exit_file is None:
                self._finish(record, AttemptExit(record.attempt_id, None, "Slurm has no record of the attempt's job"))
            else:
                self._mark_running(record)
                self._finish(record, AttemptExit(record.attempt_id, exit_file))
            return True
        if job.nodes and job.nodes != record.node:
            with self._lock:
                record.node = job.nodes
        verdict = judge(job, self.config.partition, exit_file, record.stop_requested)
        if verdict.phase in ("waiting", "running") and record.resend is not None:
            self._cancel_again(record.attempt_id, job, record.resend)
        if verdict.phase == "waiting":
            if verdict.reason != record.waiting:
                record.waiting = verdict.reason
                with self._lock:
                    self._waiting.append((record.attempt_id, verdict.reason))
                return True
            return False
        if verdict.phase == "unschedulable":
            try:
                self.slurm.scancel(job_ids=[job.job_id])
            except SlurmCommandError:
                pass
            self._finish(record, AttemptExit(record.attempt_id, None, verdict.reason, verdict.outcome))
            return True
        changed = self._mark_running(record)
        if verdict.phase == "running":
            return changed
        self._finish(record, AttemptExit(record.attempt_id, verdict.exit_code, verdict.reason, verdict.outcome))
        return True

    def _mark_running(self, record: _Attempt) -> bool:
        if record.running:
            return False
        record.running = True
        with self._lock:
            self._started.append(record.attempt_id)
        return True

    @staticmethod
    def _exit_file(record: _Attempt) -> int | None:
        """The code the wrapper recorded, if any. The file is the job's to write: read without
        following a link, without waiting on a pipe, and no more than a number's worth of it."""
        try:
            fd = os.open(record.folder / "exit", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            return int(os.read(fd, 32).strip())
        except (OSError, ValueError):
            return None
        finally:
            os.close(fd)

    def _finish(self, record: _Attempt, exit: AttemptExit) -> None:
        """Slurm says the job ended; its exit is reported once its output has all been read."""
        with self._lock:
            record.exited = exit
        self._kick.set()

    def _watch_exit_files(self) -> None:
        """An attempt whose wrapper recorded exit code 0 has succeeded: report it now rather than
        at the next `squeue`. Any other code waits for Slurm's verdict (it may be Slurm's doing,
        an out-of-memory kill, say), asked for at once."""
        with self._lock:
            live = [r for r in self._attempts.values() if r.exited is None and r.slurm_id]
        for record in live:
            code = self._exit_file(record)
            if code == 0:
                self._mark_running(record)
                self._finish(record, AttemptExit(record.attempt_id, 0))
            elif code is not None:
                self._query_due.set()

    def _tail(self) -> None:
        """Reads every attempt's output round-robin until each is caught up or the pending lines
        reach their bound, then reports the exits whose output is all read."""
        self._watch_exit_files()
        with self._lock:
            records = [r for r in self._attempts.values() if not r.reported]
        active = list(records)
        while active and self._pending_lines < MAX_PENDING_LINES:
            still = []
            for record in active:
                pieces = record.spool.read(complete=record.exited is not None)
                if not pieces:
                    continue
                ts = now_ms()
                chunks = [
                    LogChunk(record.attempt_id, p.stream, tuple((ts, line) for line in p.lines), p.end_offset)
                    for p in pieces
                ]
                with self._lock:
                    self._logs.extend(chunks)
                    self._pending_lines += sum(len(c.lines) for c in chunks)
                still.append(record)
            active = still
        for record in records:
            record.spool.release()
        done = [r for r in records if r.exited is not None and r.spool.drained()]
        if done:
            with self._lock:
                for record in done:
                    record.reported = True
                    self._exits.extend([record.exited] if record.exited else [])
        if done or self._pending_lines:
            self._wake()

    # -- reporting -----------------------------------------------------------------------------

    def poll(self) -> BackendEvents:
        """What happened since the last `ack`: the same events again until they are acknowledged."""
        with self._lock:
            return BackendEvents(
                exits=tuple(self._exits),
                logs=tuple(self._logs),
                started=tuple(self._started),
                waiting=tuple(self._waiting),
            )

    def ack(self, events: BackendEvents) -> None:
        """The tick committed `events`: forget them, and free the output bytes they came from."""
        with self._lock:
            del self._logs[: len(events.logs)]
            del self._exits[: len(events.exits)]
            del self._started[: len(events.started)]
            del self._waiting[: len(events.waiting)]
            self._pending_lines -= sum(len(c.lines) for c in events.logs)
            for chunk in events.logs:
                record = self._attempts.get(chunk.attempt_id)
                if record is not None:
                    record.spool.commit(chunk.stream, chunk.end_offset)
            ended = [self._attempts.pop(e.attempt_id, None) for e in events.exits]
        for record in ended:
            if record is not None:
                self.marks.drop(record.attempt_id)
                record.spool.remove()
                shutil.rmtree(record.folder / "work", ignore_errors=True)  # the workspace copy ends with it
        self._kick.set()

    def discard(self, attempt_ids: Sequence[str]) -> None:
        """Removes the staging folders of finished attempts (never of one this backend still holds)."""
        with self._lock:
            held = set(self._attempts)
        for attempt_id in attempt_ids:
            if attempt_id not in held:
                shutil.rmtree(self.root / "attempts" / safe_dirname(attempt_id), ignore_errors=True)

    def leftovers(self) -> frozenset[str]:
        """Attempts this backend submitted, in an earlier life too, whose end it has not seen stored."""
        self._marked = self.marks.read()
        return frozenset(self._marked)

    def adopt(self, records: list[AdoptRecord], settled: frozenset[str] = frozenset()) -> None:
        """Takes over `records` (found by Slurm job id, or by name where none was stored); a leftover
        whose end is stored (`settled`) is forgotten, and one the database no longer holds at all is
        cancelled in Slurm, again while Slurm still lists it alive, and forgotten once it does not."""
        kept = set()
        for rec in records:
            kept.add(rec.attempt_id)
            slurm_id = rec.pid or self._marked.get(rec.attempt_id)
            self.marks.put(rec.attempt_id, slurm_id)
            folder = self.root / "attempts" / safe_dirname(rec.attempt_id)
            spool = OutputSpool(folder, self.output_cap, {"stdout": rec.stdout_offset, "stderr": rec.stderr_offset})
            self._add(_Attempt(rec.attempt_id, folder, slurm_id, spool))
        strays = self.marks.forget(self._marked, kept, settled)
        self._marked = {}
        if not strays:
            return
        log.warning("cancelling %d Slurm jobs left running by attempts the database no longer holds", len(strays))
        marked = {i: a for a, i in strays.items() if i}
        try:
            # Only a job that still bears its attempt's name: a marker may outlive its job, and
            # Slurm may have given its id to another job since (ids wrap, or start over).
            listed = self.slurm.squeue(job_ids=list(marked)) if marked else []
            ours = [j.job_id for j in listed if marked.get(j.job_id) == j.name]
            self.slurm.scancel(job_ids=ours, names=[a for a, i in strays.items() if not i])
        except SlurmCommandError as exc:
            # The poller asks Slurm about them and cancels again those it still lists alive.
            log.warning("could not cancel the Slurm jobs of attempts no longer held: %s", exc)
        with self._lock:
            for attempt_id, slurm_id in strays.items():
                self._strays[attempt_id] = (slurm_id, _Resend.after_cancel())
        self._query_due.set()
        self._kick.set()
