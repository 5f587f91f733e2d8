"""One user's submit flood cannot set every user's pace: each user (with their tasks) submits a
burst at once and then at a steady rate; past it a submit is refused with when to retry, other
users and admins are unaffected, and the SDK waits and sends the job again by itself."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from iris.client.client import IrisClient
from iris.controller.api.submit_rate import SubmitRate, SubmitRateExceeded
from iris.controller.auth import LOCAL_ADMIN, Identity, Role
from tests.controller.helpers import user_token


def _user(name: str, role: Role = Role.USER) -> Identity:
    return Identity(name, role, "test")


def test_submit_rate_allows_a_burst_then_a_steady_rate_per_user():
    now = [0.0]
    rate = SubmitRate(per_second=2.0, burst=3, clock=lambda: now[0])
    for _ in range(3):
        rate.take(_user("alice"))
    with pytest.raises(SubmitRateExceeded) as refused:
        rate.take(_user("alice"))
    assert refused.value.retry_after_s == 1 and "2 tasks a second after a burst of 3" in refused.value.message
    rate.take(_user("bob"))  # another user's bucket is their own
    for _ in range(10):
        rate.take(_user("root", Role.ADMIN))
        rate.take(Identity(LOCAL_ADMIN, Role.ADMIN, "test", local_admin=True))
    now[0] = 0.5
    rate.take(_user("alice"))  # one more after half a second at 2 a second
    with pytest.raises(SubmitRateExceeded):
        rate.take(_user("alice"))
    now[0] = 100.0
    for _ in range(3):  # refilled to the burst, no further
        rate.take(_user("alice"))
    with pytest.raises(SubmitRateExceeded):
        rate.take(_user("alice"))
    SubmitRate(per_second=0, burst=1).take(_user("alice"))  # 0: no limit


def test_submit_rate_counts_a_job_per_task_and_gives_back_what_created_nothing():
    now = [0.0]
    rate = SubmitRate(per_second=10.0, burst=100, clock=lambda: now[0])
    rate.take(_user("alice"), 60)
    with pytest.raises(SubmitRateExceeded) as refused:
        rate.take(_user("alice"), 60)  # 40 left
    assert refused.value.retry_after_s == 2
    rate.take(_user("alice"), 40)
    now[0] = 10.0  # full again
    rate.take(_user("alice"), 100_000)  # larger than the burst: taken from a full bucket, into debt
    now[0] = 10_000.0  # 99,900 tasks' time later at 10 a second: the debt is paid, not one more
    with pytest.raises(SubmitRateExceeded):
        rate.take(_user("alice"))
    now[0] = 10_000.5
    rate.take(_user("alice"))
    rate.take(_user("bob"), 100)
    rate.give_back(_user("bob"), 100)  # a refused submit costs nothing
    rate.take(_user("bob"), 100)


def _launch(url: str, token: str, name: str, replicas: int = 1) -> tuple[int, str, dict]:
    body = json.dumps({"name": name, "user": "alice", "command": ["true"], "replicas": replicas}).encode()
    headers = {"content-type": "application/json", "authorization": f"Bearer {token}"}
    request = urllib.request.Request(f"{url}/iris.v1.ControllerService/LaunchJob", body, headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, "", json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("retry-after", ""), json.loads(exc.read())


def test_submits_past_a_users_rate_are_refused_with_a_retry_hint_and_the_sdk_waits(controller_factory):
    ctl = controller_factory(controller={"tick_interval": "1s", "submit_rate": 1, "submit_burst": 2})
    alice = user_token(ctl, "alice")
    assert [_launch(ctl.url, alice, f"j{i}")[0] for i in range(2)] == [200, 200]
    status, retry_after, answer = _launch(ctl.url, alice, "j2")
    assert status == 429 and answer["code"] == "resource_exhausted" and retry_after == "1", answer
    assert "alice is submitting faster" in answer["message"] and "try again in" in answer["message"]
    with IrisClient(ctl.url, token=user_token(ctl, "bob")) as bob:
        bob.submit(["true"], name="b0", user="bob")  # bob's pace is his own
    with IrisClient(ctl.url, token=alice) as sdk:
        assert sdk.submit(["true"], name="j3", user="alice") == "/alice/j3"  # waited, then sent again
    with IrisClient(ctl.url) as admin:  # the operator, local_admin
        for i in range(5):
            admin.submit(["true"], name=f"a{i}", user="alice")


def test_a_job_counts_one_submit_per_task_so_wide_jobs_cannot_flood_and_typos_cost_nothing(controller_factory):
    ctl = controller_factory(controller={"tick_interval": "1s", "submit_rate": 1, "submit_burst": 5})
    alice = user_token(ctl, "alice")
    for _ in range(3):  # refused before anything is written: counts nothing
        assert _launch(ctl.url, alice, "bad name", replicas=5)[0] == 400
    assert _launch(ctl.url, alice, "wide", replicas=50)[0] == 200  # a full bucket takes a wide job
    status, retry_after, answer = _launch(ctl.url, alice, "next")
    assert status == 429 and int(retry_after) > 30, answer  # ... and the next waits for its 50 tasks
    assert "a job counts one per replica" in answer["message"]
    with IrisClient(ctl.url, token=user_token(ctl, "bob")) as bob:
        assert bob.submit(["true"], name="b0", user="bob", replicas=5) == "/bob/b0"  # bob's pace is his own
