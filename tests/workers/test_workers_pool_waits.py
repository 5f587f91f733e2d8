"""A pool of worker daemons grows while the cluster runs: a job no worker joined now can host waits
for one that can (bounded by its scheduling timeout) instead of failing at once; on a cluster with
no pool, a job none of its backends can host is refused at submit, so `--no-wait` exits 2 too."""

from __future__ import annotations

from tests.conftest import wait_until
from tests.controller.helpers import client, status, wait_state
from tests.workers.conftest import GRACE


def test_workers_job_no_joined_worker_can_host_waits_for_one_that_can(controller_factory, worker_factory):
    ctl = controller_factory(
        "grows",
        backends=[{"id": "pool", "kind": "workers"}],
        controller={"tick_interval": "1s", "worker_grace_period": GRACE},
    )
    c = client(ctl)
    worker_factory(ctl, "small")  # 2 cpu
    run = ctl.cli("job", "run", "--no-wait", "--job-name", "big", "--cpu", "4", "--", "true")
    assert run.returncode == 0, run.stderr
    assert "no worker joined to backend pool can host it yet; it waits for one that can" in run.stderr, run.stderr
    job_id = run.stdout.strip().splitlines()[0]
    waiting = wait_until(
        lambda: (
            (s := status(c, job_id)).job.pending_reason.startswith("Waiting for a worker that can host it to join pool")
            and s
        ),
        message="the reason to say it waits for a worker to join",
    )
    assert waiting.job.state == "PENDING" and "needs 4 cpu" in waiting.job.pending_reason, waiting.job
    worker_factory(ctl, "large", "--cpu", "4")
    done = wait_state(c, job_id)
    assert done.job.state == "SUCCEEDED" and done.tasks[0].attempts[0].worker_id == "large", done

    timed = ctl.cli(
        "job", "run", "--no-wait", "--job-name", "huge", "--cpu", "64", "--scheduling-timeout", "2s", "--", "true"
    )
    assert timed.returncode == 0, timed.stderr
    ended = wait_state(c, timed.stdout.strip().splitlines()[0])
    assert ended.job.state == "UNSCHEDULABLE", ended.job
    assert "Scheduling timeout reached before a worker that can host it joined" in ended.job.error, ended.job.error


def test_job_no_backend_can_host_is_refused_at_submit_without_a_pool(controller_factory):
    ctl = controller_factory("fixed", backends=[{"id": "cpu", "kind": "local", "capacity": {"cpu": 2}}])
    run = ctl.cli("job", "run", "--no-wait", "--job-name", "huge", "--cpu", "64", "--", "true")
    assert run.returncode == 2, (run.returncode, run.stderr)
    assert "no local backend can host" in run.stderr, run.stderr
    job = status(client(ctl), run.stdout.strip().splitlines()[0]).job
    assert job.state == "UNSCHEDULABLE" and "no local backend can host" in job.error, job
