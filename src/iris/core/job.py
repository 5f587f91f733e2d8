"""A validated job request: what the controller stores and the scheduler and backends read.

Built once at submit time from the API message, so every later layer works with checked values
(a resolved id, a concrete band, normalised constraints) rather than re-validating raw input.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from iris.core.bands import Band
from iris.core.constraints import Constraint
from iris.core.resources import Resources

DEFAULT_MAX_RETRIES_PREEMPTION = 100
EXISTING_JOB_POLICIES = ("error", "keep", "replace")


@dataclass(frozen=True, slots=True)
class JobSpec:
    job_id: str
    user: str
    owner: str
    command: tuple[str, ...]
    resources: Resources
    replicas: int = 1
    band: Band = Band.INTERACTIVE
    constraints: tuple[Constraint, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    max_retries_failure: int = 0
    max_retries_preemption: int = DEFAULT_MAX_RETRIES_PREEMPTION
    timeout_s: float = 0.0
    scheduling_timeout_s: float = 0.0
    coschedule: bool = False
    workdir: str = ""
    image: str = ""  # a container image, run by workers started with --runtime docker
    bundle_id: str = ""  # sha256:<hex> of the workspace bundle in the bundles table; "" for none
    files_id: str = ""  # content id of the job's workdir files (stored in job_files); "" for none
    parent_job_id: str | None = None
    depth: int = 0
    root_job_id: str = ""
    credential: str = ""  # the id of the token the job's tree was submitted with ("" for none)
