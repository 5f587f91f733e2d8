"""`/metrics` of a live controller, scraped as Prometheus does, agrees with what the API says."""

from __future__ import annotations

import sqlite3

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import wait_until
from tests.controller.helpers import client, error_code, launch, pb, status, user_token, wait_state


def scrape(ctl, token: str | None = None) -> dict[tuple[str, tuple], float]:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    answer = httpx.get(f"{ctl.url}/metrics", headers=headers, timeout=10)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(answer.text)
        for sample in family.samples
    }


def value(samples, name: str, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_metrics_of_a_live_controller_agree_with_the_api(controller_factory):
    ctl = controller_factory(
        "metered", backends=[{"id": "cpu", "kind": "local", "workers": 1, "capacity": {"cpu": 4, "memory": "8G"}}]
    )
    c = client(ctl)
    two_cpus = pb.Resources(cpu=2, memory_bytes=1024**3)
    talker = launch(c, "talker", ["sh", "-c", "seq 1 500"], user="bob")
    assert wait_state(c, talker).job.state == "SUCCEEDED"
    wide = c.launch_job(
        pb.LaunchJobRequest(name="wide", user="alice", command=["sleep", "300"], resources=two_cpus, replicas=2)
    ).job_id
    wait_until(lambda: [t.state for t in status(c, wide).tasks] == ["RUNNING", "RUNNING"], message="both running")
    waiting = c.launch_job(
        pb.LaunchJobRequest(name="waits", user="alice", command=["true"], resources=two_cpus, priority="batch")
    ).job_id
    wait_until(lambda: status(c, waiting).job.pending_reason, message="a pending reason")
    code, _ = error_code(lambda: c.launch_job(pb.LaunchJobRequest(name="bad name!", user="alice", command=["true"])))
    assert code == "invalid_argument"

    samples = wait_until(
        lambda: s if value(s := scrape(ctl), "iris_tasks_pending", band="batch") == 1 else None,
        message="the pending task in the kept snapshot",
    )
    assert value(samples, "iris_tasks_running", band="interactive", backend="cpu") == 2
    assert value(samples, "iris_backend_cpu_cores", backend="cpu", state="total") == 4
    assert value(samples, "iris_backend_cpu_cores", backend="cpu", state="free") == 0
    assert value(samples, "iris_backend_memory_bytes", backend="cpu", state="total") == 8 * 1024**3
    assert value(samples, "iris_workers", backend="cpu", state="alive") == 1
    assert value(samples, "iris_api_requests_total", method="LaunchJob", code="ok") == 3
    assert value(samples, "iris_api_requests_total", method="LaunchJob", code="invalid_argument") == 1
    assert value(samples, "iris_api_request_duration_seconds_count", method="LaunchJob") == 4
    assert value(samples, "iris_tick_stage_duration_seconds_count", stage="schedule") > 0
    db = sqlite3.connect(f"file:{ctl.state_dir / 'controller.db'}?mode=ro", uri=True)
    try:
        stored = db.execute("SELECT SUM(log_chars) FROM jobs").fetchone()[0]
        lines = db.execute("SELECT COUNT(*) FROM logs").fetchone()[0]
    finally:
        db.close()
    assert value(samples, "iris_log_stored_bytes_total") == stored > 0
    assert value(samples, "iris_log_stored_lines_total") == lines == 500

    # Its labels name no user and no job, so it can answer anyone.
    text = httpx.get(f"{ctl.url}/metrics", timeout=10).text
    for name in ("alice", "bob", wide, waiting, talker):
        assert name not in text


def test_metrics_may_be_closed_to_all_but_admin_and_dashboard_tokens(controller_factory):
    ctl = controller_factory("closed", controller={"tick_interval": "1s", "metrics_require_token": True})
    assert "iris_workers" in str(scrape(ctl, user_token(ctl, "prom", "dashboard")))
    assert scrape(ctl, user_token(ctl, "ops", "admin"))
    refused = httpx.get(f"{ctl.url}/metrics", headers={"authorization": f"Bearer {user_token(ctl, 'alice')}"})
    assert refused.status_code == 403 and "admin or dashboard token" in refused.text
    forged = httpx.get(f"{ctl.url}/metrics", headers={"authorization": "Bearer not-a-token"})
    assert forged.status_code == 401
