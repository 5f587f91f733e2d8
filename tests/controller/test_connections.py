"""Connections that send no request, or send one a byte now and then, are closed, and connections
past the limit are answered 503 at once: no caller can hold the controller's file descriptors, and
a long poll that waits longer than the read timeout is not cut."""

from __future__ import annotations

import os
import socket

from iris.controller.connections import connection_limit
from iris.rpc import controller_pb2 as pb
from tests.conftest import wait_until
from tests.controller.helpers import client, launch, wait_state

HEAD = b"POST /iris.v1.ControllerService/ListJobs HTTP/1.1\r\nHost: x\r\n"
BODY = HEAD + b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"


def _closed(sock: socket.socket, answers: list[bytes]) -> bool:
    try:
        data = sock.recv(4096)
    except TimeoutError:
        return False
    except OSError:
        return True
    if data:
        answers.append(data)
        return False  # the close follows its answer
    return True


def test_idle_and_trickling_connections_are_closed_and_the_rest_refused(controller_factory):
    ctl = controller_factory(controller={"tick_interval": "1s", "request_read_timeout": "1s", "max_connections": 30})
    held = []
    try:
        for i in range(60):
            sock = socket.create_connection(("127.0.0.1", ctl.port))
            sock.settimeout(0.01)
            sock.send((b"", HEAD, BODY)[i % 3])
            held.append(sock)
        assert len(os.listdir(f"/proc/{ctl.pid}/fd")) < 30 + 100, "connections past the limit hold no descriptor"
        answers: list[bytes] = []
        wait_until(lambda: all(_closed(s, answers) for s in held), timeout=30, message="every held connection closed")
        refused = [a for a in answers if a.startswith(b"HTTP/1.1 503")]
        assert len(refused) == 30, answers[:3]  # each connection past the limit
        assert b'"code": "unavailable"' in refused[0] and b"most connections" in refused[0]
    finally:
        for sock in held:
            sock.close()
    # A long poll waits past the read timeout and the controller answers it, then other calls.
    c = client(ctl)
    job = launch(c, "nap", ["sleep", "1.8"])
    wait_state(c, job, {"RUNNING"})
    waited = c.get_job_status(pb.GetJobStatusRequest(job_id=job, wait_while_state="RUNNING", wait_ms=20000))
    assert waited.job.state == "SUCCEEDED"


def test_connection_limit_defaults_to_half_the_descriptor_limit():
    import resource

    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    assert connection_limit(0) == max(16, soft // 2)
    assert connection_limit(7) == 7
