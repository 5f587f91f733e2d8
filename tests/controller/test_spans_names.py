"""IRIS_SPANS counts API calls under the names of the service's own methods only: calls to paths no
method has (any caller can send them) neither add a name per path nor grow the totals file."""

from __future__ import annotations

import json
import os

import httpx

from tests.controller.helpers import client, launch, wait_state


def test_spans_count_calls_to_unknown_api_paths_under_one_name(controller_factory, tmp_path):
    path = tmp_path / "spans.json"
    ctl = controller_factory("spans-names", start=False)
    ctl.env = {**os.environ, "IRIS_SPANS": str(path)}
    ctl.start()
    with httpx.Client(base_url=ctl.url) as http:
        for i in range(40):
            answer = http.post(f"/iris.v1.ControllerService/Made{i}Up", json={})
            assert answer.status_code >= 400
    c = client(ctl)
    assert wait_state(c, launch(c, "real", ["true"])).job.state == "SUCCEEDED"
    ctl.stop()
    stages = json.loads(path.read_text())
    assert not [name for name in stages if "Made" in name], sorted(stages)
    assert stages["api.unknown"]["count"] == 40
    assert stages["api.LaunchJob"]["count"] == 1
