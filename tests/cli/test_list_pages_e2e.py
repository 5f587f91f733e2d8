"""`iris job list`, `worker list` and `endpoint list` over a paged API, through real CLI processes
and a real controller: small pages are followed to the end for --all (one table, one JSON array),
--limit stops where asked, and stderr says how many were left out and how to see them."""

from __future__ import annotations

import json

from iris.client import IrisClient


def test_job_list_follows_pages_for_all_and_says_when_it_stops_early(controller):
    with IrisClient(controller.url, token="") as c:
        ids = [c.submit(["true"], name=f"/alice/p-{i}", user="alice") for i in range(5)]
    everything = controller.cli("-o", "json", "job", "list", "--all", "--page-size", "2")
    assert everything.returncode == 0 and everything.stderr == ""
    doc = json.loads(everything.stdout)
    assert [j["job_id"] for j in doc["jobs"]] == list(reversed(ids)) and doc["total"] == 5

    one_page = controller.cli("job", "list", "--page-size", "2")
    assert one_page.returncode == 0
    assert [line.split()[0] for line in one_page.stdout.splitlines()[1:]] == [ids[4], ids[3]]
    assert "showing 2 of 5 jobs; --all for every one, --limit N for more" in one_page.stderr

    limited = controller.cli("-o", "json", "job", "list", "--limit", "3", "--page-size", "2")
    assert [j["job_id"] for j in json.loads(limited.stdout)["jobs"]] == [ids[4], ids[3], ids[2]]
    assert "showing 3 of 5 jobs" in limited.stderr

    table = controller.cli("job", "list", "--all", "--page-size", "2")
    assert len(table.stdout.splitlines()) == 6 and "showing" not in table.stderr

    both = controller.cli("job", "list", "--all", "--limit", "3")
    assert both.returncode == 3 and "--all and --limit contradict each other" in both.stderr


def test_worker_list_is_complete_unless_limited(controller_factory):
    ctl = controller_factory(
        backends=[{"id": "cpu", "kind": "local", "workers": 3, "capacity": {"cpu": 1, "memory": "1G", "disk": "1G"}}]
    )
    every = json.loads(ctl.cli("-o", "json", "worker", "list").stdout)
    assert len(every["workers"]) == 3 and every["total"] == 3
    limited = ctl.cli("worker", "list", "--limit", "2")
    assert len(limited.stdout.splitlines()) == 3  # the header and two workers
    assert "showing 2 of 3 workers; drop --limit for every one" in limited.stderr
    typo = ctl.cli("-o", "json", "worker", "list", "--backend", "cpus")
    assert typo.returncode == 3
    assert json.loads(typo.stdout)["error"] == {
        "code": "not_found",
        "message": "backend 'cpus' does not exist on this cluster; its backends: cpu",
    }
