"""Turns a LaunchJobRequest into a validated JobSpec: id resolution, resources, constraints,
inheritance from the parent job, and the client-freshness gate.

Everything a request can get wrong is rejected here with a message that says what to fix, before
anything is written.
"""

from __future__ import annotations

import datetime as dt
import json
import secrets
import time

from iris import REVISION_DATE
from iris.controller.db.database import sql
from iris.core.bands import Band
from iris.core.constraints import ANY_REGION, Constraint, Op, inherit_constraints
from iris.core.errors import FailedPrecondition, InvalidArgument
from iris.core.job import DEFAULT_MAX_RETRIES_PREEMPTION, EXISTING_JOB_POLICIES, JobSpec
from iris.core.names import JobName, validate_component
from iris.rpc import controller_pb2 as pb
from iris.rpc.codec import constraints_from_proto, resources_from_proto

MAX_REPLICAS = 100_000


def generated_name() -> str:
    # 48 random bits: thousands of unnamed submissions a second never collide in practice.
    return time.strftime("job-%Y%m%d-%H%M%S-") + secrets.token_hex(6)


def check_client_freshness(client_date: str, max_age_days: int, controller_date: str = REVISION_DATE) -> None:
    """Refuses a root submission from a client more than `max_age_days` older than the controller."""
    if not client_date:
        return
    try:
        client = dt.date.fromisoformat(client_date)
    except ValueError:
        raise InvalidArgument(f"client_revision_date {client_date!r} must be YYYY-MM-DD") from None
    age = (dt.date.fromisoformat(controller_date) - client).days
    if age > max_age_days:
        raise FailedPrecondition(
            f"your iris client ({client_date}) is {age} days older than this controller ({controller_date}); "
            f"clients more than {max_age_days} days behind are refused: upgrade iris and submit again"
        )


def resolve_job_id(req: pb.LaunchJobRequest) -> JobName:
    if req.parent_job_id:
        parent = JobName.parse(req.parent_job_id)
        return parent.child(req.name or generated_name())
    if req.name.startswith("/"):
        name = JobName.parse(req.name)
        if req.user and req.user != name.user:
            raise InvalidArgument(f"job id {req.name} belongs to user {name.user}, not {req.user}")
        return name
    if not req.user:
        raise InvalidArgument("a job needs a user: pass --user, or a full id /<user>/<name>")
    return JobName.root(req.user, req.name or generated_name())


def build_spec(
    req: pb.LaunchJobRequest,
    parent: dict | None,
    parent_constraints: tuple[Constraint, ...],
    parent_env: dict[str, str],
    owner: str,
) -> JobSpec:
    """Validates the request; `parent` is the parent job row for a child submission."""
    name = resolve_job_id(req)
    if not name.is_root and parent is None:
        raise InvalidArgument(f"job {name} names a parent that does not exist: submit {name.parent} first")
    command = tuple(req.command)
    if not command or not command[0].strip():
        raise InvalidArgument("a job needs a command: iris job run [flags] -- CMD ARGS…")
    replicas = req.replicas or 1
    if not 1 <= replicas <= MAX_REPLICAS:
        raise InvalidArgument(f"replicas must be between 1 and {MAX_REPLICAS}, got {replicas}")
    resources = resources_from_proto(req.resources)
    if resources.device.kind != "cpu" and resources.device.count <= 0:
        raise InvalidArgument(f"a {resources.device.kind} request needs a device count of at least 1")
    constraints = constraints_from_proto(req.constraints)
    if parent is not None:
        constraints = inherit_constraints(parent_constraints, constraints)
    else:
        constraints = tuple(c for c in constraints if not (c.key in ("region", "zone") and ANY_REGION in c.values))
    band = Band.parse(req.priority) if req.priority else (Band.parse(parent["band"]) if parent else Band.INTERACTIVE)
    if req.existing_job_policy and req.existing_job_policy not in EXISTING_JOB_POLICIES:
        raise InvalidArgument(
            f"existing_job_policy {req.existing_job_policy!r} must be one of {', '.join(EXISTING_JOB_POLICIES)}"
        )
    if req.max_retries_failure < 0 or req.max_retries_preemption < 0:
        raise InvalidArgument("retry budgets must not be negative")
    if req.timeout_s < 0 or req.scheduling_timeout_s < 0:
        raise InvalidArgument("timeouts must not be negative")
    for key in req.env:
        if not key or "=" in key or "\0" in key:
            raise InvalidArgument(f"environment variable name {key!r} is not valid")
    env = {**parent_env, **dict(req.env)}
    multi_device = replicas > 1 and resources.device.is_accelerator
    validate_component("user", name.user)
    return JobSpec(
        job_id=str(name),
        user=name.user,
        owner=owner or name.user,
        command=command,
        resources=resources,
        replicas=replicas,
        band=band,
        constraints=constraints,
        env=env,
        max_retries_failure=req.max_retries_failure,
        max_retries_preemption=req.max_retries_preemption
        if req.HasField("max_retries_preemption")
        else DEFAULT_MAX_RETRIES_PREEMPTION,
        timeout_s=req.timeout_s,
        scheduling_timeout_s=req.scheduling_timeout_s,
        coschedule=req.coschedule or multi_device,
        workdir=req.workdir,
        parent_job_id=str(name.parent) if name.parent else None,
        depth=name.depth,
        root_job_id=str(name.root_job),
    )


def parent_context(conn, parent_job_id: str) -> tuple[dict | None, tuple[Constraint, ...], dict[str, str]]:
    """The parent's row, constraints and env, for inheritance (None when there is no such job)."""

    row = conn.execute(sql("SELECT * FROM jobs WHERE job_id = :j"), {"j": parent_job_id}).mappings().first()
    if row is None:
        return None, (), {}
    cfg = conn.execute(sql("SELECT constraints, env FROM job_config WHERE job_id = :j"), {"j": parent_job_id}).first()
    constraints = tuple(Constraint(k, Op(op), tuple(v), bool(p)) for k, op, v, p in json.loads(cfg[0]))
    return dict(row), constraints, json.loads(cfg[1])
