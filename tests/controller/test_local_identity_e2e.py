"""Who a tokenless caller is, on a real controller: the kernel's word on its Unix socket, and
anonymous over TCP, however quickly the caller comes and goes."""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
from pathlib import Path

import httpx
import pytest

from iris.rpc import controller_pb2 as pb
from tests.conftest import ControllerFactory, wait_until
from tests.controller.helpers import client, launch, logs, wait_state

TASK_UID = 250_123  # in the default auth.task_uids.range
PERSON_UID = 65534  # `nobody`: an account of this host that is not the operator's


@pytest.fixture
def reachable():
    """A controller whose state directory other uids can reach (pytest's own folder is root's
    alone), its tasks under uids of their own."""
    base = Path(tempfile.mkdtemp(prefix="iris-peercred-"))
    base.chmod(0o711)
    factory = ControllerFactory(base)
    try:
        ctl = factory(auth={"task_uids": {"enabled": True, "range": "200000-299999"}})
        for folder in (ctl.state_dir.parent, ctl.state_dir):
            folder.chmod(0o711)
        yield ctl
    finally:
        factory.cleanup()
        shutil.rmtree(base, ignore_errors=True)


def _request(method: str, doc: dict) -> bytes:
    body = json.dumps(doc).encode()
    return (
        f"POST /iris.v1.ControllerService/{method} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode() + body


def _sent_and_gone(path: Path, uid: int, method: str, doc: dict) -> socket.socket:
    """The connection a process running as `uid` opened to `path`: it sent one request and exited
    at once, handing this process its end to read the answer from."""
    parent, child = socket.socketpair()
    request = _request(method, doc)
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        code = 1
        try:
            parent.close()
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            conn.connect(str(path))
            conn.sendall(request)
            socket.send_fds(child, [b"x"], [conn.fileno()])
            code = 0
        finally:
            os._exit(code)
    child.close()
    _msg, fds, _flags, _addr = socket.recv_fds(parent, 1, 1)
    parent.close()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0 and fds, "the child could not connect and send"
    return socket.socket(fileno=fds[0])


def _answer(conn: socket.socket) -> tuple[int, dict]:
    data = b""
    with conn:
        while chunk := conn.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def test_a_caller_that_sends_and_exits_at_once_is_still_named_by_its_uid(reachable):
    sock = reachable.state_dir / "controller.sock"
    launch = {"name": "sneaky", "user": "alice", "command": ["true"]}
    # A task's uid without its token: refused, though it was gone before its request was read.
    status, doc = _answer(_sent_and_gone(sock, TASK_UID, "LaunchJob", launch))
    assert status == 401, doc
    assert doc["code"] == "unauthenticated" and f"uid {TASK_UID}, one Iris tasks run as" in doc["message"]
    # Another account of this host is the Iris user of its name, never local_admin.
    status, doc = _answer(_sent_and_gone(sock, PERSON_UID, "GetClusterInfo", {}))
    assert status == 200, doc
    assert (doc["caller"], doc["callerRole"]) == ("nobody", "user")
    status, doc = _answer(_sent_and_gone(sock, PERSON_UID, "LaunchJob", launch))
    assert status == 403 and "nobody (user) may not create /alice/sneaky" in doc["message"], doc
    assert client(reachable).list_jobs(pb.ListJobsRequest()).jobs == []


# Runs as a task under its own uid: tokenless calls over TCP and through the socket, a call with
# its token through the socket; prints their status codes.
PROBE = r"""
import http.client, json, os, socket, urllib.parse
url = urllib.parse.urlsplit(os.environ["IRIS_CONTROLLER"])

class Local(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(os.environ["SOCK"])

def code(conn, headers={}):
    conn.request("POST", "/iris.v1.ControllerService/ListJobs", body=b"{}",
                 headers={"Content-Type": "application/json", **headers})
    answer = conn.getresponse()
    answer.read()
    return answer.status

tcp, local = http.client.HTTPConnection(url.hostname, url.port, timeout=10), Local("localhost", timeout=10)
print(json.dumps([code(tcp), code(local), code(local), code(local, {"Authorization": "Bearer " + os.environ["IRIS_TOKEN"]})]))
"""


def test_a_task_without_its_token_is_refused_on_both_ways_in(reachable):
    c = client(reachable)
    env = {"SOCK": str(reachable.state_dir / "controller.sock")}
    # The system's Python: this host's own may sit in root's closed home, which a task uid cannot enter.
    probe = launch(c, "probe", ["/usr/bin/python3", "-c", PROBE], env=env)
    assert wait_state(c, probe).job.state == "SUCCEEDED", logs(c, probe)
    assert json.loads(logs(c, probe)[-1]) == [401, 401, 401, 200]


def test_tokenless_tcp_is_anonymous_and_told_how_to_authenticate(controller):
    api = f"{controller.url}/iris.v1.ControllerService"
    info = httpx.post(f"{api}/GetClusterInfo", json={}, timeout=10)
    assert info.status_code == 200
    assert (info.json()["caller"], info.json()["callerRole"]) == ("anonymous", "anonymous")
    refused = httpx.post(f"{api}/LaunchJob", json={"name": "x", "user": "alice", "command": ["true"]}, timeout=10)
    assert refused.status_code == 401
    message = refused.json()["message"]
    assert "carries no token" in message and "IRIS_TOKEN" in message and "iris token create" in message
    assert "Unix socket" in message
    assert httpx.get(f"{controller.url}/health", timeout=10).status_code == 200


def test_the_cli_on_the_controllers_host_needs_no_token(controller):
    listed = controller.cli("--controller", controller.url, "job", "list", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    run = controller.cli("job", "run", "--no-wait", "--", "true")
    assert run.returncode == 0 and run.stdout.strip().startswith("/"), (run.stdout, run.stderr)


def test_revoking_a_users_token_stops_her_running_tasks_child_submits(controller, tmp_path):
    import sys

    from tests.controller.helpers import user_token

    go = tmp_path / "go"
    script = (
        "import os, time\n"
        "from iris.client.client import IrisClient\n"
        "c = IrisClient()\n"
        "print('before', c.submit(['true'], name='first'), flush=True)\n"
        f"while not os.path.exists({str(go)!r}): time.sleep(0.05)\n"
        "try:\n"
        "    print('after', c.submit(['true'], name='second'))\n"
        "except Exception as exc:\n"
        "    print('refused', type(exc).__name__, exc)\n"
    )
    token = user_token(controller, "alice")
    alice = client(controller, token)
    driver = launch(alice, "driver", [sys.executable, "-c", script])
    wait_until(lambda: logs(alice, driver), message="the task's first child")  # its token worked while hers did
    revoked = controller.cli("token", "revoke", token)
    assert revoked.returncode == 0, revoked.stderr
    go.touch()
    operator = client(controller)
    assert wait_state(operator, driver).job.state == "SUCCEEDED", logs(operator, driver)
    lines = logs(operator, driver)
    assert lines[0] == f"before {driver}/first"
    assert lines[1].startswith("refused Unauthenticated") and "has since been revoked" in lines[1], lines
    assert "second" not in " ".join(j.job_id for j in operator.list_jobs(pb.ListJobsRequest()).jobs)


def test_a_client_made_before_its_controller_starts_finds_the_socket_once_it_is_up(controller_factory):
    from iris.core.errors import Unavailable
    from iris.rpc.transport import ConnectTransport

    ctl = controller_factory(start=False)
    transport = ConnectTransport(ctl.url, timeout=10)
    with pytest.raises(Unavailable, match="cannot reach the Iris controller"):
        transport.call("GetClusterInfo", pb.GetClusterInfoRequest(), pb.GetClusterInfoResponse)
    ctl.start()
    info = transport.call("GetClusterInfo", pb.GetClusterInfoRequest(), pb.GetClusterInfoResponse)
    assert (info.caller, info.caller_role) == ("local_admin", "admin")
    assert transport.local_socket == str(ctl.state_dir / "controller.sock")
    # Restarted, it is found again, through the socket it made anew.
    ctl.stop()
    with pytest.raises(Unavailable):
        transport.call("GetClusterInfo", pb.GetClusterInfoRequest(), pb.GetClusterInfoResponse)
    ctl.start()
    info = transport.call("GetClusterInfo", pb.GetClusterInfoRequest(), pb.GetClusterInfoResponse)
    assert (info.caller, info.pid) == ("local_admin", ctl.pid)
    transport.close()
