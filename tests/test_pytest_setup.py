"""The suite runs with xdist's workers, without them, and with xdist switched off altogether; with
workers, each file goes whole to one of them (its module-scoped fixtures are built once)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.allowed_skips import ALLOWED_SKIPS, allowed
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


SKIPPING = """
import pytest

def test_that_skips():
    pytest.skip("no such service here")

def test_that_runs():
    assert True
"""


def _run_skipping(tmp_path, ci: str) -> subprocess.CompletedProcess:
    sample = tmp_path / "test_sample_skips.py"
    sample.write_text(SKIPPING)
    env = {**os.environ, "CI": ci}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "tests.conftest", "-q", "-rs", str(sample)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="the rule holds for CI runs as root")
def test_skipped_test_fails_a_ci_run_as_root_unless_allowed(tmp_path):
    got = _run_skipping(tmp_path, "true")
    assert got.returncode == 1, got.stdout[-2000:]
    assert "1 failed, 1 passed" in got.stdout, got.stdout[-2000:]
    assert "was skipped (no such service here) in a CI run as root" in got.stdout
    assert "tests/allowed_skips.py" in got.stdout
    # Outside CI a skip is a skip.
    got = _run_skipping(tmp_path, "")
    assert got.returncode == 0 and "1 passed, 1 skipped" in got.stdout, got.stdout[-2000:]


def test_allowed_skips_are_named_by_test_with_a_reason():
    assert ALLOWED_SKIPS and all(reason.strip() for reason in ALLOWED_SKIPS.values())
    for nodeid in ALLOWED_SKIPS:
        path, _, name = nodeid.partition("::")
        assert (ROOT / path).is_file() and f"def {name}(" in (ROOT / path).read_text(), nodeid
    assert allowed("tests/scheduler/test_scheduler_pool.py::test_pool_search_same_as_scan[3]")
    assert allowed("tests/scheduler/test_scheduler_pool.py::test_other") is None
