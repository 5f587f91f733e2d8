"""Whether a tokenless loopback caller is a task is asked of the kernel once per connection: every
call on a kept-alive connection reuses the answer, a new connection asks again, and a task's calls
stay refused however many it makes on one connection."""

from __future__ import annotations

import json
import os

import pytest

from iris.rpc import controller_pb2 as pb
from tests.controller.helpers import client, launch, logs, wait_state

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="tasks get uids of their own only under a root controller")

# Runs as a task: three tokenless calls on one kept-alive connection; prints their status codes.
PROBE = r"""
import http.client, json, os, urllib.parse
url = urllib.parse.urlsplit(os.environ["IRIS_CONTROLLER"])
conn = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
codes = []
for _ in range(3):
    conn.request("POST", "/iris.v1.ControllerService/ListJobs", body=b"{}",
                 headers={"Content-Type": "application/json", "Connect-Protocol-Version": "1"})
    answer = conn.getresponse()
    answer.read()
    codes.append(answer.status)
print(json.dumps(codes))
"""


def test_peer_owner_is_looked_up_once_per_connection_and_a_task_stays_refused(controller_factory, tmp_path):
    path = tmp_path / "spans.json"
    ctl = controller_factory("peers", start=False, auth={"task_uids": {"enabled": True, "range": "200000-299999"}})
    ctl.env = {**os.environ, "IRIS_SPANS": str(path)}
    ctl.start()
    c = client(ctl)
    for _ in range(20):  # one kept-alive connection, local_admin every time
        assert c.get_cluster_info(pb.GetClusterInfoRequest()).name == "peers"
    # The system's Python: this host's own may sit in root's closed home, which a task uid cannot enter.
    probe = launch(c, "probe", ["/usr/bin/python3", "-c", PROBE])
    assert wait_state(c, probe).job.state == "SUCCEEDED", logs(c, probe)
    assert json.loads(logs(c, probe)[-1]) == [401, 401, 401]  # a task is never local_admin
    ctl.stop()
    stages = json.loads(path.read_text())
    lookups = stages.pop("api.peer_lookup")["count"]
    calls = sum(s["count"] for name, s in stages.items() if name.startswith("api.") and name.count(".") == 1)
    assert calls >= 25
    # The test's connection (its client reconnects only after idling for seconds) and the task's.
    assert 2 <= lookups <= 4, (lookups, calls)
