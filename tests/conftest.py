"""Fixtures that run real controllers: real processes on free loopback ports, real SQLite files.

Every process a fixture starts is stopped at teardown by its PID, even when the test fails.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from iris.backends.local.backend import kill_leftover_attempts
from iris.controller.process import probe
from iris.core import polling

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(predicate, timeout: float = 20.0, interval: float = 0.02, message: str = "condition"):
    """Polls `predicate` until it returns a truthy value; fails the test after `timeout`."""
    return polling.wait_until(predicate, timeout, interval, message, AssertionError)


def default_backends() -> list[dict]:
    return [{"id": "cpu", "kind": "local", "workers": 2, "capacity": {"cpu": 4, "memory": "8G", "disk": "10G"}}]


@dataclass
class RunningController:
    name: str
    config_path: Path
    state_dir: Path
    url: str
    proc: subprocess.Popen | None = None
    log: Path | None = None
    extra_env: dict = field(default_factory=dict)

    def start(self, timeout: float = 30.0) -> RunningController:
        self.log = self.state_dir.parent / f"{self.name}.log"
        out = open(self.log, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "iris.controller", str(self.config_path)],
            stdout=out,
            stderr=out,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        out.close()
        deadline = time.monotonic() + timeout
        while not probe(self.url, timeout=0.5):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"controller {self.name} did not start:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        """Graceful stop (SIGTERM), then SIGKILL if it lingers."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def kill(self) -> None:
        """SIGKILL: a crash. The controller's attempts keep running, to be re-adopted."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def rewrite(self, **changes) -> None:
        """Changes top-level keys of this controller's config file (before it starts)."""
        config = yaml.safe_load(self.config_path.read_text())
        config.update(changes)
        self.config_path.write_text(yaml.safe_dump(config))

    def restart(self) -> RunningController:
        self.stop()
        return self.start()

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


class ControllerFactory:
    def __init__(self, base: Path):
        self.base = base
        self.started: list[RunningController] = []

    def __call__(
        self, name: str = "test", backends: list[dict] | None = None, start: bool = True, **extra
    ) -> RunningController:
        port = free_port()
        state_dir = self.base / name / "state"
        # Tasks here run under the controller's uid unless a test asks for uids of their own: this
        # host's Python lives in root's private home, which another uid cannot reach.
        extra["auth"] = {"task_uids": {"enabled": False}, **extra.get("auth", {})}
        config = {
            "name": name,
            "listen": f"127.0.0.1:{port}",
            "state_dir": str(state_dir),
            "backends": backends or default_backends(),
            "controller": {"tick_interval": "1s"},
            **extra,
        }
        path = self.base / name / "cluster.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(config))
        ctl = RunningController(name, path, state_dir, f"http://127.0.0.1:{port}")
        self.started.append(ctl)
        return ctl.start() if start else ctl

    def cleanup(self) -> None:
        for ctl in self.started:
            ctl.stop()
        # Attempts outlive a SIGKILLed controller by design; stop any the tests left behind.
        for ctl in self.started:
            kill_leftover_attempts(ctl.state_dir)


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
