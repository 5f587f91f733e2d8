"""The workers backend's record of which principal each worker name belongs to (kept in the state
folder across restarts): one module, driven through `register_worker` as the controller calls it;
tests/workers/test_workers_forget.py shows the same across a real controller's restart."""

from __future__ import annotations

import logging

import pytest

from iris.backends.protocol import BackendContext
from iris.backends.workers.backend import WorkersBackend
from iris.core.config import WorkersBackendConfig
from iris.core.errors import PermissionDenied
from iris.rpc import controller_pb2 as pb


def backend(state_dir) -> WorkersBackend:
    return WorkersBackend(WorkersBackendConfig(id="pool", kind="workers"), BackendContext("c", state_dir, "http://x"))


def request(name: str, boot: str, previous: str = "") -> pb.RegisterWorkerRequest:
    capacity = pb.Resources(cpu=4, memory_bytes=1 << 30)
    return pb.RegisterWorkerRequest(
        backend_id="pool", name=name, boot_id=boot, previous_boot_id=previous, capacity=capacity
    )


def names(b: WorkersBackend) -> list[str]:
    return sorted(w.worker_id for w in b.workers())


@pytest.mark.parametrize("content", ["", '{"w1": "w1"', "[]", '{"w1": 3}', "\x00\x00"])
def test_workers_unreadable_owners_file_is_set_aside_and_the_backend_starts(tmp_path, caplog, content):
    first = backend(tmp_path)
    first.register_worker(request("w1", "b1"), "w1", False)
    path = first._owners.path
    path.write_text(content)
    with caplog.at_level(logging.WARNING):
        restarted = backend(tmp_path)
    assert str(path) in caplog.text and "unreadable" in caplog.text
    assert not path.exists() and [p.name for p in path.parent.iterdir() if "unreadable" in p.name]
    # Bound again by the first daemon that registers the name, and kept from then on.
    restarted.register_worker(request("w1", "b2", "b1"), "w1", False)
    with pytest.raises(PermissionDenied):
        backend(tmp_path).register_worker(request("w1", "b3"), "w2", False)


def test_workers_registration_whose_owner_record_cannot_be_written_changes_nothing(tmp_path):
    b = backend(tmp_path)
    b.register_worker(request("w0", "b0"), "w0", False)
    b._owners.path.with_name(b._owners.path.name + ".tmp").mkdir()  # the write fails, as on a full disk
    with pytest.raises(OSError):
        b.register_worker(request("w1", "b1"), "w1", False)
    assert names(b) == ["w0"] and b._owners.get("w1") is None
    assert len(b._sessions) == 1


def test_workers_admin_registering_a_name_leaves_it_bound_to_its_owner(tmp_path):
    b = backend(tmp_path)
    b.register_worker(request("host-1", "b1"), "host-1", False)
    b.register_worker(request("host-1", "b2", "b1"), "root", True)  # an operator's daemon, with an admin token
    restarted = backend(tmp_path)
    restarted.register_worker(request("host-1", "b3", "b2"), "host-1", False)  # its own token, after a restart
    assert names(restarted) == ["host-1"]
    with pytest.raises(PermissionDenied, match="belongs to host-1"):
        restarted.register_worker(request("host-1", "b4"), "host-2", False)
