"""`iris worker start` checks its name and folder before it makes anything on the host."""

from __future__ import annotations

import subprocess
import sys

import pytest

from iris.core.errors import InvalidArgument
from iris.worker.settings import host_settings


@pytest.mark.parametrize("name", ["", "  ", "a/b", "../../escape", "-dash"])
def test_worker_settings_bad_name_is_refused_before_any_folder_is_made(name, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(InvalidArgument, match="name"):
        host_settings("http://127.0.0.1:1", "pool", name=name, cpu=1, memory="1G", disk="1G")
    assert list(tmp_path.rglob("*")) == []


def test_worker_settings_relative_work_dir_is_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    settings = host_settings("http://127.0.0.1:1", "pool", name="w1", cpu=1, memory="1G", disk="1G", work_dir="wd")
    assert settings.work_dir == tmp_path / "wd"
    assert settings.work_dir.is_dir()


def test_worker_start_empty_name_exits_3_naming_the_flag(tmp_path):
    cmd = [sys.executable, "-m", "iris.cli.main", "worker", "start", "--controller", "http://127.0.0.1:1"]
    result = subprocess.run(
        [*cmd, "--backend", "pool", "--name", "", "--work-dir", str(tmp_path / "wd")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 3, result.stderr
    assert "--name is empty" in result.stderr
    assert not (tmp_path / "wd").exists()
