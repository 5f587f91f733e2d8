"""Job writes at submit: storing a job, its config and its tasks, and replacing or deleting a
finished job's tree.

Every function takes an open write transaction; the caller commits. What happens to a job after
submit (its tasks' attempts, its roll-up, stopping it) is decided in `controller/state/transitions.py`
and written by `controller/state/applier.py` alone, so the state rules live in one place.
"""

from __future__ import annotations

import functools
import json
from typing import NamedTuple

from sqlalchemy.engine import Connection

from iris.controller.db.attempts import release_output
from iris.controller.db.database import dumps, run, run_many, sql
from iris.controller.db.literals import TERMINAL_JOBS, quoted
from iris.core.constraints import Constraint, Op
from iris.core.errors import AlreadyExists, FailedPrecondition, NotFound
from iris.core.job import JobSpec
from iris.core.names import JobName, TaskName
from iris.core.resources import Device, Resources
from iris.core.states import JobState, TaskState

TERMINAL_JOB_SQL = TERMINAL_JOBS
MISSING = object()  # `check_new_job`: the parent's row was not read yet


def job_row(conn: Connection, job_id: str):
    return conn.execute(sql("SELECT * FROM jobs WHERE job_id = :j"), {"j": job_id}).mappings().first()


def require_job(conn: Connection, job_id: str):
    row = job_row(conn, job_id)
    if row is None:
        raise job_not_found(job_id)
    return row


def job_not_found(job_id: str) -> NotFound:
    """The one error every call answers for a job this cluster does not hold."""
    return NotFound(f"job {job_id} does not exist; `iris job list` shows the jobs this cluster knows")


def descendant_ids(conn: Connection, job_id: str) -> list[str]:
    """Ids of every job nested under `job_id` (children, grandchildren, …), parents first.

    Walks the parent index level by level, so the cost follows the size of the subtree, not of the
    whole jobs table.
    """
    out: list[str] = []
    level = [job_id]
    while level:
        level = [
            r[0]
            for parent in level
            for r in conn.execute(sql("SELECT job_id FROM jobs WHERE parent_job_id = :p"), {"p": parent})
        ]
        out.extend(level)
    return out


def delete_job_tree(conn: Connection, job_id: str, now_ms: int) -> None:
    """Deletes a job and its descendants. The workspace layers their configs named are recorded in
    `released_layers` first, in this same transaction, so retention releases them as it does a
    finished job's once the retention has passed since now, whatever happens to this process."""
    ids = [job_id, *descendant_ids(conn, job_id)]
    marks, params = _placeholders(ids), _params(ids)
    # On the driver (`run`), as the rest of the submit path: a replace is a submit.
    run(
        conn,
        "INSERT INTO released_layers (content_id, released_ms)"
        f" SELECT bundle_id, :now FROM job_config WHERE job_id IN ({marks}) AND bundle_id LIKE 'sha256:%'"
        f" UNION SELECT workdir_files, :now FROM job_config WHERE job_id IN ({marks})"
        " AND workdir_files LIKE 'sha256:%'"
        " ON CONFLICT(content_id) DO UPDATE SET released_ms = excluded.released_ms",
        {**params, "now": now_ms},
    )
    release_output(conn, ids)
    for table in ("logs", "attempts", "tasks", "job_config", "job_files", "federated_jobs", "endpoints", "jobs"):
        run(conn, f"DELETE FROM {table} WHERE job_id IN ({marks})", params)


def _placeholders(ids: list[str]) -> str:
    return ",".join(f":p{i}" for i in range(len(ids)))


def _params(ids: list[str]) -> dict:
    return {f"p{i}": v for i, v in enumerate(ids)}


def insert_job(
    conn: Connection,
    spec: JobSpec,
    now_ms: int,
    existing_policy: str = "error",
    cluster: str | None = None,
    with_tasks: bool = True,
) -> tuple[str, bool]:
    """Stores a job, its config and its PENDING tasks. Returns (state, created).

    `existing_policy`: error (default) refuses a duplicate id; keep returns the existing job;
    replace deletes a finished job of that id first (a live one must be stopped first).

    A new id (nearly every submit) is found new by its insert itself, which writes nothing when
    the id is taken: one statement, not a look-up and then the insert.
    """
    parent = require_job(conn, spec.parent_job_id) if spec.parent_job_id else None
    root_submitted_ms = parent["root_submitted_ms"] if parent is not None else now_ms
    # A duplicate under a finished parent is answered as a duplicate: looked up before any insert.
    finished_parent = parent is not None and JobState(parent["state"]).is_terminal
    if finished_parent or not _insert_row(conn, spec, None, now_ms, root_submitted_ms, cluster):
        met = check_new_job(conn, spec, existing_policy, parent)
        if met.kept is not None:
            return met.kept, False
        insertion = None
        if met.replaces:
            # Taken before a replaced job is deleted, so a replacement always gets a new, higher
            # insertion (what the tick's config cache keys on) even when the old job was the newest.
            insertion = run(conn, "SELECT COALESCE(MAX(insertion), 0) + 1 FROM jobs").fetchone()[0]
            delete_job_tree(conn, spec.job_id, now_ms)
        _insert_row(conn, spec, insertion, now_ms, root_submitted_ms, cluster)
    run(
        conn,
        "INSERT INTO job_config (job_id, command, resources, constraints, env, workdir, bundle_id,"
        " workdir_files, max_retries_failure, max_retries_preemption, timeout_s, coschedule, image)"
        " VALUES (:j, :cmd, :res, :cons, :env, :wd, :b, :f, :mrf, :mrp, :to, :co, :img)",
        {
            "j": spec.job_id,
            "cmd": dumps(list(spec.command)),
            "res": _resources_json(spec.resources),
            "cons": _constraints_json(spec.constraints),
            "env": dumps(dict(spec.env)) if spec.env else "{}",
            "wd": spec.workdir,
            "b": spec.bundle_id,
            "f": spec.files_id,
            "mrf": spec.max_retries_failure,
            "mrp": spec.max_retries_preemption,
            "to": spec.timeout_s,
            "co": int(spec.coschedule),
            "img": spec.image,
        },
    )
    if with_tasks:
        job = JobName.parse(spec.job_id)
        run_many(
            conn,
            f"INSERT INTO tasks (task_id, job_id, idx, state) VALUES (:t, :j, :i, {quoted(TaskState.PENDING)})",
            [{"t": str(TaskName(job, i)), "j": spec.job_id, "i": i} for i in range(spec.replicas)],
        )
    return JobState.PENDING.value, True


class NewJob(NamedTuple):
    """What a submit of a job id meets: the existing job's state when `keep` keeps it (None: the
    submit creates the job), and whether it replaces a finished job of that id."""

    kept: str | None
    replaces: bool


def check_new_job(conn: Connection, spec: JobSpec, existing_policy: str = "error", parent=MISSING) -> NewJob:
    """Whether a submit of `spec` may create it, reading only: refuses a duplicate id (unless
    `existing_policy` keeps or replaces it), the replacement of a live job, and a child of a finished
    job, with the errors `insert_job` raises, since it decides through this same function. `parent`:
    the parent's row when the caller has read it."""
    if parent is MISSING:
        parent = require_job(conn, spec.parent_job_id) if spec.parent_job_id else None
    found = run(conn, "SELECT state FROM jobs WHERE job_id = :j", {"j": spec.job_id}).fetchone()
    if found is not None:
        existing = found[0]
        if existing_policy == "keep":
            return NewJob(existing, False)
        if existing_policy != "replace":
            raise AlreadyExists(
                f"job {spec.job_id} already exists ({existing}); choose another name, or say what to do with it:"
                ' --existing keep|replace (SDK: existing_job_policy="keep" or "replace")'
            )
        if not JobState(existing).is_terminal:
            raise FailedPrecondition(
                f"job {spec.job_id} is still {existing}; stop it first (`iris job stop {spec.job_id}`) before replacing it"
            )
    if parent is not None and JobState(parent["state"]).is_terminal:
        raise FailedPrecondition(
            f"parent job {spec.parent_job_id} has already finished ({parent['state']}); a finished job cannot start children"
        )
    return NewJob(None, found is not None)


# A burst of submits mostly asks for a few shapes: each one's stored text is made once.
@functools.lru_cache(maxsize=1024)
def parse_resources(raw: str) -> Resources:
    """A job's resources from their stored text (`_resources_json`'s inverse)."""
    d = json.loads(raw)
    dev = d.get("device") or {}
    device = Device(dev.get("kind", "cpu"), dev.get("variant", ""), int(dev.get("count", 0)), dev.get("topology", ""))
    return Resources(cpu=float(d["cpu"]), memory=int(d["memory"]), disk=int(d["disk"]), device=device)


def parse_constraints(raw: str) -> tuple[Constraint, ...]:
    """A job's constraints from their stored text (`_constraints_json`'s inverse)."""
    return tuple(Constraint(k, Op(op), tuple(vals), bool(pref)) for k, op, vals, pref in json.loads(raw))


def _resources_json(r: Resources) -> str:
    device = {
        "kind": r.device.kind,
        "variant": r.device.variant,
        "count": r.device.count,
        "topology": r.device.topology,
    }
    return dumps({"cpu": r.cpu, "memory": r.memory, "disk": r.disk, "device": device})


@functools.lru_cache(maxsize=1024)
def _constraints_json(constraints: tuple[Constraint, ...]) -> str:
    return dumps([[c.key, c.op.value, list(c.values), c.preferred] for c in constraints])


def _insert_row(
    conn: Connection, spec: JobSpec, insertion: int | None, now_ms: int, root_submitted_ms: int, cluster: str | None
) -> bool:
    """Inserts the job's row unless its id is taken; returns whether it did. `insertion`: its
    number, or None for the next one (numbered by the insert itself)."""
    deadline = int(now_ms + spec.scheduling_timeout_s * 1000) if spec.scheduling_timeout_s > 0 else None
    cursor = run(
        conn,
        "INSERT INTO jobs (job_id, insertion, parent_job_id, root_job_id, depth, user, owner, band, state,"
        " replicas, cluster, submitted_ms, root_submitted_ms, scheduling_deadline_ms, pending_reason, credential)"
        f" VALUES (:job_id, COALESCE(:insertion, (SELECT COALESCE(MAX(insertion), 0) + 1 FROM jobs)), :parent, :root, :depth, :user, :owner, :band, {quoted(JobState.PENDING)}, :replicas,"
        " :cluster, :now, :root_now, :deadline, :reason, :credential) ON CONFLICT (job_id) DO NOTHING",
        {
            "job_id": spec.job_id,
            "insertion": insertion,
            "parent": spec.parent_job_id,
            "root": spec.root_job_id or spec.job_id,
            "depth": spec.depth,
            "user": spec.user,
            "owner": spec.owner,
            "band": spec.band.label,
            "replicas": spec.replicas,
            "cluster": cluster,
            "now": now_ms,
            "root_now": root_submitted_ms,
            "deadline": deadline,
            "reason": "Waiting for the scheduler's next pass",
            "credential": spec.credential,
        },
    )
    return cursor.rowcount == 1
