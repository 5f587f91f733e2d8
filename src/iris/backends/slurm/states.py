"""How a Slurm job's state becomes an Iris attempt's: waiting (with a sentence saying why),
running, or ended with an outcome, an exit code and an error.

Pure, so every mapping is unit-tested without a Slurm. The choices: a job that ran and exited is
judged by its exit code like any attempt; an end Slurm imposed that is not the job's own fault
(its time limit, memory enforcement, a node failure, a cancel Iris did not ask for) is
WORKER_FAILED, retried under the preemption budget; Slurm's preemption is PREEMPTED; a pending
reason Slurm never resolves by waiting (the request exceeds the partition) is UNSCHEDULABLE.
"""

from __future__ import annotations

from dataclasses import dataclass

from iris.backends.slurm.commands import SlurmJob, shell_exit_code
from iris.core.states import TaskState

WAITING = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"})
RUNNING = frozenset({"CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "STAGE_OUT", "SIGNALING", "RESIZING"})
# Pending reasons that waiting never clears: the request itself does not fit the partition.
NEVER = frozenset(
    {
        "PartitionConfig",
        "PartitionNodeLimit",
        "PartitionTimeLimit",
        "BadConstraints",
        "InvalidAccount",
        "InvalidQOS",
        "AccountNotAllowed",
        "QOSNotAllowed",
        "PartitionDown",
        "PartitionInactive",
    }
)
_REASONS = {
    "Resources": "the resources it asks for are in use",
    "Priority": "jobs of higher priority are ahead of it",
    "None": "Slurm has not considered it yet",
    "BeginTime": "its start time has not come",
    "Dependency": "it waits for another job",
    "JobHeldUser": "it is held",
    "JobHeldAdmin": "an administrator holds it",
    "ReqNodeNotAvail": "the nodes it needs are not available",
    "QOSMaxJobsPerUserLimit": "its QOS allows no more running jobs now",
    "AssocGrpGRES": "its account's GPU limit is reached",
}
_ENDS = {
    "TIMEOUT": (TaskState.WORKER_FAILED, "Slurm ended it at its time limit"),
    "OUT_OF_MEMORY": (TaskState.WORKER_FAILED, "Slurm killed it for using more memory than it asked for"),
    "NODE_FAIL": (TaskState.WORKER_FAILED, "its Slurm node failed"),
    "BOOT_FAIL": (TaskState.WORKER_FAILED, "its Slurm node failed to boot"),
    "DEADLINE": (TaskState.WORKER_FAILED, "Slurm ended it at its deadline"),
    "REVOKED": (TaskState.WORKER_FAILED, "Slurm revoked it"),
    "PREEMPTED": (TaskState.PREEMPTED, "Slurm preempted it"),
    "CANCELLED": (TaskState.WORKER_FAILED, "Slurm cancelled it (an administrator or a Slurm policy)"),
}


@dataclass(frozen=True, slots=True)
class Verdict:
    """What one Slurm job row means for its attempt."""

    phase: str  # waiting | running | ended | unschedulable
    reason: str = ""  # a sentence: why it waits, or why it ended
    exit_code: int | None = None
    outcome: TaskState | None = None  # set where the exit code alone would mislead


def pending_sentence(partition: str, reason: str) -> str:
    words = _REASONS.get(reason)
    return f"Waiting in Slurm partition {partition}: {reason}" + (f" ({words})" if words else "")


def judge(job: SlurmJob, partition: str, exit_file: int | None, stop_requested: bool) -> Verdict:
    """The verdict for one row; `exit_file` is the exit code the job's wrapper recorded, if any."""
    if job.state in WAITING:
        if job.reason in NEVER:
            return Verdict(
                "unschedulable",
                f"Slurm can never run it in partition {partition}: {job.reason}",
                outcome=TaskState.UNSCHEDULABLE,
            )
        return Verdict("waiting", pending_sentence(partition, job.reason))
    if job.state in RUNNING:
        return Verdict("running")
    code = exit_file if exit_file is not None else shell_exit_code(job.exit_status)
    if job.state == "CANCELLED" and stop_requested:
        return Verdict("ended", "stopped", exit_code=code)
    if job.state in _ENDS:
        outcome, why = _ENDS[job.state]
        return Verdict("ended", why, exit_code=code, outcome=outcome)
    if job.state == "COMPLETED":
        return Verdict("ended", exit_code=exit_file if exit_file is not None else 0)
    # FAILED, SPECIAL_EXIT, anything newer: the job's own exit decides.
    code = code if code else 1
    return Verdict("ended", ended_sentence(code), exit_code=code, outcome=TaskState.FAILED)


def ended_sentence(code: int) -> str:
    if code > 128:
        return f"exit code {code} (killed by signal {code - 128})"
    return f"exit code {code}"
