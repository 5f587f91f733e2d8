"""A task's token lists only its own job's tree: a sibling whose id merely starts with the task's
job id (`/alice/run2` beside `/alice/run`) and other users' endpoints stay out of its lists.
Real controller, real task calling the API with the token in its env."""

from __future__ import annotations

import json
import sys

from iris.rpc import controller_pb2 as pb
from tests.conftest import wait_until
from tests.controller.helpers import client, launch, logs, status, user_token, wait_state

PROBE = r"""
import json, os, urllib.request, urllib.error
def call(method, body):
    request = urllib.request.Request(os.environ["IRIS_CONTROLLER"] + "/iris.v1.ControllerService/" + method,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": "Bearer " + os.environ["IRIS_TOKEN"]})
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return json.load(resp)
    except urllib.error.HTTPError as exc:
        return exc.code
jobs = lambda r: sorted(j["jobId"] for j in r.get("jobs", [])) if isinstance(r, dict) else r
eps = lambda r: sorted(e["jobId"] for e in r.get("endpoints", [])) if isinstance(r, dict) else r
print(json.dumps({
    "jobs": jobs(call("ListJobs", {})),
    "jobs_by_own_id": jobs(call("ListJobs", {"prefix": os.environ["IRIS_JOB_ID"]})),
    "jobs_by_user": jobs(call("ListJobs", {"prefix": "/alice/"})),
    "endpoints": eps(call("ListEndpoints", {})),
    "endpoints_of_other": eps(call("ListEndpoints", {"jobId": "/bob/web"})),
}))
"""


def test_task_lists_neither_jobs_whose_id_extends_its_own_nor_other_jobs_endpoints(controller):
    admin = client(controller)
    bob = launch(admin, "/bob/web", ["sleep", "120"], user="bob")
    attempt = wait_until(
        lambda: next((a.attempt_id for t in status(admin, bob).tasks for a in t.attempts), ""),
        message="bob's task to start",
    )
    admin.register_endpoint(pb.RegisterEndpointRequest(job_id=bob, attempt_id=attempt, name="web", port=8080))
    alice = client(controller, user_token(controller, "alice"))
    sibling = launch(alice, "run2", ["sleep", "120"])

    probe = launch(alice, "run", [sys.executable, "-c", PROBE])
    assert wait_state(alice, probe).job.state == "SUCCEEDED", logs(alice, probe)
    report = json.loads(logs(alice, probe)[-1])

    assert report["jobs"] == ["/alice/run"]
    assert report["jobs_by_own_id"] == ["/alice/run"]
    assert report["jobs_by_user"] == ["/alice/run"]
    assert report["endpoints"] == []
    assert report["endpoints_of_other"] == 403
    # A user (not a task) still lists every job and endpoint.
    listed = {j.job_id for j in alice.list_jobs(pb.ListJobsRequest(prefix="/alice/run")).jobs}
    assert listed == {"/alice/run", "/alice/run2"}
    assert [e.job_id for e in alice.list_endpoints(pb.ListEndpointsRequest()).endpoints] == [bob]
    for job in (bob, sibling):
        admin.terminate_job(pb.TerminateJobRequest(job_id=job))
