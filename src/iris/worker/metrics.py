"""What a worker daemon reports on `/metrics` (`iris worker start --metrics-listen HOST:PORT`), in
Prometheus' text format through `prometheus_client`, as the controller's `/metrics` does.

Counted as it happens: polls of the controller by outcome, attempts started and refused. Read at
scrape time from what the daemon holds in memory: whether it is registered, its capacity, the
attempts running and the devices they hold. Labels carry the worker's own name and backend (one
value each per daemon), never a user or a job. Off unless asked for: the daemon otherwise listens
on nothing, so it may sit behind NAT.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily, Metric

if TYPE_CHECKING:
    from iris.worker.daemon import WorkerDaemon

REGISTRY = CollectorRegistry()

POLLS = Counter(
    "iris_worker_polls",
    "Long polls of the controller, by outcome (ok, unreachable, refused)",
    ["outcome"],
    registry=REGISTRY,
)
ATTEMPTS_STARTED = Counter(
    "iris_worker_attempts_started",
    "Attempts this daemon was handed, by outcome (started, refused: it could not start them)",
    ["outcome"],
    registry=REGISTRY,
)


class DaemonLevels:
    """The levels read off a live daemon at each scrape."""

    def __init__(self, daemon: WorkerDaemon):
        self.daemon = daemon

    def collect(self) -> Iterator[Metric]:
        d = self.daemon
        labels = ["worker", "backend"]
        values = [d.settings.name, d.settings.backend]
        registered = GaugeMetricFamily(
            "iris_worker_registered", "1 while the controller has this worker joined", labels=labels
        )
        registered.add_metric(values, 1.0 if d.registered.is_set() and d.session_open() else 0.0)
        yield registered
        capacity = GaugeMetricFamily(
            "iris_worker_capacity",
            "What this worker offers, by resource (cpu cores, bytes, devices)",
            labels=[*labels, "resource"],
        )
        cap = d.settings.capacity
        for resource, amount in (
            ("cpu", cap.cpu),
            ("memory_bytes", cap.memory),
            ("disk_bytes", cap.disk),
            ("devices", cap.device.count if cap.device.is_accelerator else 0),
        ):
            capacity.add_metric([*values, resource], float(amount))
        yield capacity
        running, devices = d.runtime.levels()
        live = GaugeMetricFamily("iris_worker_attempts_running", "Attempts running on this worker now", labels=labels)
        live.add_metric(values, float(running))
        yield live
        held = GaugeMetricFamily("iris_worker_devices_in_use", "Devices held by running attempts", labels=labels)
        held.add_metric(values, float(devices))
        yield held


def serve(daemon: WorkerDaemon, listen: str) -> int:
    """Starts `/metrics` on `listen` (HOST:PORT) in a thread of its own; returns the port."""
    from prometheus_client import start_http_server

    from iris.core.errors import InvalidArgument

    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise InvalidArgument(f"--metrics-listen {listen!r} is not HOST:PORT, e.g. 127.0.0.1:9101")
    REGISTRY.register(DaemonLevels(daemon))
    try:
        server, _thread = start_http_server(int(port), addr=host.strip("[]"), registry=REGISTRY)
    except OSError as exc:
        raise InvalidArgument(f"--metrics-listen {listen}: cannot listen there ({exc.strerror or exc})") from None
    return int(server.server_port)
