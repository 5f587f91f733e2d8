"""The counters and histograms a controller (or a worker daemon) keeps for `/metrics`, in
Prometheus' text format through the maintained client library (`prometheus_client`).

What is counted as it happens lives here: API calls by method and code with their latency, the
control tick's stages, the output stored, calls to federation peers. What is a level (tasks pending
and running, capacity, workers, peers up) is read at scrape time from what the tick already keeps
in memory (`iris.controller.state.gauges`), so a scrape costs no query of the database.

Labels name only things of the cluster's own vocabulary with few values (a method, a Connect code,
a stage, a band, a backend, a device token, a peer), never a user or a job: the series stay few
whatever the load, and `/metrics` can answer without a token, as exporters do.

One registry per process (a controller or a daemon is one process), not prometheus_client's global
one, so nothing else a process imports can add series to it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest

REGISTRY = CollectorRegistry()
CONTENT_TYPE = CONTENT_TYPE_LATEST

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

API_REQUESTS = Counter(
    "iris_api_requests",
    "API calls answered, by method and Connect code (ok for a success)",
    ["method", "code"],
    registry=REGISTRY,
)
API_SECONDS = Histogram(
    "iris_api_request_duration_seconds",
    "Seconds from an API call's identity check to its answer, by method",
    ["method"],
    buckets=_LATENCY_BUCKETS,
    registry=REGISTRY,
)
TICK_SECONDS = Histogram(
    "iris_tick_stage_duration_seconds",
    "Seconds each stage of the control tick's passes took (events, reconcile, schedule, federation, light)",
    ["stage"],
    buckets=_LATENCY_BUCKETS,
    registry=REGISTRY,
)
LOG_STORED_BYTES = Counter(
    "iris_log_stored_bytes",
    "Bytes of job output stored in the database, as the output caps count them (text and row overhead)",
    registry=REGISTRY,
)
LOG_STORED_LINES = Counter("iris_log_stored_lines", "Lines of job output stored in the database", registry=REGISTRY)
FEDERATION_CALLS = Counter(
    "iris_federation_calls",
    "Calls to federation peers, by peer, method (ListBackends is the heartbeat, HandOffJobs the handoff,"
    " FederationSync the sync) and outcome (ok, unreachable, or the peer's Connect code)",
    ["peer", "method", "outcome"],
    registry=REGISTRY,
)


@contextmanager
def timed(histogram: Histogram, *labels: str) -> Iterator[None]:
    """Observes the block's wall time in `histogram` under `labels`."""
    start = time.perf_counter()
    try:
        yield
    finally:
        histogram.labels(*labels).observe(time.perf_counter() - start)


def render() -> bytes:
    """Every series of this process, in Prometheus' text format."""
    return generate_latest(REGISTRY)
