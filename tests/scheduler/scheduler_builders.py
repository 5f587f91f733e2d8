"""Builders for scheduler snapshots: workers, running and pending tasks with sensible defaults."""

from __future__ import annotations

from iris.core.bands import Band
from iris.core.constraints import Constraint, Op
from iris.core.resources import Device, Resources
from iris.scheduler import PendingTask, RunningTask, ScheduleResult, SchedulingSnapshot, WorkerSnapshot
from iris.scheduler.reference import Decisions

G = 1024**3


def cpu_worker(
    worker_id: str,
    backend: str = "cpu",
    cpu: float = 8,
    memory: int = 32 * G,
    disk: int = 100 * G,
    alive: bool = True,
    **attributes: str,
) -> WorkerSnapshot:
    attrs = {"device-type": "cpu", **{k.replace("_", "-"): v for k, v in attributes.items()}}
    return WorkerSnapshot(worker_id, backend, Resources(cpu=cpu, memory=memory, disk=disk), attrs, alive)


def gpu_worker(
    worker_id: str,
    backend: str = "gpu",
    variant: str = "h100",
    count: int = 8,
    cpu: float = 64,
    memory: int = 512 * G,
    alive: bool = True,
    **attributes: str,
) -> WorkerSnapshot:
    attrs = {
        "device-type": "gpu",
        "device-variant": variant,
        "gpu-count": str(count),
        **{k.replace("_", "-"): v for k, v in attributes.items()},
    }
    capacity = Resources(cpu=cpu, memory=memory, disk=500 * G, device=Device("gpu", variant, count))
    return WorkerSnapshot(worker_id, backend, capacity, attrs, alive)


def cpu_request(cpu: float = 1, memory: int = G, disk: int = 0) -> Resources:
    return Resources(cpu=cpu, memory=memory, disk=disk)


def gpu_request(count: int = 8, variant: str = "h100", cpu: float = 1, memory: int = G) -> Resources:
    return Resources(cpu=cpu, memory=memory, device=Device("gpu", variant, count))


def job(
    job_id: str,
    resources: Resources | None = None,
    replicas: int = 1,
    band: Band = Band.INTERACTIVE,
    constraints: tuple[Constraint, ...] = (),
    user: str = "alice",
    insertion: int = 0,
    **fields,
) -> tuple[PendingTask, ...]:
    """The pending tasks of one job, `<job>/0 … <job>/N-1`."""
    resources = resources or cpu_request()
    return tuple(
        PendingTask(
            f"{job_id}/{i}",
            job_id,
            i,
            resources,
            tuple(constraints),
            band,
            user,
            insertion=insertion,
            replicas=replicas,
            **fields,
        )
        for i in range(replicas)
    )


def running(
    task_id: str,
    worker_id: str,
    resources: Resources | None = None,
    band: Band = Band.BATCH,
    started_ms: int = 0,
    user: str = "bob",
    job_id: str | None = None,
) -> RunningTask:
    return RunningTask(
        task_id, job_id or task_id.rsplit("/", 1)[0], worker_id, resources or cpu_request(), band, started_ms, user
    )


def require(key: str, op: Op, *values: str) -> Constraint:
    return Constraint(key, op, tuple(values))


def prefer(key: str, op: Op, *values: str) -> Constraint:
    return Constraint(key, op, tuple(values), preferred=True)


def snapshot(workers, pending=(), running_tasks=(), now_ms: int = 1_000_000, budgets=None) -> SchedulingSnapshot:
    pending_tasks = tuple(t for group in pending for t in (group if isinstance(group, tuple) else (group,)))
    return SchedulingSnapshot(now_ms, tuple(workers), tuple(running_tasks), pending_tasks, dict(budgets or {}))


TIMEOUT = "Scheduling timeout reached"  # how the reason of a task past its deadline begins


def decisions_of(result: ScheduleResult) -> Decisions:
    """The kernel's result in the terms the reference scheduler decides in."""
    return Decisions(
        frozenset((a.task_id, a.worker_id) for a in result.assignments),
        frozenset((p.task_id, p.worker_id, p.by_task_id) for p in result.preemptions),
        frozenset(u.task_id for u in result.unschedulable if not u.reason.startswith(TIMEOUT)),
        frozenset(u.task_id for u in result.unschedulable if u.reason.startswith(TIMEOUT)),
        frozenset(result.pending_reasons),
    )


def placements(result) -> dict[str, str]:
    """task id → worker id."""
    return {a.task_id: a.worker_id for a in result.assignments}
