"""Fixtures that run real controllers: real processes on free loopback ports, real SQLite files.

Every process a fixture starts is stopped at teardown by its PID, even when the test fails.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from iris import testing
from iris.testing import ClusterProcess, ClusterSet, free_port
from tests.allowed_skips import allowed as allowed_skip

ROOT = Path(__file__).resolve().parent.parent

# The harness's controllers are forked from a process that has imported them (see
# iris.testing.forkserver): a start costs about half a second instead of two on a busy 2-core host.
os.environ.setdefault(testing.forkserver.ENABLE_ENV, "1")

__all__ = ["ROOT", "ControllerFactory", "RunningController", "free_port", "start_together", "wait_until"]

# Where the long tests live, longest first. With workers the suite runs `--dist loadfile` (see
# `pytest_cmdline_main`): each file goes whole to one worker (its module-scoped fixtures are built
# once), and a worker takes the next file in this order as it frees up; a long file started near the
# end would be the run's whole tail, started first the short ones fill in behind it. Paths not
# listed keep their place after these.
SLOW_FIRST = (
    "tests/integration/test_federation_chaos.py",
    "tests/integration/test_federation_faults.py",
    "tests/integration/test_federation_honest.py",
    "tests/integration/test_federation.py",
    "tests/controller/test_soak.py",
    "tests/integration/",
    "tests/workers/",
    "tests/dashboard/",
    "tests/controller/",
    "tests/cli/",
    "tests/client/",
    "tests/testing/",
    "tests/backends/",
)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """With xdist's workers (`-n N`) and no `--dist` given, sends each file whole to one worker, in
    the order `pytest_collection_modifyitems` leaves. Chosen here rather than in pyproject's addopts,
    where xdist's options would break `pytest -p no:xdist`. Runs before xdist's own hook, which
    would otherwise pick `load`."""
    if not config.pluginmanager.hasplugin("xdist") or not config.getoption("numprocesses", None):
        return
    if config.option.dist == "no" and not config.option.distload:
        config.option.dist = "loadfile"
        config.option.loadscopereorder = False  # keep SLOW_FIRST's order, not xdist's by file size


def pytest_configure(config):
    """Gives the run a HOME of its own: `iris cluster start` remembers clusters, tokens are saved and
    worker daemons keep their folders under ~/.iris, and a test run must not touch the user's."""
    home = tempfile.mkdtemp(prefix="iris-test-home-")
    os.chmod(home, 0o755)  # tasks under their own uid pass through it, as through a real home
    config._iris_home = (home, os.environ.get("HOME"))
    os.environ["HOME"] = home


def pytest_unconfigure(config):
    home, previous = getattr(config, "_iris_home", (None, None))
    if home is None:
        return
    if previous is None:
        os.environ.pop("HOME", None)
    else:
        os.environ["HOME"] = previous
    shutil.rmtree(home, ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    """Orders the files of long tests first (a stable sort: a file's own order is kept)."""

    def rank(item) -> int:
        path = item.nodeid.split("::")[0]
        return next((i for i, prefix in enumerate(SLOW_FIRST) if path.startswith(prefix)), len(SLOW_FIRST))

    items.sort(key=rank)


def _skips_fail() -> bool:
    """Whether a skip fails the run: in CI (CI=true) as root, where every service the suite needs is
    installed and every test can run, a skip would hide a test that proves nothing there."""
    return os.environ.get("CI") == "true" and os.geteuid() == 0


def _refuse_skip(report, nodeid: str) -> None:
    """Turns `report`, a skip, into a failure that says why, unless allowed_skips lists `nodeid`."""
    if not report.skipped or hasattr(report, "wasxfail") or not _skips_fail() or allowed_skip(nodeid):
        return
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    reason = reason.removeprefix("Skipped: ")
    report.outcome = "failed"
    report.longrepr = (
        f"{nodeid} was skipped ({reason}) in a CI run as root, where every test must run: make it run"
        " here, or list it with the reason it cannot in tests/allowed_skips.py"
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _refuse_skip(outcome.get_result(), item.nodeid)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """A whole module skipped as it is imported (`pytest.skip(..., allow_module_level=True)`)."""
    outcome = yield
    _refuse_skip(outcome.get_result(), collector.nodeid)


def wait_until(predicate, timeout: float = 20.0, interval: float = 0.02, message: str = "condition"):
    """Polls `predicate` until it returns a truthy value; fails the test after `timeout`."""
    return testing.wait_until(predicate, timeout, interval, message, AssertionError)


def default_backends() -> list[dict]:
    return [{"id": "cpu", "kind": "local", "workers": 2, "capacity": {"cpu": 4, "memory": "8G", "disk": "10G"}}]


@dataclass
class RunningController(ClusterProcess):
    """A harness cluster that also runs the `iris` CLI against itself."""

    extra_env: dict = field(default_factory=dict)

    @property
    def log(self) -> Path:
        """The controller's log file (its stdout and stderr)."""
        return self.log_path

    @log.setter
    def log(self, path: Path) -> None:
        self.log_path = path

    def cli(
        self,
        *args: str,
        check: bool = False,
        timeout: float = 60,
        input: str | None = None,
        cwd: Path | str | None = None,
    ) -> subprocess.CompletedProcess:
        """Runs `iris ARGS…` against this controller, from `cwd` (default: an empty folder, the
        workspace `iris job run` ships)."""
        env = {**os.environ, "IRIS_CONTROLLER": self.url, **self.extra_env}
        if cwd is None:
            cwd = self.state_dir.parent / "cwd"
            cwd.mkdir(parents=True, exist_ok=True)
        return subprocess.run(
            [sys.executable, "-m", "iris.cli.main", *args],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=check,
            input=input,
        )


def start_together(*controllers: RunningController) -> list[RunningController]:
    """Starts controllers at once (each start is mostly its imports) and returns once all answer.

    Their ports are fixed when they are made, so a parent's `peers:` may name peers not yet up."""
    with ThreadPoolExecutor(len(controllers)) as pool:
        return list(pool.map(lambda ctl: ctl.start(), controllers))


class ControllerFactory(ClusterSet):
    """`controller_factory(name, backends=…, start=True, **top-level config keys)`."""

    def __call__(
        self, name: str = "test", backends: list[dict] | None = None, start: bool = True, **extra
    ) -> RunningController:
        # Tasks here run under the controller's uid unless a test asks for uids of their own: this
        # host's Python lives in root's private home, which another uid cannot reach.
        extra["auth"] = {"task_uids": {"enabled": False}, **extra.get("auth", {})}
        settings = extra.pop("controller", {"tick_interval": "1s"})
        ctl = RunningController(name, self.base, backends or default_backends(), settings, extra)
        self.add(ctl).write_config()  # the file exists before a start, for tests that read or run it
        return ctl.start() if start else ctl

    def cleanup(self) -> None:
        self.close()


@pytest.fixture
def controller_factory(tmp_path):
    factory = ControllerFactory(tmp_path)
    try:
        yield factory
    finally:
        factory.cleanup()


@pytest.fixture
def controller(controller_factory) -> RunningController:
    return controller_factory()


@pytest.fixture(scope="module")
def module_controller(tmp_path_factory) -> Iterator[RunningController]:
    """A default controller shared by a module's tests that each leave it as they found it (the
    cases of a parametrized refusal check, say): one start instead of one per test."""
    factory = ControllerFactory(tmp_path_factory.mktemp("module-controller"))
    try:
        yield factory()
    finally:
        factory.cleanup()
