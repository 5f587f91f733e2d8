"""The local backend says when its own threads (exit watcher, log reader) died or are stuck."""

from __future__ import annotations

import threading
import time

from iris.backends.local.backend import THREAD_STALL_S, LocalBackend
from iris.core.config import LocalBackendConfig


def test_local_backend_reports_a_dead_or_stuck_thread_and_nothing_when_healthy(tmp_path):
    backend = LocalBackend(LocalBackendConfig(id="cpu", kind="local"), tmp_path)
    try:
        assert backend.problems() == ()
        backend._beats["logs-cpu"] = time.monotonic() - THREAD_STALL_S - 5
        (stuck,) = backend.problems()
        assert "logs-cpu" in stuck and "stuck" in stuck
        backend._beats["logs-cpu"] = time.monotonic()
        backend._threads.append(threading.Thread(name="exits-gone"))  # never started: not alive
        (dead,) = backend.problems()
        assert "exits-gone" in dead and "died" in dead
    finally:
        backend._threads = backend._threads[:2]
        backend.shutdown()
    assert backend.problems() == ()  # a stopped backend's threads end by design
