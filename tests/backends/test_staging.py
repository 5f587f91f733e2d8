"""A job's files are unpacked once into the folder its attempts run in, the same for every kind."""

from __future__ import annotations

import io
import zipfile

from iris.backends.staging import Workspace, is_staged, safe_dirname, stage_workspace


def _zip(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return buf.getvalue()


def test_stage_workspace_unpacks_bundle_then_files_on_top(tmp_path):
    ws = Workspace("/alice/j", _zip({"a.txt": b"bundle", "pkg/b.py": b"x = 1"}), {"a.txt": b"file", "c/d": b"d"})
    folder = stage_workspace(ws, tmp_path / "w")
    assert (folder / "a.txt").read_bytes() == b"file"
    assert (folder / "pkg" / "b.py").read_bytes() == b"x = 1"
    assert (folder / "c" / "d").read_bytes() == b"d"
    assert is_staged(folder)


def test_stage_workspace_twice_keeps_the_first_copy(tmp_path):
    folder = stage_workspace(Workspace("/a/j", files={"f": b"1"}), tmp_path / "w")
    (folder / "f").write_bytes(b"changed by the task")
    stage_workspace(Workspace("/a/j", files={"f": b"1"}), folder)
    assert (folder / "f").read_bytes() == b"changed by the task"


def test_safe_dirname_is_filesystem_safe_and_unique_per_id():
    names = {safe_dirname(i) for i in ("/alice/a b", "/alice/a_b", "/alice/a/b:0", "/alice/a/b:1")}
    assert len(names) == 4
    assert all("/" not in n and " " not in n and ":" not in n for n in names)
