"""Turns a LaunchJobRequest into a validated JobSpec: id resolution, resources, constraints,
inheritance from the parent job, and the client-freshness gate.

Everything a request can get wrong is rejected here with a message that says what to fix, before
anything is written.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import secrets
import time
from collections.abc import Mapping
from dataclasses import replace

from iris import REVISION_DATE
from iris.controller.db.database import sql
from iris.core.bands import Band
from iris.core.config import TimeLimitConfig
from iris.core.constraints import ANY_REGION, Constraint, Op, inherit_constraints, make_constraint
from iris.core.errors import FailedPrecondition, InvalidArgument
from iris.core.images import check_image
from iris.core.job import DEFAULT_MAX_RETRIES_PREEMPTION, EXISTING_JOB_POLICIES, JobSpec
from iris.core.limits import MAX_REPLICAS, MAX_RETRIES, MAX_TASK_BYTES, MAX_TASK_CPU, MAX_TASK_DEVICES, MAX_TIMEOUT_S
from iris.core.names import JobName, validate_component
from iris.rpc import controller_pb2 as pb
from iris.rpc.bounds import check_number, check_text
from iris.rpc.codec import constraints_from_proto, resources_from_proto

# What one job may ask for is in iris.core.limits; what else a request may carry:
MAX_COMMAND_ARGS = 4096
MAX_COMMAND_CHARS = 256 * 1024
MAX_ENV_VARS = 1000
MAX_ENV_CHARS = 256 * 1024
MAX_CONSTRAINTS = 64
MAX_CONSTRAINT_VALUES = 256
MAX_WORKDIR_FILES = 1000
# A name a shell can export: a job's env reaches its command through a shell (every backend runs
# commands that way), which silently drops any other name.
_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,255}\Z")
# Names a job may not set, by prefix, and why; every other name (LD_*, BASH_ENV, PYTHON*, PATH, …)
# is passed to the task alone, never to a process with the controller's or a daemon's privileges
# (see iris.backends.privileged and docs/security.md, which lists this table).
REFUSED_ENV_PREFIXES = (
    ("SLURM_", "Slurm sets SLURM_* in the jobs it runs, and its tools read them as their configuration"),
    ("SBATCH_", "sbatch reads SBATCH_* as its options; ask for resources with --cpu, --memory and --gpu"),
    ("DOCKER_", "DOCKER_* configure the Docker client a worker starts containers with"),
)


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
    command = check_command(req.command)
    replicas = req.replicas or 1
    if not 1 <= replicas <= MAX_REPLICAS:
        raise InvalidArgument(f"replicas must be between 1 and {MAX_REPLICAS}, got {replicas}")
    check_resources(req.resources)
    resources = resources_from_proto(req.resources)
    if resources.device.kind != "cpu" and resources.device.count <= 0:
        raise InvalidArgument(f"a {resources.device.kind} request needs a device count of at least 1")
    check_constraints(req.constraints)
    constraints = constraints_from_proto(req.constraints)
    if parent is not None:
        constraints = inherit_constraints(parent_constraints, constraints)
    else:
        constraints = tuple(c for c in constraints if not (c.key in ("region", "zone") and ANY_REGION in c.values))
    if req.image and not any(c.key == "runtime" for c in constraints):
        # An image runs only on a worker with a container runtime, never as a process elsewhere.
        constraints = (*constraints, make_constraint("runtime", Op.EQ, ["docker"]))
    band = Band.parse(req.priority) if req.priority else (Band.parse(parent["band"]) if parent else Band.INTERACTIVE)
    if req.existing_job_policy and req.existing_job_policy not in EXISTING_JOB_POLICIES:
        raise InvalidArgument(
            f"existing_job_policy {req.existing_job_policy!r} must be one of {', '.join(EXISTING_JOB_POLICIES)}"
        )
    check_number("max_retries_failure", req.max_retries_failure, 0, MAX_RETRIES)
    check_number("max_retries_preemption", req.max_retries_preemption, 0, MAX_RETRIES)
    check_number("timeout_s", req.timeout_s, 0, MAX_TIMEOUT_S)
    check_number("scheduling_timeout_s", req.scheduling_timeout_s, 0, MAX_TIMEOUT_S)
    check_env(req.env)
    check_text("workdir", req.workdir, 4096)
    check_text("image", req.image, 512)
    if req.image:
        check_image(req.image)
    if len(req.workdir_files) > MAX_WORKDIR_FILES:
        raise InvalidArgument(
            f"a job may carry at most {MAX_WORKDIR_FILES} workdir files, got {len(req.workdir_files)};"
            " bundle the directory instead"
        )
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
        image=req.image,
        bundle_id=req.bundle_id,
        parent_job_id=str(name.parent) if name.parent else None,
        depth=name.depth,
        root_job_id=str(name.root_job),
    )


def apply_time_limit(spec: JobSpec, limits: Mapping[str, TimeLimitConfig]) -> JobSpec:
    """`spec` with its band's default time limit when it asked for none; refused when it asks for
    more than its band's maximum (`controller.time_limits`)."""
    limit = limits.get(spec.band.label)
    if limit is None:
        return spec
    if limit.max and spec.timeout_s > limit.max:
        raise InvalidArgument(
            f"--timeout {spec.timeout_s:g}s is above the {limit.max:g}s this cluster allows {spec.band.label}"
            f" jobs (controller.time_limits.{spec.band.label}.max): ask for at most {limit.max:g}s"
        )
    if not spec.timeout_s and (limit.default or limit.max):
        return replace(spec, timeout_s=limit.default or limit.max)
    return spec


def check_command(args) -> tuple[str, ...]:
    """The command as a tuple, refused when empty, too long, or holding a NUL byte."""
    command = tuple(args)
    if not command or not command[0].strip():
        raise InvalidArgument("a job needs a command: iris job run [flags] -- CMD ARGS…")
    if len(command) > MAX_COMMAND_ARGS:
        raise InvalidArgument(f"the command has {len(command)} arguments; at most {MAX_COMMAND_ARGS} are allowed")
    total = sum(len(a) for a in command)
    if total > MAX_COMMAND_CHARS:
        raise InvalidArgument(
            f"the command is {total} characters long; at most {MAX_COMMAND_CHARS} are allowed:"
            " put long input in a workdir file instead"
        )
    for i, arg in enumerate(command):
        check_text(f"command argument {i}", arg, MAX_COMMAND_CHARS)
    return command


def check_resources(m: pb.Resources) -> None:
    """Refuses resources that are negative, not finite, or beyond what any worker could offer."""
    check_number("resources.cpu", m.cpu, 0, MAX_TASK_CPU)
    check_number("resources.memory_bytes", m.memory_bytes, 0, MAX_TASK_BYTES)
    check_number("resources.disk_bytes", m.disk_bytes, 0, MAX_TASK_BYTES)
    check_number("resources.device.count", m.device.count, 0, MAX_TASK_DEVICES)
    for name in ("kind", "variant", "topology"):
        check_text(f"resources.device.{name}", getattr(m.device, name), 64)


def check_constraints(items) -> None:
    if len(items) > MAX_CONSTRAINTS:
        raise InvalidArgument(f"a job may carry at most {MAX_CONSTRAINTS} constraints, got {len(items)}")
    for c in items:
        if len(c.values) > MAX_CONSTRAINT_VALUES:
            raise InvalidArgument(
                f"constraint {c.key[:64]!r} has {len(c.values)} values; at most {MAX_CONSTRAINT_VALUES} are allowed"
            )
        check_text("constraint key", c.key, 256)
        for v in c.values:
            check_text(f"a value of constraint {c.key!r}", v, 256)
    pins = {c.key: ",".join(c.values) for c in items if c.key in ("cluster", "backend")}
    if len(pins) == 2:
        raise InvalidArgument(
            f"the job pins both cluster={pins['cluster']} and backend={pins['backend']}; a backend pin names"
            " a backend of this cluster and a cluster pin sends the job to a peer, so give only one"
            " (--target-cluster to choose the peer, which picks its own backend)"
        )


def check_env(env) -> None:
    """Refuses env names no shell can pass on, names of REFUSED_ENV_PREFIXES, NUL bytes in values,
    and oversize envs."""
    if len(env) > MAX_ENV_VARS:
        raise InvalidArgument(f"a job may set at most {MAX_ENV_VARS} environment variables, got {len(env)}")
    total = 0
    for key, value in env.items():
        if not _ENV_KEY.match(key):
            raise InvalidArgument(
                f"environment variable name {key[:64]!r} is not valid: use letters, digits and '_',"
                " not starting with a digit (at most 256 characters)"
            )
        for prefix, why in REFUSED_ENV_PREFIXES:
            if key.startswith(prefix):
                raise InvalidArgument(f"environment variable {key} is not accepted: {why}")
        check_text(f"environment variable {key}", value, MAX_ENV_CHARS)
        total += len(key) + len(value)
    if total > MAX_ENV_CHARS:
        raise InvalidArgument(f"the job's environment is {total} characters; at most {MAX_ENV_CHARS} are allowed")


def parent_context(conn, parent_job_id: str) -> tuple[dict | None, tuple[Constraint, ...], dict[str, str]]:
    """The parent's row, constraints and env, for inheritance (None when there is no such job)."""

    row = conn.execute(sql("SELECT * FROM jobs WHERE job_id = :j"), {"j": parent_job_id}).mappings().first()
    if row is None:
        return None, (), {}
    cfg = conn.execute(sql("SELECT constraints, env FROM job_config WHERE job_id = :j"), {"j": parent_job_id}).first()
    constraints = tuple(Constraint(k, Op(op), tuple(v), bool(p)) for k, op, v, p in json.loads(cfg[0]))
    return dict(row), constraints, json.loads(cfg[1])
