"""`iris cluster status` counts only live workers' capacity in a pool's totals: a dead worker's cpu
is shown beside them, apart, since nothing can be placed on it."""

from __future__ import annotations

import json
import signal

from tests.conftest import wait_until
from tests.controller.helpers import client, pb


def _pool_row(ctl) -> list[str]:
    out = ctl.cli("cluster", "status")
    assert out.returncode == 0, out.stderr
    return next(line for line in out.stdout.splitlines() if line.startswith("pool "))


def test_cluster_status_leaves_a_dead_workers_cpu_out_of_the_pools_totals(pool, worker_factory):
    c = client(pool)
    worker_factory(pool, "live")
    dead = worker_factory(pool, "silent", "--cpu", "3")
    assert "cpu 0/5, 0 task(s)" in _pool_row(pool)
    dead.signal(signal.SIGSTOP)  # silent, as a host that lost its network
    wait_until(
        lambda: (
            {w.worker_id: w.alive for w in c.list_workers(pb.ListWorkersRequest()).workers}
            == {"live": True, "silent": False}
        ),
        message="the silent worker to be declared dead",
    )
    row = _pool_row(pool)
    assert row.split()[:3] == ["pool", "workers", "1/2"], row
    assert "cpu 0/2, 0 task(s); dead: 1 worker(s), cpu 3, not counted" in row, row
    doc = json.loads(pool.cli("-o", "json", "cluster", "status").stdout)
    assert doc["backends"][0]["capacity"]["cpu"] == 2
    assert {w["worker_id"]: w.get("alive", False) for w in doc["workers"]} == {"live": True, "silent": False}
