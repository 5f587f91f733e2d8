"""An endpoint of a task on a worker daemon is relayed only to the address that worker calls the
controller from: a real controller, a real daemon dialling this host's own (non-loopback) address,
and a real task."""

from __future__ import annotations

import socket

import httpx
import pytest

from tests.controller.helpers import client, error_code, user_token
from tests.integration.test_endpoint_hosts_e2e import FOREIGN, register, serving, url_of
from tests.workers.conftest import workers_backends


def _own_address() -> str | None:
    """An address of this host other than loopback, which a worker dialling it calls from."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("192.0.2.1", 9))  # no packet is sent: this only picks a route
            address = probe.getsockname()[0]
    except OSError:
        return None
    return None if address.startswith("127.") else address


def test_endpoint_hosts_task_on_a_worker_serves_only_the_workers_address(controller_factory, worker_factory):
    address = _own_address()
    if address is None:
        pytest.skip("this host has no address but loopback for a worker to dial from")
    ctl = controller_factory("pool", start=False, backends=workers_backends(), controller={"tick_interval": "1s"})
    ctl.extra["listen"] = f"0.0.0.0:{ctl.port}"  # the worker dials the host's own address, not loopback
    ctl.start()
    token = ctl.cli("token", "create", "--config", str(ctl.config_path), "--user", "w1", "--role", "worker")
    assert token.returncode == 0, token.stderr

    class Remote:
        url = f"http://{address}:{ctl.port}"

    worker_factory(Remote, "w1", env={"IRIS_TOKEN": token.stdout.strip()}, wait=False)
    worker_factory.wait_joined(ctl, "w1")
    alice = client(ctl, user_token(ctl, "alice"))
    job, attempt, eps = serving(ctl, alice, env={"SERVE_BIND": "0.0.0.0"})
    assert eps["web"].address.startswith(f"{address}:")  # the task named no host: its worker's
    port = int(eps["web"].address.rsplit(":", 1)[1])

    for host in ("127.0.0.1", "localhost", "::1", "0x7f.1", *FOREIGN):
        code, message = error_code(lambda host=host: register(alice, job, attempt, "evil", host, port))
        assert code == "invalid_argument", (host, message)
        assert f"it runs on a worker at {address}, so {address}, or no host at all" in message, message
    assert register(alice, job, attempt, "own", address, port).address == f"{address}:{port}"

    with httpx.Client(timeout=30) as http:
        got = http.get(url_of(alice, job, "web") + "hello")
        assert got.status_code == 200 and got.json()["path"] == "/hello"
