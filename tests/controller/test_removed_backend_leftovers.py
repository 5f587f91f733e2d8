"""A controller restarted without a local backend it had before its crash stops that backend's
attempts: the database files them as lost (to be retried elsewhere), so a process left running
would run the same task twice."""

from __future__ import annotations

from iris.rpc import controller_pb2 as pb
from iris.testing import local_backend
from tests.conftest import wait_until
from tests.controller.helpers import client, launch, logs, pid_alive, status


def test_attempts_of_a_backend_removed_across_a_crash_are_killed(controller_factory):
    ctl = controller_factory("removed", backends=[local_backend("a"), local_backend("b")])
    c = client(ctl)
    job = launch(
        c,
        "gone",
        ["sh", "-c", "echo up; while :; do sleep 0.05; done"],
        constraints=[pb.Constraint(key="backend", op="EQ", values=["b"])],
        max_retries_failure=0,
    )
    attempt = wait_until(
        lambda: (a := status(c, job).tasks[0].attempts) and a[0].pid and logs(c, job) and a[0],
        message=f"{job} to run on b",
    )
    ctl.kill()
    assert pid_alive(attempt.pid), "a crash leaves the attempt running"

    ctl.rewrite(backends=[local_backend("a")])
    ctl.start()
    c = client(ctl)
    wait_until(
        lambda: status(c, job).tasks[0].attempts[0].state not in ("RUNNING", "PENDING"),
        message="the attempt of the removed backend to be filed as lost",
    )
    wait_until(lambda: not pid_alive(attempt.pid), timeout=30, message="the removed backend's attempt to be killed")
    markers = ctl.state_dir / "attempts" / ".live" / "b"
    assert not markers.exists() or not any(markers.iterdir()), "its markers go with it"
