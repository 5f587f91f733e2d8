"""IrisClient against a real controller process: jobs run as real subprocesses, state in real SQLite."""

from __future__ import annotations

import statistics
import sys
import textwrap
import time

import pytest

from iris.client import IrisClient
from iris.core import errors


@pytest.fixture
def client(controller):
    with IrisClient(controller.url) as c:
        yield c


def test_e2e_submit_true_succeeds_quickly(client):
    latencies = []
    for i in range(5):
        start = time.monotonic()
        job = client.submit("true", name=f"t{i}", user="alice")
        final = client.wait(job, timeout=30)
        latencies.append(time.monotonic() - start)
        assert final.state == "SUCCEEDED" and final.exit_code == 0
    # The target is 0.2 s; a loaded CI machine gets slack, but not a scheduling-interval floor.
    assert statistics.median(latencies) < 1.0, latencies


def test_e2e_failing_job_reports_its_exit_code_and_logs(client):
    job = client.submit(["sh", "-c", "echo before; echo oops >&2; exit 5"], name="bad", user="alice")
    final = client.wait(job, timeout=30)
    assert final.state == "FAILED"
    lines = client.logs(job)
    assert [(line.stream, line.text) for line in lines] == [("stdout", "before"), ("stderr", "oops")]
    task = client.describe(job).tasks[0]
    assert task.has_exit_code and task.exit_code == 5


def test_e2e_replicas_follow_streams_every_task(client):
    job = client.submit("echo task $IRIS_TASK_INDEX", name="rep", user="alice", replicas=3)
    lines = list(client.follow(job))
    assert sorted((line.task_index, line.text) for line in lines) == [(0, "task 0"), (1, "task 1"), (2, "task 2")]
    assert client.status(job).state == "SUCCEEDED"


def test_e2e_unschedulable_job_ends_with_a_reason(client):
    job = client.submit("true", name="huge", user="alice", cpu=10_000)
    final = client.wait(job, timeout=30)
    assert final.state == "UNSCHEDULABLE" and final.error


def test_e2e_task_submits_a_child_job_through_the_sdk(client):
    driver = textwrap.dedent(
        """
        from iris.client import IrisClient
        c = IrisClient()
        child = c.submit("echo child of $IRIS_JOB_ID", name="child")
        print("submitted", child)
        print("child", c.wait(child, timeout=30).state)
        """
    )
    job = client.submit([sys.executable, "-c", driver], name="driver", user="alice", env={"FROM_PARENT": "yes"})
    final = client.wait(job, timeout=60)
    texts = [line.text for line in client.logs(job)]
    assert final.state == "SUCCEEDED", texts
    assert texts == ["submitted /alice/driver/child", "child SUCCEEDED"]
    child = client.status("/alice/driver/child")
    assert child.parent_job_id == "/alice/driver"
    assert [line.text for line in client.logs("/alice/driver/child")] == ["child of /alice/driver/child"]


def test_e2e_cancel_stops_a_running_job(client):
    job = client.submit("sleep 300", name="sleeper", user="alice")
    deadline = time.monotonic() + 30
    while client.status(job).state != "RUNNING":
        assert time.monotonic() < deadline, "job never started"
        time.sleep(0.02)
    resp = client.cancel(job)
    assert job in resp.terminated
    assert client.wait(job, timeout=30).state == "KILLED"


def test_e2e_errors_are_typed(client):
    client.submit("true", name="dup", user="alice")
    with pytest.raises(errors.AlreadyExists, match='existing_job_policy="keep" or "replace"'):
        client.submit("true", name="dup", user="alice")
    assert client.submit("true", name="dup", user="alice", existing_job_policy="keep") == "/alice/dup"
    with pytest.raises(errors.NotFound):
        client.status("/alice/missing")
    with pytest.raises(errors.InvalidArgument):
        client.query("DELETE FROM jobs")


def test_e2e_cluster_calls_describe_the_cluster(client, controller):
    info = client.cluster_info()
    assert info.name == controller.name
    backends = client.backends()
    assert backends.cluster == controller.name and [b.id for b in backends.backends] == ["cpu"]
    assert len(client.workers()) == 2
    assert client.peers() == []
    rows = client.query("SELECT COUNT(*) AS n FROM jobs")
    assert list(rows.columns) == ["n"]
