"""The `iris` command against a fake controller: flags to requests, exit codes, JSON documents, errors."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from iris.cli.main import _wants_json
from iris.cli.rpc import kebab, service_methods
from iris.rpc import controller_pb2 as pb


def test_job_run_flags_become_the_launch_request(iris, fake_controller):
    result = iris(
        "job",
        "run",
        "--no-wait",
        "--cpu",
        "2",
        "--memory",
        "512M",
        "--disk",
        "1G",
        "--replicas",
        "2",
        "--priority",
        "batch",
        "--region",
        "us-east5",
        "--zone",
        "us-east5-a",
        "--constraint",
        "preemptible=false",
        "--target-cluster",
        "cw",
        "--coschedule",
        "-e",
        "A",
        "1",
        "-e",
        "B",
        "two words",
        "--job-name",
        "train",
        "--user",
        "alice",
        "--max-retries",
        "2",
        "--max-retries-preemption",
        "5",
        "--timeout",
        "5m",
        "--scheduling-timeout",
        "30s",
        "--existing",
        "replace",
        "--",
        "python",
        "train.py",
        "--lr",
        "3e-4",
    )
    assert result.code == 0, result.err
    assert result.out == "/alice/train\n"
    req = fake_controller.service.requests[-1]
    assert list(req.command) == ["python", "train.py", "--lr", "3e-4"]
    assert (req.name, req.user, req.replicas, req.priority) == ("train", "alice", 2, "batch")
    assert (req.resources.cpu, req.resources.memory_bytes, req.resources.disk_bytes) == (2, 512 << 20, 1 << 30)
    assert [(c.key, c.op, list(c.values)) for c in req.constraints] == [
        ("preemptible", "EQ", ["false"]),
        ("region", "EQ", ["us-east5"]),
        ("zone", "EQ", ["us-east5-a"]),
        ("cluster", "EQ", ["cw"]),
    ]
    assert dict(req.env) == {"A": "1", "B": "two words"}
    assert req.coschedule and req.existing_job_policy == "replace"
    assert (req.max_retries_failure, req.max_retries_preemption) == (2, 5)
    assert (req.timeout_s, req.scheduling_timeout_s) == (300, 30)


def test_job_run_without_dashdash_stops_parsing_options_at_the_command(iris, fake_controller):
    assert iris("job", "run", "--no-wait", "--user", "alice", "python", "x.py", "--cpu", "9").code == 0
    assert list(fake_controller.service.requests[-1].command) == ["python", "x.py", "--cpu", "9"]
    assert fake_controller.service.requests[-1].resources.cpu == 1


def test_job_run_streams_logs_and_exits_0_on_success(iris):
    result = iris("job", "run", "--user", "alice", "--", "sh", "-c", "echo hello; echo world")
    assert result.code == 0
    assert result.out.splitlines()[0].startswith("/alice/job-")
    assert result.out.splitlines()[1:] == ["hello", "world"]
    assert "SUCCEEDED" in result.err


def test_job_run_exits_1_when_the_job_fails(iris):
    result = iris("job", "run", "--user", "alice", "--", "sh -c 'echo bad; exit 4'")
    assert result.code == 1
    assert "bad" in result.out and "FAILED" in result.err and "exit code 4" in result.err


def test_job_run_exits_2_when_unschedulable_or_rejected(iris):
    assert iris("job", "run", "--user", "alice", "--cpu", "1000", "--", "true").code == 2
    assert iris("job", "run", "--user", "alice", "--job-name", "d", "--", "true").code == 0
    dup = iris("job", "run", "--user", "alice", "--job-name", "d", "--", "true")
    assert dup.code == 2 and dup.err.strip() == "error: job /alice/d already exists; pass --existing replace or keep"


@pytest.mark.parametrize(
    "args, fragment",
    [
        (("job", "run", "--memory", "8X", "--", "true"), "Invalid value for '--memory': size '8X'"),
        (("job", "run", "--constraint", "colour=red", "--", "true"), "constraint key 'colour' is not known"),
        (("job", "run", "--gpu", "H100x0", "--", "true"), "'--gpu'"),
        (("job", "run", "--bogus", "--", "true"), "No such option '--bogus'"),
        (("job", "run", "--cpu", "2"), "Missing argument 'COMMAND...'"),
        (("job", "nope"), "No such command 'nope'"),
        (("-o", "yaml", "job", "list"), "'yaml' is not one of 'table', 'json'"),
    ],
)
def test_usage_errors_exit_3_with_one_line_naming_the_problem(iris, args, fragment):
    result = iris(*args)
    assert result.code == 3
    assert fragment in result.err
    assert result.err.count("\n") == 1 and result.err.startswith("error: ")
    assert "Traceback" not in result.err


def test_unreachable_controller_exits_3_with_how_to_start_one(iris, monkeypatch):
    result = iris("--controller", "http://127.0.0.1:9", "job", "list")
    assert result.code == 3
    assert "cannot reach the Iris controller at http://127.0.0.1:9" in result.err
    assert "iris cluster start" in result.err


def test_json_mode_prints_one_document_per_command(iris):
    run = iris("-o", "json", "job", "run", "--user", "alice", "--job-name", "j", "--", "echo hi")
    assert run.code == 0
    doc = run.json()
    assert doc["job_id"] == "/alice/j" and doc["state"] == "SUCCEEDED" and doc["exit_code"] == 0
    assert [line["text"] for line in doc["logs"]] == ["hi"]
    nowait = iris("job", "run", "-o", "json", "--no-wait", "--user", "alice", "--", "true").json()
    assert nowait["disposition"] == "local" and nowait["job_id"].startswith("/alice/")
    assert iris("-o", "json", "job", "list").json()["jobs"][0]["job_id"]
    assert iris("job", "describe", "/alice/j", "-o", "json").json()["job"]["job_id"] == "/alice/j"
    assert [ln["text"] for ln in iris("-o", "json", "job", "logs", "/alice/j").json()["lines"]] == ["hi"]
    assert iris("-o", "json", "job", "explain", "/alice/j").json()["job_id"] == "/alice/j"
    assert iris("-o", "json", "query", "SELECT job_id, state FROM jobs").json()["columns"] == ["job_id", "state"]
    assert iris("-o", "json", "cluster", "status").json()["cluster"]["name"] == "fake"
    assert iris("-o", "json", "job", "stop", "/alice/j").json() == {
        "stopped": {"/alice/j": ["/alice/j"]},
        "already_finished": {},
        "errors": {},
    }


def test_json_mode_errors_are_a_json_document_too(iris):
    result = iris("-o", "json", "job", "describe", "/nobody/x")
    assert result.code == 3  # a job that names nothing is a usage error
    assert result.json() == {"error": {"code": "not_found", "message": "job /nobody/x not found"}}
    usage = iris("-o", "json", "job", "run", "--memory", "8X", "--", "true")
    assert usage.code == 3 and usage.json()["error"]["code"] == "invalid_argument"


def test_job_list_shows_the_columns_and_filters(iris):
    iris("job", "run", "--user", "alice", "--job-name", "ok", "--", "true")
    iris("job", "run", "--user", "alice", "--job-name", "big", "--cpu", "100", "--", "true")
    table = iris("job", "list").out.splitlines()
    assert table[0].split() == ["JOB", "STATE", "CLUSTER", "TASKS", "AGE", "START", "REASON"]
    assert {line.split()[0] for line in table[1:]} == {"/alice/ok", "/alice/big"}
    only = iris("job", "list", "--state", "UNSCHEDULABLE").out.splitlines()
    assert [line.split()[0] for line in only[1:]] == ["/alice/big"]
    assert "needs 100 cpu" in only[1]
    empty = iris("job", "list", "--prefix", "/bob/")
    assert empty.code == 0 and empty.out == "" and "no jobs under /bob/" in empty.err


def test_job_logs_tail_and_task_filter(iris):
    iris(
        "job",
        "run",
        "--user",
        "alice",
        "--job-name",
        "many",
        "--replicas",
        "2",
        "--",
        "sh",
        "-c",
        "echo a$IRIS_TASK_INDEX; echo b$IRIS_TASK_INDEX",
    )
    out = iris("job", "logs", "/alice/many").out.splitlines()
    assert sorted(out) == ["[0] a0", "[0] b0", "[1] a1", "[1] b1"]
    assert iris("job", "logs", "/alice/many", "--task", "1").out.splitlines() == ["a1", "b1"]
    assert len(iris("job", "logs", "/alice/many", "--tail", "1").out.splitlines()) == 1
    assert sorted(iris("job", "logs", "-f", "/alice/many").out.splitlines()) == sorted(out)


def test_job_stop_reports_each_job_and_exits_3_if_any_is_unknown(iris):
    iris("job", "run", "--no-wait", "--user", "alice", "--job-name", "s", "--", "sleep", "30")
    result = iris("job", "stop", "/alice/s", "/alice/missing")
    assert result.code == 3
    assert result.out == "stopped /alice/s\n"
    assert result.err == "error: job /alice/missing not found\n"


def test_query_write_is_refused_with_exit_3(iris):
    result = iris("query", "DELETE FROM jobs")
    assert result.code == 3 and "read-only" in result.err


def test_rpc_controller_covers_every_service_method():
    names = {m.name for m in pb.DESCRIPTOR.services_by_name["ControllerService"].methods}
    assert set(service_methods()) == {kebab(n) for n in names}
    assert kebab("ExecuteRawQuery") == "execute-raw-query" and kebab("ListPeers") == "list-peers"


def test_rpc_controller_calls_a_method_with_a_json_body(iris, tmp_path):
    iris("job", "run", "--user", "alice", "--job-name", "r", "--", "true")
    doc = iris("rpc", "controller", "get-job-status", "--json", '{"job_id": "/alice/r", "include_tasks": true}').json()
    assert doc["job"]["state"] == "SUCCEEDED" and doc["tasks"][0]["task_id"] == "/alice/r/0"
    body = tmp_path / "body.json"
    body.write_text('{"jobId": "/alice/r"}')  # the camelCase JSON names work too
    assert iris("rpc", "controller", "list-tasks", "--json", f"@{body}").json()["tasks"][0]["state"] == "SUCCEEDED"
    assert iris("rpc", "controller", "get-cluster-info").json()["name"] == "fake"
    bad = iris("rpc", "controller", "get-job-status", "--json", "{nope")
    assert bad.code == 3 and "not a valid GetJobStatusRequest" in bad.err
    for body in ("[]", "5", '"x"', "null"):  # JSON, but no request: refused, never sent as an empty one
        wrong = iris("rpc", "controller", "list-jobs", "--json", body)
        assert wrong.code == 3 and "the body must be a JSON object" in wrong.err, (body, wrong.err)
    assert iris("rpc", "controller", "get-job-statuses").code == 3


def test_controller_flag_beats_config_beats_env(iris, fake_controller, tmp_path, monkeypatch):
    config = tmp_path / "cluster.yaml"
    config.write_text(f"name: c\nlisten: {fake_controller.url.removeprefix('http://')}\nbackends: [{{id: cpu}}]\n")
    monkeypatch.setenv("IRIS_CONTROLLER", "http://127.0.0.1:9")
    assert iris("job", "list").code == 3  # the environment names a dead controller
    assert iris("--config", str(config), "job", "list").code == 0
    assert iris("--controller", fake_controller.url, "--config", "/nonexistent.yaml", "job", "list").code == 0


def test_wants_json_sees_the_output_flag_anywhere_before_the_command():
    assert _wants_json(["-o", "json", "job", "list"])
    assert _wants_json(["job", "list", "--output=json"])
    assert _wants_json(["--controller", "http://x:1", "job", "list", "-o", "json"])
    assert not _wants_json(["job", "run", "--", "tool", "-o", "json"])
    assert not _wants_json(["job", "list"])


def test_the_submit_path_imports_no_server_modules():
    code = (
        "import sys, iris.cli.main, iris.cli.job, iris.client.client\n"
        "heavy = [m for m in ('pydantic', 'sqlalchemy', 'uvicorn', 'starlette', 'connectrpc', 'yaml', 'http.client')"
        " if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""


def run_program(url: str, home, *args: str) -> tuple[subprocess.CompletedProcess, set[str], bool]:
    """Runs `iris ARGS…` as its own process (main() reading sys.argv); returns it, sys.modules and gc.isenabled() at exit."""
    code = (
        "import atexit, gc, sys\n"
        "atexit.register(lambda: print('AT-EXIT', gc.isenabled(), *sys.modules, file=sys.stderr))\n"
        "from iris.cli.main import main\n"
        "main()\n"
    )
    env = {**os.environ, "IRIS_CONTROLLER": url, "HOME": str(home)}  # no stored token to read
    env.pop("IRIS_TOKEN", None)
    result = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=60)
    words = result.stderr.rpartition("AT-EXIT ")[2].split()
    return result, set(words[1:]), words[:1] == ["True"]


def test_job_run_no_wait_imports_no_protobuf(fake_controller, tmp_path):
    result, modules, _ = run_program(
        fake_controller.url,
        tmp_path,
        "job",
        "run",
        "--no-wait",
        "--user",
        "alice",
        "--memory",
        "2G",
        "--constraint",
        "pool=a",
        "--",
        "true",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("/alice/")
    assert "iris.client.launch" in modules  # the listing is real
    # The Connect transport lives beside the generated code, but the JSON path never imports that
    # (the hand-written wire decoder reads where a controller on this host is).
    assert not {m for m in modules if m.startswith(("google.protobuf", "iris.rpc."))} - {
        "iris.rpc.transport",
    }
    # Nor YAML, the server's libraries, or click: one parser, argparse, and no other command's module.
    assert not {m.partition(".")[0] for m in modules} & {"yaml", "pydantic", "sqlalchemy", "uvicorn", "click"}
    assert "argparse" in modules and "iris.cli.job" in modules
    others = {m for m in modules if m.startswith("iris.cli.")} - {
        "iris.cli.app",
        "iris.cli.checks",
        "iris.cli.commands",
        "iris.cli.job",
        "iris.cli.job_ops",
        "iris.cli.main",
        "iris.cli.pages",
        "iris.cli.submit",
        "iris.cli.values",
    }
    assert not others, others
    sent = fake_controller.service.requests[-1]
    assert sent.resources.memory_bytes == 2 << 30 and [c.key for c in sent.constraints] == ["pool"]


def test_the_program_collects_garbage_while_its_command_runs(fake_controller, tmp_path):
    # Start-up runs with the collector paused; a command (a foreground controller, `job logs -f`) must not.
    result, _, gc_enabled = run_program(fake_controller.url, tmp_path, "job", "run", "--no-wait", "--", "true")
    assert result.returncode == 0, result.stderr[-2000:]
    assert gc_enabled


def test_help_lists_every_command(iris):
    result = iris("--help")
    assert result.code == 0
    for name in ("cluster", "demo", "job", "query", "rpc"):
        assert f"  {name} " in result.out


def test_token_flag_and_env_send_a_bearer_token(iris, fake_controller, monkeypatch):
    assert iris("--token", "tok-flag", "job", "run", "--no-wait", "--user", "a", "--", "true").code == 0
    monkeypatch.setenv("IRIS_TOKEN", "tok-env")
    assert iris("job", "run", "--no-wait", "--user", "a", "--", "true").code == 0
    assert fake_controller.service.authorizations == ["Bearer tok-flag", "Bearer tok-env"]
