"""An endpoint is relayed only to the host its attempt runs on: a real controller and a real task on
its host; a foreign host is refused at registration and, for a row that names one, at relay time.
(`tests/workers/test_workers_endpoints.py` does the same for a task on a worker daemon.)"""

from __future__ import annotations

import os
import sqlite3
import sys
from pathlib import Path

import httpx
from connectrpc.errors import ConnectError

from iris.rpc import controller_pb2 as pb
from tests.conftest import wait_until
from tests.controller.helpers import client, error_code, launch, status, user_token, wait_state

SERVE = str(Path(__file__).with_name("serve_task.py"))
FOREIGN = ("169.254.169.254", "::ffff:169.254.169.254", "10.1.2.3", "192.0.2.99", "fe80::1")


def live(ctl, job_id: str) -> dict[str, pb.Endpoint]:
    eps = client(ctl).list_endpoints(pb.ListEndpointsRequest(job_id=job_id)).endpoints
    return {e.name: e for e in eps}


def serving(ctl, alice, **fields) -> tuple[str, str, dict[str, pb.Endpoint]]:
    """A running serve_task job of alice's: its id, its attempt and its two endpoints."""
    job = launch(alice, "serve", [sys.executable, SERVE], **fields)
    eps = wait_until(lambda: len(live(ctl, job)) == 2 and live(ctl, job), timeout=60, message="endpoints registered")
    return job, status(alice, job).tasks[0].attempts[-1].attempt_id, eps


def register(c, job: str, attempt: str, name: str, host: str, port: int) -> pb.Endpoint:
    req = pb.RegisterEndpointRequest(job_id=job, attempt_id=attempt, name=name, host=host, port=port)
    return c.register_endpoint(req).endpoint


def url_of(alice, job: str, name: str) -> str:
    return alice.mint_endpoint_url(pb.MintEndpointUrlRequest(job_id=job, name=name, ttl_s=600)).url


def test_endpoint_hosts_task_on_the_controllers_host_serves_only_loopback(controller):
    alice = client(controller, user_token(controller, "alice"))
    job, attempt, eps = serving(controller, alice)
    assert eps["web"].address.startswith("127.0.0.1:")  # the task named no host
    port = int(eps["web"].address.rsplit(":", 1)[1])

    for host in FOREIGN:
        code, message = error_code(lambda host=host: register(alice, job, attempt, "evil", host, port))
        assert code == "invalid_argument", (host, message)
        assert f"host {host!r} is not on the host this attempt runs on" in message
        assert "a loopback address (127.0.0.1 or ::1), or no host at all" in message
    assert set(live(controller, job)) == {"web", "ws"}

    # An alias of loopback is stored as the address it names, and reaches the task end to end.
    assert register(alice, job, attempt, "alias", "127.1", port).address == f"127.0.0.1:{port}"
    assert register(alice, job, attempt, "any", "0.0.0.0", port).address == f"127.0.0.1:{port}"
    url = url_of(alice, job, "alias")
    with httpx.Client(timeout=30) as http:
        assert http.get(url + "hello").json()["path"] == "/hello"

        # A row naming a foreign host (stored before this rule) is refused when relayed.
        db = sqlite3.connect(controller.state_dir / "controller.db", timeout=30)
        try:
            with db:
                db.execute("UPDATE endpoints SET address = '169.254.169.254:80' WHERE name = 'alias'")
        finally:
            db.close()
        refused = http.get(url + "hello")
        assert refused.status_code == 403, refused.text
        assert "host '169.254.169.254' is not on the host this attempt runs on" in refused.json()["message"]


# Loaded into the controller process: a lookup of a name under .hang.test answers only once the
# test creates the release file, as a name whose DNS server never answers would.
HANGING_DNS = """
import os, socket, time
_real = socket.getaddrinfo
def _getaddrinfo(host, *args, **kwargs):
    if isinstance(host, str) and host.endswith(".hang.test"):
        deadline = time.monotonic() + 120
        while not os.path.exists(os.environ["IRIS_TEST_DNS_RELEASE"]) and time.monotonic() < deadline:
            time.sleep(0.05)
        raise socket.gaierror(socket.EAI_NONAME, "released by the test")
    return _real(host, *args, **kwargs)
socket.getaddrinfo = _getaddrinfo
"""


def test_endpoint_hosts_a_host_whose_lookup_hangs_holds_neither_the_call_nor_the_database(controller_factory, tmp_path):
    hook = tmp_path / "dnshook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(HANGING_DNS)
    release = tmp_path / "release-dns"
    ctl = controller_factory("dns", start=False)
    ctl.env = {
        **os.environ,
        "PYTHONPATH": f"{hook}:{os.environ.get('PYTHONPATH', '')}",
        "IRIS_TEST_DNS_RELEASE": str(release),
    }
    ctl.start()
    try:
        alice = client(ctl, user_token(ctl, "alice"))
        job, attempt, eps = serving(ctl, alice)
        port = int(eps["web"].address.rsplit(":", 1)[1])

        code, message = error_code(lambda: register(alice, job, attempt, "slow", "svc.hang.test", port))
        assert code == "invalid_argument", message
        assert "did not resolve within" in message and "register an IP address" in message
        assert not release.exists()  # the lookup is still out, and the call has answered

        # While that lookup hangs, the database takes writes: a job is submitted, placed and ends.
        done = launch(alice, "quick", ["true"])
        assert wait_state(alice, done).job.state == "SUCCEEDED"

        # Lookups still out are bounded: with every slot held, another name is refused at once.
        for i in range(1, 4):
            error_code(lambda i=i: register(alice, job, attempt, f"slow{i}", f"svc{i}.hang.test", port))
        code, message = error_code(lambda: register(alice, job, attempt, "more", "more.hang.test", port))
        assert code == "unavailable", message
        assert "register an IP address" in message
        assert set(live(ctl, job)) == {"web", "ws"}  # nothing refused was stored

        # Once the lookups end, their slots are free again and a name that resolves is taken.
        release.touch()
        ep = wait_until(
            lambda: _registered(alice, job, attempt, port), timeout=30, message="a lookup slot to be free again"
        )
        assert ep.address in (f"127.0.0.1:{port}", f"[::1]:{port}")
    finally:
        release.touch()


def _registered(alice, job: str, attempt: str, port: int) -> pb.Endpoint | None:
    try:
        return register(alice, job, attempt, "named", "localhost", port)
    except ConnectError:
        return None
