"""Loads the scheduler's frozen snapshot from the database, and each job's parsed config.

A job's config never changes after submit, so parsed resources and constraints are cached per job:
a tick with ten thousand pending tasks parses each job's JSON once, not once per tick. The cache is
keyed by the job's `insertion` as well as its id: replacing a job (`--existing replace`, or a
handoff re-admitted under the same id) gives it a new insertion, so the old config can never be
served for the new job.

A task whose attempts failed waits out its retry backoff (`retry_backoff_s`) before it enters the
snapshot again; its job's pending reason says so.

Often nothing changes at all: `inputs_version` reads the version that every change to the rows a
snapshot is built from moves (see `iris.controller.db.schema.SCHEDULE_INPUTS`), and
`load_versioned` returns with the snapshot the version it was read at and the earliest time at
which the clock alone would change it or the scheduler's answer, so the tick can tell that
scheduling again would decide the same.

Between ticks little changes, so the loader keeps what it built: each pending or running task
is rebuilt only when its row changed since the last load (otherwise the same frozen object is
handed on), and the scheduler's worker index (`iris.scheduler.index.ClusterIndex`) is advanced
from the last tick's, redoing only the workers whose running tasks changed.

A row the loader cannot turn into a sane config (unparseable JSON, a number that is not finite or
is out of range) is left out of the snapshot and reported in `poisoned`, for the tick to fail that
one job; one bad row never stops the scheduling of the others.

The configs of the jobs new to a load are read in one statement, not one per job: a burst of
submits brings hundreds of jobs to the tick at once, and reading their configs one by one was
about a tenth of the controller's CPU per submitted job with 4 clients submitting.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from operator import attrgetter

from iris.backends.protocol import WorkerSnapshot
from iris.controller.db.database import Database, run
from iris.controller.db.jobs import parse_constraints, parse_resources
from iris.controller.db.literals import LIVE_TASKS, PENDING
from iris.core.bands import Band
from iris.core.constraints import Constraint
from iris.core.job import JobSpec
from iris.core.limits import MAX_TASK_BYTES, MAX_TASK_CPU, MAX_TASK_DEVICES
from iris.core.names import JobName, TaskName
from iris.core.resources import Resources
from iris.core.states import retry_backoff_s
from iris.rpc.bounds import check_number
from iris.scheduler.gating import resource_value
from iris.scheduler.index import ClusterIndex
from iris.scheduler.snapshot import PendingTask, RunningTask, SchedulingSnapshot


@dataclass(frozen=True, slots=True)
class JobConfig:
    command: tuple[str, ...]
    resources: Resources
    constraints: tuple[Constraint, ...]
    env: Mapping[str, str]
    workdir: str
    coschedule: bool
    image: str = ""
    bundle_id: str = ""
    files_id: str = ""
    timeout_s: float = 0.0


def check_stored_resources(r: Resources) -> None:
    """Refuses stored resources the scheduler could not do arithmetic on (the same bounds as submit)."""
    check_number("cpu", r.cpu, 0, MAX_TASK_CPU)
    check_number("memory", r.memory, 0, MAX_TASK_BYTES)
    check_number("disk", r.disk, 0, MAX_TASK_BYTES)
    check_number("device count", r.device.count, 0, MAX_TASK_DEVICES)


_CONFIG_COLUMNS = (
    "command, resources, constraints, env, workdir, coschedule, image, bundle_id, workdir_files, timeout_s"
)


def _parse_config(row: tuple) -> JobConfig:
    """A job's config from its `job_config` row (`_CONFIG_COLUMNS`); raises when it cannot be used."""
    config = JobConfig(
        tuple(json.loads(row[0])),
        parse_resources(row[1]),
        parse_constraints(row[2]),
        json.loads(row[3]),
        row[4],
        bool(row[5]),
        row[6],
        row[7],
        row[8] if row[8].startswith("sha256:") else "",  # '{}': a job from before files ids
        float(row[9] or 0),
    )
    check_stored_resources(config.resources)
    return config


_PENDING_COLUMNS = (
    "SELECT t.task_id, t.job_id, t.idx, j.band, j.user, j.depth, j.root_submitted_ms, j.insertion,"
    " j.replicas, j.scheduling_deadline_ms, p.state, t.failure_count,"
    " CASE WHEN t.failure_count > 0 THEN"
    " (SELECT a.finished_ms FROM attempts a WHERE a.attempt_id = t.task_id || ':' || t.attempt) END"
)
_PENDING_SQL = (
    f"{_PENDING_COLUMNS} FROM tasks t JOIN jobs j ON j.job_id = t.job_id"
    " LEFT JOIN jobs p ON p.job_id = j.parent_job_id"
    f" WHERE t.state = {PENDING} AND t.cluster IS NULL"
)
# The rows of the tasks stamped since a version (see `iris.controller.db.schema.SCHEDULE_CHANGES`),
# pending or not: the last column says whether each is pending now.
_CHANGED_SQL = (
    f"{_PENDING_COLUMNS}, t.state = {PENDING} AND t.cluster IS NULL AND j.job_id IS NOT NULL"
    " FROM schedule_changes c JOIN tasks t ON t.task_id = c.task_id LEFT JOIN jobs j ON j.job_id = t.job_id"
    " LEFT JOIN jobs p ON p.job_id = j.parent_job_id WHERE c.stamp >= ?"
)


_deadline = attrgetter("scheduling_deadline_ms")


@dataclass(frozen=True, slots=True)
class Loaded:
    """A snapshot, the inputs version it was read at, and the earliest time at which the clock
    alone changes it or the scheduler's answer (a retry backoff's end, a scheduling deadline)."""

    snapshot: SchedulingSnapshot
    version: int
    due_ms: int | None


def _read_version(conn) -> int:
    return run(conn, "SELECT version FROM schedule_inputs WHERE id = 0").fetchone()[0]


def planned_tasks(spec: JobSpec, now_ms: int, insertion: int, parent: Mapping | None) -> tuple[PendingTask, ...]:
    """The pending tasks a job of `spec` would be loaded as were it stored now with `insertion`
    under `parent` (its row; None for a root job): what a dry run adds to a snapshot. The fields
    are those `SnapshotLoader._build` reads from the stored rows."""
    job = JobName.parse(spec.job_id)
    timeout = spec.scheduling_timeout_s
    return tuple(
        PendingTask(
            task_id=str(TaskName(job, i)),
            job_id=spec.job_id,
            index=i,
            resources=spec.resources,
            constraints=spec.constraints,
            band=spec.band,
            user=spec.user,
            depth=spec.depth,
            root_submitted_ms=parent["root_submitted_ms"] if parent is not None else now_ms,
            insertion=insertion,
            replicas=spec.replicas,
            coschedule=spec.coschedule,
            scheduling_deadline_ms=int(now_ms + timeout * 1000) if timeout > 0 else None,
            parent_running=parent is not None and parent["state"] == "RUNNING",
            limit_ms=int(spec.timeout_s * 1000) if spec.timeout_s > 0 else None,
        )
        for i in range(spec.replicas)
    )


class SnapshotLoader:
    def __init__(
        self,
        db: Database,
        user_budgets: Mapping[str, float] | None = None,
        default_budget: float | None = None,
    ):
        self.db = db
        self.user_budgets = dict(user_budgets or {})
        self.default_budget = default_budget
        self._configs: dict[str, tuple[int | None, JobConfig]] = {}
        # Jobs whose stored config could not be loaded, with why; the tick fails them and drains this.
        self.poisoned: dict[str, str] = {}
        # Jobs left out of the last snapshot because a failed task waits out its retry backoff.
        self.backing_off: dict[str, str] = {}
        # task id -> (its row, the task built from it, None until built) of every pending task as of
        # the last load; of those, the tasks with no failed attempt (`_ready`), and the others, whose
        # retry backoff the clock ends or whose config could not be built (`_others`)
        self._pending_rows: dict[str, tuple[tuple, PendingTask | None]] = {}
        self._ready: dict[str, PendingTask] = {}
        self._others: set[str] = set()
        # (inputs version, deletes) the last load read at: rows stamped since are read again
        self._seen: tuple[int, int] | None = None
        self.rows_read = 0  # pending rows read from the database, over every load
        self.full_reads = 0  # loads that read every pending row (the first, and any after a delete)
        self.config_reads = 0  # statements that read job configs, over every load
        self._lock = threading.Lock()  # the tick and an explain call may load at once
        self._running_rows: dict[str, tuple[tuple, RunningTask]] = {}
        self._index: ClusterIndex | None = None

    def inputs_version(self) -> int:
        """The version every change to a snapshot's rows moves (one row, read in microseconds)."""
        with self.db.read() as conn:
            return _read_version(conn)

    def config(self, conn, job_id: str, insertion: int | None = None) -> JobConfig:
        """The parsed config of `job_id`; `insertion` (when the caller has it) saves a lookup."""
        if insertion is None:
            found = run(conn, "SELECT insertion FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
            insertion = found[0] if found is not None else None
        cached = self._configs.get(job_id)
        if cached is not None and cached[0] == insertion:
            return cached[1]
        self.config_reads += 1
        row = run(conn, f"SELECT {_CONFIG_COLUMNS} FROM job_config WHERE job_id = ?", (job_id,)).fetchone()
        config = _parse_config(row)
        self._configs[job_id] = (insertion, config)
        return config

    def _read_configs(self, conn, rows) -> None:
        """Caches, in one statement, the configs of the jobs of pending-task `rows` not cached yet
        (a burst of submits brings hundreds of new jobs to one load). A config that cannot be parsed
        is left out, for `config` to read again and report."""
        wanted = {}
        for row in rows:
            cached = self._configs.get(row[1])
            if cached is None or cached[0] != row[7]:
                wanted[row[1]] = row[7]
        if len(wanted) < 2:
            return  # one job's config costs the same read either way
        self.config_reads += 1
        found = run(
            conn,
            f"SELECT job_id, {_CONFIG_COLUMNS} FROM job_config WHERE job_id IN (SELECT value FROM json_each(?))",
            (json.dumps(list(wanted)),),
        ).fetchall()
        for row in found:
            try:
                self._configs[row[0]] = (wanted[row[0]], _parse_config(row[1:]))
            except Exception:  # `config` reads it again and the job is poisoned there
                continue

    def _poison(self, job_id: str, exc: Exception) -> None:
        self.poisoned[job_id] = f"its stored request cannot be used ({type(exc).__name__}: {exc})"

    def load(self, now_ms: int, workers: tuple[WorkerSnapshot, ...]) -> SchedulingSnapshot:
        return self.load_versioned(now_ms, workers).snapshot

    def load_versioned(self, now_ms: int, workers: tuple[WorkerSnapshot, ...]) -> Loaded:
        """The snapshot, with the inputs version it was read at and when the clock alone changes it
        (returned, not kept: `explain` loads from an API thread while the tick loads)."""
        with self._lock, self.db.read() as conn:
            version, deletes = run(conn, "SELECT version, deletes FROM schedule_inputs WHERE id = 0").fetchone()
            running = self._running(conn)
            peer_spend = self._peer_spend(conn)
            if self._seen is None or self._seen[1] != deletes:
                # Every pending row (the first load, or tasks were deleted): on the driver, as plain
                # tuples, since SQLAlchemy's row objects cost more than the query for thousands.
                known, self._pending_rows, self._ready, self._others = self._pending_rows, {}, {}, set()
                rows = run(conn, _PENDING_SQL).fetchall()
                self.full_reads += 1
                self._read_configs(conn, rows)
                for row in rows:
                    self._put(conn, row, known.get(row[0]))
            else:
                rows = run(conn, _CHANGED_SQL, (self._seen[0],)).fetchall()
                self._read_configs(conn, [row for row in rows if row[13]])
                for row in rows:
                    old = self._drop(row[0])
                    if row[13]:
                        self._put(conn, row[:13], old)
            self._seen = (version, deletes)
            self.rows_read += len(rows)
            pending = list(self._ready.values())
            self.backing_off = {}
            due: list[int] = []
            for task_id in list(self._others):
                r, task = self._pending_rows[task_id]
                if r[12] is not None:
                    wait_s = retry_backoff_s(r[11])
                    if now_ms < r[12] + wait_s * 1000:
                        due.append(int(r[12] + wait_s * 1000))
                        self.backing_off[r[1]] = (
                            f"Backing off for {wait_s:g}s after {r[11]} failed attempt{'s' if r[11] > 1 else ''}"
                            " before retrying"
                        )
                        continue
                if task is None:
                    task = self._build(conn, r)
                    if task is None:
                        continue
                    self._pending_rows[task_id] = (r, task)
                pending.append(task)
        if len(self._configs) > 1000:  # else never more than the live jobs allow (see `_forget_finished`)
            self._forget_finished({t.job_id for t in running} | {t.job_id for t in pending})
        # A deadline already passed changes nothing later: the scheduler ends its task now.
        due += [d for d in filter(None, map(_deadline, pending)) if d > now_ms]
        if self._index is None:
            self._index = ClusterIndex(workers, running)
        else:
            self._index = self._index.advance(workers, running)
        snapshot = SchedulingSnapshot(
            now_ms=now_ms,
            workers=workers,
            running=running,
            pending=tuple(pending),
            index=self._index,
            user_budgets=self.user_budgets,
            default_budget=self.default_budget,
            peer_spend=peer_spend,
        )
        return Loaded(snapshot, version, min(due, default=None))

    def kept(self) -> tuple[list[PendingTask], list[RunningTask]]:
        """The pending and running tasks as of the last load, from memory: what `/metrics` reports,
        at no cost to the database."""
        with self._lock:
            pending = [task for _, task in self._pending_rows.values() if task is not None]
            running = [task for _, task in self._running_rows.values()]
        return pending, running

    def _put(self, conn, row: tuple, old: tuple[tuple, PendingTask | None] | None) -> None:
        """Takes `row` as a pending task's: the task built from it is handed on while its row is unchanged.
        One that failed before (its retry backoff) or whose config cannot be built waits in `_others`."""
        task_id = row[0]
        task = old[1] if old is not None and old[0] == row else None
        if task is None and row[12] is None:
            task = self._build(conn, row)
        self._pending_rows[task_id] = (row, task)
        if task is not None and row[12] is None:
            self._ready[task_id] = task
        else:
            self._others.add(task_id)

    def _drop(self, task_id: str) -> tuple[tuple, PendingTask | None] | None:
        self._ready.pop(task_id, None)
        self._others.discard(task_id)
        return self._pending_rows.pop(task_id, None)

    def _build(self, conn, r: tuple) -> PendingTask | None:
        """The pending task of row `r`, or None (its job poisoned) when its config cannot be used."""
        try:
            cfg = self.config(conn, r[1], r[7])
            return PendingTask(
                task_id=r[0],
                job_id=r[1],
                index=r[2],
                resources=cfg.resources,
                constraints=cfg.constraints,
                band=Band.parse(r[3]),
                user=r[4],
                depth=r[5],
                root_submitted_ms=r[6],
                insertion=r[7],
                replicas=r[8],
                coschedule=cfg.coschedule,
                scheduling_deadline_ms=r[9],
                parent_running=r[10] == "RUNNING",
                limit_ms=int(cfg.timeout_s * 1000) if cfg.timeout_s > 0 else None,
            )
        except Exception as exc:
            self._poison(r[1], exc)
            return None

    def _forget_finished(self, active: set[str]) -> None:
        """Drops cached configs of jobs that no longer run or wait, once they outnumber the live ones."""
        if len(self._configs) > 2 * len(active) + 1000:
            # An explain call caches configs from an API thread without the load lock: walking a copy
            # (taken in one C call) keeps its insert from breaking the walk; a config it adds meanwhile
            # may be dropped, and is read again when next needed.
            self._configs = {j: c for j, c in self._configs.copy().items() if j in active}

    def load_running(self) -> tuple[RunningTask, ...]:
        with self.db.read() as conn:
            return self._running(conn)

    def load_spend_inputs(self) -> tuple[tuple[RunningTask, ...], dict[str, int]]:
        """What budgets are charged from, read in one transaction: the tasks placed here, and per
        user what their handed-off jobs hold on federation peers."""
        with self.db.read() as conn:
            return self._running(conn), self._peer_spend(conn)

    def _peer_spend(self, conn) -> dict[str, int]:
        """Per owner, the resource value of the live mirrored tasks of root jobs handed to peers
        (outside the batch band): federated work is charged on this cluster, where it was submitted."""
        rows = run(
            conn,
            "SELECT t.job_id, j.user, j.band, j.insertion FROM tasks t JOIN jobs j ON j.job_id = t.job_id"
            f" WHERE t.state IN {LIVE_TASKS} AND t.cluster IS NOT NULL AND t.cluster != ''",
        ).fetchall()
        spend: dict[str, int] = {}
        for job_id, user, band, insertion in rows:
            if Band.parse(band) is Band.BATCH:
                continue
            try:
                value = resource_value(self.config(conn, job_id, insertion).resources)
            except Exception:  # its peer runs it; an unreadable copy here only goes uncharged
                continue
            spend[user] = spend.get(user, 0) + value
        return spend

    def _running(self, conn) -> tuple[RunningTask, ...]:
        rows = run(
            conn,
            "SELECT t.task_id, t.job_id, t.worker_id, COALESCE(t.started_ms, j.submitted_ms), j.band, j.user,"
            " j.insertion FROM tasks t JOIN jobs j ON j.job_id = t.job_id"
            f" WHERE t.state IN {LIVE_TASKS} AND t.cluster IS NULL",
        ).fetchall()
        running = []
        known, fresh = self._running_rows, {}
        for r in rows:
            row = r
            cached = known.get(row[0])
            if cached is not None and cached[0] == row:
                running.append(cached[1])
                fresh[row[0]] = cached
                continue
            try:
                cfg = self.config(conn, r[1], r[6])
                ends = int(r[3] + cfg.timeout_s * 1000) if cfg.timeout_s > 0 else None
                task = RunningTask(r[0], r[1], r[2], cfg.resources, Band.parse(r[4]), r[3], r[5], ends)
            except Exception as exc:
                self._poison(r[1], exc)
                continue
            running.append(task)
            fresh[row[0]] = (row, task)
        self._running_rows = fresh
        return tuple(running)
