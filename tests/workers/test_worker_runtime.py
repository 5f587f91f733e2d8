"""The worker's process runtime reports each attempt's exit code whether the spawner started it,
the spawner went while it ran, or it was started directly after the spawner had gone."""

from __future__ import annotations

import threading

from iris.backends.local.backend import kill_leftover_attempts
from iris.core.resources import Device
from iris.rpc import controller_pb2 as pb
from iris.worker.runtime import ProcessRuntime
from tests.conftest import wait_until


def test_runtime_reports_exit_codes_across_the_spawners_end(tmp_path):
    ended = threading.Event()
    runtime = ProcessRuntime(tmp_path, Device(), ended.set)
    spawner = runtime._spawner
    assert spawner is not None, "this host can start the spawner"
    go = tmp_path / "go"
    try:
        first = runtime.start(pb.AttemptLaunch(attempt_id="/u/j/0:0", command=["sh", "-c", "exit 3"]))
        wait_until(lambda: first.exited, message="the first attempt's exit")
        assert first.serial and first.handle is None and first.exit_code == 3
        script = f"while [ ! -e {go} ]; do sleep 0.02; done; exit 4"
        second = runtime.start(pb.AttemptLaunch(attempt_id="/u/j/1:0", command=["sh", "-c", script]))
        spawner._proc.kill()  # the helper dies while the attempt it started runs on
        wait_until(lambda: runtime._spawner is None, message="the runtime to notice the spawner has gone")
        go.touch()
        wait_until(lambda: second.exited, message="the orphaned attempt's exit")
        assert second.exit_code == 4  # from the exit file its wrapper wrote
        third = runtime.start(pb.AttemptLaunch(attempt_id="/u/j/2:0", command=["sh", "-c", "exit 5"]))
        wait_until(lambda: third.exited, message="the directly started attempt's exit")
        assert third.handle is not None and third.exit_code == 5
    finally:
        runtime.shutdown()
        spawner.close()  # reaps the killed helper
        kill_leftover_attempts(tmp_path)
