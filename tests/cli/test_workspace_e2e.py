"""`iris job run` ships the current folder as the job's workspace: real CLI processes, a real controller."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

from tests.conftest import ROOT


def _readme_block(first_line: str, lang: str) -> str:
    """The fenced `lang` block of the README that starts with `first_line`."""
    for block in re.findall(rf"```{lang}\n(.*?)```", (ROOT / "README.md").read_text(), re.S):
        if block.startswith(first_line):
            return block
    raise AssertionError(f"no {lang} block starting {first_line!r} in the README")


def test_readme_fanout_example_runs_as_written(controller_factory, monkeypatch, tmp_path):
    # As the README assumes: .venv/bin on PATH (the cluster's too), so `python3` in a task imports iris.
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    controller = controller_factory()
    driver = _readme_block("# driver.py", "python")
    console = _readme_block("$ iris job run --job-name fanout", "console")
    command = console.splitlines()[0].removeprefix("$ iris ").split()
    shown = console.split("\n$ ")[0].splitlines()[1:]  # the command's own output, up to the next prompt
    expected = [line for line in shown if line.startswith("/alice/fanout/")]
    work = tmp_path / "project"
    work.mkdir()
    (work / "driver.py").write_text(driver)
    controller.extra_env["USER"] = "alice"
    run = controller.cli(*command, cwd=work, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["/alice/fanout", *expected]
    assert "/alice/fanout SUCCEEDED" in run.stderr


def test_resubmitting_the_same_tree_sends_no_bundle_bytes(controller, tmp_path):
    work = tmp_path / "code"
    (work / "pkg").mkdir(parents=True)
    (work / "pkg" / "task.py").write_text("print('hello from the shipped code')\n")
    runs = [
        controller.cli("-o", "json", "job", "run", "--user", "alice", "--", "python3", "pkg/task.py", cwd=work)
        for _ in range(2)
    ]
    docs = [json.loads(r.stdout) for r in runs]
    for r, doc in zip(runs, docs):
        assert r.returncode == 0, r.stderr
        assert [line["text"] for line in doc["logs"]] == ["hello from the shipped code"]
    assert docs[0]["workspace"]["uploaded_bytes"] > 0
    assert docs[1]["workspace"]["uploaded_bytes"] == 0
    assert docs[0]["workspace"]["bundle_id"] == docs[1]["workspace"]["bundle_id"]
    text = controller.cli("job", "run", "--user", "alice", "--", "true", cwd=work)
    assert "already on the cluster, nothing sent" in text.stderr
    count = controller.cli("-o", "json", "query", "SELECT count(*) AS n FROM bundles")
    assert json.loads(count.stdout)["rows"] == [[1]]


def test_gitignore_and_irisignore_stay_home(controller, tmp_path):
    work = tmp_path / "repo"
    for name in ("keep.py", "debug.log", "data/big.csv", "sub/keep.txt", "sub/secret.txt", ".git/HEAD"):
        path = work / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(name)
    (work / ".gitignore").write_text("*.log\ndata/\n")
    (work / "sub" / ".irisignore").write_text("secret.txt\n")
    run = controller.cli("job", "run", "--user", "alice", "--", "find . -type f | sort", cwd=work)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[1:] == ["./.gitignore", "./keep.py", "./sub/.irisignore", "./sub/keep.txt"]


def test_a_cluster_state_dir_a_worker_dir_and_saved_tokens_stay_home(controller, tmp_path):
    work = tmp_path / "project"
    state = ("state/marin/controller.lock", "state/marin/signing_key.pem")
    worker = ("wd/worker.lock", "wd/bundles/0a1b/other_users_code.py")  # a worker daemon's --work-dir
    for name in ("train.py", *state, *worker, ".iris/tokens.json"):
        path = work / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(name)
    run = controller.cli("job", "run", "--user", "alice", "--", "find . -type f | sort", cwd=work)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[1:] == ["./train.py"]


def test_workspace_past_the_limit_is_refused_naming_the_biggest_file(controller, tmp_path):
    work = tmp_path / "heavy"
    work.mkdir()
    (work / "train.py").write_text("print(1)\n")
    with open(work / "checkpoint.bin", "wb") as f:
        f.truncate(40 * 1024**2)  # sparse: costs no disk
    run = controller.cli("job", "run", "--user", "alice", "--", "python3", "train.py", cwd=work)
    assert run.returncode == 3
    assert "checkpoint.bin (40.0 MB)" in run.stderr and ".irisignore" in run.stderr
    assert json.loads(controller.cli("-o", "json", "job", "list").stdout) == {"jobs": [], "total": 0}
    (work / ".irisignore").write_text("*.bin\n")
    ok = controller.cli("job", "run", "--user", "alice", "--", "python3", "train.py", cwd=work)
    assert ok.returncode == 0 and ok.stdout.splitlines()[1:] == ["1"], ok.stderr


def test_a_workspace_past_the_transport_default_of_4_mb_travels(controller, tmp_path):
    work = tmp_path / "data"
    work.mkdir()
    (work / "weights.bin").write_bytes(os.urandom(6 * 1024**2))  # incompressible: a 6 MB bundle
    run = controller.cli("job", "run", "--user", "alice", "--", "wc -c < weights.bin", cwd=work)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[1:] == [str(6 * 1024**2)]


def test_workdir_and_no_workspace_override_the_current_folder(controller, tmp_path):
    here, other = tmp_path / "here", tmp_path / "other"
    for folder in (here, other):
        folder.mkdir()
        (folder / f"in-{folder.name}").write_text("x")
    shipped = controller.cli("job", "run", "--user", "alice", "--workdir", str(other), "--", "ls", cwd=here)
    assert shipped.returncode == 0 and shipped.stdout.splitlines()[1:] == ["in-other"], shipped.stderr
    bare = controller.cli("job", "run", "--user", "alice", "--no-workspace", "--", "ls", cwd=here)
    assert bare.returncode == 0 and bare.stdout.splitlines()[1:] == [], bare.stderr
    both = controller.cli("job", "run", "--no-workspace", "--workdir", str(other), "--", "ls", cwd=here)
    assert both.returncode == 3 and "contradict" in both.stderr


def test_sdk_submit_takes_a_workdir_and_children_run_in_their_parents_workspace(controller, tmp_path):
    from iris.client import IrisClient

    work = tmp_path / "sdk"
    work.mkdir()
    (work / "data.txt").write_text("from the sdk\n")
    (work / "parent.sh").write_text(
        "cat data.txt\n"
        f'{sys.executable} -c "from iris.client import IrisClient; c = IrisClient();'
        " j = c.submit('cat data.txt', name='child'); print(c.wait(j).state)\"\n"
    )
    with IrisClient(controller.url, token="") as c:
        job = c.submit(["sh", "parent.sh"], name="sdk", user="alice", parent="", workdir=str(work))
        assert c.wait(job, timeout=120).state == "SUCCEEDED"
        assert [line.text for line in c.logs(job)] == ["from the sdk", "SUCCEEDED"]
        assert [line.text for line in c.logs(f"{job}/child")] == ["from the sdk"]
        bare = c.submit("ls", name="bare", user="alice", parent="")
        assert c.wait(bare, timeout=60).state == "SUCCEEDED" and c.logs(bare) == []
