"""Tokens on a real controller: who a call is, what it may do, and that expiry always holds."""

from __future__ import annotations

import time

from connectrpc.errors import ConnectError

from iris.controller.auth import load_or_create_signing_key, mint_token
from iris.controller.auth.tokens import CLOCK_SKEW_S
from iris.rpc import controller_pb2 as pb
from tests.conftest import wait_until
from tests.controller.helpers import client, error_code, launch


def token(ctl, user: str, role: str = "user", ttl: float = 3600, now: float | None = None) -> str:
    return mint_token(load_or_create_signing_key(None, ctl.state_dir), ctl.name, user, role, ttl, now=now)


def test_a_remembered_token_still_expires(controller):
    # Minted in the past so that, with the clock-skew allowance, it is accepted for about 2 s more.
    c = client(controller, token(controller, "alice", ttl=1, now=time.time() - CLOCK_SKEW_S + 1))
    assert c.list_jobs(pb.ListJobsRequest()).jobs == []  # verified, then remembered

    def refused():
        try:
            c.list_jobs(pb.ListJobsRequest())
        except ConnectError as exc:
            return exc.code.name.lower(), exc.message
        return None

    code, message = wait_until(refused, timeout=10, message="the token to expire")
    assert code == "unauthenticated" and "expired" in message


def test_users_stop_only_their_own_jobs_and_dashboards_only_read(controller):
    alice, bob = client(controller, token(controller, "alice")), client(controller, token(controller, "bob"))
    job = launch(alice, "mine", ["sleep", "60"])
    assert job == "/alice/mine"
    code, _ = error_code(lambda: bob.terminate_job(pb.TerminateJobRequest(job_id=job)))
    assert code == "permission_denied"
    dashboard = client(controller, token(controller, "ops", role="dashboard"))
    assert [j.job_id for j in dashboard.list_jobs(pb.ListJobsRequest()).jobs] == [job]
    code, message = error_code(lambda: launch(dashboard, "nope", ["true"], user="ops"))
    assert code == "permission_denied" and "LaunchJob" in message
    assert alice.terminate_job(pb.TerminateJobRequest(job_id=job)).state == "KILLED"


def test_a_tampered_token_is_refused_even_from_loopback(controller):
    good = token(controller, "alice")
    head, payload, sig = good.split(".")
    bad = ".".join((head, payload, ("A" if sig[0] != "A" else "B") + sig[1:]))
    code, _ = error_code(lambda: client(controller, bad).list_jobs(pb.ListJobsRequest()))
    assert code == "unauthenticated"


def test_a_task_submits_child_jobs_as_its_owner_with_the_token_in_its_env(controller):
    import sys

    from tests.controller.helpers import logs, status, wait_state

    alice = client(controller, token(controller, "alice"))
    script = (
        "import os; from iris.client.client import IrisClient; "
        "print('has token', bool(os.environ.get('IRIS_TOKEN'))); "
        "print(IrisClient().submit(['true'], name='kid'))"
    )
    parent = launch(alice, "driver", [sys.executable, "-c", script])
    assert wait_state(alice, parent).job.state == "SUCCEEDED", logs(alice, parent)
    assert logs(alice, parent) == ["has token True", "/alice/driver/kid"]
    assert status(alice, "/alice/driver/kid").job.owner == "alice"


def test_a_forwarded_for_header_never_changes_who_a_call_comes_from(controller_factory):
    # The caller's address is its socket's: a header naming another one is not believed, whether
    # it would take trust away (here: loopback is opted in) or lend it to a caller outside
    # auth.trusted_cidrs (there: nothing is).
    import httpx

    trusting = controller_factory("trusting", auth={"trusted_cidrs": ["127.0.0.0/8"]})
    untrusting = controller_factory("untrusting", auth={"trusted_cidrs": ["203.0.113.0/24"]})
    for header in ("X-Forwarded-For", "Forwarded"):
        value = "203.0.113.9" if header == "X-Forwarded-For" else "for=203.0.113.9"
        headers = {header: value, "X-Forwarded-Proto": "https"}
        answer = httpx.post(f"{trusting.url}/iris.v1.ControllerService/ListJobs", json={}, headers=headers, timeout=10)
        assert answer.status_code == 200, (header, answer.text)  # loopback: local_admin, as without it
        answer = httpx.post(
            f"{untrusting.url}/iris.v1.ControllerService/ListJobs", json={}, headers=headers, timeout=10
        )
        assert answer.status_code == 401, (header, answer.text)  # anonymous, as without it
