"""A worker daemon's `/metrics`: scraped from a real daemon joined to a real controller, its figures
match what the controller says of the same worker."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from iris.client import IrisClient
from tests.conftest import free_port, wait_until


def _scrape(port: int) -> dict[tuple[str, tuple], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _value(samples, name: str, **labels) -> float:
    return samples[(name, tuple(sorted({"worker": "m1", "backend": "pool", **labels}.items())))]


def test_worker_metrics_show_its_capacity_running_attempts_and_polls(pool, worker_factory):
    port = free_port()
    worker_factory(pool, "m1", "--metrics-listen", f"127.0.0.1:{port}")
    wait_until(lambda: _value(_scrape(port), "iris_worker_registered") == 1.0, message="the worker to be registered")
    samples = _scrape(port)
    assert _value(samples, "iris_worker_capacity", resource="cpu") == 2.0
    assert _value(samples, "iris_worker_capacity", resource="memory_bytes") == 4 * 1024**3
    assert _value(samples, "iris_worker_attempts_running") == 0.0
    with IrisClient(pool.url, token="") as sdk:
        job = sdk.submit(["sleep", "30"], name="held", user="alice", cpu=1)
        wait_until(lambda: sdk.status(job).state == "RUNNING", message="the job to run")
        wait_until(lambda: _value(_scrape(port), "iris_worker_attempts_running") == 1.0, message="one attempt running")
        (worker,) = [w for w in sdk.workers() if w.worker_id == "m1"]
        assert worker.running_tasks == 1
        # Counted once the start returned, which may be a moment after its report made the job RUNNING.
        started = ("iris_worker_attempts_started_total", (("outcome", "started"),))
        samples = wait_until(lambda: (s := _scrape(port)).get(started) == 1.0 and s, message="the start to be counted")
        assert samples[("iris_worker_polls_total", (("outcome", "ok"),))] >= 1.0
        sdk.cancel(job)


def test_a_bad_metrics_address_is_refused_before_joining(pool, tmp_path):
    run = pool.cli(
        "worker", "start", "--backend", "pool", "--work-dir", str(tmp_path / "w"), "--metrics-listen", "nope"
    )
    assert run.returncode == 3 and "is not HOST:PORT" in run.stderr
