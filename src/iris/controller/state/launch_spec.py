"""What a backend starts one attempt with: its command, resources, workspace layers, environment,
token and uid.

Everything an attempt learns about itself comes from here: its ids and place in the job
(`IRIS_JOB_ID`, `IRIS_TASK_ID`, `IRIS_TASK_INDEX`, `IRIS_NUM_TASKS`, …), the cluster's base env under
the job's own, and a token confined to the job and the attempt. It is built inside the tick's
transaction, right after the attempt row is written, so a spec always matches the rows the tick
commits; a spec that cannot be built fails its own job, never the pass (the tick decides that).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from iris.backends import staging
from iris.backends.protocol import LaunchSpec
from iris.controller.auth.isolation import TaskIdentity
from iris.controller.db.database import run
from iris.core.names import AttemptName

if TYPE_CHECKING:
    from iris.controller.state.snapshot import JobConfig


# (conn, job_id, owner, user, attempt_id, credential) -> the attempt's identity
TaskIdentitySource = Callable[[object, str, str, str, str, str], TaskIdentity]
# (conn, job_id, insertion) -> the job's parsed config
JobConfigSource = Callable[[object, str, int], "JobConfig"]


class LaunchSpecs:
    """Builds launch specs from a job's stored config, the cluster's base env and the attempt's identity."""

    def __init__(
        self,
        job_config: JobConfigSource,
        base_env: Mapping[str, str],
        state_dir: Path | None = None,
        task_identity: TaskIdentitySource | None = None,
    ):
        self.job_config = job_config
        self.base_env = dict(base_env)
        self.state_dir = state_dir
        self.task_identity = task_identity or (lambda *_: TaskIdentity())

    def build(self, conn, attempt: AttemptName, worker_id: str, backend_id: str) -> LaunchSpec:
        """What a backend needs to start `attempt` on `worker_id`; `conn` is the tick's open transaction."""
        job_id, index = attempt.job_id, attempt.index
        replicas, owner, user, insertion, credential = run(
            conn, "SELECT replicas, owner, user, insertion, credential FROM jobs WHERE job_id = :j", {"j": job_id}
        ).fetchone()
        cfg = self.job_config(conn, job_id, insertion)
        # Unpacked at submit, off the tick; the backend copies the layers into the attempt's folder.
        layers = staging.layers(self.state_dir, cfg.bundle_id, cfg.files_id) if self.state_dir else ()
        identity = self.task_identity(conn, job_id, owner, user, str(attempt), credential)
        env = {
            **self.base_env,
            **cfg.env,
            "IRIS_JOB_ID": job_id,
            "IRIS_TASK_ID": str(attempt.task),
            "IRIS_TASK_INDEX": str(index),
            "IRIS_ATTEMPT": str(attempt.attempt),
            "IRIS_NUM_TASKS": str(replicas),
            "IRIS_WORKER_ID": worker_id,
            "IRIS_BACKEND_ID": backend_id,
        }
        if identity.token:
            env["IRIS_TOKEN"] = identity.token  # the task acts for its job, e.g. to submit child jobs
        account = identity.account
        return LaunchSpec(
            str(attempt),
            job_id,
            index,
            attempt.attempt,
            worker_id,
            cfg.command,
            env,
            cfg.resources,
            cfg.workdir,
            cfg.image,
            layers,
            uid=account.uid if account else None,
            gid=account.gid if account else None,
            max_processes=account.max_processes if account else 0,
            timeout_s=cfg.timeout_s,
            bundle_id=cfg.bundle_id,
            files_id=cfg.files_id,
        )
