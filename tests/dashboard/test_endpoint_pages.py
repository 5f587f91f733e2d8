"""A page served through a capability URL shares the controller's address with the dashboard and
the API, so a browser would let its script act as the dashboard does: read the signed-in session's
token, and call the API as local_admin from the controller's host. Real controller, real serving
task, real Chromium: the page's script must get neither, while the served app itself still works."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from iris.rpc import controller_pb2 as pb
from tests.conftest import wait_until
from tests.controller.helpers import client, status, user_token

PAGE_TASK = str(Path(__file__).with_name("page_task.py"))


def test_served_page_reads_no_dashboard_token_and_gets_no_admin_api_but_its_own_app_works(controller, new_page):
    admin = client(controller)
    victim = admin.launch_job(pb.LaunchJobRequest(name="/bob/victim", user="bob", command=["sleep", "300"])).job_id
    alice = client(controller, user_token(controller, "alice"))
    job = alice.launch_job(pb.LaunchJobRequest(name="page", user="alice", command=[sys.executable, PAGE_TASK, victim]))
    job_id = job.job_id
    wait_until(
        lambda: any(e.name == "web" for e in admin.list_endpoints(pb.ListEndpointsRequest(job_id=job_id)).endpoints),
        timeout=60,
        message="the page's endpoint registered",
    )
    url = alice.mint_endpoint_url(pb.MintEndpointUrlRequest(job_id=job_id, name="web")).url

    page = new_page()
    page.goto(controller.url + "/")  # the dashboard, signed in as carol in this tab's session
    page.evaluate("t => sessionStorage.setItem('iris.token', t)", user_token(controller, "carol"))
    page.goto(url)
    page.wait_for_function("document.title === 'done'", timeout=30_000)
    got = json.loads(page.text_content("#out") or "{}")

    assert got["token"].startswith("blocked"), got
    assert not got["stop"].startswith("200"), got
    assert not got["stop_simple"].startswith("200"), got
    assert got["own_get"] == "fetched", got
    assert got["own_post"] == "posted", got
    assert status(admin, victim).job.state == "RUNNING"
    admin.terminate_job(pb.TerminateJobRequest(job_id=victim))
    admin.terminate_job(pb.TerminateJobRequest(job_id=job_id))
