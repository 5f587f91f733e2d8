"""Reservations on a real controller: a job needing a whole 8-device worker starts when the first
wave of 1-device jobs ends, although 1-device jobs keep arriving after it; one whose time limit
ends before the reservation's expected start still backfills meanwhile."""

from __future__ import annotations

from iris.rpc import controller_pb2 as pb
from tests.conftest import wait_until
from tests.controller.helpers import client, status, wait_state


def _gpu(count: int) -> pb.Resources:
    return pb.Resources(device=pb.Device(kind="gpu", variant="h100", count=count))


def test_big_job_starts_after_first_wave_while_small_jobs_keep_coming(controller_factory):
    ctl = controller_factory(
        "reserve",
        backends=[
            {
                "id": "h100",
                "kind": "local",
                "workers": 1,
                "capacity": {"cpu": 16, "memory": "16G"},
                "devices": {"gpu": "h100", "count": 8},
            }
        ],
    )
    c = client(ctl)

    def launch(name: str, devices: int, seconds: float, limit: float = 0.0) -> str:
        command = ["sleep", str(seconds)] if seconds else ["true"]
        request = pb.LaunchJobRequest(name=name, user="bob", command=command, resources=_gpu(devices), timeout_s=limit)
        return c.launch_job(request).job_id

    # The first wave fills the worker; one of its jobs ends at once and leaves a device free.
    wave = [launch(f"wave{i}", 1, 4 if i else 0, limit=30) for i in range(8)]
    assert wait_state(c, wave[0]).job.state == "SUCCEEDED"
    big = launch("big", 8, 0)
    # Small jobs without a time limit keep arriving after the big one: none may take the free device.
    stream = [launch(f"stream{i}", 1, 0) for i in range(3)]
    reason = wait_until(
        lambda: status(c, big).job.pending_reason if "Holds a reservation" in status(c, big).job.pending_reason else "",
        message="the big job holds a reservation",
    )
    assert "Holds a reservation on " in reason and "expected start ~" in reason
    # A small job whose limit ends long before the first wave's does: it backfills on the free device.
    short = launch("short", 1, 0, limit=2)
    assert wait_state(c, short).job.state == "SUCCEEDED"
    waiting = status(c, stream[0]).job
    assert waiting.state == "PENDING"
    assert f"Waits behind the reservation of job {big}" in waiting.pending_reason
    assert status(c, big).job.state == "PENDING"
    stream.append(launch("stream-late", 1, 0))

    assert wait_state(c, big).job.state == "SUCCEEDED"
    big_started = status(c, big).job.started_ms
    for job_id in stream:
        done = wait_state(c, job_id).job
        assert done.state == "SUCCEEDED"
        assert done.started_ms >= big_started, f"{job_id} started before the reserved job"
    assert status(c, short).job.started_ms < big_started
    wave_ends = max(wait_state(c, j).job.finished_ms for j in wave)
    assert big_started >= wave_ends  # it waited for the wave, not for the stream
