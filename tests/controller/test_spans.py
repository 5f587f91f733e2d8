"""IRIS_SPANS: a real controller adds up the stages of the submit path and writes them when it stops."""

from __future__ import annotations

import json
import os

from iris.core import spans
from tests.controller.helpers import client, launch, wait_state


def test_spans_of_a_submitted_job_are_written_when_the_controller_stops(controller_factory, tmp_path):
    path = tmp_path / "spans.json"
    ctl = controller_factory("spans", start=False)
    ctl.env = {**os.environ, "IRIS_SPANS": str(path)}
    ctl.start()
    c = client(ctl)
    for i in range(3):
        assert wait_state(c, launch(c, f"j{i}", ["echo", "hello"])).job.state == "SUCCEEDED"
    ctl.stop()
    stages = json.loads(path.read_text())
    for name in ("api.LaunchJob", "submit", "submit.validate", "submit.insert", "submit.wake"):
        assert stages[name]["count"] == 3, name
    for name in ("tick", "tick.events", "tick.schedule", "tick.schedule.start", "tick.schedule.start.spawn"):
        assert stages[name]["count"] >= 1, name
    assert stages["tick.schedule.start.spawn"]["count"] == 3  # one process started per job
    assert stages["local.exits"]["count"] >= 3
    assert all(s["wall_s"] >= s["cpu_s"] * 0.5 >= 0 for s in stages.values())
    assert stages["submit"]["cpu_s"] >= stages["submit.insert"]["cpu_s"] > 0


def test_spans_are_off_without_the_variable():
    assert not spans.enabled()  # this test process has no IRIS_SPANS
    with spans.span("never"):
        pass
    assert "never" not in spans.totals()
