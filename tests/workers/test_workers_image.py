"""A job's image travels from the SDK through the controller; a bad one is refused at submit."""

from __future__ import annotations

from iris.client.launch import build_launch_request
from tests.controller.helpers import client, error_code, launch, pb, wait_state


def test_workers_image_option_reaches_the_request_and_bad_names_are_refused(pool, worker_factory):
    assert build_launch_request(["true"], image="local/busybox:1")["image"] == "local/busybox:1"
    assert "image" not in build_launch_request(["true"])
    c = client(pool)
    code, message = error_code(lambda: launch(c, "bad", ["true"], image="two words"))
    assert code == "invalid_argument" and "not an image name" in message
    worker_factory(pool, "plain")  # a process worker cannot run an image: the job fails saying so
    job = launch(c, "boxed", ["true"], image="local/busybox:1")
    done = wait_state(c, job)
    assert done.job.state == "FAILED" and "--runtime docker" in done.tasks[0].error
    assert c.list_jobs(pb.ListJobsRequest(prefix="/alice/bad")).total == 0
