"""IrisClient against a fake controller served over real HTTP: every SDK method and its error mapping."""

from __future__ import annotations

import pytest

from iris.client import IrisClient
from iris.client.client import TERMINAL_STATES
from iris.core import errors
from iris.core.states import TERMINAL_JOB_STATES


@pytest.fixture
def client(fake_controller):
    with IrisClient(fake_controller.url) as c:
        yield c


def test_terminal_states_match_the_core_vocabulary():
    assert TERMINAL_STATES == {s.value for s in TERMINAL_JOB_STATES}


def test_url_defaults_to_iris_controller_env(monkeypatch):
    monkeypatch.setenv("IRIS_CONTROLLER", "http://10.0.0.5:10000/")
    assert IrisClient().url == "http://10.0.0.5:10000"
    monkeypatch.delenv("IRIS_CONTROLLER")
    assert IrisClient().url == "http://127.0.0.1:10000"


def test_submit_wait_and_logs_return_the_job_outcome(client):
    job = client.submit(["sh", "-c", "echo one; echo two"], name="hello", user="alice")
    assert job == "/alice/hello"
    final = client.wait(job, timeout=30)
    assert final.state == "SUCCEEDED" and final.has_exit_code and final.exit_code == 0
    assert [line.text for line in client.logs(job)] == ["one", "two"]
    assert [line.text for line in client.logs(job, tail=1)] == ["two"]


def test_follow_yields_lines_until_the_job_ends(client):
    job = client.submit("for i in 1 2 3; do echo line $i; sleep 0.05; done", name="slow", user="alice")
    assert [line.text for line in client.follow(job)] == ["line 1", "line 2", "line 3"]
    assert client.status(job).state == "SUCCEEDED"


def test_wait_raises_timeout_error_while_the_job_runs(client):
    job = client.submit("sleep 5", name="sleepy", user="alice")
    with pytest.raises(TimeoutError, match="still RUNNING"):
        client.wait(job, timeout=0.1)
    client.cancel(job)


def test_cancel_reports_the_stopped_jobs(client):
    job = client.submit("sleep 30", name="long", user="alice")
    resp = client.cancel(job)
    assert list(resp.terminated) == [job] and resp.state == "KILLED"
    assert client.wait(job, timeout=10).state == "KILLED"


def test_submit_inside_a_task_nests_under_its_job(client, fake_controller, monkeypatch):
    monkeypatch.setenv("IRIS_JOB_ID", "/alice/driver")
    job = client.submit("true", name="step")
    assert job == "/alice/driver/step"
    assert fake_controller.service.requests[-1].parent_job_id == "/alice/driver"
    # An explicit parent="" (or a full id) submits a root job even from a task.
    assert client.submit("true", name="other", user="alice", parent="") == "/alice/other"
    assert client.submit("true", name="/alice/third") == "/alice/third"


def test_launch_response_carries_the_disposition(client):
    first = client.launch("true", name="dup", user="alice")
    assert first.disposition == "local"
    kept = client.launch("true", name="dup", user="alice", existing_job_policy="keep")
    assert kept.disposition == "existing" and kept.job_id == "/alice/dup"


def test_launch_json_sends_the_same_request_as_launch(client, fake_controller, monkeypatch):
    monkeypatch.setenv("IRIS_JOB_ID", "/alice/driver")
    options = {
        "name": "step",
        "memory": "2G",
        "gpu": "H100x2",
        "region": "us-east5",
        "env": {"A": "1"},
        "max_retries_preemption": 0,
    }
    assert client.prepare_json("true", **options)["parent_job_id"] == "/alice/driver"
    reply = client.launch_json(client.prepare_json("true", **options))
    assert reply == {"jobId": "/alice/driver/step", "state": "RUNNING", "disposition": "local"}
    received = fake_controller.service.requests[-1]
    assert received == client.prepare("true", **options)  # what `launch` would have sent as protobuf
    assert received.HasField("max_retries_preemption") and received.resources.device.variant == "h100"
    with pytest.raises(errors.AlreadyExists, match="already exists"):
        client.launch_json(client.prepare_json("true", **options))


def test_server_errors_arrive_as_typed_errors(client):
    client.submit("true", name="dup", user="alice")
    with pytest.raises(errors.AlreadyExists, match="already exists"):
        client.submit("true", name="dup", user="alice")
    with pytest.raises(errors.NotFound, match="/nobody/x"):
        client.status("/nobody/x")
    with pytest.raises(errors.InvalidArgument, match="read-only"):
        client.query("DELETE FROM jobs")


def test_list_describe_explain_query_and_cluster_calls(client):
    ok = client.submit("true", name="ok", user="alice")
    big = client.submit("true", name="big", user="alice", cpu=1000)
    client.wait(ok, timeout=30)
    assert client.wait(big, timeout=30).state == "UNSCHEDULABLE"
    assert {j.job_id for j in client.list()} == {ok, big}
    assert [j.job_id for j in client.list(state="unschedulable")] == [big]
    assert [j.job_id for j in client.list(prefix="/alice/o")] == [ok]
    detail = client.describe(ok)
    assert detail.job.job_id == ok and [t.task_id for t in detail.tasks] == [f"{ok}/0"]
    assert detail.tasks[0].attempts[0].state == "SUCCEEDED"
    assert client.explain(big).groups[0].verdict == "blocked"
    assert list(client.query("SELECT job_id, state FROM jobs").columns) == ["job_id", "state"]
    assert client.cluster_info().name == "fake"
    assert client.backends().backends[0].id == "local"
    assert [p.peer_id for p in client.peers()] == ["cw"]
    assert client.workers()[0].worker_id == "local-0"


def test_call_reaches_any_method_by_name(client):
    from iris.rpc import controller_pb2 as pb

    assert client.call("GetClusterInfo", pb.GetClusterInfoRequest()).name == "fake"
    with pytest.raises(errors.InvalidArgument, match="no method"):
        client.call("Nope", pb.GetClusterInfoRequest())
