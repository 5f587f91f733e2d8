"""Federation that stays honest under faults: logs relayed to the last line across a parent crash,
and a cancel shown as stopping until the peer confirms it."""

from __future__ import annotations

import time

from tests.conftest import wait_until
from tests.controller.helpers import client, logs, status, wait_state
from tests.integration.test_federation import gpu_job, start_federation

FORTY = "for i in $(seq 1 20); do echo line-$i; done; sleep 2; for i in $(seq 21 40); do echo line-$i; done"


def test_logs_arrive_complete_in_order_and_once_after_the_parent_was_down_across_the_jobs_end(controller_factory):
    fed = start_federation(controller_factory)
    marin, h100 = fed.marin, fed.h100
    c = client(marin, fed.token)
    job = c.launch_job(gpu_job("chatty", "h100", command=("sh", "-c", FORTY))).job_id
    wait_until(lambda: len(logs(c, job)) >= 1, timeout=30, message="first lines relayed")
    marin.kill()
    peer = client(h100)
    wait_state(peer, job, timeout=30)
    time.sleep(1.5)  # the parent stays down for a few more of the peer's sync intervals
    marin.start()
    marin.extra_env["IRIS_TOKEN"] = fed.token
    followed = marin.cli("job", "logs", "-f", job, timeout=60)
    assert followed.returncode == 0, followed.stderr
    expected = [f"line-{i}" for i in range(1, 41)]
    assert followed.stdout.splitlines() == expected
    assert logs(c, job) == expected
    assert status(c, job).job.state == "SUCCEEDED"
