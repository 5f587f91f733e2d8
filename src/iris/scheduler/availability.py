"""Decides what a backend advertises: per device token, what is free, the total, and what placed
work holds per band.

Computed from placed work only, never from what is queued: a peer reads `held_by_band` to tell
what a job of a higher band could reclaim there by preemption, and counting queued work would make
a busy queue look like a full cluster. Only accelerators are advertised; CPU work matches peers on
shape alone. A running task that asked for any variant holds its worker's variant.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from iris.core.availability import Availability, BandHolding
from iris.core.bands import Band
from iris.scheduler.fit import worker_token
from iris.scheduler.snapshot import RunningTask, WorkerSnapshot


def compute_availability(
    workers: Iterable[WorkerSnapshot], running: Iterable[RunningTask], now_ms: int
) -> dict[str, Availability]:
    """Per backend id, the availability block of its alive workers (every backend gets one)."""
    workers = sorted(workers, key=lambda w: (w.backend_id, w.worker_id))
    accelerated = {w.worker_id: w for w in workers if w.alive and worker_token(w)}
    used: dict[str, int] = defaultdict(int)
    held: dict[str, dict[Band, dict[str, float]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(float)))
    for task in running:
        worker = accelerated.get(task.worker_id)
        device = task.resources.device
        if worker is None or not device.is_accelerator:
            continue
        used[worker.worker_id] += device.count
        held[worker.backend_id][task.band][worker_token(worker)] += device.count
    free: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    total: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for worker in workers:
        free[worker.backend_id]  # every backend appears, even one without accelerators
        total[worker.backend_id]
        if worker.worker_id in accelerated:
            token, count = worker_token(worker), worker.capacity.device.count
            total[worker.backend_id][token] += count
            free[worker.backend_id][token] += max(0, count - used[worker.worker_id])
    return {
        backend: Availability(
            observation_epoch_ms=now_ms,
            amounts=dict(sorted(free[backend].items())),
            total_amounts=dict(sorted(total[backend].items())),
            held_by_band=tuple(
                BandHolding(band, dict(sorted(held[backend][band].items()))) for band in sorted(held[backend])
            ),
        )
        for backend in sorted(total)
    }
