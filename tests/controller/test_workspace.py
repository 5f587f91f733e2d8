"""Workspaces through a real controller: hostile names and bundles are refused at the API and
change nothing, bundles are stored once by content id, and an attempt's copy ends with it."""

from __future__ import annotations

import hashlib
import io
import struct
import zipfile

import pytest

from iris.rpc import controller_pb2 as pb
from tests.conftest import wait_until
from tests.controller.helpers import client, error_code, launch, logs, wait_state

BAD_NAMES = ["a\u0000b", ".", "x" * 300, "/etc/passwd", "../escape", "a/../../b", "a//b", "a\\b"]


def _zip(entries: dict[str, bytes]) -> bytes:
    """A zip of `entries`, names stored exactly as given (zipfile itself would cut one at a NUL)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in entries.items():
            zf.writestr(zipfile.ZipInfo(name.replace("\0", "@")), data)
    out = buf.getvalue()
    for name in entries:
        if "\0" in name:
            out = out.replace(name.replace("\0", "@").encode(), name.encode())
    return out


def _declare_size(data: bytes, size: int) -> bytes:
    """The zip with its (single) entry's uncompressed size rewritten to `size` in both headers."""
    out = bytearray(data)
    local = out.find(b"PK\x03\x04")
    struct.pack_into("<I", out, local + 22, size)
    central = out.find(b"PK\x01\x02")
    struct.pack_into("<I", out, central + 24, size)
    return bytes(out)


def _nothing_written(c) -> None:
    assert list(c.list_jobs(pb.ListJobsRequest()).jobs) == []


def _canary_runs(c, name: str) -> None:
    job = launch(c, name, ["echo", "alive"])
    assert wait_state(c, job).job.state == "SUCCEEDED"


@pytest.mark.parametrize("where", ["files", "bundle"])
def test_workspace_hostile_names_are_refused_and_nothing_is_written(controller, where):
    c = client(controller)
    cases = [{n: b"x"} for n in BAD_NAMES] + [{"a": b"1", "a/b": b"2"}]
    for files in cases:
        fields = {"workdir_files": files} if where == "files" else {"workspace_bundle": _zip(files)}
        code, message = error_code(lambda: launch(c, "evil", ["true"], **fields))
        assert code == "invalid_argument", (files, message)
        assert "workspace" in message or "workdir_files" in message, message
        _nothing_written(c)
    assert (
        not any((controller.state_dir / "bundles").glob("*")) if (controller.state_dir / "bundles").exists() else True
    )
    _canary_runs(c, "canary")


def test_workspace_bundle_expanding_past_the_limit_is_refused_before_unpacking(controller):
    c = client(controller)
    bomb = _declare_size(_zip({"zeros": b"\0" * 4096}), 0xFFFFFFF0)  # claims about 4 GiB
    code, message = error_code(lambda: launch(c, "bomb", ["true"], workspace_bundle=bomb))
    assert code == "invalid_argument" and "expands to" in message
    # A zip that under-declares its size is stopped while unpacking, not after filling the disk.
    liar = _declare_size(_zip({"zeros": b"\0" * (1 << 20)}), 100)
    code, message = error_code(lambda: launch(c, "liar", ["true"], workspace_bundle=liar))
    assert code == "invalid_argument" and "bundle" in message
    many = _zip({f"f{i}": b"" for i in range(20_001)})
    code, message = error_code(lambda: launch(c, "many", ["true"], workspace_bundle=many))
    assert code == "invalid_argument" and "20001 entries" in message
    _nothing_written(c)
    assert not (controller.state_dir / "bundles").exists() or not any(
        p for p in (controller.state_dir / "bundles").iterdir() if not p.name.startswith(".")
    )
    _canary_runs(c, "canary")


def test_workspace_bundle_is_stored_once_and_named_by_id_afterwards(controller):
    c = client(controller)
    data = _zip({"run.sh": b"echo from the bundle"})
    bundle_id = "sha256:" + hashlib.sha256(data).hexdigest()
    unknown = c.launch_job(pb.LaunchJobRequest(name="one", user="alice", command=["true"], bundle_id=bundle_id))
    assert unknown.bundle_missing and not list(c.list_jobs(pb.ListJobsRequest()).jobs)
    first = launch(c, "one", ["sh", "run.sh"], workspace_bundle=data, bundle_id=bundle_id)
    second = launch(c, "two", ["sh", "run.sh"], bundle_id=bundle_id)  # no bytes: the cluster has them
    for job in (first, second):
        assert wait_state(c, job).job.state == "SUCCEEDED"
        assert logs(c, job) == ["from the bundle"]
    rows = c.execute_raw_query(pb.ExecuteRawQueryRequest(sql="SELECT content_id FROM bundles")).rows
    assert len(rows) == 1
    wrong = "sha256:" + "0" * 64
    code, message = error_code(lambda: launch(c, "three", ["true"], workspace_bundle=data, bundle_id=wrong))
    assert code == "invalid_argument" and "does not match" in message


def test_workspace_copy_is_private_to_the_attempt_and_removed_with_it(controller):
    c = client(controller)
    data = _zip({"counter": b"0"})
    script = "cat counter; echo; echo 1 > counter; pwd"
    jobs = [launch(c, f"w{i}", ["sh", "-c", script], workspace_bundle=data) for i in range(2)]
    for job in jobs:
        assert wait_state(c, job).job.state == "SUCCEEDED"
        lines = logs(c, job)
        assert lines[0] == "0"  # the other job's write did not reach this one
        assert lines[1].endswith("/work")
    attempts = controller.state_dir / "attempts"
    wait_until(lambda: not list(attempts.glob("*/work")), message="the attempts' workspace copies to be removed")
    assert (controller.state_dir / "bundles").is_dir()  # the unpacked bundle itself stays for reuse
