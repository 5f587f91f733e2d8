"""Every command that takes a JOB exits as the README says, as a real `iris` process against a real
controller: a name that names no job, or is no job id at all, is a usage error (exit 3, with the
fix in the message), so that 1 and 2 only ever report what a job did or what the cluster refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import ControllerFactory, free_port, wait_until

UNKNOWN = [
    ["job", "describe", "/alice/nope"],
    ["job", "describe", "nope"],
    ["job", "describe", "--all-tasks", "nope"],
    ["job", "logs", "/alice/nope"],
    ["job", "logs", "-f", "nope"],
    ["job", "stop", "/alice/nope"],
    ["job", "wait", "/alice/nope"],
    ["job", "explain", "nope"],
    ["endpoint", "list", "/alice/nope"],
    ["endpoint", "url", "/alice/nope", "web"],
    ["endpoint", "url", "nope", "web"],
]
MALFORMED = [
    ["job", "describe", "//x"],
    ["job", "describe", "/alice/a b"],
    ["job", "describe", "/alice/../bob/x"],
    ["job", "describe", ""],
    ["job", "logs", "/alice/.hidden"],
    ["job", "stop", "/"],
    ["job", "wait", "/alice"],
    ["job", "explain", "-"],
    ["endpoint", "list", "/alice//x"],
    ["endpoint", "url", "/alice/x/../y", "web"],
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    factory = ControllerFactory(tmp_path_factory.mktemp("exitcodes"))
    try:
        ctl = factory("exits")
        ctl.extra_env["USER"] = "alice"
        yield ctl
    finally:
        factory.cleanup()


def _count(cluster) -> int:
    out = cluster.cli("-o", "json", "query", "SELECT COUNT(*) AS n FROM jobs")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["rows"][0][0]


@pytest.mark.parametrize("argv", UNKNOWN, ids=" ".join)
def test_cli_job_that_does_not_exist_exits_3_naming_it(cluster, argv):
    got = cluster.cli(*argv)
    assert got.returncode == 3, got.stderr
    assert "/alice/nope does not exist" in got.stderr and "iris job list" in got.stderr
    assert "Traceback" not in got.stderr
    as_json = cluster.cli("-o", "json", *argv)
    assert as_json.returncode == 3
    doc = json.loads(as_json.stdout)
    error = doc["errors"]["/alice/nope"] if argv[:2] == ["job", "stop"] else doc["error"]  # stop reports per job
    assert error["code"] == "not_found"


@pytest.mark.parametrize("argv", MALFORMED, ids=" ".join)
def test_cli_malformed_job_id_exits_3_saying_what_a_job_id_is(cluster, argv):
    before = _count(cluster)
    got = cluster.cli(*argv)
    assert got.returncode == 3, got.stderr
    assert "does not exist" not in got.stderr and "Traceback" not in got.stderr
    assert "/<user>/<name>" in got.stderr or "is not valid" in got.stderr, got.stderr
    assert _count(cluster) == before


def test_cli_existing_job_is_found_by_its_short_name_on_every_command(cluster):
    run = cluster.cli("job", "run", "--job-name", "there", "--", "true")
    assert run.returncode == 0, run.stderr
    for argv in (
        ["job", "describe", "there"],
        ["job", "logs", "there"],
        ["job", "wait", "there"],
        ["endpoint", "list", "there"],
    ):
        got = cluster.cli(*argv)
        assert got.returncode == 0, (argv, got.stderr)
    listed = cluster.cli("-o", "json", "endpoint", "list", "there")
    assert json.loads(listed.stdout) == {"endpoints": [], "total": 0}
    missing = cluster.cli("endpoint", "url", "there", "web")
    assert missing.returncode == 3 and "no live endpoint 'web'" in missing.stderr
    stop = cluster.cli("job", "stop", "there")
    assert stop.returncode == 0 and "already finished" in stop.stdout + stop.stderr


def test_cli_job_list_takes_several_states_joined_by_commas(cluster):
    run = cluster.cli("job", "run", "--job-name", "listed", "--", "true")
    assert run.returncode == 0, run.stderr

    def listed(states: str) -> bool:
        got = cluster.cli("-o", "json", "job", "list", "--state", states)
        assert got.returncode == 0, got.stderr
        return "/alice/listed" in {j["job_id"] for j in json.loads(got.stdout)["jobs"]}

    assert listed("failed,Succeeded") and listed("SUCCEEDED") and not listed("pending,running")
    for command in (["job", "list"], ["job", "stop"]):
        typo = cluster.cli(*command, "--state", "pending,RUNING")
        assert typo.returncode == 3 and "'RUNING' is not a job state; did you mean RUNNING?" in typo.stderr
    ended = cluster.cli("job", "stop", "--state", "running,failed")
    assert ended.returncode == 3 and "FAILED jobs have ended already" in ended.stderr


def test_cli_refuses_control_characters_in_a_region_and_shows_those_of_a_command_as_escapes(cluster):
    hostile = "us\x1b[31m\nforged  row"
    # A region (a short identifier other users see in reasons) may not hold them: nothing is sent.
    run = cluster.cli("job", "run", "--no-wait", "--job-name", "hostile", "--region", hostile, "--", "true")
    assert run.returncode == 3 and "--region 'us\\x1b[31m\\nforged  row' holds a control character" in run.stderr
    assert json.loads(cluster.cli("-o", "json", "job", "list", "--prefix", "/alice/hostile").stdout)["jobs"] == []
    # A command may hold any text; `describe` shows it escaped, so it cannot drive the terminal.
    run = cluster.cli("job", "run", "--no-wait", "--job-name", "hostile", "--", "echo", "red\x1b[31mtext")
    assert run.returncode == 0, run.stderr
    out = cluster.cli("job", "describe", "hostile").stdout
    assert "\x1b" not in out and "red\\x1b[31mtext" in out, out


def test_cli_logs_of_a_task_the_job_does_not_have_exits_3_naming_its_tasks(cluster):
    run = cluster.cli("job", "run", "--job-name", "two", "--replicas", "2", "--", "echo out")
    assert run.returncode == 0, run.stderr
    assert cluster.cli("job", "logs", "two", "--task", "1").stdout == "out\n"
    assert cluster.cli("job", "logs", "two", "--tail", "1").stdout.endswith("out\n")
    for tail_none in (["job", "logs", "two", "--tail", "0"], ["job", "logs", "-f", "two", "--tail", "0"]):
        got = cluster.cli(*tail_none)  # as `tail -n 0`: no stored line (with -f, only lines still to come)
        assert got.returncode == 0 and got.stdout == "", (tail_none, got.stdout, got.stderr)
    for argv in (["job", "logs", "two", "--task", "2"], ["job", "logs", "-f", "two", "--task", "7"]):
        got = cluster.cli(*argv)
        assert got.returncode == 3, got.stderr
        assert "it has 2 task(s), numbered 0 to 1" in got.stderr and got.stdout == ""


@pytest.mark.parametrize("argv", [[], ["job"], ["cluster"], ["token"]], ids=lambda a: " ".join(["iris", *a]))
def test_cli_group_without_a_command_prints_its_help_and_exits_3(argv, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("IRIS_CONTROLLER", "IRIS_TOKEN")}
    got = subprocess.run(
        [sys.executable, "-m", "iris.cli.main", *argv], env=env, cwd=tmp_path, capture_output=True, text=True
    )
    assert got.returncode == 3
    assert got.stderr.startswith(f"Usage: {' '.join(['iris', *argv])} [OPTIONS] COMMAND"), got.stderr
    assert "Commands:" in got.stderr and "error:" not in got.stderr and got.stdout == ""
    as_json = subprocess.run(
        [sys.executable, "-m", "iris.cli.main", "-o", "json", *argv],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert as_json.returncode == 3
    assert json.loads(as_json.stdout)["error"]["message"].lower().startswith("missing command")


WELCOME = """
import http.server, sys
class Welcome(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.rfile.read(int(self.headers.get("content-length") or 0))
        body = b"<html>welcome</html>"
        self.send_response(200)
        self.send_header("content-type", "text/html")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    do_POST = do_GET
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Welcome).serve_forever()
"""


@pytest.fixture(params=["file server", "welcome page"])
def not_a_controller(tmp_path, request):
    """What a mistyped --controller may reach on a loopback port: a plain file server (404 and 501
    pages), or a server that answers every request, POSTs too, with a 200 page."""
    port = free_port()
    (tmp_path / "www").mkdir()
    (tmp_path / "welcome.py").write_text(WELCOME)
    args = (
        ["-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(tmp_path / "www")]
        if request.param == "file server"
        else [str(tmp_path / "welcome.py"), str(port)]
    )
    proc = subprocess.Popen([sys.executable, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until(lambda: _answers(url), timeout=30, message="the file server")
        yield url
    finally:
        proc.kill()
        proc.wait()


def _answers(url: str) -> bool:
    import httpx

    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.mark.parametrize(
    "argv",
    [
        ["job", "run", "--no-wait", "--no-workspace", "--", "true"],
        ["job", "run", "--no-workspace", "--", "true"],
        ["job", "list"],
        ["job", "describe", "/alice/x"],
        ["job", "stop", "/alice/x"],
        ["cluster", "status"],
        ["query", "SELECT 1"],
    ],
    ids=" ".join,
)
def test_cli_url_of_something_else_than_a_controller_exits_3(not_a_controller, tmp_path, argv):
    env = {k: v for k, v in os.environ.items() if k not in ("IRIS_TOKEN",)}
    env["IRIS_CONTROLLER"] = not_a_controller
    got = subprocess.run(
        [sys.executable, "-m", "iris.cli.main", *argv],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert got.returncode == 3, got.stderr
    assert not_a_controller in got.stderr and "Traceback" not in got.stderr


def test_cli_existing_keep_with_no_wait_does_not_claim_to_follow(cluster):
    first = cluster.cli("job", "run", "--no-wait", "--job-name", "kept", "--", "true")
    assert first.returncode == 0, first.stderr
    again = cluster.cli("job", "run", "--no-wait", "--existing", "keep", "--job-name", "kept", "--", "true")
    assert again.returncode == 0 and again.stdout == "/alice/kept\n", again.stderr
    assert "already exists" in again.stderr and "kept as it is" in again.stderr
    assert "following" not in again.stderr
