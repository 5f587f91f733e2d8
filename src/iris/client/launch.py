"""Builds a LaunchJobRequest from the values a person types (`--memory 8G`, `--gpu H100x8`, …).

The CLI's `job run` flags and the SDK's `submit` keywords are the same values, so one pure function
turns both into the request; everything it can check without the controller (sizes, device
spellings, constraint keys and ops, bands, names) fails here with the message to fix it, before a
request is sent.

The request is built as a JSON document that is both valid Connect JSON for the controller's
`application/json` codec and the keyword arguments of the `LaunchJobRequest` message: it uses the
proto's own field names and plain numbers for int64 fields, which the proto3 JSON mapping requires
every parser to accept beside lowerCamelCase names and int64 strings. `iris job run --no-wait`
sends the document as it is, so the CLI's submit path never imports the protobuf runtime (about
15 ms of a 50 ms budget); the SDK builds its message with `LaunchJobRequest(**document)`, which
takes a few microseconds where `json_format.ParseDict` would take about 60.
"""

from __future__ import annotations

import os
import re

import iris
from iris.core.bands import Band
from iris.core.errors import InvalidArgument
from iris.core.limits import MAX_REPLICAS, MAX_RETRIES, MAX_TIMEOUT_S
from iris.core.names import JobName, validate_component
from iris.core.printable import check_launch_request, check_printable
from iris.core.resources import build_resources
from iris.core.units import parse_duration

TYPE_CHECKING = False  # typing's own constant costs `import typing` (4 ms) on the CLI's submit path
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence
    from typing import Any

    from iris.core.constraints import Constraint

EXISTING_JOB_POLICIES = ("error", "keep", "replace")
_SHELL_CHARS = re.compile(r"[\s|&;<>()$`]")


def default_user() -> str:
    """$USER (or 'user'), with characters a job name cannot hold replaced by '-'."""
    raw = os.environ.get("USER") or os.environ.get("USERNAME") or "user"
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "-", raw).strip("-._") or "user"
    return cleaned if not cleaned.isdigit() else f"u{cleaned}"


def normalize_command(command: str | Sequence[str]) -> list[str]:
    """The argv to run: a string, or a single argument that needs a shell, runs under `sh -c`."""
    if isinstance(command, str):
        argv = [command]
    else:
        argv = [str(a) for a in command]
    if not argv or not any(a.strip() for a in argv):
        raise InvalidArgument("the job has no command; give one after `--`, e.g. iris job run -- python train.py")
    if len(argv) == 1 and _SHELL_CHARS.search(argv[0]):
        return ["/bin/sh", "-c", argv[0]]
    return argv


def parse_constraints(
    constraints: Iterable[str | Constraint], region: str | None, zone: str | None, target_cluster: str | None
) -> list[Constraint]:
    """The job's constraints: the given ones (text or Constraint), then region, zone and cluster pins."""
    constraints = list(constraints)
    if not (constraints or region or zone or target_cluster):
        return []  # most jobs name none, and then skip importing the registry (a cost on every submit)
    from iris.core.constraints import Constraint, make_constraint, parse_constraint_text

    parsed = [c if isinstance(c, Constraint) else parse_constraint_text(c) for c in constraints]
    if region:
        parsed.append(make_constraint("region", "EQ", (region,)))
    if zone:
        parsed.append(make_constraint("zone", "EQ", (zone,)))
    if target_cluster:
        parsed.append(make_constraint("cluster", "EQ", (target_cluster,)))
    return parsed


def check_replicas(replicas: int) -> int:
    """A job's task count: a whole number from 1 to MAX_REPLICAS."""
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise InvalidArgument(f"replicas {replicas!r} must be a whole number of at least 1")
    if replicas > MAX_REPLICAS:
        raise InvalidArgument(f"replicas {replicas} is more than a job may have (at most {MAX_REPLICAS})")
    return replicas


def check_retries(what: str, retries: int | None) -> int | None:
    """A job's retry count (None: the default), from 0 to MAX_RETRIES."""
    if retries is not None and retries < 0:
        raise InvalidArgument(f"{what} {retries} must not be negative")
    if retries is not None and retries > MAX_RETRIES:
        raise InvalidArgument(f"{what} {retries} is more than a job may have (at most {MAX_RETRIES})")
    return retries


def check_job_name(name: str) -> str:
    """A job's name as given: a full id (`/alice/train`) or one short name (`train`)."""
    text = name.strip()
    if text.startswith("/"):
        JobName.parse(text)
    else:
        validate_component("job name", text)
    return name


def job_seconds(what: str, value: float | str | None) -> float:
    """A job's timeout in seconds (0: none), at most MAX_TIMEOUT_S."""
    seconds = 0.0 if value in (None, "") else parse_duration(value)
    if seconds > MAX_TIMEOUT_S:
        raise InvalidArgument(
            f"{what} {value} is longer than a job may wait (at most {MAX_TIMEOUT_S / 86400 / 365:g} years)"
        )
    return seconds


def build_launch_request(
    command: str | Sequence[str],
    *,
    name: str | None = None,
    user: str | None = None,
    cpu: float | None = None,
    memory: str | int | None = None,
    disk: str | int | None = None,
    gpu: str | None = None,
    tpu: str | None = None,
    replicas: int = 1,
    priority: str | None = None,
    constraints: Iterable[str | Constraint] = (),
    region: str | None = None,
    zone: str | None = None,
    target_cluster: str | None = None,
    env: Mapping[str, str] | None = None,
    max_retries: int = 0,
    max_retries_preemption: int | None = None,
    timeout: float | str | None = None,
    scheduling_timeout: float | str | None = None,
    coschedule: bool = False,
    existing_job_policy: str = "error",
    parent: str | None = None,
    image: str | None = None,
    bundle_id: str = "",
) -> dict[str, Any]:
    """Validates the values and returns the LaunchJobRequest as its JSON document (see the module docstring).

    Raises InvalidArgument naming what to fix.
    """
    constraints = list(constraints)
    # The values as typed, before anything parses or strips them, named by their flags.
    for flag, value in (
        ("--job-name", name),
        ("--user", user),
        ("--region", region),
        ("--zone", zone),
        ("--target-cluster", target_cluster),
        ("--image", image),
        ("--gpu", gpu),
        ("--tpu", tpu),
        ("--priority", priority),
        ("--existing", existing_job_policy),
        ("parent job id", parent),
        *(("--constraint", c) for c in constraints),
        *(("--env name", key) for key in env or ()),
    ):
        if isinstance(value, str):
            check_printable(flag, value)
    argv = normalize_command(command)
    for flag, value in (("region", region), ("zone", zone), ("target-cluster", target_cluster)):
        if value is not None and not value.strip():
            raise InvalidArgument(f"--{flag} is empty; name one (e.g. --{flag} NAME) or leave the option out")
    resources = build_resources(cpu=cpu, memory=memory, disk=disk, gpu=gpu, tpu=tpu)
    check_replicas(replicas)
    band = Band.parse(priority)
    policy = (existing_job_policy or "error").strip().lower()
    if policy not in EXISTING_JOB_POLICIES:
        raise InvalidArgument(
            f"existing-job policy {existing_job_policy!r} is not one of {', '.join(EXISTING_JOB_POLICIES)}"
        )
    check_retries("max retries", max_retries)
    check_retries("max preemption retries", max_retries_preemption)
    timeout_s = job_seconds("timeout", timeout)
    scheduling_timeout_s = job_seconds("scheduling timeout", scheduling_timeout)

    parsed = parse_constraints(constraints, region, zone, target_cluster)
    env = dict(env or {})
    for key, value in env.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise InvalidArgument(f"env {key!r}={value!r} is not a string name and value; pass both as strings")

    parent = parent or ""
    name = (name or "").strip()
    if parent:
        JobName.parse(parent)
        if name:
            validate_component("job name", name)
    elif name.startswith("/"):
        JobName.parse(name)
    elif name:
        validate_component("job name", name)
    user = user if user is not None else default_user()
    if not name.startswith("/") and not parent:
        validate_component("user", user)

    device = resources.device
    request: dict[str, Any] = {
        "name": name,
        "user": user,
        "command": argv,
        "resources": {
            "cpu": resources.cpu,
            "memory_bytes": resources.memory,
            "disk_bytes": resources.disk,
            "device": {
                "kind": device.kind,
                "variant": device.variant,
                "count": device.count,
                "topology": device.topology,
            },
        },
        "replicas": replicas,
        "priority": band.label,
        "constraints": [
            {"key": c.key, "op": c.op.value, "values": list(c.values), "preferred": c.preferred} for c in parsed
        ],
        "env": env,
        "max_retries_failure": max_retries,
        "timeout_s": timeout_s,
        "scheduling_timeout_s": scheduling_timeout_s,
        "coschedule": coschedule,
        "existing_job_policy": policy,
        "parent_job_id": parent,
        "client_revision_date": iris.REVISION_DATE,
        "bundle_id": bundle_id,
    }
    if image:  # absent unless asked, so older controllers accept the request unchanged
        request["image"] = image.strip()
    if max_retries_preemption is not None:  # absent: the controller's default (100)
        request["max_retries_preemption"] = max_retries_preemption
    check_launch_request(request)  # what the controller refuses, refused before sending
    return request
