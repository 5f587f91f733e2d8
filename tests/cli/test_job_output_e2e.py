"""A job's output as the `iris` command prints it: control characters shown as escapes, so a job
cannot drive the reader's terminal, while `-o json` and `--raw` give the stored text exactly."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import wait_until

# Sets the window title, clears the screen, moves the cursor home, then a tab, a bell and a C1 CSI.
NASTY = "\x1b]0;owned\x07\x1b[2J\x1b[Hhi\tthere\x07\x9b1m"
SHOWN = "\\x1b]0;owned\\x07\\x1b[2J\\x1b[Hhi\tthere\\x07\\x9b1m"
COMMAND = "printf '\\033]0;owned\\007\\033[2J\\033[Hhi\\tthere\\007\\302\\2331m\\n'; printf 'err\\033[31m\\n' >&2"


def test_job_output_control_characters_are_escaped_on_every_printing_path(module_controller):
    ctl = module_controller
    run = ctl.cli("job", "run", "--user", "alice", "--job-name", "nasty", "--", COMMAND)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["/alice/nasty", SHOWN]
    assert "err\\x1b[31m" in run.stderr and "\x1b" not in run.stderr

    logs = ctl.cli("job", "logs", "/alice/nasty")
    assert logs.stdout == SHOWN + "\n"
    assert "err\\x1b[31m" in logs.stderr and "\x1b" not in logs.stderr
    follow = ctl.cli("job", "logs", "-f", "-t", "/alice/nasty")
    assert follow.stdout.endswith(" " + SHOWN + "\n") and "\x1b" not in follow.stdout + follow.stderr

    raw = ctl.cli("job", "logs", "--raw", "/alice/nasty")
    assert raw.stdout == NASTY + "\n" and raw.stderr == "err\x1b[31m\n"
    doc = json.loads(ctl.cli("-o", "json", "job", "logs", "/alice/nasty").stdout)
    assert [line["text"] for line in doc["lines"] if line["stream"] == "stdout"] == [NASTY]


def test_job_run_raw_prints_the_output_as_the_job_wrote_it(module_controller):
    run = module_controller.cli("job", "run", "--raw", "--user", "alice", "--job-name", "rawrun", "--", COMMAND)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["/alice/rawrun", NASTY]
    assert "err\x1b[31m" in run.stderr


def test_a_stop_reason_with_escape_sequences_is_shown_escaped_where_a_job_ends(module_controller):
    ctl = module_controller
    empty = ctl.state_dir.parent / "cwd"  # the folder `cli` runs from: the workspace `job run` ships
    empty.mkdir(parents=True, exist_ok=True)
    follow = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "iris.cli.main",
            "job",
            "run",
            "--user",
            "alice",
            "--job-name",
            "stopped",
            "--",
            "sleep 300",
        ],
        env={**os.environ, "IRIS_CONTROLLER": ctl.url},
        cwd=empty,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(
            lambda: ctl.cli("job", "describe", "/alice/stopped").stdout.count("RUNNING") > 0, message="the job to run"
        )
        stop = ctl.cli("job", "stop", "--reason", "\x1b]0;owned\x07\x1b[2Jbye", "/alice/stopped")
        assert stop.returncode == 0, stop.stderr
        _, err = follow.communicate(timeout=60)
    finally:
        if follow.poll() is None:
            follow.kill()
            follow.wait()
    assert "\x1b" not in err and "\\x1b]0;owned\\x07\\x1b[2Jbye" in err, err
    ended = ctl.cli("job", "logs", "-f", "/alice/stopped").stderr
    assert "\x1b" not in ended and "ended KILLED: " in ended and "\\x1b[2Jbye" in ended, ended
