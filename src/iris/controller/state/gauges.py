"""What `/metrics` reports as levels: tasks pending and running, each backend's capacity free and in
all, workers alive and dead, peers reachable; read when Prometheus scrapes, from what the control
tick and the backends keep in memory (the snapshot loader's last pending and running tasks, the
backends' members, the federation manager's last heartbeat), so a scrape queries no database.

Free capacity is the same figure the scheduler works from: what the live workers have less what
placed tasks hold (`compute_availability`, as a peer reads it for devices; cores and memory alike).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from iris.backends.protocol import Backend
from iris.scheduler import compute_availability

if TYPE_CHECKING:
    from iris.controller.state.snapshot import SnapshotLoader
    from iris.federation.manager import FederationManager


class ClusterGauges(Collector):
    """A collector over one controller's tick, backends and federation manager."""

    def __init__(
        self,
        loader: SnapshotLoader,
        backends: Mapping[str, Backend],
        federation: FederationManager | None,
        now_ms,
    ):
        self.loader = loader
        self.backends = backends
        self.federation = federation
        self.now_ms = now_ms

    def collect(self) -> Iterator[GaugeMetricFamily]:
        pending, running = self.loader.kept()
        workers = tuple(w for b in self.backends.values() for w in b.workers())
        backend_of = {w.worker_id: w.backend_id for w in workers}

        waiting = GaugeMetricFamily("iris_tasks_pending", "Tasks waiting to be placed, by band", labels=["band"])
        for band, n in sorted(Counter(t.band.label for t in pending).items()):
            waiting.add_metric([band], n)
        yield waiting

        placed = GaugeMetricFamily(
            "iris_tasks_running",
            "Tasks placed on this cluster's workers (assigned, building or running), by band and backend",
            labels=["band", "backend"],
        )
        for (band, backend), n in sorted(
            Counter((t.band.label, backend_of.get(t.worker_id, "")) for t in running).items()
        ):
            placed.add_metric([band, backend], n)
        yield placed

        members = GaugeMetricFamily(
            "iris_workers", "Workers of each backend, alive or dead (not yet forgotten)", labels=["backend", "state"]
        )
        for (backend, state), n in sorted(
            Counter((w.backend_id, "alive" if w.alive else "dead") for w in workers).items()
        ):
            members.add_metric([backend, state], n)
        yield members

        yield from self._capacity(workers, running, backend_of)

        if self.federation is not None:
            up = GaugeMetricFamily(
                "iris_peer_up", "Whether a federation peer answered its last heartbeat", labels=["peer"]
            )
            for status in self.federation.statuses():
                up.add_metric([status.peer_id], 1.0 if status.reachable else 0.0)
            yield up

    def _capacity(self, workers, running, backend_of) -> Iterator[GaugeMetricFamily]:
        cores = GaugeMetricFamily(
            "iris_backend_cpu_cores", "Cores of a backend's live workers: in all, and free", labels=["backend", "state"]
        )
        memory = GaugeMetricFamily(
            "iris_backend_memory_bytes",
            "Memory of a backend's live workers: in all, and free",
            labels=["backend", "state"],
        )
        alive = {w.worker_id for w in workers if w.alive}
        total_cpu: Counter[str] = Counter()
        total_memory: Counter[str] = Counter()
        for w in workers:
            if w.alive:
                total_cpu[w.backend_id] += w.capacity.cpu
                total_memory[w.backend_id] += w.capacity.memory
        used_cpu: Counter[str] = Counter()
        used_memory: Counter[str] = Counter()
        for t in running:
            if t.worker_id in alive:
                used_cpu[backend_of[t.worker_id]] += t.resources.cpu
                used_memory[backend_of[t.worker_id]] += t.resources.memory
        for backend in sorted(self.backends):
            cores.add_metric([backend, "total"], total_cpu[backend])
            cores.add_metric([backend, "free"], max(0.0, total_cpu[backend] - used_cpu[backend]))
            memory.add_metric([backend, "total"], total_memory[backend])
            memory.add_metric([backend, "free"], max(0, total_memory[backend] - used_memory[backend]))
        yield cores
        yield memory

        devices = GaugeMetricFamily(
            "iris_backend_devices",
            "Accelerators of a backend's live workers by device token (h100, v5e…): in all, and free",
            labels=["backend", "device", "state"],
        )
        for backend, block in sorted(compute_availability(workers, tuple(running), self.now_ms()).items()):
            for token, total in sorted(block.total_amounts.items()):
                devices.add_metric([backend, token, "total"], total)
                devices.add_metric([backend, token, "free"], block.amounts.get(token, 0))
        yield devices
