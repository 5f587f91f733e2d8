"""`iris endpoint list|url` as real subprocesses against a real controller, and the URL it prints
reaching a real task's server through that controller."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import httpx

from tests.conftest import wait_until

SERVE = str(Path(__file__).parents[1] / "integration" / "serve_task.py")


def test_e2e_endpoint_list_and_url_reach_the_task(controller):
    run = controller.cli("job", "run", "--no-wait", "--user", "alice", "--job-name", "web", "--", sys.executable, SERVE)
    assert run.returncode == 0, run.stderr
    job = run.stdout.strip()

    def listed():
        out = controller.cli("endpoint", "list", job, "-o", "json")
        assert out.returncode == 0, out.stderr
        eps = json.loads(out.stdout)["endpoints"]
        return eps if len(eps) == 2 else None

    eps = wait_until(listed, timeout=60, message="the task's endpoints")
    assert sorted(e["name"] for e in eps) == ["web", "ws"] and all(e["job_id"] == job for e in eps)
    table = controller.cli("endpoint", "list")
    assert table.returncode == 0 and "web" in table.stdout and job in table.stdout

    url = controller.cli("endpoint", "url", job, "web", "--ttl", "10m")
    assert url.returncode == 0, url.stderr
    assert url.stdout.startswith(f"{controller.url}/proxy/t/") and url.stdout.strip().endswith("/web/")
    got = httpx.get(url.stdout.strip() + "hello", timeout=30)
    assert got.status_code == 200 and got.json()["path"] == "/hello"

    missing = controller.cli("endpoint", "url", job, "nope")
    assert missing.returncode == 3 and "no live endpoint 'nope'" in missing.stderr
    bad_ttl = controller.cli("endpoint", "url", job, "web", "--ttl", "forever")
    assert bad_ttl.returncode == 3 and "forever" in bad_ttl.stderr and "Traceback" not in bad_ttl.stderr
    none_ttl = controller.cli("endpoint", "url", job, "web", "--ttl", "0")
    assert none_ttl.returncode == 3 and "'0' is not a positive duration" in none_ttl.stderr
    long_ttl = controller.cli("endpoint", "url", job, "web", "--ttl", "40d")
    assert long_ttl.returncode == 3 and "at most 30 days, and a ttl of 40 days is longer" in long_ttl.stderr
    unknown = controller.cli("endpoint", "list", "/alice/none")
    assert unknown.returncode == 3 and "does not exist" in unknown.stderr

    assert controller.cli("job", "stop", job).returncode == 0
    gone = controller.cli("endpoint", "list", job, "-o", "json")
    assert json.loads(gone.stdout) == {"endpoints": [], "total": 0}
    assert httpx.get(url.stdout.strip() + "hello", timeout=10).status_code == 404
