from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from iris.cli.main import main
from tests.client.fake_controller import FakeController


@pytest.fixture
def fake_controller():
    """A fake ControllerService on a free loopback port (real HTTP, real Connect protocol)."""
    server = FakeController().start()
    yield server
    server.stop()


@dataclass
class CliResult:
    code: int
    out: str
    err: str

    def json(self):
        """The single JSON document the command printed (fails if there is not exactly one)."""
        return json.loads(self.out)


@pytest.fixture
def iris(capsys, monkeypatch, fake_controller, tmp_path):
    """Runs `iris ARGS…` in this process against the fake controller, from an empty folder (the
    workspace `job run` ships); returns code, stdout, stderr."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("IRIS_CONTROLLER", fake_controller.url)
    monkeypatch.delenv("IRIS_JOB_ID", raising=False)

    def run(*args: str) -> CliResult:
        capsys.readouterr()
        try:
            main(list(args))
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run
