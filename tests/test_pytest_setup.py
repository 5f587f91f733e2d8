"""The suite runs with xdist's workers, without them, and with xdist switched off altogether; with
workers, each file goes whole to one of them (its module-scoped fixtures are built once)."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.conftest import ROOT

# A file of quick tests, more of them than workers: spread one at a time, both workers would take some.
SAMPLE = "tests/core/test_core.py"


def _pytest(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args, SAMPLE],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _collected(*args: str) -> int:
    got = _pytest("-q", "--co", *args)
    assert got.returncode == 0, (args, got.stdout[-2000:], got.stderr[-2000:])
    found = re.search(r"\b(\d+) tests? collected\b", got.stdout)
    assert found, got.stdout[-500:]
    return int(found.group(1))


def test_pytest_without_xdist_runs_the_suite_config():
    assert _collected("-p", "no:xdist") == _collected() > 2


def test_pytest_with_workers_gives_each_file_whole_to_one_worker(tmp_path):
    got = _pytest("-n", "2", "-v", "--basetemp", str(tmp_path / "t"))
    assert got.returncode == 0, got.stdout[-2000:] + got.stderr[-2000:]
    workers = re.findall(r"^\[(gw\d+)\][^\n]*PASSED", got.stdout, re.MULTILINE)
    assert len(workers) == _collected() > 2, got.stdout[-2000:]
    assert len(set(workers)) == 1, f"the file was split across workers: {sorted(set(workers))}"
