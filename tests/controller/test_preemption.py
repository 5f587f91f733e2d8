"""Preemption on a real controller: interactive work evicts batch work, which is retried."""

from __future__ import annotations

from iris.rpc import controller_pb2 as pb
from tests.conftest import wait_until
from tests.controller.helpers import client, pid_alive, status, wait_state


def test_interactive_job_preempts_batch_tasks_which_are_retried(controller_factory):
    ctl = controller_factory(
        "preempt",
        backends=[
            {
                "id": "h100",
                "kind": "local",
                "workers": 2,
                "capacity": {"cpu": 8, "memory": "16G"},
                "devices": {"gpu": "h100", "count": 8},
            }
        ],
    )
    c = client(ctl)
    gpu = pb.Resources(device=pb.Device(kind="gpu", variant="h100", count=8))
    batch = c.launch_job(
        pb.LaunchJobRequest(
            name="sweep", user="bob", command=["sleep", "300"], resources=gpu, replicas=2, priority="batch"
        )
    ).job_id
    wait_until(lambda: status(c, batch).job.task_counts.get("RUNNING") == 2, message="batch fills both hosts")
    victims = [t.attempts[0].pid for t in status(c, batch).tasks]
    urgent = c.launch_job(
        pb.LaunchJobRequest(
            name="debug",
            user="alice",
            command=["sh", "-c", "echo got $CUDA_VISIBLE_DEVICES"],
            resources=gpu,
            priority="interactive",
        )
    ).job_id
    assert wait_state(c, urgent, timeout=30).job.state == "SUCCEEDED"
    after = status(c, batch)
    preempted = [t for t in after.tasks if any(a.state == "PREEMPTED" for a in t.attempts)]
    assert len(preempted) == 1
    assert preempted[0].preemption_count == 1
    wait_until(
        lambda: not any(pid_alive(p) for p in victims if p == preempted[0].attempts[0].pid), message="victim gone"
    )
    # the victim is retried under its preemption budget and runs again once the GPUs free up
    wait_until(lambda: status(c, batch).job.task_counts.get("RUNNING") == 2, timeout=30, message="batch back to two")
    assert len(status(c, batch).tasks[preempted[0].index].attempts) == 2
    c.terminate_job(pb.TerminateJobRequest(job_id=batch))


def test_equal_band_never_preempts(controller_factory):
    ctl = controller_factory(
        "nopreempt",
        backends=[
            {
                "id": "h100",
                "kind": "local",
                "workers": 1,
                "capacity": {"cpu": 8, "memory": "16G"},
                "devices": {"gpu": "h100", "count": 8},
            }
        ],
    )
    c = client(ctl)
    gpu = pb.Resources(device=pb.Device(kind="gpu", variant="h100", count=8))
    first = c.launch_job(pb.LaunchJobRequest(name="first", user="bob", command=["sleep", "300"], resources=gpu)).job_id
    wait_state(c, first, {"RUNNING"})
    second = c.launch_job(pb.LaunchJobRequest(name="second", user="alice", command=["true"], resources=gpu)).job_id
    reason = wait_until(
        lambda: status(c, second).job.pending_reason if "h100" in status(c, second).job.pending_reason else "",
        message="a pending reason naming the device",
    )
    assert status(c, first).job.state == "RUNNING"
    assert status(c, second).job.state == "PENDING" and reason
    c.terminate_job(pb.TerminateJobRequest(job_id=first))
    assert wait_state(c, second).job.state == "SUCCEEDED"
