"""`iris job run --dry-run` and PlanJob on a real controller: the answer writes nothing, and the
submit that follows it does what it said (the backend and worker, the reservation and expected
start, the preemption, the refusal)."""

from __future__ import annotations

import json

import pytest

from iris.client import IrisClient
from iris.core import errors
from iris.rpc import controller_pb2 as pb
from tests.conftest import wait_until
from tests.controller.helpers import client, error_code, job_count, launch, status, user_token, wait_state


def _rows(c) -> list[int]:
    """How many jobs, tasks, attempts and handoffs the database holds."""
    tables = ("jobs", "tasks", "attempts", "federated_jobs")
    query = " UNION ALL ".join(f"SELECT COUNT(*) FROM {t}" for t in tables)
    return [int(r.values[0].number_value) for r in c.execute_raw_query(pb.ExecuteRawQueryRequest(sql=query)).rows]


def _cpu(cores: float) -> pb.Resources:
    return pb.Resources(cpu=cores)


def test_dry_run_free_capacity_says_now_on_the_backend_the_submit_then_uses(controller_factory):
    ctl = controller_factory(
        "plan-now",
        backends=[
            {"id": "small", "kind": "local", "workers": 1, "capacity": {"cpu": 2, "memory": "4G"}},
            {"id": "big", "kind": "local", "workers": 1, "capacity": {"cpu": 8, "memory": "8G"}},
        ],
    )
    c = client(ctl)
    before = _rows(c)
    flags = ("--user", "alice", "--job-name", "fits", "--cpu", "6", "--", "true")
    dry = ctl.cli("-o", "json", "job", "run", "--dry-run", *flags)
    assert dry.returncode == 0, dry.stderr
    answer = json.loads(dry.stdout)
    assert (answer["job_id"], answer["disposition"], answer["starts_now"]) == ("/alice/fits", "local", True)
    assert answer["backend_ids"] == ["big"] and answer["preemptions"] == []
    assert answer["band"] == "interactive" and answer["pending_reason"] == ""
    text = ctl.cli("job", "run", "--dry-run", *flags)
    assert text.returncode == 0, text.stderr
    assert f"would run on backend big now (worker {answer['worker_ids'][0]})" in text.stdout
    assert "band: interactive (no budget)" in text.stdout
    with IrisClient(ctl.url) as sdk:  # the SDK's plan takes what submit takes, a workdir too
        planned = sdk.plan("true", name="fits", user="alice", cpu=6, workdir=str(ctl.state_dir))
    assert (list(planned.backend_ids), planned.starts_now) == (["big"], True)
    assert _rows(c) == before and job_count(c) == 0  # nothing was written

    real = ctl.cli("job", "run", "--no-wait", *flags)
    assert real.returncode == 0, real.stderr
    done = wait_state(c, "/alice/fits")
    assert done.job.state == "SUCCEEDED"
    attempt = done.tasks[0].attempts[-1]
    assert (attempt.backend_id, attempt.worker_id) == ("big", answer["worker_ids"][0])


def test_dry_run_full_cluster_waits_with_the_reservation_the_submit_then_holds(controller_factory):
    ctl = controller_factory(
        "plan-wait",
        backends=[{"id": "cpu", "kind": "local", "workers": 1, "capacity": {"cpu": 4, "memory": "8G"}}],
        budgets={"users": {"bob": 1}},
    )
    c = client(ctl)
    hog = launch(c, "hog", ["sleep", "60"], user="bob", resources=_cpu(4), timeout_s=30)
    started = wait_until(lambda: status(c, hog).job.started_ms if status(c, hog).job.state == "RUNNING" else 0)
    before = _rows(c)
    request = pb.LaunchJobRequest(name="next", user="alice", command=["true"], resources=_cpu(4))
    answer = c.plan_job(request)
    assert answer.disposition == "local" and not answer.starts_now and answer.tasks_placed == 0
    assert list(answer.reserved_workers) == ["cpu-0"] and answer.reserved_backend_id == "cpu"
    # The expected start is the end of the running job's time limit.
    assert abs(answer.start_latest_ms - (started + 30_000)) < 1000
    assert answer.start_earliest_ms < answer.start_latest_ms
    assert "Holds a reservation on cpu-0 since" in answer.pending_reason
    text = ctl.cli("job", "run", "--dry-run", "--user", "alice", "--job-name", "next", "--cpu", "4", "--", "true")
    assert text.returncode == 0, text.stderr
    assert "would wait on backend cpu: expected start in " in text.stdout
    assert "Holds a reservation on cpu-0" in text.stdout
    assert answer.band == "interactive" and not answer.HasField("budget") and not answer.over_budget
    # Bob's running job spends past his budget: his next one would compete as batch.
    more = c.plan_job(pb.LaunchJobRequest(name="more", user="bob", command=["true"], resources=_cpu(4)))
    assert (more.requested_band, more.band, more.over_budget, more.budget) == ("interactive", "batch", True, 1)
    assert more.spend > 1
    assert _rows(c) == before

    c.launch_job(request)
    waiting = wait_until(
        lambda: "Holds a reservation" in (j := status(c, "/alice/next").job).pending_reason and j,
        message="the submitted job's pending reason",
    )
    assert waiting.pending_reason.split(" since ")[0] == answer.pending_reason.split(" since ")[0]
    wait_until(lambda: status(c, "/alice/next").job.start_latest_ms, message="the submitted job's estimate")
    assert status(c, "/alice/next").job.start_latest_ms == answer.start_latest_ms
    c.terminate_job(pb.TerminateJobRequest(job_id=hog))


def test_dry_run_higher_band_names_the_job_the_submit_then_preempts(controller_factory):
    ctl = controller_factory(
        "plan-preempt",
        backends=[{"id": "cpu", "kind": "local", "workers": 2, "capacity": {"cpu": 4, "memory": "8G"}}],
    )
    c = client(ctl)
    first = launch(c, "first", ["sleep", "60"], user="alice", resources=_cpu(4), priority="batch")
    wait_state(c, first, {"RUNNING"})
    second = launch(c, "second", ["sleep", "60"], user="alice", resources=_cpu(4), priority="batch")
    wait_state(c, second, {"RUNNING"})
    request = pb.LaunchJobRequest(
        name="urgent", user="bob", command=["sleep", "60"], resources=_cpu(4), priority="production"
    )
    answer = c.plan_job(request)
    assert answer.starts_now and answer.band == "production"
    (victim,) = answer.preemptions
    assert victim.job_id in (first, second) and victim.band == "batch"
    spared = second if victim.job_id == first else first
    text = ctl.cli("job", "run", "--dry-run", "--user", "bob", "--priority", "production", "--cpu", "4", "--", "true")
    assert f"would preempt {victim.job_id} (task {victim.task_id} on {victim.worker_id}, band batch)" in text.stdout
    assert job_count(c) == 2

    c.launch_job(request)
    wait_state(c, "/bob/urgent", {"RUNNING"})
    wait_until(
        lambda: any(a.state == "PREEMPTED" for a in status(c, victim.job_id).tasks[0].attempts),
        message="the named job's attempt to be preempted",
    )
    kept = status(c, spared)
    assert kept.job.state == "RUNNING" and [a.state for a in kept.tasks[0].attempts] == ["RUNNING"]
    assert status(c, "/bob/urgent").tasks[0].attempts[-1].worker_id == victim.worker_id
    for job_id in (first, second, "/bob/urgent"):
        c.terminate_job(pb.TerminateJobRequest(job_id=job_id))


def test_dry_run_refusals_exit_and_say_as_a_no_wait_submit_does(controller):
    c = client(controller)
    huge = ("--user", "alice", "--cpu", "64", "--", "true")
    dry = controller.cli("job", "run", "--dry-run", *huge)
    assert job_count(c) == 0
    real = controller.cli("job", "run", "--no-wait", *huge)
    assert (dry.returncode, real.returncode) == (2, 2)
    assert dry.stderr == real.stderr and "no local backend can host cpu=64" in dry.stderr
    assert "would be rejected: UNSCHEDULABLE" in dry.stdout
    as_json = json.loads(controller.cli("-o", "json", "job", "run", "--dry-run", *huge).stdout)
    assert (as_json["disposition"], as_json["state"]) == ("rejected", "UNSCHEDULABLE")

    # A request the controller refuses outright: the same error and exit code as the submit.
    dup = ("--user", "alice", "--job-name", "dup", "--", "true")
    assert controller.cli("job", "run", "--no-wait", *dup).returncode == 0
    count = job_count(c)
    dry = controller.cli("job", "run", "--dry-run", *dup)
    real = controller.cli("job", "run", "--no-wait", *dup)
    assert (dry.returncode, real.returncode) == (2, 2)
    assert dry.stderr == real.stderr and "already exists" in dry.stderr
    with IrisClient(controller.url) as sdk, pytest.raises(errors.AlreadyExists):
        sdk.plan("true", name="dup", user="alice")
    assert job_count(c) == count
    # Another user's namespace: refused by the same ownership check, with the same error.
    alice = client(controller, user_token(controller, "alice"))
    theirs = pb.LaunchJobRequest(name="/bob/x", command=["true"])
    planned, launched = error_code(lambda: alice.plan_job(theirs)), error_code(lambda: alice.launch_job(theirs))
    assert planned == launched and planned[0] == "permission_denied"
    assert job_count(c) == count
