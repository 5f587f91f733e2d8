"""The `iris` command as a real subprocess against real controller processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import free_port, wait_until


def iris(*args: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "iris.cli.main", *args],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_e2e_job_run_exit_codes_follow_the_outcome(controller):
    ok = controller.cli("job", "run", "--user", "alice", "--job-name", "ok", "--", "sh", "-c", "echo out; echo err >&2")
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.splitlines() == ["/alice/ok", "out"]
    assert "err" in ok.stderr and "/alice/ok SUCCEEDED" in ok.stderr
    bad = controller.cli("job", "run", "--user", "alice", "--", "exit 7")
    assert bad.returncode == 1 and "FAILED" in bad.stderr
    huge = controller.cli("job", "run", "--user", "alice", "--cpu", "10000", "--", "true")
    assert huge.returncode == 2 and "UNSCHEDULABLE" in huge.stderr
    dup = controller.cli("job", "run", "--user", "alice", "--job-name", "ok", "--", "true")
    assert dup.returncode == 2 and "already exists" in dup.stderr
    usage = controller.cli("job", "run", "--memory", "8X", "--", "true")
    assert usage.returncode == 3 and "8X" in usage.stderr and "Traceback" not in usage.stderr
    nowhere = iris("--controller", f"http://127.0.0.1:{free_port()}", "job", "run", "--", "true")
    assert nowhere.returncode == 3 and "iris cluster start" in nowhere.stderr


def test_e2e_no_wait_prints_only_the_id_and_list_describe_logs_see_the_job(controller):
    run = controller.cli(
        "job",
        "run",
        "--no-wait",
        "--user",
        "alice",
        "--job-name",
        "rep",
        "--replicas",
        "2",
        "--",
        "echo replica $IRIS_TASK_INDEX",
    )
    assert run.returncode == 0 and run.stdout == "/alice/rep\n"
    logs = controller.cli("job", "logs", "-f", "/alice/rep")
    assert sorted(logs.stdout.splitlines()) == ["[0] replica 0", "[1] replica 1"]
    listed = controller.cli("job", "list").stdout.splitlines()
    assert listed[0].split() == ["JOB", "STATE", "CLUSTER", "TASKS", "AGE", "START", "REASON"]
    assert listed[1].split()[:4] == ["/alice/rep", "SUCCEEDED", controller.name, "2/2"]
    described = controller.cli("job", "describe", "/alice/rep").stdout
    assert "State:" in described and "SUCCEEDED" in described
    assert "/alice/rep/0:0" in described and "/alice/rep/1:0" in described
    doc = json.loads(controller.cli("-o", "json", "job", "describe", "/alice/rep").stdout)
    assert [t["state"] for t in doc["tasks"]] == ["SUCCEEDED", "SUCCEEDED"]
    assert all(a["pid"] > 0 for t in doc["tasks"] for a in t["attempts"])


def test_e2e_job_stop_kills_a_running_job(controller):
    controller.cli("job", "run", "--no-wait", "--user", "alice", "--job-name", "sleeper", "--", "sleep", "300")
    wait_until(
        lambda: json.loads(controller.cli("-o", "json", "job", "list").stdout)["jobs"][0]["state"] == "RUNNING",
        message="the job to run",
    )
    stop = controller.cli("job", "stop", "/alice/sleeper")
    assert stop.returncode == 0 and stop.stdout == "stopped /alice/sleeper\n"
    state = json.loads(controller.cli("-o", "json", "job", "describe", "/alice/sleeper").stdout)["job"]["state"]
    assert state == "KILLED"


def test_e2e_pending_job_shows_a_reason_in_list_and_describe(controller):
    # Two workers of 4 cpu: the third 4-cpu job waits for one to free up.
    for name in ("a", "b", "c"):
        controller.cli(
            "job", "run", "--no-wait", "--user", "alice", "--job-name", name, "--cpu", "4", "--", "sleep", "300"
        )
    wait_until(lambda: "PENDING" in controller.cli("job", "list", "--state", "PENDING").stdout, message="a pending job")
    pending = controller.cli("job", "list", "--state", "PENDING").stdout.splitlines()
    assert len(pending) == 2 and pending[1].split()[0] == "/alice/c"
    reason = pending[1].split(None, 5)[5]
    assert reason.strip()
    described = controller.cli("job", "describe", "/alice/c").stdout
    assert "Pending reason:" in described
    explained = controller.cli("job", "explain", "/alice/c")
    assert explained.returncode == 0 and explained.stdout.startswith("/alice/c")
    groups = json.loads(controller.cli("-o", "json", "job", "explain", "/alice/c").stdout)["groups"]
    reasons = [reason for group in groups for reason in group["reasons"]]
    # Each group's reasons are printed once: in its row of the table, not again as lines below it.
    assert reasons and all(explained.stdout.count(r) == reasons.count(r) for r in reasons), explained.stdout
    controller.cli("job", "stop", "/alice/a", "/alice/b", "/alice/c")


def test_e2e_query_and_rpc(controller):
    controller.cli("job", "run", "--user", "alice", "--job-name", "q", "--", "true")
    table = controller.cli("query", "SELECT job_id, state FROM jobs").stdout.splitlines()
    assert table[0].split() == ["job_id", "state"] and table[1].split() == ["/alice/q", "SUCCEEDED"]
    doc = json.loads(controller.cli("-o", "json", "query", "SELECT job_id FROM jobs").stdout)
    assert doc["rows"] == [["/alice/q"]]
    write = controller.cli("query", "DELETE FROM jobs")
    assert write.returncode == 3 and write.stderr.startswith("error: ")
    assert json.loads(controller.cli("-o", "json", "query", "SELECT COUNT(*) FROM jobs").stdout)["rows"] == [[1]]
    backends = json.loads(controller.cli("rpc", "controller", "list-backends").stdout)
    assert backends["cluster"] == controller.name and backends["backends"][0]["id"] == "cpu"
    peers = json.loads(controller.cli("rpc", "controller", "list-peers").stdout)
    assert peers == {"peers": [], "next_page_token": "", "total": 0, "inbound": []}
    status = json.loads(
        controller.cli("rpc", "controller", "get-job-status", "--json", '{"job_id": "/alice/q"}').stdout
    )
    assert status["job"]["state"] == "SUCCEEDED"


def test_e2e_cluster_status_reports_health_and_backends(controller):
    status = controller.cli("cluster", "status")
    assert status.returncode == 0
    assert status.stdout.startswith(f"cluster {controller.name} at {controller.url}: healthy")
    assert "cpu" in status.stdout
    doc = json.loads(controller.cli("-o", "json", "cluster", "status").stdout)
    assert doc["healthy"] and doc["cluster"]["name"] == controller.name
    down = iris("--controller", f"http://127.0.0.1:{free_port()}", "cluster", "status")
    assert down.returncode == 3 and "cannot reach" in down.stderr


def write_config(tmp_path: Path) -> tuple[Path, str]:
    port = free_port()
    path = tmp_path / "cluster.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": "detached",
                "listen": f"127.0.0.1:{port}",
                "state_dir": str(tmp_path / "state"),
                "backends": [{"id": "cpu", "kind": "local", "workers": 1, "capacity": {"cpu": 2, "memory": "2G"}}],
            }
        )
    )
    return path, f"http://127.0.0.1:{port}"


@pytest.fixture
def detached(tmp_path):
    """A config for `cluster start --detach`; whatever it started is stopped at teardown."""
    path, url = write_config(tmp_path)
    yield path, url
    pid_file = tmp_path / "state" / "controller.pid"
    if pid_file.exists():
        iris("cluster", "stop", "--config", str(path))
        try:
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
        except (OSError, ValueError):
            pass


def test_e2e_cluster_start_detach_then_stop(detached, tmp_path):
    path, url = detached
    started = iris("cluster", "start", "--config", str(path), "--detach")
    assert started.returncode == 0, started.stderr
    assert f"cluster detached is up at {url}" in started.stdout
    pid = int((tmp_path / "state" / "controller.pid").read_text())
    assert (tmp_path / "state" / "controller.log").exists()
    run = iris("--config", str(path), "job", "run", "--user", "alice", "--", "echo from detached")
    assert run.returncode == 0 and run.stdout.splitlines()[1] == "from detached"
    again = iris("cluster", "start", "--config", str(path), "--detach")
    assert again.returncode != 0 and "already running" in again.stderr
    stopped = iris("cluster", "stop", "--config", str(path))
    assert stopped.returncode == 0 and stopped.stdout == "stopped cluster detached\n"
    wait_until(lambda: not Path(f"/proc/{pid}").exists() or _zombie(pid), message="controller gone")
    assert iris("cluster", "stop", "--config", str(path)).stdout.startswith("no controller was running")


def test_e2e_cluster_start_local_uses_iris_home(tmp_path):
    home = tmp_path / "home"
    port = free_port()
    env = {"IRIS_HOME": str(home)}
    try:
        started = iris("cluster", "start", "--local", "--port", str(port), "--detach", env=env)
        assert started.returncode == 0, started.stderr
        assert (home / "controller.pid").exists()
        status = iris("cluster", "status", "--local", "--port", str(port), env=env)
        assert status.returncode == 0 and "cluster local at" in status.stdout
    finally:
        stop = iris("cluster", "stop", "--local", env=env)
        assert stop.returncode == 0


def test_e2e_cluster_start_needs_a_config_and_reports_a_bad_one(tmp_path):
    missing = iris("cluster", "start")
    assert (
        missing.returncode == 3
        and "--config cluster.yaml, --local for the embedded one, or --cluster NAME" in missing.stderr
    )
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nbackends: [{id: cpu, capacity: {memory: 8X}}]\n")
    result = iris("cluster", "start", "--config", str(bad))
    assert result.returncode == 3 and "backends.0.capacity.memory" in result.stderr and "8X" in result.stderr


def test_e2e_cluster_start_foreground_stops_on_sigterm(tmp_path):
    path, url = write_config(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "iris.cli.main", "cluster", "start", "--config", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # Start-up is mostly imports; on a loaded machine it can take many seconds.
        wait_until(
            lambda: iris("--controller", url, "cluster", "status").returncode == 0, timeout=90, message="controller up"
        )
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")
    except OSError:
        return True


def test_e2e_job_run_p50_latency_of_true(controller):
    """Submit → finished for `true` through the CLI process, five times in a row: each succeeds.

    The time is printed, not asserted (a loaded machine would fail any bound); bench/submit.py
    measures it properly.
    """
    times = []
    for i in range(5):
        start = time.monotonic()
        result = controller.cli("job", "run", "--user", "alice", "--job-name", f"t{i}", "--", "true")
        times.append(time.monotonic() - start)
        assert result.returncode == 0, result.stderr
        assert f"/alice/t{i} SUCCEEDED" in result.stderr
    times.sort()
    print(f"iris job run -- true: p50 {times[len(times) // 2]:.2f}s")
