"""Connections that send no request, or send one a byte now and then, are closed, and connections
past the limit are answered 503 at once: no caller can hold the controller's file descriptors, and
a long poll that waits longer than the read timeout is not cut."""

from __future__ import annotations

import json
import os
import select
import socket
import time

import psutil
import pytest

from iris.controller.http.connections import connection_limit
from iris.rpc import controller_pb2 as pb
from tests.conftest import wait_until
from tests.controller.helpers import client, launch, operator_socket, wait_state

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


def _hold_as(uid: int, port: int, count: int, request: bytes, report: int, stop: int) -> None:
    """In a forked child: as `uid`, opens `count` connections that each send `request`, writes how
    many were refused (503) to `report` (255: it failed), and holds the rest until `stop` is readable."""
    refused = 255
    try:
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
        held = []
        for _ in range(count):
            sock = socket.socket()
            sock.connect(("127.0.0.1", port))
            sock.send(request)
            held.append(sock)
        answered: dict[socket.socket, bytes] = {}
        deadline = time.monotonic() + 30
        while len(answered) < count and time.monotonic() < deadline:
            readable, _, _ = select.select([s for s in held if s not in answered], [], [], 0.5)
            answered.update((s, s.recv(64)) for s in readable)
            if not readable and answered:
                break  # the refusals come at once; the held ones stay silent
        refused = sum(a.startswith(b"HTTP/1.1 503") for a in answered.values())
    finally:
        os.write(report, bytes([refused]))
        os.read(stop, 1)
        os._exit(0)


def _follow(job: str) -> bytes:
    """A FetchLogs call that waits a minute for a line of a job that prints none."""
    body = json.dumps({"jobId": job, "waitMs": 60000}).encode()
    head = "POST /iris.v1.ControllerService/FetchLogs HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    return f"{head}Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body


@pytest.mark.skipif(os.geteuid() != 0, reason="holds connections as another uid, which needs root")
@pytest.mark.parametrize("hold", ["trickle", "follow"])
def test_one_client_holding_every_connection_cannot_keep_another_out(controller_factory, hold):
    ctl = controller_factory(controller={"tick_interval": "1s", "request_read_timeout": "60s", "max_connections": 20})
    with client(ctl) as c:
        quiet = launch(c, "quiet", ["sleep", "120"])
        wait_state(c, quiet, {"RUNNING"})
    # The table holds no connection of ours before the first client fills it.
    controller = psutil.Process(ctl.pid)
    wait_until(lambda: not [k for k in controller.net_connections() if k.raddr], message="our connections closed")
    request = BODY if hold == "trickle" else _follow(quiet)
    report_r, report_w = os.pipe()
    stop_r, stop_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        _hold_as(54321, ctl.port, 30, request, report_w, stop_r)
    try:
        assert select.select([report_r], [], [], 60)[0], "the first client reports how many it holds"
        refused = os.read(report_r, 1)[0]
        assert refused == 10, "the first client fills the table; its own connections past it are refused"
        # Another client (the operator, tokenless from loopback) still gets in, call after call, and
        # the tick goes on placing work, while the first client's requests trickle or wait on.
        job = launch(client(ctl), "through", ["true"])
        assert wait_state(client(ctl), job).job.state == "SUCCEEDED"
        for _ in range(3):
            assert client(ctl).list_jobs(pb.ListJobsRequest()).jobs
    finally:
        os.write(stop_w, b"x")
        os.waitpid(pid, 0)
        for fd in (report_r, report_w, stop_r, stop_w):
            os.close(fd)


def test_a_request_head_past_its_limit_is_refused_before_it_is_held(module_controller):
    for head in (
        b"POST /iris.v1.ControllerService/ListJobs HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"X-A: aaaa\r\n" * 20_000,
        b"POST /" + b"a" * 100_000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n",
    ):
        with socket.create_connection(("127.0.0.1", module_controller.port), timeout=30) as sock:
            sock.sendall(head + b"X-B: b\r\n" * 1000)
            answer = sock.recv(4096)
            assert sock.recv(4096) == b""  # then the controller ends its side
        assert answer.startswith(b"HTTP/1.1 431") and b"longer than 65536 bytes" in answer, answer[:200]
    # A head within the limit (a long token, say) is answered as usual.
    head = b"POST /iris.v1.ControllerService/ListJobs HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: " + b"a" * 30_000
    with operator_socket(module_controller) as sock:
        sock.sendall(head + b"\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
        assert sock.recv(4096).startswith(b"HTTP/1.1 200")


def test_a_connection_pipelining_too_many_requests_is_closed_and_others_are_answered(module_controller):
    request = b"POST /iris.v1.ControllerService/GetClusterInfo HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    request += b"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"

    def answers(count: int) -> tuple[int, bool]:
        """How many answers `count` pipelined requests get, and whether the connection was cut."""
        got, cut = b"", False
        with socket.create_connection(("127.0.0.1", module_controller.port), timeout=30) as sock:
            sock.sendall(request * count)
            while got.count(b"HTTP/1.1 200") < count:
                try:
                    data = sock.recv(1 << 16)
                except ConnectionResetError:
                    data = b""
                if not data:
                    cut = True
                    break
                got += data
        return got.count(b"HTTP/1.1 200"), cut

    assert answers(8) == (8, False)  # a few ahead of their answers are served in order
    served, cut = answers(2000)
    assert cut and served < 100, served
    assert client(module_controller).get_cluster_info(pb.GetClusterInfoRequest()).name
    assert "Exception in ASGI application" not in module_controller.log.read_text()
