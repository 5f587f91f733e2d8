"""Nothing relayed through `/proxy/t/` may take the controller from others, nor carry one caller's
state to another: the relay keeps no cookies, holds few requests per caller and per endpoint (the
rest refused at once), gives up on an app that stops sending, and the API keeps answering
everyone while one caller holds as many relayed requests as it can (real controllers, real tasks).
"""

from __future__ import annotations

import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from iris.rpc import controller_pb2 as pb
from tests.conftest import wait_until
from tests.controller.helpers import client, launch, status, user_token, wait_state

SERVE = str(Path(__file__).with_name("serve_task.py"))


def _serve(ctl, user: str) -> tuple[str, str]:
    """Starts `user`'s serving task on `ctl`; returns its job and the capability URL of its `web`."""
    c = client(ctl, user_token(ctl, user))
    job = launch(c, f"serve-{user}", [sys.executable, SERVE], user=user)
    wait_until(
        lambda: len(client(ctl).list_endpoints(pb.ListEndpointsRequest(job_id=job)).endpoints) == 2,
        timeout=60,
        message=f"{user}'s endpoints",
    )
    return job, c.mint_endpoint_url(pb.MintEndpointUrlRequest(job_id=job, name="web", ttl_s=600)).url


def test_relay_keeps_no_cookie_of_one_users_app_for_another(controller_factory):
    ctl = controller_factory("jar")
    _, alice = _serve(ctl, "alice")
    _, bob = _serve(ctl, "bob")
    with httpx.Client(timeout=30) as http:
        # alice's app sets a cookie (for Path=/ of the host every endpoint is relayed to) ...
        assert http.get(alice + "answer-hop").status_code == 200
        # ... which bob's app, reached through the same relay, never receives; nor does alice's own.
        assert http.get(bob + "hello").json()["cookie"] is None
        assert http.get(alice + "hello").json()["cookie"] is None
        # A client's own cookies do not pass to an app either: the capability URL is the credential.
        assert http.get(bob + "hello", headers={"cookie": "session=stolen"}).json()["cookie"] is None


def test_relay_holds_few_requests_per_caller_and_refuses_the_rest_at_once(controller_factory):
    ctl = controller_factory(
        "bounded", controller={"tick_interval": "1s", "proxy_max_per_caller": 4, "proxy_max_per_endpoint": 6}
    )
    job, url = _serve(ctl, "alice")
    http = httpx.Client(timeout=60, limits=httpx.Limits(max_connections=None))
    try:
        with ThreadPoolExecutor(10) as pool:
            held = [pool.submit(http.get, url + f"hold/{i}") for i in range(10)]
            # The six past the caller's four are answered at once (the held ones wait on the app).
            refused = wait_until(
                lambda: done if len(done := [f.result() for f in held if f.done()]) >= 6 else None,
                timeout=30,
                message="the refusals past the caller's bound",
            )
            assert [r.status_code for r in refused] == [503] * 6
            assert all(r.headers["retry-after"] == "1" and "proxy_max_per_caller" in r.text for r in refused)
            # The API answers meanwhile; the caller's next relayed request, on any connection, waits
            # for one of its four to end.
            c = client(ctl)
            beside = launch(c, "beside", ["true"])
            assert wait_state(c, beside).job.state == "SUCCEEDED"
            assert httpx.get(url + "hello", timeout=10).status_code == 503
            # Once the app answers, the held four end well and the caller may relay again.
            assert httpx.get(_direct_url(ctl, job) + "release-holds", timeout=10).status_code == 200
            assert sorted(f.result().status_code for f in held) == [200] * 4 + [503] * 6
        assert http.get(url + "hello").status_code == 200
    finally:
        http.close()


def test_relay_gives_up_on_an_app_that_sends_nothing(controller_factory):
    ctl = controller_factory("patient", controller={"tick_interval": "1s", "proxy_read_timeout": "2s"})
    _, url = _serve(ctl, "alice")
    answer = httpx.get(url + "hold/forever", timeout=60)
    assert answer.status_code == 504 and "proxy_read_timeout" in answer.text
    assert httpx.get(url + "hello", timeout=10).status_code == 200  # and the slot is given back


def test_api_answers_others_while_one_caller_holds_every_relayed_request_it_may(controller_factory):
    # 40 connections in all, so at most 10 relayed requests; one caller tries 60 and keeps them.
    ctl = controller_factory("crowded", controller={"tick_interval": "1s", "max_connections": 40})
    job, url = _serve(ctl, "alice")
    stop = threading.Event()
    codes: list[int] = []

    def hold(i: int) -> None:
        with httpx.Client(timeout=60) as http:
            while not stop.is_set() and len(codes) < 2000:  # bounded: stops by itself
                answer = http.get(url + f"hold/{i}")
                codes.append(answer.status_code)
                if answer.status_code != 503:
                    return

    threads = [threading.Thread(target=hold, args=(i,), daemon=True) for i in range(60)]
    for t in threads:
        t.start()
    try:
        wait_until(lambda: codes.count(503) >= 50, timeout=30, message="the relay's refusals")
        bob = client(ctl, user_token(ctl, "bob"))
        for i in range(20):
            assert status(bob, job).job.state == "RUNNING"
            assert wait_state(bob, launch(bob, f"bob-{i}", ["true"], user="bob")).job.state == "SUCCEEDED"
    finally:
        stop.set()
        httpx.get(_direct_url(ctl, job) + "release-holds", timeout=10)
        for t in threads:
            t.join(timeout=30)


def _direct_url(ctl, job: str) -> str:
    """The served app's own address (the test reaches it directly to release held requests)."""
    endpoints = client(ctl).list_endpoints(pb.ListEndpointsRequest(job_id=job)).endpoints
    return f"http://{next(e for e in endpoints if e.name == 'web').address}/"
