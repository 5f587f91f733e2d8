"""A job's files are checked and unpacked once per content id, the same for every backend kind."""

from __future__ import annotations

import io
import zipfile

import pytest

from iris.backends.staging import (
    bundle_folder,
    check_tree,
    content_id,
    inspect_bundle,
    layers,
    safe_dirname,
    unpack_bundle,
    write_files,
)
from iris.core.errors import InvalidArgument


def _zip(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return buf.getvalue()


def test_unpack_bundle_once_by_content_id_and_files_layer_on_top(tmp_path):
    data = _zip({"a.txt": b"bundle", "pkg/b.py": b"x = 1"})
    cid = content_id(data)
    folder = unpack_bundle(tmp_path, cid, data)
    assert folder == bundle_folder(tmp_path, cid)
    assert (folder / "pkg" / "b.py").read_bytes() == b"x = 1"
    (folder / "a.txt").write_bytes(b"left alone")
    assert unpack_bundle(tmp_path, cid, data) == folder  # a second call is a no-op
    assert (folder / "a.txt").read_bytes() == b"left alone"
    fid = write_files(tmp_path, {"a.txt": b"file", "c/d": b"d"})
    assert write_files(tmp_path, {"c/d": b"d", "a.txt": b"file"}) == fid  # order does not matter
    assert layers(tmp_path, cid, fid) == (str(folder), str(bundle_folder(tmp_path, fid)))
    assert layers(tmp_path, "", "") == ()


def test_inspect_refuses_unsafe_names_and_a_mismatched_id():
    for names in (["../x"], ["/x"], ["a", "a/b"], ["a//b"], ["x" * 256], ["a\x01b"]):
        with pytest.raises(InvalidArgument):
            check_tree((n, False) for n in names)
    data = _zip({"ok": b"1"})
    with pytest.raises(InvalidArgument, match="does not match"):
        inspect_bundle(data, "sha256:" + "1" * 64)
    assert inspect_bundle(data).files == 1


def test_safe_dirname_is_filesystem_safe_and_unique_per_id():
    names = {safe_dirname(i) for i in ("/alice/a b", "/alice/a_b", "/alice/a/b:0", "/alice/a/b:1")}
    assert len(names) == 4
    assert all("/" not in n and " " not in n and ":" not in n for n in names)
