"""The systemd units in deploy/ parse, and each starts an `iris` command line that the CLI accepts."""

from __future__ import annotations

import configparser
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
UNITS = sorted(DEPLOY.glob("*.service"))


def _unit(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=True, delimiters=("=",))
    parser.optionxform = str  # systemd's keys are case-sensitive
    parser.read_string(path.read_text(), source=str(path))
    return parser


def test_deploy_ships_a_controller_and_a_worker_unit():
    assert {p.name for p in UNITS} >= {"iris-controller.service", "iris-worker@.service"}


@pytest.mark.parametrize("path", UNITS, ids=lambda p: p.name)
def test_deploy_unit_parses_and_its_command_is_one_the_cli_accepts(path):
    unit = _unit(path)
    assert {"Unit", "Service", "Install"} <= set(unit.sections())
    service = unit["Service"]
    assert service["Type"] == "simple" and service["Restart"] == "on-failure"
    assert service["KillSignal"] == "SIGTERM" and int(service["TimeoutStopSec"]) > 0
    assert unit["Install"]["WantedBy"] == "multi-user.target"
    argv = shlex.split(service["ExecStart"])
    assert Path(argv[0]).name == "iris" and argv[0].startswith("/")
    # Placeholders systemd fills in (the instance name, the EnvironmentFile's values) stand in as
    # words; with --help the CLI still refuses any option or command it does not have.
    args = [a.replace("%i", "pool").replace("${IRIS_CONTROLLER}", "http://ctl:10000") for a in argv[1:]]
    checked = subprocess.run(
        [sys.executable, "-m", "iris.cli.main", *args, "--help"], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stderr
