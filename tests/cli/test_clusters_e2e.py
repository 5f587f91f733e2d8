"""Named clusters and `cluster start --detach` through real CLI processes and real controllers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import yaml

from iris.controller.process import probe
from tests.conftest import free_port, wait_until


def run_iris(home: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """`iris ARGS…` with its own HOME (so its cluster list) and no $IRIS_CONTROLLER."""
    env = {k: v for k, v in os.environ.items() if k not in ("IRIS_CONTROLLER", "IRIS_TOKEN")}
    env["HOME"] = str(home)
    return subprocess.run(
        [sys.executable, "-m", "iris.cli.main", *args],
        env=env,
        cwd=home,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_cluster_flag_picks_the_named_controller_and_use_sets_the_default(controller_factory, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    a = controller_factory("alpha")
    b = controller_factory("beta")
    assert run_iris(home, "cluster", "add", "alpha", "--url", a.url).returncode == 0
    assert run_iris(home, "cluster", "add", "beta", "--config", str(b.config_path)).returncode == 0
    for name in ("alpha", "beta"):
        status = run_iris(home, "--cluster", name, "-o", "json", "cluster", "status")
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["cluster"]["name"] == name
    peers = run_iris(home, "--cluster=beta", "rpc", "controller", "list-peers")
    assert peers.returncode == 0, peers.stderr
    query = run_iris(home, "--cluster=alpha", "-o", "json", "query", "SELECT 1 AS one")
    assert query.returncode == 0 and json.loads(query.stdout)["rows"] == [[1]]
    # No default yet: the SDK default URL, where nothing runs.
    assert run_iris(home, "cluster", "use", "beta").returncode == 0
    status = run_iris(home, "-o", "json", "cluster", "status")
    assert json.loads(status.stdout)["cluster"]["name"] == "beta"
    listed = json.loads(run_iris(home, "-o", "json", "cluster", "list").stdout)
    assert listed["default"] == "beta"
    assert [(c["name"], c["up"]) for c in listed["clusters"]] == [("alpha", True), ("beta", True)]
    table = run_iris(home, "cluster", "list").stdout.splitlines()
    assert table[0].split() == ["NAME", "URL", "STATUS", "CONFIG", "ANSWER"]
    assert table[2].split()[:4] == ["*", "beta", b.url, "up"]
    unknown = run_iris(home, "--cluster", "gamma", "job", "list")
    assert unknown.returncode == 3 and "alpha, beta" in unknown.stderr
    # --controller still wins over a named cluster's URL.
    explicit = run_iris(home, "--controller", a.url, "-o", "json", "cluster", "status")
    assert json.loads(explicit.stdout)["cluster"]["name"] == "alpha"


def test_cluster_list_shows_a_cluster_that_answers_late_as_slow_not_down(controller_factory, tmp_path):
    """A controller that accepts the connection but has not answered within --timeout (here a
    stopped process, as a swamped one looks) is slow, with the reason; an address where nothing
    listens is down, with the error; --timeout 0 waits for the answer however late."""
    home = tmp_path / "home"
    home.mkdir()
    busy = controller_factory("busy")
    gone = f"http://127.0.0.1:{free_port()}"
    assert run_iris(home, "cluster", "add", "busy", "--url", busy.url).returncode == 0
    assert run_iris(home, "cluster", "add", "gone", "--url", gone).returncode == 0
    os.kill(busy.pid, signal.SIGSTOP)
    try:
        listed = run_iris(home, "-o", "json", "cluster", "list", "--timeout", "1")
        assert listed.returncode == 0, listed.stderr
        rows = {c["name"]: c for c in json.loads(listed.stdout)["clusters"]}
        assert (rows["busy"]["status"], rows["busy"]["up"], rows["busy"]["answered_in_s"]) == ("slow", False, None)
        assert rows["busy"]["error"] == "accepted the connection but gave no answer within 1s", rows["busy"]
        assert (rows["gone"]["status"], rows["gone"]["up"], rows["gone"]["error"]) == (
            "down",
            False,
            "connection refused",
        )
        table = run_iris(home, "cluster", "list", "--timeout", "1").stdout.splitlines()
        assert table[1].split()[:3] == ["busy", busy.url, "slow"] and "no answer within 1s" in table[1]
        assert table[2].split()[:3] == ["gone", gone, "down"] and "connection refused" in table[2]
        env = {k: v for k, v in os.environ.items() if k not in ("IRIS_CONTROLLER", "IRIS_TOKEN")}
        waiting = subprocess.Popen(
            [sys.executable, "-m", "iris.cli.main", "-o", "json", "cluster", "list", "--timeout", "0"],
            env={**env, "HOME": str(home)},
            cwd=home,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            port = int(busy.url.rsplit(":", 1)[1])
            connections = psutil.Process(waiting.pid).net_connections
            wait_until(
                lambda: (
                    waiting.poll() is not None
                    or sum(1 for c in connections(kind="tcp") if c.raddr and c.raddr.port == port) > 0
                ),
                message="the list to ask the stopped controller",
            )
            os.kill(busy.pid, signal.SIGCONT)
            out, err = waiting.communicate(timeout=60)
        finally:
            if waiting.poll() is None:
                waiting.kill()
                waiting.wait()
        late = {c["name"]: c for c in json.loads(out)["clusters"]}["busy"]
        assert late["up"] and late["status"] in ("up", "slow") and late["answered_in_s"] > 0, (late, err)
    finally:
        os.kill(busy.pid, signal.SIGCONT)
    for bad in ("-1", "soon"):
        refused = run_iris(home, "cluster", "list", "--timeout", bad)
        assert refused.returncode == 3 and "--timeout" in refused.stderr, refused.stderr


def _config(tmp_path: Path, name: str, port: int, state_dir: Path) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": name,
                "listen": f"127.0.0.1:{port}",
                "state_dir": str(state_dir),
                "backends": [{"id": "cpu", "kind": "local", "workers": 1, "capacity": {"cpu": 1, "memory": "1G"}}],
            }
        )
    )
    return path


def test_detached_start_on_a_held_port_exits_3_naming_the_holder(controller_factory, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    port = free_port()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import socket,time; s=socket.socket(); s.bind(('127.0.0.1',{port})); s.listen(); print('ready',flush=True); time.sleep(300)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "ready"
        cfg = _config(tmp_path, "clash", port, tmp_path / "clash-state")
        for foreground in (False, True):  # the foreground start says so too, never "serving on"
            extra = [] if foreground else ["--detach", "--timeout", "20"]
            started = run_iris(home, "cluster", "start", "--config", str(cfg), *extra)
            assert started.returncode == 3, started.stdout + started.stderr
            assert f"pid {holder.pid}" in started.stderr and f"port {port}" in started.stderr
            assert "Traceback" not in started.stderr and "serving on" not in started.stderr
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    other = controller_factory("owner")
    other_port = int(other.url.rsplit(":", 1)[1])
    cfg = _config(tmp_path, "second", other_port, tmp_path / "second-state")
    started = run_iris(home, "cluster", "start", "--config", str(cfg), "--detach", "--timeout", "20")
    assert started.returncode == 3, started.stdout + started.stderr
    assert "another iris controller (cluster owner" in started.stderr
    assert "second" not in run_iris(home, "cluster", "list").stdout


def test_unwritable_state_dir_is_a_clear_error(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    cfg = _config(tmp_path, "nowhere", free_port(), blocker / "state")
    for args in (["--detach"], []):
        started = run_iris(home, "cluster", "start", "--config", str(cfg), *args)
        assert started.returncode == 3, started.stderr
        assert "cannot be created or written" in started.stderr and "internal error" not in started.stderr


def test_detached_start_records_the_cluster_and_stop_by_name(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    port = free_port()
    cfg = _config(tmp_path, "solo", port, tmp_path / "solo-state")
    # Added but not started: a command naming it says which cluster is down and how to start it.
    assert run_iris(home, "cluster", "add", "solo", "--config", str(cfg)).returncode == 0
    assert run_iris(home, "cluster", "use", "solo").returncode == 0
    for argv in (["--cluster", "solo", "job", "list"], ["job", "run", "--no-wait", "--", "true"]):
        down = run_iris(home, *argv)
        assert down.returncode == 3, down.stderr
        assert f"cannot reach cluster solo at http://127.0.0.1:{port}" in down.stderr, down.stderr
        assert "`iris --cluster solo cluster start --detach`" in down.stderr and "--local" not in down.stderr
    # The start it names is the one that brings it up.
    started = run_iris(home, "--cluster", "solo", "cluster", "start", "--detach")
    try:
        assert started.returncode == 0, started.stderr
        listed = json.loads(run_iris(home, "-o", "json", "cluster", "list").stdout)["clusters"]
        assert [(c["name"], c["up"], c["config"]) for c in listed] == [("solo", True, str(cfg))]
        # The default named cluster serves the commands that need a cluster's config, too.
        for argv in (["cluster", "public-key"], ["token", "create", "--user", "bob"]):
            got = run_iris(home, *argv)
            assert got.returncode == 0 and got.stdout.strip(), (argv, got.stderr)
    finally:
        stopped = run_iris(home, "--cluster", "solo", "cluster", "stop")
    assert stopped.returncode == 0 and "stopped cluster solo" in stopped.stdout


def test_cluster_add_refuses_a_name_or_url_no_command_could_use_and_keeps_the_list(tmp_path):
    assert run_iris(tmp_path, "cluster", "add", "marin", "--url", "http://127.0.0.1:1").returncode == 0
    before = (tmp_path / ".iris" / "clusters.yaml").read_text()
    for args in (
        ["bad name", "--url", "http://127.0.0.1:1"],
        ["", "--url", "http://127.0.0.1:1"],
        [".hidden", "--url", "http://127.0.0.1:1"],
        ["a/b", "--url", "http://127.0.0.1:1"],
        ["ok", "--url", "http://"],
        ["ok", "--url", "http://host name:80"],
        ["ok", "--url", "http://127.0.0.1:99999"],
    ):
        got = run_iris(tmp_path, "cluster", "add", *args)
        assert got.returncode == 3, (args, got.stdout, got.stderr)
        assert "Traceback" not in got.stderr and ("name" in got.stderr or "--url" in got.stderr)
    assert (tmp_path / ".iris" / "clusters.yaml").read_text() == before


def test_cluster_add_of_a_name_in_the_list_is_refused_unless_replace_and_a_down_one_is_named(tmp_path):
    first, second = f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"
    assert run_iris(tmp_path, "cluster", "add", "marin", "--url", first).returncode == 0
    before = (tmp_path / ".iris" / "clusters.yaml").read_text()
    taken = run_iris(tmp_path, "cluster", "add", "marin", "--url", second)
    assert taken.returncode == 3, taken.stdout + taken.stderr
    assert "cluster 'marin' is already in" in taken.stderr and f"({first})" in taken.stderr
    assert "--replace" in taken.stderr and "`iris cluster remove marin`" in taken.stderr
    assert (tmp_path / ".iris" / "clusters.yaml").read_text() == before
    same = run_iris(tmp_path, "cluster", "add", "marin", "--url", first)
    assert same.returncode == 0 and "nothing changed" in same.stdout
    replaced = run_iris(tmp_path, "-o", "json", "cluster", "add", "marin", "--url", second, "--replace")
    assert replaced.returncode == 0, replaced.stderr
    assert json.loads(replaced.stdout)["replaced"] == {"url": first, "config": ""}
    listed = json.loads(run_iris(tmp_path, "-o", "json", "cluster", "list").stdout)["clusters"]
    assert [(c["name"], c["url"], c["up"]) for c in listed] == [("marin", second, False)]
    # Added by URL alone, it runs elsewhere: the error names it and its URL, and no --local.
    down = run_iris(tmp_path, "--cluster", "marin", "job", "list")
    assert down.returncode == 3, down.stderr
    assert f"cannot reach cluster marin at {second}" in down.stderr and "--local" not in down.stderr
    assert "ask whoever runs it" in down.stderr and "`iris cluster list`" in down.stderr


def _refused_as_running(home: Path, args: list[str], url: str) -> None:
    """A start of the running cluster, detached and in the foreground: exit 3 naming its URL and the stop."""
    for extra in (["--detach"], []):
        again = run_iris(home, "cluster", "start", *args, *extra)
        assert again.returncode == 3, again.stdout + again.stderr
        assert f"is already running at {url}" in again.stderr, again.stderr
        assert f"`iris cluster stop {' '.join(args)}`" in again.stderr and "Traceback" not in again.stderr
        assert "serving on" not in again.stderr


def test_start_of_a_running_cluster_exits_3_naming_its_url_and_stop(controller_factory, tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    running = controller_factory("busy")
    _refused_as_running(home, ["--config", str(running.config_path)], running.url)
    assert run_iris(home, "--controller", running.url, "cluster", "status").returncode == 0, "it runs on"

    monkeypatch.setenv("IRIS_HOME", str(tmp_path / "local-home"))
    port = free_port()
    local = ["--local", "--port", str(port)]
    started = run_iris(home, "cluster", "start", *local, "--detach")
    try:
        assert started.returncode == 0, started.stderr
        _refused_as_running(home, local, f"http://127.0.0.1:{port}")
        by_name = run_iris(home, "--cluster", "local", "cluster", "public-key")  # recorded without a config
        assert by_name.returncode == 0 and "PUBLIC KEY" in by_name.stdout, by_name.stderr
        # Asked for on another port, the answer still names the port the running one serves on.
        elsewhere = run_iris(home, "cluster", "start", "--local", "--port", str(free_port()), "--detach")
        assert elsewhere.returncode == 3, elsewhere.stdout + elsewhere.stderr
        assert f"is already running at http://127.0.0.1:{port} " in elsewhere.stderr, elsewhere.stderr
        assert "`iris cluster stop --local`" in elsewhere.stderr
    finally:
        stopped = run_iris(home, "cluster", "stop", *local)
    assert stopped.returncode == 0 and "stopped cluster local" in stopped.stdout


# Asks whether the cluster of the config in argv[1] runs, counting the file locks the answer took.
PROBE = """
import sys
taken = []
sys.addaudithook(lambda event, args: taken.append(args) if event == "fcntl.flock" else None)
from iris.controller.process import lock_held
from iris.core.config import load_config
print(lock_held(load_config(sys.argv[1])), len(taken))
"""


def test_asking_whether_a_cluster_runs_never_takes_its_lock(controller_factory):
    """A start that found the lock taken by someone merely asking would exit 3 with nothing running."""
    running = controller_factory("probed")

    def ask() -> list[str]:
        got = subprocess.run(
            [sys.executable, "-c", PROBE, str(running.config_path)], capture_output=True, text=True, timeout=60
        )
        assert got.returncode == 0, got.stderr
        return got.stdout.split()

    assert ask() == ["True", "0"]
    running.stop()
    assert ask() == ["False", "0"]


def test_two_starts_at_once_leave_one_running_and_the_other_exits_3(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    port = free_port()
    cfg = _config(tmp_path, "twice", port, tmp_path / "twice-state")
    env = {k: v for k, v in os.environ.items() if k not in ("IRIS_CONTROLLER", "IRIS_TOKEN")}
    env["HOME"] = str(home)
    logs = [tmp_path / f"start-{i}.log" for i in range(2)]
    starts = []
    for log in logs:
        with open(log, "w") as out:
            starts.append(
                subprocess.Popen(
                    [sys.executable, "-m", "iris.cli.main", "cluster", "start", "--config", str(cfg)],
                    env=env,
                    cwd=home,
                    stdout=out,
                    stderr=out,
                )
            )
    try:
        wait_until(lambda: any(p.poll() is not None for p in starts), timeout=60, message="one start to give up")
        (loser,) = [p for p in starts if p.poll() is not None]
        (winner,) = [p for p in starts if p is not loser]
        said = logs[starts.index(loser)].read_text()
        assert loser.returncode == 3 and "is already running at" in said, said
        answer = wait_until(lambda: probe(f"http://127.0.0.1:{port}"), timeout=60, message="the other to serve")
        assert answer["pid"] == winner.pid and winner.poll() is None
    finally:
        for p in starts:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
