"""A job's image travels from the SDK through the controller; a bad one is refused at submit."""

from __future__ import annotations

from iris.client.launch import build_launch_request
from tests.conftest import wait_until
from tests.controller.helpers import client, error_code, launch, pb, status


def test_workers_image_option_reaches_the_request_and_bad_names_are_refused(pool, worker_factory):
    assert build_launch_request(["true"], image="local/busybox:1")["image"] == "local/busybox:1"
    assert "image" not in build_launch_request(["true"])
    c = client(pool)
    code, message = error_code(lambda: launch(c, "bad", ["true"], image="two words"))
    assert code == "invalid_argument" and "not an image name" in message
    assert c.list_jobs(pb.ListJobsRequest(prefix="/alice/bad")).total == 0


def test_workers_image_job_steered_to_a_docker_worker_never_a_process_one(pool, worker_factory):
    plain = worker_factory(pool, "plain")
    c = client(pool)
    # A daemon that says it runs containers; the test plays it, so no Docker is needed here.
    boxer = c.register_worker(
        pb.RegisterWorkerRequest(
            backend_id="pool", name="boxer", capacity=pb.Resources(cpu=1, memory_bytes=1 << 30),
            runtime="docker", boot_id="boxer-1",
        )
    )  # fmt: skip
    job = launch(c, "boxed", ["true"], image="local/busybox:1", resources=pb.Resources(cpu=1, memory_bytes=1 << 20))

    def started():
        resp = c.worker_poll(pb.WorkerPollRequest(backend_id="pool", session=boxer.session, wait_ms=200))
        return [cmd.start for cmd in resp.commands if cmd.HasField("start")]

    (start,) = wait_until(started, message="the image job to be sent to the docker worker")
    assert start.image == "local/busybox:1" and start.job_id == job
    task = status(c, job).tasks[0]
    assert [a.worker_id for a in task.attempts] == ["boxer"]
    assert plain.attempt_pids() == []
    workers = {w.worker_id: dict(w.attributes) for w in c.list_workers(pb.ListWorkersRequest()).workers}
    assert workers["boxer"]["runtime"] == "docker" and workers["plain"]["runtime"] == "process"
    c.terminate_job(pb.TerminateJobRequest(job_id=job))


def test_workers_image_job_refused_at_submit_where_no_backend_runs_images(controller_factory):
    ctl = controller_factory("plain")  # only the local backend
    c = client(ctl)
    code, message = error_code(lambda: launch(c, "boxed", ["true"], image="local/busybox:1"))
    assert code == "invalid_argument" and "--runtime docker" in message, message
    assert c.list_jobs(pb.ListJobsRequest(prefix="/alice/")).total == 0
    launch(c, "plain", ["true"])  # the same job without an image is taken
    assert c.list_jobs(pb.ListJobsRequest(prefix="/alice/")).total == 1
