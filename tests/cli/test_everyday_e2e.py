"""Everyday habits through real CLI processes and a real controller: bad input refused before any
request, bulk stop, waiting that says why, attempts told apart in logs, history, Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading

import psutil
import pytest

from iris.client import IrisClient
from tests.conftest import wait_until

BAD_INPUTS = [
    (["job", "run", "--gpu", "x8", "--", "true"], "no variant"),
    (["job", "run", "--gpu", "H100x-1", "--", "true"], "whole number of at least 1"),
    (["job", "run", "--constraint", "region==us", "--", "true"], "write region=us"),
    (["job", "run", "--memory", "512", "--", "true"], "write 512M or 512G"),
    (["job", "run", "--memory", "0", "--", "true"], "is zero"),
    (["job", "run", "-e", "KEY", "--", "true"], "-e KEY=VALUE or -e KEY VALUE"),
    (["job", "run", "-e", "1X=2", "--", "true"], "not an environment variable name"),
    (["job", "run", "--target-cluster", "cw", "--", "true"], "has no federation peers"),
    (["job", "list", "--state", "RUNING"], "did you mean RUNNING?"),
    (["job", "run", "--cpu", "0", "--", "true"], "'--cpu': cpu 0 asks for no cores"),
    (
        ["job", "run", "--cpu", "-1", "--", "true"],
        "'--cpu': cpu -1 is negative; ask for cores like 2 or 0.5 (the default is 1) (see `iris job run --help`)",
    ),
    (
        ["job", "run", "--cpu", "1e9", "--", "true"],
        "'--cpu': cpu 1e+09 is more than a task may ask for (at most 100000",
    ),
    (
        ["job", "run", "--memory", "99999999T", "--", "true"],
        "'--memory': memory 99999999T is more than a task may ask for (at most 1024T)",
    ),
    (["job", "run", "--disk", "2000T", "--", "true"], "'--disk': disk 2000T is more than a task may ask for"),
    (["job", "run", "--region", "", "--", "true"], "--region is empty"),
    (["job", "run", "--zone", " ", "--", "true"], "--zone is empty"),
    (["worker", "start", "--backend", "pool", "--memory", "12"], "write 12M or 12G"),
    (
        ["worker", "start", "--backend", "pool", "--work-dir", "/dev/null/work"],
        "--work-dir /dev/null/work cannot be created: Not a directory; give a folder",
    ),
    (["worker", "start", "--backend", "pool", "--attr", "zone=a\nb"], "--attr 'zone=a\\nb' holds a control"),
    (["job", "run", "--job-name", "", "--", "true"], "'--job-name': the value is empty"),
    (
        ["job", "run", "--gpu", "H100x70000", "--", "true"],
        "'--gpu': 70000 GPUs is more than a task may ask for (at most 65536)",
    ),
    (["job", "run", "--replicas", "100001", "--", "true"], "'--replicas': replicas 100001 is more than a job may have"),
    (
        ["job", "run", "--max-retries", "5000", "--", "true"],
        "'--max-retries': max retries 5000 is more than a job may have",
    ),
    (
        ["job", "run", "--scheduling-timeout", "3651d", "--", "true"],
        "'--scheduling-timeout': scheduling timeout 3651d is longer than a job may wait (at most 10 years)",
    ),
    (["job", "run", "--image", " ", "--", "true"], "'--image': the value is empty"),
    (["job", "run", "--user", "a b", "--", "true"], "'--user': user 'a b' is not valid: use letters"),
    (["job", "run", "--job-name", "a/b", "--", "true"], "'--job-name': job name 'a/b' is not valid: use letters"),
    (["job", "run", "--region", "us\x1b[2J", "--", "true"], "--region 'us\\x1b[2J' holds a control character, ESC"),
    (["job", "run", "--constraint", "zone=a\nb", "--", "true"], "--constraint 'zone=a\\nb' holds a control character"),
    (["job", "run", "--image", "busy\x7fbox", "--", "true"], "--image 'busy\\x7fbox' holds a control character, DEL"),
    (["job", "run", "--target-cluster", "cw\x85", "--", "true"], "--target-cluster 'cw\\x85' holds a control"),
]


def _jobs(controller) -> list[dict]:
    return json.loads(controller.cli("-o", "json", "job", "list").stdout)["jobs"]


@pytest.mark.parametrize(("args", "fix"), BAD_INPUTS, ids=[" ".join(a[1:4]) for a, _ in BAD_INPUTS])
def test_bad_input_exits_3_with_the_fix_and_writes_nothing(module_controller, args, fix):
    result = module_controller.cli(*args)
    assert result.returncode == 3, result.stdout + result.stderr
    assert fix in result.stderr and "Traceback" not in result.stderr
    assert _jobs(module_controller) == []


def test_env_spellings_and_env_file_all_reach_the_job(controller, tmp_path):
    env_file = tmp_path / "job.env"
    env_file.write_text("# settings\nC=from-file\nexport D='quoted'\n")
    run = controller.cli(
        "job",
        "run",
        "--user",
        "alice",
        "-e",
        "A=one",
        "-e",
        "B",
        "two words",
        "--env-file",
        str(env_file),
        "--",
        'echo "$A|$B|$C|$D"',
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[1:] == ["one|two words|from-file|quoted"]


def test_short_names_resolve_and_stopping_a_finished_job_says_so(controller):
    controller.extra_env["USER"] = "alice"
    assert controller.cli("job", "run", "--job-name", "fin", "--", "true").returncode == 0
    described = controller.cli("-o", "json", "job", "describe", "fin")
    assert described.returncode == 0 and json.loads(described.stdout)["job"]["job_id"] == "/alice/fin"
    stop = controller.cli("job", "stop", "fin")
    assert stop.returncode == 0
    assert "/alice/fin had already finished (SUCCEEDED)" in stop.stdout


def test_bulk_stop_counts_and_asks_past_ten(controller):
    with IrisClient(controller.url, token="") as c:
        sweep = [c.submit("sleep 300", name=f"sweep-{i}", user="alice", cpu=0.1, parent="") for i in range(12)]
        other = c.submit("sleep 300", name="keep", user="alice", cpu=0.1, parent="")
    refused = controller.cli("job", "stop", "--user", "alice", "--prefix", "/alice/sweep-")
    assert refused.returncode == 3 and "12 jobs match; pass --yes" in refused.stderr
    assert {j["state"] for j in _jobs(controller)} <= {"PENDING", "RUNNING"}
    done = controller.cli("job", "stop", "--user", "alice", "--prefix", "/alice/sweep-", "--yes")
    assert done.returncode == 0, done.stderr
    assert "stopping 12 job(s)" in done.stderr and len(done.stdout.splitlines()) == 12
    states = {j["job_id"]: j["state"] for j in _jobs(controller)}
    assert all(states[j] == "KILLED" for j in sweep) and states[other] != "KILLED"
    none = controller.cli("job", "stop", "--prefix", "/alice/sweep-")
    assert none.returncode == 0 and "no live jobs match" in none.stderr
    controller.cli("job", "stop", other)


def test_logs_mark_each_new_attempt_and_history_and_wait_summarise(controller):
    controller.extra_env["USER"] = "alice"
    script = 'echo "attempt $IRIS_ATTEMPT"; [ "$IRIS_ATTEMPT" = 1 ]'
    flaky = controller.cli("job", "run", "--job-name", "flaky", "--max-retries", "1", "--", script)
    assert flaky.returncode == 0, flaky.stderr
    # The live output of `job run` marks the retry as `job logs` does.
    assert flaky.stdout.splitlines()[1:] == ["attempt 0", "--- task 0: attempt 1 (attempt 0 ended) ---", "attempt 1"]
    logs = controller.cli("job", "logs", "flaky").stdout.splitlines()
    assert logs == ["attempt 0", "--- task 0: attempt 1 (attempt 0 ended) ---", "attempt 1"]
    assert controller.cli("job", "run", "--job-name", "bad", "--", "exit 4").returncode == 1
    waited = controller.cli("job", "wait", "flaky", "bad")
    assert waited.returncode == 1
    assert waited.stdout.splitlines() == [
        "/alice/flaky SUCCEEDED (exit code 0)",
        "/alice/bad FAILED (task 0 failed: exit code 4)",
    ]
    history = json.loads(controller.cli("-o", "json", "job", "history", "--since", "1d").stdout)
    assert history["jobs"] == 2
    assert history["states"]["SUCCEEDED"]["jobs"] == 1 and history["states"]["FAILED"]["jobs"] == 1
    table = controller.cli("job", "history").stdout.splitlines()
    assert table[1].split() == ["STATE", "JOBS", "RUN", "TIME", "MEAN"] and table[-1].split()[:2] == ["TOTAL", "2"]


def test_wait_follows_a_running_job_to_its_end_and_keeps_its_timeout(controller):
    """`job wait` lets the controller hold each status call while a job keeps its state: it still
    sees the end of a job that was running when it began, and gives up at its --timeout. A job
    run with --timeout 0 takes its band's default, and none is set here, as `job run --help` says."""
    controller.extra_env["USER"] = "alice"
    assert "0 (the default): the cluster's default for its band (controller.time_limits), else none" in " ".join(
        controller.cli("job", "run", "--help").stdout.split()
    )
    for name, command in (("brief", "sleep 1"), ("endless", "sleep 300")):
        started = controller.cli("job", "run", "--no-wait", "--timeout", "0", "--job-name", name, "--", command)
        assert started.returncode == 0, started.stderr
    waited = controller.cli("job", "wait", "brief")
    assert (waited.returncode, waited.stdout) == (0, "/alice/brief SUCCEEDED (exit code 0)\n"), waited.stderr
    gave_up = controller.cli("job", "wait", "--timeout", "1s", "endless", "brief")
    assert gave_up.returncode == 1
    assert "still not finished after 1s: /alice/endless" in gave_up.stderr
    for json_flag in ([], ["-o", "json"]):
        out, err, code = _interrupt_once_connected(controller, *json_flag, "job", "wait", "endless")
        assert code == 130, err
        assert "stopped waiting; /alice/endless keeps running" in err
        assert "`iris job wait /alice/endless`" in err and "`iris job describe /alice/endless`" in err
        if json_flag:
            doc = json.loads(out)
            assert doc["still_running"] == ["/alice/endless"] and doc["interrupted"] == "detached"
    assert {j["job_id"]: j["state"] for j in _jobs(controller)}["/alice/endless"] == "RUNNING"
    controller.cli("job", "stop", "endless")


def test_wait_timeout_zero_means_no_limit_as_for_job_run(controller, tmp_path):
    """`job wait --timeout 0` waits as long as it takes (0 means no limit, as for `job run
    --timeout`), and a negative --timeout is refused before anything is asked."""
    controller.extra_env["USER"] = "alice"
    gate = tmp_path / "go"
    started = controller.cli(
        "job", "run", "--no-wait", "--job-name", "gated", "--", f"while [ ! -e {gate} ]; do sleep 0.05; done"
    )
    assert started.returncode == 0, started.stderr
    port = int(controller.url.rsplit(":", 1)[1])
    proc = _spawn(controller, "job", "wait", "--timeout", "0", "gated")
    try:
        wait_until(lambda: proc.poll() is not None or _calls(proc.pid, port), message="the wait to call the controller")
        wait_until(lambda: {j["job_id"]: j["state"] for j in _jobs(controller)}["/alice/gated"] == "RUNNING")
        gate.touch()
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert (proc.returncode, out) == (0, "/alice/gated SUCCEEDED (exit code 0)\n"), err
    for flag in ("--timeout=-1", "--timeout=soon"):
        refused = controller.cli("job", "wait", flag, "gated")
        assert refused.returncode == 3 and "--timeout" in refused.stderr, refused.stderr


def _interrupt_once_connected(controller, *args: str) -> tuple[str, str, int]:
    """Runs `iris ARGS…`, sends it Ctrl-C once it holds a connection to the controller (so is past
    its start-up, in the command itself), and returns its stdout, stderr and exit code."""
    port = int(controller.url.rsplit(":", 1)[1])
    proc = _spawn(controller, *args)
    try:
        wait_until(lambda: _calls(proc.pid, port), message="the command to call the controller")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return out, err, proc.returncode


def _calls(pid: int, port: int) -> bool:
    """Whether process `pid` holds a connection to the controller: a TCP one to `port` (on loopback),
    or one to its Unix socket (the command's only Unix socket)."""
    try:
        held = psutil.Process(pid).net_connections(kind="all")
    except psutil.Error:
        return False
    return any(c.family == socket.AF_UNIX or (c.raddr and c.raddr.port == port) for c in held)


def _spawn(controller, *args: str) -> subprocess.Popen:
    env = {**os.environ, "IRIS_CONTROLLER": controller.url, "USER": "alice", "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "iris.cli.main", *args],
        env=env,
        cwd=controller.state_dir.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # A suite started in the background of a shell inherits SIGINT ignored, and Python then
        # never raises KeyboardInterrupt; the CLI under test must see Ctrl-C as a terminal sends it.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


class _Reader:
    """Collects a stream's lines on a thread, so a test can poll for one without blocking."""

    def __init__(self, stream):
        self.lines: list[str] = []
        self._thread = threading.Thread(target=lambda: self.lines.extend(iter(stream.readline, "")), daemon=True)
        self._thread.start()

    def text(self) -> str:
        return "".join(self.lines)


def test_ctrl_c_detaches_by_default_and_stops_with_cancel_on_interrupt(controller):
    for flag, final in (([], "RUNNING"), (["--cancel-on-interrupt"], "KILLED")):
        name = "stays" if not flag else "goes"
        proc = _spawn(controller, "job", "run", "--no-workspace", "--job-name", name, *flag, "--", "sleep 300")
        try:
            wait_until(
                lambda: any(j["job_id"] == f"/alice/{name}" and j["state"] == "RUNNING" for j in _jobs(controller)),
                message=f"{name} to run",
            )
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 130
        assert ("detached" in err) if not flag else (f"stopped /alice/{name}" in err)
        assert {j["job_id"]: j["state"] for j in _jobs(controller)}[f"/alice/{name}"] == final
    controller.cli("job", "stop", "/alice/stays")


def test_ctrl_c_with_json_output_still_prints_one_document(controller):
    commands = (
        ["-o", "json", "job", "run", "--no-workspace", "--job-name", "talks", "--", "echo hi; exec sleep 300"],
        ["-o", "json", "job", "logs", "-f", "talks"],
    )
    for argv in commands:
        proc = _spawn(controller, *argv)
        try:
            wait_until(
                lambda: any(j["job_id"] == "/alice/talks" and j["state"] == "RUNNING" for j in _jobs(controller)),
                message="talks to run",
            )
            wait_until(lambda: controller.cli("job", "logs", "/alice/talks").stdout == "hi\n", message="its first line")
            # The job runs before `logs -f` is even spawned: wait until the command itself calls the
            # controller, so the Ctrl-C reaches it following rather than still starting up.
            wait_until(lambda: _calls(proc.pid, controller.port), message="the command to call the controller")
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 130, err
        doc = json.loads(out)
        assert doc["job_id"] == "/alice/talks" and doc["interrupted"] in ("detached", True), doc
    controller.cli("job", "stop", "/alice/talks")


def test_job_run_says_why_it_waits_and_list_watch_redraws(controller):
    blocker = controller.cli(
        "job", "run", "--no-wait", "--user", "alice", "--cpu", "4", "--replicas", "2", "--", "sleep 300"
    )
    assert blocker.returncode == 0
    waiting = controller.cli(
        "job", "run", "--user", "alice", "--cpu", "4", "--scheduling-timeout", "3s", "--job-name", "waits", "--", "true"
    )
    assert waiting.returncode == 2, waiting.stderr
    assert "pending: " in waiting.stderr and "UNSCHEDULABLE" in waiting.stderr
    # `job logs -f` of a job still waiting says what it waits for, instead of printing nothing.
    queued = controller.cli(
        "job", "run", "--no-wait", "--user", "alice", "--cpu", "4", "--job-name", "queued", "--", "true"
    )
    assert queued.returncode == 0, queued.stderr
    follow = _spawn(controller, "job", "logs", "-f", "queued")
    err = _Reader(follow.stderr)
    try:
        wait_until(lambda: "pending: " in err.text(), timeout=30, message="logs -f to say why the job waits")
        # `job wait` of it says so too, on stderr, while its stdout keeps to the jobs that ended.
        waiter = _spawn(controller, "job", "wait", "queued")
        waited = _Reader(waiter.stderr)
        try:
            wait_until(lambda: "/alice/queued pending: " in waited.text(), timeout=30, message="job wait to say why")
            assert controller.cli("job", "stop", "/alice/queued").returncode == 0
            assert waiter.wait(timeout=30) == 1
            assert "/alice/queued KILLED" in waiter.stdout.read()
        finally:
            if waiter.poll() is None:
                waiter.kill()
                waiter.wait()
        assert follow.wait(timeout=30) == 0
    finally:
        if follow.poll() is None:
            follow.kill()
            follow.wait()
    wait_until(lambda: "ended KILLED" in err.text(), timeout=30, message="logs -f to say how the job ended")
    # A page of one job at a time: each redraw still follows every page that --all asks for.
    watch = _spawn(controller, "job", "list", "--watch", "--all", "--page-size", "1")
    out = _Reader(watch.stdout)
    first = blocker.stdout.strip().splitlines()[-1]
    try:
        wait_until(
            lambda: out.text().count("/alice/waits") >= 2 and out.text().count(first) >= 2,
            timeout=30,
            message="two redraws of the list, with both jobs",
        )
        watch.send_signal(signal.SIGINT)
        watch.wait(timeout=20)
    finally:
        if watch.poll() is None:
            watch.kill()
    assert watch.returncode == 0
    controller.cli("job", "stop", "--user", "alice", "--yes")
