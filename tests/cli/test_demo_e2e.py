"""`iris demo` as a real subprocess: three real controllers federate real jobs, and nothing survives it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil

STEPS = [
    # (job id, disposition at submit, final state, cluster that ran it)
    ("/demo/cpu-hello", "local", "SUCCEEDED", "marin"),
    ("/demo/train-h100", "queued", "SUCCEEDED", "cw-h100"),
    ("/demo/pinned-eval", "queued", "SUCCEEDED", "cw-gb200"),
    ("/demo/needs-b300", "rejected", "UNSCHEDULABLE", "marin"),
    ("/demo/sleeper", "queued", "KILLED", "cw-h100"),
]


def run_demo(*args: str, tmp_path: Path, tmpdir: Path | None = None) -> subprocess.CompletedProcess:
    # A HOME of its own: the demo must not depend on (or touch) the caller's token file.
    env = {**os.environ, "HOME": str(tmp_path), "IRIS_TOKEN": "", "IRIS_CONTROLLER": ""}
    if tmpdir is not None:
        env["TMPDIR"] = str(tmpdir)
    return subprocess.run(
        [sys.executable, "-m", "iris.cli.main", *args, "demo"], env=env, capture_output=True, text=True, timeout=120
    )


def pid_alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.Error:
        return False


def processes_mentioning(text: str) -> list[int]:
    """Live processes whose command line contains `text`."""
    found = []
    for proc in psutil.process_iter():
        try:
            if text in " ".join(proc.cmdline()) and pid_alive(proc.pid):
                found.append(proc.pid)
        except psutil.Error:
            pass
    return found


def test_demo_json_report_says_where_each_job_landed_and_nothing_survives(tmp_path):
    # A temp folder others may pass through, as /tmp is (pytest's own are closed): the demo leaves nothing in it.
    tmpdir = Path(tempfile.mkdtemp(prefix="iris-demo-test-", dir="/tmp"))
    tmpdir.chmod(0o711)
    try:
        result = run_demo("-o", "json", tmp_path=tmp_path, tmpdir=tmpdir)
        assert list(tmpdir.glob("iris-attempts-*")) == []  # no controller kept its attempts outside the demo's folder
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    doc = json.loads(result.stdout)
    assert doc["ok"] and doc["left_running"] == []
    assert [c["name"] for c in doc["clusters"]] == ["marin", "cw-h100", "cw-gb200"]
    steps = doc["steps"]
    assert [(s["job_id"], s["disposition"], s["state"], s["cluster"]) for s in steps] == STEPS
    assert all(s["as_expected"] for s in steps)
    local, h100, pinned, rejected, cancelled = steps
    assert local["logs"] == ["hello from marin: task 0 of /demo/cpu-hello"]
    assert h100["handoff_state"] == "HANDED_OFF" and h100["exit_code"] == 0
    assert h100["logs"] == ["training on cw-h100 with GPUs 0,1,2,3,4,5,6,7", "step 100: loss 1.23"]
    assert h100["ran_on"]["cluster"] == "cw-h100" and h100["ran_on"]["attempts"][0]["backend"] == "h100"
    assert "cw-h100" in h100["why"]
    assert pinned["pinned_peer"] == "cw-gb200" and pinned["logs"] == ["eval on cw-gb200"]
    assert "b300" in rejected["message"] and rejected["ran_on"]["attempts"] == [] and rejected["seconds"] < 2
    assert cancelled["pid_alive_before_cancel"] and cancelled["peer_state"] == "KILLED"
    # The demo's own word is not enough: nothing it reported starting is alive, and nothing runs from its folder.
    pids = [*doc["pids_seen"]["controllers"].values(), *doc["pids_seen"]["tasks"]]
    assert len(pids) == 3 + 4 and cancelled["peer_pid"] in pids
    assert [pid for pid in pids if pid_alive(pid)] == []
    assert processes_mentioning(doc["workdir"]) == []
    assert not Path(doc["workdir"]).exists()
    assert doc["seconds"] < 30


def test_demo_narrates_each_step_and_exits_zero(tmp_path):
    # The caller's cluster list is theirs: the demo's throw-away clusters are never added to it.
    listed = tmp_path / ".iris" / "clusters.yaml"
    listed.parent.mkdir()
    listed.write_text("clusters:\n  mine:\n    url: http://127.0.0.1:1\ndefault: mine\n")
    before = listed.read_bytes()
    result = run_demo(tmp_path=tmp_path)
    assert listed.read_bytes() == before
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    for line in (
        "marin reaches cw-h100: backend h100: h100 16 free of 16",
        "marin reaches cw-gb200: backend gb200: gb200 8 free of 8",
        "as expected: local, SUCCEEDED on marin",
        "handoff HANDED_OFF to cw-h100",
        "logs on marin, relayed from cw-h100",
        "     training on cw-h100 with GPUs 0,1,2,3,4,5,6,7",
        "as expected: queued, SUCCEEDED on cw-h100",
        "pinned with --target-cluster cw-gb200",
        "as expected: queued, SUCCEEDED on cw-gb200",
        "marin answers: /demo/needs-b300 UNSCHEDULABLE, disposition rejected (no local backend can host",
        "as expected: rejected, UNSCHEDULABLE before running anywhere",
        "cancel on marin: iris job stop /demo/sleeper",
        "as expected: KILLED on marin, KILLED on cw-h100, process gone",
        "nothing the demo started is left running",
        "every job landed where it should, and nothing is left running",
    ):
        assert line in out, f"missing {line!r} in:\n{out}"
    assert "NOT as expected" not in out
