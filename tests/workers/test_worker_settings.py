"""`iris worker start` checks its name and folder before it makes anything on the host."""

from __future__ import annotations

import os
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


@pytest.mark.parametrize(
    ("devices", "attrs", "message"),
    [
        ("gpu:h100:0", (), "count of 1 or more"),
        ("gpu:h100:-1", (), "count of 1 or more"),
        ("gpu:a100:1", ("device-variant=h100",), "--attr device-variant=h100 contradicts --devices gpu:a100:1"),
        (None, ("device-type=gpu",), "--attr device-type=gpu contradicts --devices (none: a cpu worker)"),
    ],
)
def test_worker_settings_devices_and_attributes_that_disagree_are_refused(devices, attrs, message, tmp_path):
    with pytest.raises(InvalidArgument) as err:
        host_settings("http://127.0.0.1:1", "pool", "w1", 1, "1G", "1G", devices, attrs, str(tmp_path / "wd"))
    assert message in str(err.value)
    assert not (tmp_path / "wd").exists()


def test_worker_settings_attributes_beside_the_devices_are_kept(tmp_path):
    settings = host_settings(
        "http://127.0.0.1:1",
        "pool",
        "w1",
        1,
        "1G",
        "1G",
        "gpu:h100:8",
        ("zone=a", "device-variant=H100"),
        str(tmp_path),
    )
    assert settings.attributes == {
        "device-type": "gpu",
        "device-variant": "h100",
        "gpu-count": "8",
        "zone": "a",
    }


@pytest.mark.skipif(os.geteuid() != 0, reason="only a root daemon checks who may change its folders")
def test_root_worker_refuses_a_work_dir_another_user_could_change(tmp_path):
    def settings(folder):
        return host_settings(
            "http://127.0.0.1:1", "pool", name="w1", cpu=1, memory="1G", disk="1G", work_dir=str(folder)
        )

    tmp_path.chmod(0o700)
    open_to_all = tmp_path / "open"
    open_to_all.mkdir()
    open_to_all.chmod(0o777)
    with pytest.raises(InvalidArgument, match=f"{open_to_all} is writable by others \\(mode 777\\)"):
        settings(open_to_all / "wd")
    assert not (open_to_all / "wd").exists()  # refused before anything was made
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, 65534, 65534)
    with pytest.raises(InvalidArgument, match=f"{theirs} belongs to uid 65534"):
        settings(theirs / "wd")
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)  # as /tmp: only an entry's owner may replace it
    assert settings(sticky / "wd").work_dir == sticky / "wd"
    planted = sticky / "planted"
    planted.mkdir()
    os.chown(planted, 65534, 65534)
    with pytest.raises(InvalidArgument, match="belongs to uid 65534"):
        settings(planted)
