"""The lean paths of `iris job run`, `job list` and `job describe` print, exit and submit exactly as the click commands do.

Every command line runs twice against one real controller: through `main` as the console script
runs it (the lean path first), and through `main(lean=False)` (click only). Stdout, stderr and the
exit code must match once the parts that differ by design are made equal: the job name (each run
files its own job) and the seconds a followed job took.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest

from iris.cli.main import main
from iris.client import IrisClient
from tests.conftest import ROOT, ControllerFactory, wait_until

TAGS = {True: "tagln", False: "tagck"}  # of one length, so sizes printed match
# Command lines the lean path runs itself; {tag} is a per-run name part.
TAKEN = [
    ["job", "run", "--no-wait", "--no-workspace", "--job-name", "{tag}-a", "--", "true"],
    ["job", "run", "--no-wait", "--no-workspace", "--user", "{tag}", "--", "true"],
    [
        "-o",
        "json",
        "job",
        "run",
        "--no-wait",
        "--no-workspace",
        "--job-name={tag}-b",
        "--memory",
        "2G",
        "--cpu",
        "0.5",
        "--disk=1G",
        "-e",
        "A",
        "1",
        "-e",
        "B=2",
        "--priority",
        "batch",
        "--max-retries",
        "2",
        "--timeout",
        "5m",
        "--constraint",
        "region=us-east5",
        "--",
        "sh",
        "-c",
        "exit 0",
    ],
    ["job", "run", "--no-workspace", "--job-name", "{tag}-c", "-t", "--", "echo", "hello"],
    ["job", "run", "--no-workspace", "--job-name", "{tag}-d", "--", "sh", "-c", "echo out; echo err >&2; exit 3"],
    ["job", "run", "--no-workspace", "--job-name", "{tag}-e", "-ojson", "--", "echo", "hello"],
    ["job", "run", "--no-wait", "--workdir", "ws-{tag}", "--job-name", "{tag}-f", "--", "true"],
    ["job", "run", "--no-wait", "--no-workspace", "--job-name", "{tag}-g", "--", "definitely-not-a-program"],
    ["job", "run", "--no-wait", "--no-workspace", "--job-name", "dup-{tag}", "--", "true"],  # refused: exists
    ["job", "run", "--no-wait", "--no-workspace", "--gpu", "H100x8", "--job-name", "{tag}-h", "--", "true"],
]
# Command lines the lean path leaves to click (help, unknown flags, values click refuses).
LEFT = [
    ["job", "run", "--no-wait", "--bogus", "--", "true"],
    ["job", "run", "--no-wait"],
    ["job", "run", "--no-wait", "--", ""],
    ["job", "run", "--help"],
    ["--version"],
    ["job", "run", "--memory", "512", "--", "true"],
    ["job", "run", "--disk", "0G", "--", "true"],
    ["job", "run", "--gpu", "x8", "--", "true"],
    ["job", "run", "--tpu", "v5p", "--", "true"],
    ["job", "run", "--cpu", "lots", "--", "true"],
    ["job", "run", "--replicas", "0", "--", "true"],
    ["job", "run", "--priority", "urgent", "--", "true"],
    ["job", "run", "--priority", "BATCH", "--", "true"],
    ["job", "run", "--existing", "merge", "--", "true"],
    ["job", "run", "--timeout", "", "--", "true"],
    ["job", "run", "--timeout", "soon", "--", "true"],
    ["job", "run", "--constraint", "region~x", "--", "true"],
    ["job", "run", "-e", "1A=b", "--", "true"],
    ["job", "run", "-e", "KEY", "--", "true"],
    ["job", "run", "-e"],
    ["job", "run", "--env-file", "/nonexistent/env", "--", "true"],
    ["job", "run", "--job-name", "bad/name", "--", "true"],
    ["job", "run", "--workdir", "/nonexistent", "--", "true"],
    ["job", "run", "--workdir", ".", "--no-workspace", "--", "true"],
    ["job", "run", "--no-wait=yes", "--", "true"],
    ["job", "run", "--target-cluster", "nowhere", "--", "true"],
    ["-o", "yaml", "job", "run", "--", "true"],
    ["-o", "yaml", "job", "run", "-o", "json", "--no-wait", "--no-workspace", "--", "true"],
    ["-o", "json", "job", "run", "--memory", "512", "--", "true"],
    ["--controller"],
    ["job", "launch", "--", "true"],
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    factory = ControllerFactory(tmp_path_factory.mktemp("lean"))
    try:
        yield factory("lean")
    finally:
        factory.cleanup()


def _normal(text: str, tag: str) -> str:
    text = text.replace(tag, "TAG")
    text = re.sub(r"after [0-9.]+s", "after Ns", text)
    text = re.sub(r"job-\d{8}-\d{6}-[0-9a-f]+", "job-ID", text)  # a generated name
    text = re.sub(r'(_ms|seq)": "?[0-9]+"?', r'\1": N', text)  # times in JSON
    return re.sub(r"\b\d\d:\d\d:\d\d\.\d\d\d ", "HH:MM:SS.mmm ", text)


def _in_process(capsys, monkeypatch, tmp_path, url: str, argv: list[str], lean: bool) -> tuple[int, str, str]:
    tag = TAGS[lean]
    monkeypatch.chdir(tmp_path)
    (tmp_path / f"ws-{tag}").mkdir(exist_ok=True)
    (tmp_path / f"ws-{tag}" / "train.py").write_text(f"print('{tag}')\n")  # same size, its own content id
    monkeypatch.setenv("IRIS_CONTROLLER", url)
    monkeypatch.setenv("USER", "alice")
    monkeypatch.delenv("IRIS_JOB_ID", raising=False)
    capsys.readouterr()
    try:
        main([a.replace("{tag}", tag) for a in argv], lean=lean)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out = capsys.readouterr()
    return code, _normal(out.out, tag), _normal(out.err, tag)


@pytest.mark.parametrize("argv", TAKEN + LEFT, ids=lambda argv: " ".join(argv)[:60])
def test_lean_job_run_prints_and_exits_as_the_click_command_does(cluster, capsys, monkeypatch, tmp_path, argv):
    with IrisClient(cluster.url) as client:
        for tag in TAGS.values():
            client.submit("true", name=f"dup-{tag}", user="alice", existing_job_policy="keep")
        before = len(client.list(limit=1000))
        via_click = _in_process(capsys, monkeypatch, tmp_path, cluster.url, argv, lean=False)
        via_lean = _in_process(capsys, monkeypatch, tmp_path, cluster.url, argv, lean=True)
        assert via_lean == via_click
        added = len(client.list(limit=1000)) - before
    assert added == (2 if argv in TAKEN and "dup-{tag}" not in argv else 0)  # one job per run, none for bad input
    if argv in LEFT:
        assert via_click[0] in (0, 3) and (via_click[0] == 0) == ("--help" in argv or "--version" in argv)


def test_lean_job_run_sends_the_same_request_as_the_click_command(cluster, capsys, monkeypatch, tmp_path):
    argv = [a.replace("{tag}-b", "{tag}-request") for a in TAKEN[2]]
    docs = {}
    for lean in (False, True):
        code, out, _ = _in_process(capsys, monkeypatch, tmp_path, cluster.url, argv, lean)
        assert code == 0
        job_id = json.loads(out)["job_id"].replace("TAG", TAGS[lean])
        with IrisClient(cluster.url) as client:
            described = client.describe(job_id).job
        docs[lean] = (described.resources, list(described.constraints), described.priority, list(described.command))
    assert docs[True] == docs[False]
    resources, constraints, priority, command = docs[True]
    assert (resources.memory_bytes, resources.disk_bytes, resources.cpu, priority, command) == (
        2 << 30,
        1 << 30,
        0.5,
        "batch",
        ["sh", "-c", "exit 0"],
    )
    assert [(c.key, list(c.values)) for c in constraints] == [("region", ["us-east5"])]


def _program(url: str | None, home, argv: list[str], lean: bool, modules_file) -> subprocess.CompletedProcess:
    code = (
        "import atexit, os, sys\n"
        "def dump():\n"
        "    with open(os.environ['MODULES_FILE'], 'w') as f:\n"
        "        f.write(' '.join(sorted(sys.modules)))\n"
        "atexit.register(dump)\n"
        "from iris.cli.main import main\n"
        f"main(lean={lean})\n"
    )
    env = {**os.environ, "HOME": str(home), "MODULES_FILE": str(modules_file)}
    env.pop("IRIS_TOKEN", None)
    env.pop("IRIS_CONTROLLER", None)
    if url is not None:
        env["IRIS_CONTROLLER"] = url
    env["PYTHONPATH"] = str(ROOT / "src")
    return subprocess.run([sys.executable, "-c", code, *argv], env=env, capture_output=True, text=True, timeout=60)


SPARED = ("click", "yaml", "ssl", "socket", "email", "http", "google", "typing", "ast", "dis", "pydantic", "sqlalchemy")


@pytest.mark.parametrize(
    "argv, code",
    [
        (["job", "run", "--no-wait", "--no-workspace", "--user", "alice", "--memory", "1G", "--", "true"], 0),
        (["--token", "not-a-token", "job", "run", "--no-wait", "--no-workspace", "--", "true"], 3),
        (
            [
                "--controller",
                "http://127.0.0.1:9",
                "-o",
                "json",
                "job",
                "run",
                "--no-wait",
                "--no-workspace",
                "--",
                "true",
            ],
            3,
        ),
        (["job", "run", "--no-wait", "--no-workspace", "--user", "alice", "--job-name", "dup-x", "--", "true"], 2),
    ],
    ids=["submitted", "bad token", "unreachable", "refused"],
)
def test_lean_job_run_as_a_program_imports_none_of_click_yaml_ssl_or_protobuf(cluster, tmp_path, argv, code):
    """As its own process: same output as click's, and none of what the lean path exists to avoid."""
    with IrisClient(cluster.url) as client:
        client.submit("true", name="dup-x", user="alice", existing_job_policy="keep")
    runs = {}
    for lean in (False, True):
        modules_file = tmp_path / f"modules-{lean}"
        result = _program(cluster.url, tmp_path, argv, lean, modules_file)
        modules = set(modules_file.read_text().split())
        runs[lean] = (result.returncode, re.sub(r"/alice/job-\S+", "ID", result.stdout), result.stderr, modules)
    assert runs[True][:3] == runs[False][:3]
    assert runs[True][0] == code, runs[True][2]
    assert "click" in runs[False][3]  # the listing is real
    assert not {m.partition(".")[0] for m in runs[True][3]} & set(SPARED), {
        m.partition(".")[0] for m in runs[True][3]
    } & set(SPARED)


def test_a_deferred_module_is_imported_on_first_use_and_then_is_the_real_one():
    code = (
        "import sys\n"
        "from iris.cli.main import _defer\n"
        "_defer('inspect')\n"
        "import dataclasses, inspect\n"
        "before = 'ast' in sys.modules\n"
        "@dataclasses.dataclass\n"
        "class P:\n"
        "    x: int\n"
        "print(before, P.__doc__, sys.modules['inspect'] is not inspect, inspect.isclass is sys.modules['inspect'].isclass)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "P(x:", "int)", "True", "True"]


def _both(url: str | None, home, argv: list[str]) -> dict:
    runs = {}
    for lean in (False, True):
        modules_file = home / f"modules-{lean}"
        result = _program(url, home, argv, lean, modules_file)
        runs[lean] = (result.returncode, result.stdout, result.stderr, set(modules_file.read_text().split()))
    return runs


def test_lean_job_run_finds_a_named_or_default_cluster_without_yaml(cluster, tmp_path):
    (tmp_path / ".iris").mkdir()
    listing = tmp_path / ".iris" / "clusters.yaml"
    listing.write_text(f"default: here\nclusters:\n  here: {{url: '{cluster.url}'}}\n")
    # The parsed list is kept only for a file whose last change (which utime cannot move back) is
    # more than two seconds old.
    wait_until(lambda: time.time() - listing.stat().st_ctime > 2.1, timeout=30, message="the listing to age")
    for argv in (
        ["--cluster", "here", "job", "run", "--no-wait", "--no-workspace", "--user", "alice", "--", "true"],
        ["job", "run", "--no-wait", "--no-workspace", "--user", "alice", "--", "true"],
        ["--cluster", "nowhere", "job", "run", "--no-wait", "--no-workspace", "--", "true"],
    ):
        runs = _both(None, tmp_path, argv)  # click first: it parses the YAML and keeps the copy
        code, out, err, modules = runs[True]
        assert (code, err) == runs[False][:3:2], err
        if "nowhere" in argv:
            assert code == 3 and "no cluster named 'nowhere'" in err
            continue
        assert code == 0 and out.startswith("/alice/job-")
        assert "yaml" not in modules and "click" not in modules
        assert (tmp_path / ".iris" / ".clusters.cache.json").exists()


def test_lean_job_run_sends_a_saved_token_without_importing_the_auth_libraries(cluster, tmp_path):
    from iris.client.token_store import TokenStore

    TokenStore(tmp_path / ".iris" / "tokens.json").put(cluster.url, "not-a-token")
    runs = _both(cluster.url, tmp_path, ["job", "run", "--no-wait", "--no-workspace", "--", "true"])
    assert runs[True][:3] == runs[False][:3]
    assert runs[True][0] == 3 and "token" in runs[True][2]  # the controller refused the saved token
    assert not {m.partition(".")[0] for m in runs[True][3]} & {"jwt", "cryptography", "click"}


# `iris job list` forms the lean path runs itself, and those it leaves to click.
LIST_TAKEN = [
    ["job", "list"],
    ["job", "list", "--state", "failed"],
    ["job", "list", "--state=RUNNING", "--prefix", "/lister/"],
    ["job", "list", "--user", "lister", "--page-size", "2"],
    ["job", "list", "--user=lister", "--limit", "3", "--page-size=2"],
    ["job", "list", "--user", "lister", "--all", "--page-size", "2"],
    ["job", "list", "--prefix", "/lister/", "--page-size", "2", "-o", "json"],
    ["-o", "json", "job", "list", "--user", "lister", "--all", "--page-size", "2"],
    ["-ojson", "job", "list", "--state", "killed"],
    ["job", "list", "--prefix", "/nobody/", "--state", "pending"],
    ["-o", "json", "job", "list", "--prefix", "/nobody/"],
]
LIST_LEFT = [
    ["job", "list", "--state", "done"],
    ["job", "list", "--all", "--limit", "2"],
    ["job", "list", "--limit", "-1"],
    ["job", "list", "--page-size", "9999"],
    ["job", "list", "--page-size"],
    ["job", "list", "--bogus"],
    ["job", "list", "extra"],
    ["job", "list", "--help"],
    ["-o", "yaml", "job", "list"],
    ["-o", "json", "job", "list", "--watch"],
]


@pytest.fixture(scope="module")
def list_cluster(tmp_path_factory):
    """A controller of its own: the other tests' jobs would change state between two listings."""
    factory = ControllerFactory(tmp_path_factory.mktemp("leanlist"))
    try:
        yield factory("lean")
    finally:
        factory.cleanup()


@pytest.fixture(scope="module")
def listed(list_cluster):
    """Jobs of user `lister` in five states, settled, on a controller that runs nothing else."""
    with IrisClient(list_cluster.url) as client:
        names = {
            "ok": ("true", "SUCCEEDED"),
            "bad": ("false", "FAILED"),
            "busy": ("sleep 600", "RUNNING"),
            "stopped": ("sleep 600", "KILLED"),
        }
        for name, (command, _) in names.items():
            client.submit(command, name=name, user="lister", existing_job_policy="keep")
        client.submit("true", name="huge", user="lister", cpu=100000, existing_job_policy="keep")
        wait_until(lambda: client.status("/lister/stopped").state == "RUNNING", timeout=60, message="a job to run")
        client.cancel("/lister/stopped")
        for name, (_, state) in names.items():
            wait_until(lambda n=name, s=state: client.status(f"/lister/{n}").state == s, timeout=60, message=name)
        yield client


@pytest.mark.parametrize("argv", LIST_TAKEN + LIST_LEFT, ids=lambda argv: " ".join(argv)[:60])
def test_lean_job_list_prints_and_exits_as_the_click_command_does(
    list_cluster, listed, capsys, monkeypatch, tmp_path, argv
):
    monkeypatch.setattr("iris.cli.output.format_age", lambda ms, now_ms=None: "7s")  # the clock moves between runs
    via_click = _in_process(capsys, monkeypatch, tmp_path, list_cluster.url, argv, lean=False)
    via_lean = _in_process(capsys, monkeypatch, tmp_path, list_cluster.url, argv, lean=True)
    assert via_lean == via_click
    code, out, err = via_click
    from iris.cli.lean import lean_command

    command = lean_command(argv)
    if argv in LIST_TAKEN:
        assert code == 0, err
        assert command is not None and command() == 0  # the lean path printed it, not click after it
        if "lister" in " ".join(argv) and "json" not in " ".join(argv):
            assert "/lister/" in out
        if "--page-size" in argv and "--all" not in argv and "--user" in argv:
            assert "showing" in err  # the page was smaller than the list
    else:
        assert code == (0 if "--help" in argv else 3), err
        assert command is None or command() is None


def test_lean_job_list_as_a_program_imports_neither_click_nor_protobuf(list_cluster, listed, tmp_path):
    for argv in (["job", "list", "--user", "lister", "--page-size", "2"], ["-o", "json", "job", "list"]):
        runs = _both(list_cluster.url, tmp_path, argv)
        assert runs[True][0] == 0 and runs[True][1], runs[True][2]
        assert "click" in runs[False][3] and "google.protobuf" in runs[False][3]  # the listing is real
        spared = {m.partition(".")[0] for m in runs[True][3]} & {"click", "google", "yaml"}
        assert not spared, spared
        if "json" in argv:
            assert json.loads(runs[True][1]) == json.loads(runs[False][1])
        else:
            assert runs[True][2] == runs[False][2] and "showing 2 of" in runs[True][2]


# What the lean `job list` leaves unimported, beside click and protobuf: most of its time as a
# process went to start-up, and these are what the SDK's request builders and dataclasses bring,
# and what only a double (struct, math) or the module type's home (types) would need.
LIST_SPARED = (
    "re",
    "enum",
    "dataclasses",
    "threading",
    "functools",
    "iris.client.client",
    "iris.core.names",
    "struct",
    "math",
    "types",
)


def test_lean_job_list_as_a_program_imports_no_regular_expressions_dataclasses_or_sdk(list_cluster, listed, tmp_path):
    for argv in (["job", "list", "--user", "lister"], ["-o", "json", "job", "list", "--state", "failed"]):
        runs = _both(list_cluster.url, tmp_path, argv)
        assert runs[True][:3] == runs[False][:3] and runs[True][0] == 0, runs[True][2]
        assert set(LIST_SPARED) <= runs[False][3]  # the names are real modules the click command imports
        loaded = runs[True][3] & set(LIST_SPARED)
        assert not loaded, loaded


# `iris job describe` forms the lean path runs itself, and those it leaves to click. Each runs with
# bob's token ({bob}): alice's jobs are another user's. {alice} is alice's token.
DESCRIBE_TAKEN = [
    ["job", "describe", "/alice/ok"],
    ["job", "describe", "/alice/bad"],
    ["-o", "json", "job", "describe", "/alice/bad"],
    ["job", "describe", "/alice/gang", "-ojson"],
    ["job", "describe", "/alice/gang"],
    ["job", "describe", "/alice/busy"],
    ["job", "describe", "/alice/stopped", "--output=json"],
    ["job", "describe", "/alice/huge"],
    ["job", "describe", "/alice/big"],
    ["job", "describe", "--all-tasks", "/alice/big"],
    ["job", "describe", "/alice/big", "-o", "json"],
    ["-o", "json", "job", "describe", "/alice/big", "--all-tasks"],
    ["job", "describe", "--", "/alice/ok"],
    ["--token", "{alice}", "job", "describe", "retried"],  # a short name, under the token's user
]
DESCRIBE_LEFT = [
    ["job", "describe", "/alice/nope"],  # unknown
    ["-o", "json", "job", "describe", "/alice/nope"],
    ["job", "describe", "//x"],  # malformed
    ["job", "describe", "nope"],  # a short name of bob's that does not exist
    ["--token", "not-a-token", "job", "describe", "/alice/ok"],  # refused
    ["job", "describe"],
    ["job", "describe", "/alice/ok", "/alice/bad"],
    ["job", "describe", "--all-tasks=yes", "/alice/ok"],
    ["job", "describe", "--bogus", "/alice/ok"],
    ["job", "describe", "--help"],
    ["-o", "yaml", "job", "describe", "/alice/ok"],
    ["job", "describe", "/alice/ok", "-o"],
]
BIG = 1001  # one task more than a page
NOW_MS = 1_900_000_000_000  # the "now" a running job's run time is measured to, in both runs


@pytest.fixture(scope="module")
def auth_cluster(tmp_path_factory):
    """A controller of its own; each call below sends a user's token, which it checks and acts as."""
    factory = ControllerFactory(tmp_path_factory.mktemp("leandescribe"))
    try:
        yield factory("lean")
    finally:
        factory.cleanup()


@pytest.fixture(scope="module")
def described(auth_cluster):
    """Alice's jobs in every state (failed with an error, coscheduled, a page and one more of
    tasks, retried), settled; and a token each for alice and bob."""
    from iris.controller.auth import load_or_create_signing_key, mint_token

    key = load_or_create_signing_key(None, auth_cluster.state_dir)
    tokens = {user: mint_token(key, auth_cluster.name, user, "user", 3600) for user in ("alice", "bob")}
    with IrisClient(auth_cluster.url, token=tokens["alice"]) as client:
        jobs = {
            "ok": (dict(command="true"), "SUCCEEDED"),
            "bad": (dict(command="echo boom >&2; exit 3", memory="2G", disk="1G"), "FAILED"),
            "retried": (dict(command="false", max_retries=1), "FAILED"),
            "gang": (dict(command="true", replicas=3, coschedule=True, constraints=("region not_exists",)), None),
            "busy": (dict(command="sleep 600"), "RUNNING"),
            "stopped": (dict(command="sleep 600"), "KILLED"),
            "huge": (dict(command="true", cpu=100000), None),
            "big": (dict(command="true", cpu=100000, replicas=BIG), None),
        }
        for name, (options, _) in jobs.items():
            client.submit(name=name, existing_job_policy="keep", **options)
        wait_until(lambda: client.status("/alice/stopped").state == "RUNNING", timeout=60, message="a job to run")
        client.cancel("/alice/stopped")
        for name, (_, state) in jobs.items():
            if state is not None:
                wait_until(lambda n=name, s=state: client.status(f"/alice/{n}").state == s, timeout=60, message=name)
        wait_until(lambda: client.status("/alice/gang").state == "SUCCEEDED", timeout=60, message="the gang")
    yield tokens


def _tokens(argv: list[str], tokens: dict) -> list[str]:
    argv = [a.replace("{alice}", tokens["alice"]) for a in argv]
    return argv if "--token" in argv else ["--token", tokens["bob"], *argv]


@pytest.mark.parametrize("argv", DESCRIBE_TAKEN + DESCRIBE_LEFT, ids=lambda argv: " ".join(argv)[:60])
def test_lean_job_describe_prints_and_exits_as_the_click_command_does(
    auth_cluster, described, capsys, monkeypatch, tmp_path, argv
):
    from iris.cli import output

    run_time = output.run_time
    monkeypatch.setattr(output, "run_time", lambda started, finished, now_ms=None: run_time(started, finished, NOW_MS))
    full = _tokens(argv, described)
    via_click = _in_process(capsys, monkeypatch, tmp_path, auth_cluster.url, full, lean=False)
    via_lean = _in_process(capsys, monkeypatch, tmp_path, auth_cluster.url, full, lean=True)
    assert via_lean == via_click
    code, out, err = via_click
    from iris.cli.lean import lean_command

    monkeypatch.setenv("IRIS_CONTROLLER", auth_cluster.url)
    command = lean_command(full)
    if argv in DESCRIBE_LEFT:
        assert code == (0 if "--help" in argv else 3), err
        assert command is None or command() is None
        return
    assert code == 0, err
    capsys.readouterr()
    assert command is not None and command() == 0  # the lean path printed it, not click after it
    raw = capsys.readouterr().out
    assert _normal(raw, TAGS[True]) == out
    if "/alice/big" in argv:
        more = "--all-tasks" not in argv
        assert ("showing 1,000 of 1,001 tasks; --all-tasks for every one" in err) == more
        tasks = (
            json.loads(raw)["tasks"]
            if "json" in " ".join(argv)
            else raw.split("\nTasks:\n")[1].split("\n\n")[0].splitlines()[1:]
        )
        assert len(tasks) == (1000 if more else BIG)


def test_lean_job_describe_shows_each_state_as_the_job_has_it(auth_cluster, described, capsys, monkeypatch, tmp_path):
    """What the pages compared above hold: the failed job's error, the gang's tasks, each attempt."""
    outs = {}
    for name in ("bad", "gang", "retried"):
        argv = _tokens(["job", "describe", f"/alice/{name}"], described)
        code, outs[name], _ = _in_process(capsys, monkeypatch, tmp_path, auth_cluster.url, argv, lean=True)
        assert code == 0
    assert "State:" in outs["bad"] and "FAILED" in outs["bad"] and "Error:" in outs["bad"]
    assert re.search(r"\nResources: +cpu=1 memory=2G disk=1G\n", outs["bad"])
    assert [line.split()[0] for line in outs["gang"].split("Tasks:\n")[1].splitlines()[1:4]] == [
        "/alice/gang/0",
        "/alice/gang/1",
        "/alice/gang/2",
    ]
    assert "Constraints:" in outs["gang"]
    assert "/alice/retried/0:0" in outs["retried"] and "/alice/retried/0:1" in outs["retried"]


def test_lean_job_describe_as_a_program_imports_neither_click_nor_protobuf(auth_cluster, described, tmp_path):
    for argv in (["job", "describe", "/alice/bad"], ["-o", "json", "job", "describe", "--all-tasks", "/alice/big"]):
        runs = _both(auth_cluster.url, tmp_path, _tokens(argv, described))
        assert runs[True][:3] == runs[False][:3], runs[True][2]
        assert runs[True][0] == 0 and runs[True][1]
        assert "click" in runs[False][3] and "google.protobuf" in runs[False][3]  # the listing is real
        spared = {m.partition(".")[0] for m in runs[True][3]} & set(SPARED)
        assert not spared, spared
        # It calls through the transport: the SDK's client module and its request builders stay unread.
        assert "iris.client.client" in runs[False][3] and "iris.client.client" not in runs[True][3]
