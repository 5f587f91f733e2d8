"""Job writes: submit, terminate, and the one function that keeps a job's stored state equal to
what its tasks derive.

Every function takes an open write transaction; the caller commits. `refresh_jobs` is called after
any change to tasks, so the denormalised `jobs.state` used by listings can never drift from
`derive_job_state`, and a job that ends takes its unfinished tasks and descendant jobs with it.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy.engine import Connection

from iris.controller.db.database import dumps, sql
from iris.core.errors import AlreadyExists, FailedPrecondition, NotFound
from iris.core.job import JobSpec
from iris.core.states import JobState, TaskState, derive_job_state

ACTIVE_TASK_SQL = "('ASSIGNED','BUILDING','RUNNING')"
TERMINAL_TASK_SQL = "('SUCCEEDED','FAILED','KILLED','WORKER_FAILED','PREEMPTED','UNSCHEDULABLE')"
TERMINAL_JOB_SQL = "('SUCCEEDED','FAILED','KILLED','UNSCHEDULABLE')"


def job_row(conn: Connection, job_id: str):
    return conn.execute(sql("SELECT * FROM jobs WHERE job_id = :j"), {"j": job_id}).mappings().first()


def require_job(conn: Connection, job_id: str):
    row = job_row(conn, job_id)
    if row is None:
        raise NotFound(f"job {job_id} does not exist; `iris job list` shows the jobs this cluster knows")
    return row


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


def delete_job_tree(conn: Connection, job_id: str) -> None:
    ids = [job_id, *descendant_ids(conn, job_id)]
    for table in ("logs", "attempts", "tasks", "job_config", "federated_jobs", "endpoints", "jobs"):
        conn.execute(sql(f"DELETE FROM {table} WHERE job_id IN ({_placeholders(ids)})"), _params(ids))


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
    """
    existing = job_row(conn, spec.job_id)
    # Taken before a replaced job is deleted, so a replacement always gets a new, higher insertion
    # (what the tick's config cache keys on) even when the old job was the newest.
    insertion = conn.execute(sql("SELECT COALESCE(MAX(insertion), 0) + 1 FROM jobs")).scalar_one()
    if existing is not None:
        if existing_policy == "keep":
            return existing["state"], False
        if existing_policy == "replace":
            if not JobState(existing["state"]).is_terminal:
                raise FailedPrecondition(
                    f"job {spec.job_id} is still {existing['state']}; stop it first (`iris job stop {spec.job_id}`) before replacing it"
                )
            delete_job_tree(conn, spec.job_id)
        else:
            raise AlreadyExists(
                f"job {spec.job_id} already exists ({existing['state']}); choose another --job-name, or pass --existing keep|replace"
            )
    root_submitted_ms = now_ms
    if spec.parent_job_id:
        parent = require_job(conn, spec.parent_job_id)
        if JobState(parent["state"]).is_terminal:
            raise FailedPrecondition(
                f"parent job {spec.parent_job_id} has already finished ({parent['state']}); a finished job cannot start children"
            )
        root_submitted_ms = parent["root_submitted_ms"]
    deadline = int(now_ms + spec.scheduling_timeout_s * 1000) if spec.scheduling_timeout_s > 0 else None
    conn.execute(
        sql(
            "INSERT INTO jobs (job_id, insertion, parent_job_id, root_job_id, depth, user, owner, band, state,"
            " replicas, cluster, submitted_ms, root_submitted_ms, scheduling_deadline_ms, pending_reason)"
            " VALUES (:job_id, :insertion, :parent, :root, :depth, :user, :owner, :band, 'PENDING', :replicas,"
            " :cluster, :now, :root_now, :deadline, :reason)"
        ),
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
        },
    )
    r = spec.resources
    conn.execute(
        sql(
            "INSERT INTO job_config (job_id, command, resources, constraints, env, workdir, bundle_id,"
            " workdir_files, max_retries_failure, max_retries_preemption, timeout_s, coschedule, image)"
            " VALUES (:j, :cmd, :res, :cons, :env, :wd, :b, :f, :mrf, :mrp, :to, :co, :img)"
        ),
        {
            "j": spec.job_id,
            "cmd": dumps(list(spec.command)),
            "res": dumps(
                {
                    "cpu": r.cpu,
                    "memory": r.memory,
                    "disk": r.disk,
                    "device": {
                        "kind": r.device.kind,
                        "variant": r.device.variant,
                        "count": r.device.count,
                        "topology": r.device.topology,
                    },
                }
            ),
            "cons": dumps([[c.key, c.op.value, list(c.values), c.preferred] for c in spec.constraints]),
            "env": dumps(dict(spec.env)),
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
        conn.execute(
            sql("INSERT INTO tasks (task_id, job_id, idx, state) VALUES (:t, :j, :i, 'PENDING')"),
            [{"t": f"{spec.job_id}/{i}", "j": spec.job_id, "i": i} for i in range(spec.replicas)],
        )
    return JobState.PENDING.value, True


def kill_tasks(conn: Connection, job_ids: Iterable[str], reason: str, now_ms: int) -> None:
    """Marks every unfinished task (and live attempt) of `job_ids` KILLED.

    Processes of attempts marked here are stopped by the next tick, which stops any attempt a
    backend still runs whose stored state is terminal.
    """
    ids = list(job_ids)
    if not ids:
        return
    params = {**_params(ids), "now": now_ms, "reason": reason}
    conn.execute(
        sql(
            f"UPDATE attempts SET state = 'KILLED', finished_ms = :now, error = :reason"
            f" WHERE job_id IN ({_placeholders(ids)}) AND state IN {ACTIVE_TASK_SQL}"
        ),
        params,
    )
    conn.execute(
        sql(
            f"UPDATE tasks SET state = 'KILLED', finished_ms = :now, error = :reason"
            f" WHERE job_id IN ({_placeholders(ids)}) AND state NOT IN {TERMINAL_TASK_SQL}"
        ),
        params,
    )


def terminate_job(conn: Connection, job_id: str, reason: str, now_ms: int) -> list[str]:
    """Stops a job and all its descendants; returns the ids of the jobs that were still live."""
    require_job(conn, job_id)
    ids = [job_id, *descendant_ids(conn, job_id)]
    live = [
        r[0]
        for r in conn.execute(
            sql(f"SELECT job_id FROM jobs WHERE job_id IN ({_placeholders(ids)}) AND state NOT IN {TERMINAL_JOB_SQL}"),
            _params(ids),
        )
    ]
    if not live:
        return []
    conn.execute(sql(f"UPDATE jobs SET cancel_requested = 1 WHERE job_id IN ({_placeholders(live)})"), _params(live))
    kill_tasks(conn, live, reason, now_ms)
    refresh_jobs(conn, live, now_ms)
    return live


def refresh_jobs(conn: Connection, job_ids: Iterable[str], now_ms: int) -> list[str]:
    """Recomputes each job's state from its tasks; returns the jobs that became terminal.

    A job that ends (failed, unschedulable, killed, succeeded) stops its unfinished tasks and
    every descendant job, so nothing it started outlives it.
    """
    ended: list[str] = []
    pending = list(dict.fromkeys(job_ids))
    while pending:
        job_id = pending.pop(0)
        row = conn.execute(sql("SELECT state, started_ms, error FROM jobs WHERE job_id = :j"), {"j": job_id}).first()
        if row is None or JobState(row[0]).is_terminal:
            continue  # a finished job never changes state again
        if conn.execute(
            sql("SELECT 1 FROM federated_jobs WHERE job_id = :j AND direction = 'SENT'"), {"j": job_id}
        ).first():
            continue  # a federated job mirrors its state from its peer instead
        tasks = conn.execute(
            sql("SELECT state, error, idx FROM tasks WHERE job_id = :j ORDER BY idx"), {"j": job_id}
        ).all()
        if not tasks:
            continue
        states = [TaskState(t[0]) for t in tasks]
        new_state = derive_job_state(states)
        error = row[2]
        if new_state.is_terminal and new_state is not JobState.SUCCEEDED and not error:
            culprit = next(
                (t for t in tasks if t[0] not in ("SUCCEEDED", "KILLED") and TaskState(t[0]).is_terminal), None
            )
            culprit = culprit or next((t for t in tasks if t[0] == "KILLED"), None)
            if culprit is not None:
                error = f"task {culprit[2]} {culprit[0].lower().replace('_', ' ')}" + (
                    f": {culprit[1]}" if culprit[1] else ""
                )
        started = row[1]
        if started is None and new_state in (JobState.RUNNING, JobState.SUCCEEDED, JobState.FAILED):
            started = now_ms
        conn.execute(
            sql(
                "UPDATE jobs SET state = :s, started_ms = :st, error = :e,"
                " finished_ms = CASE WHEN :terminal THEN :now ELSE NULL END,"
                " pending_reason = CASE WHEN :s = 'PENDING' THEN pending_reason ELSE '' END"
                " WHERE job_id = :j"
            ),
            {
                "s": new_state.value,
                "st": started,
                "e": error,
                "terminal": new_state.is_terminal,
                "now": now_ms,
                "j": job_id,
            },
        )
        if new_state.is_terminal:
            ended.append(job_id)
            if any(not s.is_terminal for s in states):
                kill_tasks(conn, [job_id], f"job {new_state.value.lower()}", now_ms)
            children = [
                c
                for c in descendant_ids(conn, job_id)
                if conn.execute(
                    sql(f"SELECT 1 FROM jobs WHERE job_id = :c AND state NOT IN {TERMINAL_JOB_SQL}"), {"c": c}
                ).first()
            ]
            if children:
                kill_tasks(conn, children, f"parent job {job_id} ended ({new_state.value})", now_ms)
                pending.extend(children)
    return ended


def fail_jobs(conn: Connection, errors: dict[str, str], now_ms: int) -> list[str]:
    """Fails each job in `errors` (job id → why) outright: its unfinished tasks and live attempts
    become FAILED with that error, with no retry. For a job the controller itself cannot handle
    (a poison row), so that it stops taking part in every pass of the tick."""
    for job_id, error in errors.items():
        params = {"j": job_id, "e": error, "now": now_ms}
        conn.execute(
            sql(
                "UPDATE attempts SET state = 'FAILED', finished_ms = :now, error = :e"
                f" WHERE job_id = :j AND state IN {ACTIVE_TASK_SQL}"
            ),
            params,
        )
        conn.execute(
            sql(
                "UPDATE tasks SET state = 'FAILED', finished_ms = :now, error = :e"
                f" WHERE job_id = :j AND state NOT IN {TERMINAL_TASK_SQL}"
            ),
            params,
        )
        conn.execute(sql("UPDATE jobs SET error = :e WHERE job_id = :j AND state NOT IN " + TERMINAL_JOB_SQL), params)
    return refresh_jobs(conn, list(errors), now_ms)
