"""A sweep of empty cgroups that runs while an attempt starts never removes that attempt's cgroup:
the attempt is born in it (see `spawner`), so a cgroup swept away between its creation and the
start would fail the attempt, and with it the job (the pump sweeps after each stored exit, while
the tick may be starting the next attempt)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from iris.backends.local.backend import LocalBackend
from iris.backends.protocol import LaunchSpec
from iris.core.config import LocalBackendConfig
from iris.core.resources import Resources
from tests.conftest import wait_until

_PAUSE_S = 30.0  # only a bound on a broken hand-off between the two threads; never reached when it works


class _PausingBase(type(Path())):  # type: ignore[misc]
    """The cgroup base folder, whose listing waits at `paused` until `resume` is set: the sweep has
    decided what it keeps but not yet looked at the folders."""

    paused: threading.Event
    resume: threading.Event

    def iterdir(self):
        self.paused.set()
        self.resume.wait(_PAUSE_S)
        return super().iterdir()


def test_a_sweep_racing_an_attempt_start_leaves_its_cgroup_and_the_attempt_starts(tmp_path):
    backend = LocalBackend(LocalBackendConfig(id="cpu", workers=1), tmp_path / "state")
    containment = backend.containment
    try:
        if containment.kind != "cgroup" or backend._spawner is None:
            pytest.skip("no writable cgroup v2 (or no spawner) on this host")
        assert containment.base is not None
        base = _PausingBase(containment.base)
        base.paused, base.resume = threading.Event(), threading.Event()
        containment.base = base
        sweep = threading.Thread(target=containment.sweep, args=(set(),), name="sweep", daemon=True)
        prepare = containment.prepare

        def prepare_then_let_the_sweep_finish(name: str) -> str:
            # The attempt's cgroup is made while the sweep is between its decision and its removals;
            # the sweep then finishes before the wrapper is started in that cgroup.
            path = prepare(name)
            base.resume.set()
            sweep.join()
            return path

        containment.prepare = prepare_then_let_the_sweep_finish  # type: ignore[method-assign]
        sweep.start()
        wait_until(base.paused.is_set, message="the sweep paused before listing the cgroups")
        spec = LaunchSpec(
            "/u/raced/0:0", "/u/raced", 0, 0, "cpu-0", ("sh", "-c", "exit 0"), dict(os.environ), Resources(cpu=1)
        )
        backend.start(spec)  # raised LaunchError (the cgroup gone) when the sweep removed it
        codes: dict[str, int | None] = {}

        def ended() -> bool:
            events = backend.poll()
            codes.update({e.attempt_id: e.exit_code for e in events.exits})
            backend.ack(events)
            return bool(codes)

        wait_until(ended, message="the attempt's exit reported")
        assert codes == {"/u/raced/0:0": 0}
    finally:
        if isinstance(containment.base, _PausingBase):
            containment.base.resume.set()
        backend.shutdown()


def test_an_attempt_gets_its_cgroup_after_the_folder_of_cgroups_was_removed(tmp_path):
    from iris.backends.local.containment import Containment

    containment = Containment(tmp_path / "attempts")
    if containment.base is None:
        pytest.skip("no writable cgroup v2 on this host")
    # Another holder of the same state folder (a cleanup of its leftovers) removes the folder of
    # its cgroups once the last is gone: an attempt prepared afterwards is still contained.
    containment.base.rmdir()
    try:
        path = containment.prepare("a1")
        assert path and (Path(path) / "cgroup.procs").exists(), path
    finally:
        containment.end("a1", "a1")
        containment.close()
    assert not containment.base.exists()
