"""Local backends sharing one state folder each find, after a restart, only the attempts they
started and have not seen end, and kill only their own leftovers that the database no longer holds."""

from __future__ import annotations

from iris.backends.local.backend import LocalBackend, kill_leftover_attempts
from iris.backends.protocol import AdoptRecord, LaunchSpec
from iris.core.config import LocalBackendConfig
from iris.core.resources import Resources
from tests.backends.local_events import spawned_pid
from tests.conftest import wait_until
from tests.controller.helpers import pid_alive


def _spec(attempt_id: str, worker_id: str) -> LaunchSpec:
    return LaunchSpec(
        attempt_id, attempt_id.split(":")[0].rsplit("/", 1)[0], 0, 0, worker_id, ("sleep", "60"), {}, Resources(cpu=1)
    )


def test_each_backend_sees_and_kills_only_its_own_leftovers(tmp_path):
    first = {b: LocalBackend(LocalBackendConfig(id=b, kind="local"), tmp_path) for b in ("a", "b")}
    try:
        for b, backend in first.items():
            backend.start(_spec(f"/u/{b}/0:0", f"{b}-0"))
        pids = {b: spawned_pid(backend, f"/u/{b}/0:0") for b, backend in first.items()}
        # A restart: new backends on the same folder, while the attempts run on.
        again = {b: LocalBackend(LocalBackendConfig(id=b, kind="local"), tmp_path) for b in ("a", "b")}
        try:
            assert again["a"].leftovers() == {"/u/a/0:0"} and again["b"].leftovers() == {"/u/b/0:0"}
            again["a"].adopt([])  # the database holds a's attempt no more: it is killed
            again["b"].adopt([AdoptRecord("/u/b/0:0", "b-0", pids["b"], "", 0, 0)])  # b's is live: kept
            wait_until(lambda: not pid_alive(pids["a"]), message="a's leftover to be killed")
            assert pid_alive(pids["b"]) and again["b"].running() == {"/u/b/0:0"}
            assert again["a"].leftovers() == frozenset() and again["b"].leftovers() == {"/u/b/0:0"}
        finally:
            for backend in again.values():
                backend.shutdown()
    finally:
        for backend in first.values():
            backend.shutdown()
        kill_leftover_attempts(tmp_path)
