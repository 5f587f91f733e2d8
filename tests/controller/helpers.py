"""Small helpers over the raw Connect client for controller tests."""

from __future__ import annotations

import os
import socket

import httpx
from connectrpc.code import Code
from connectrpc.errors import ConnectError

from iris.core.errors import IrisError
from iris.rpc import controller_pb2 as pb
from iris.rpc.controller_connect import ControllerServiceClientSync
from iris.rpc.transport import SOCKET_NAME, ConnectTransport
from tests.conftest import wait_until

TERMINAL = {"SUCCEEDED", "FAILED", "KILLED", "UNSCHEDULABLE"}


class _TokenClient:
    """A Connect client that sends a bearer token with every call."""

    def __init__(self, url: str, token: str):
        self._inner = ControllerServiceClientSync(url)
        self._headers = {"authorization": f"Bearer {token}"}

    def __getattr__(self, name):
        method = getattr(self._inner, name)
        return lambda request: method(request, headers=self._headers)


class _OperatorClient:
    """The Connect client's methods (`list_jobs(request)`), called as the operator: without a token,
    through the controller's Unix socket, as `iris` on the controller's host calls it. Errors are
    raised as the Connect client raises them."""

    _service = pb.DESCRIPTOR.services_by_name["ControllerService"]

    def __init__(self, ctl):
        self._transport = ConnectTransport(ctl.url, timeout=120, local_socket=str(ctl.state_dir / SOCKET_NAME))

    def __enter__(self) -> _OperatorClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self._transport.close()

    def __getattr__(self, name):
        method = self._service.methods_by_name["".join(part.title() for part in name.split("_"))]
        answer = getattr(pb, method.output_type.name)

        def call(request, headers=None):
            token = (headers or {}).get("authorization", "").removeprefix("Bearer ") or None
            try:
                return self._transport.call(method.name, request, answer, token=token)
            except IrisError as exc:
                raise ConnectError(Code(exc.code), exc.message) from None

        return call


def operator_http(ctl, timeout: float = 30) -> httpx.Client:
    """An HTTP client of `ctl` as the operator: through its Unix socket, without a token."""
    transport = httpx.HTTPTransport(uds=str(ctl.state_dir / SOCKET_NAME))
    return httpx.Client(transport=transport, base_url=ctl.url, timeout=timeout)


def operator_socket(ctl, timeout: float = 30) -> socket.socket:
    """A connection to `ctl`'s Unix socket, for raw HTTP as the operator."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    sock.connect(str(ctl.state_dir / SOCKET_NAME))
    return sock


def client(ctl, token: str | None = None):
    """A client of `ctl`: as local_admin (its Unix socket, no token) or with `token`."""
    return _TokenClient(ctl.url, token) if token else _OperatorClient(ctl)


def user_token(ctl, user: str, role: str = "user") -> str:
    """A token minted with the cluster's own signing key (created in its state dir on first use)."""
    from iris.controller.auth import load_or_create_signing_key, mint_token

    return mint_token(load_or_create_signing_key(None, ctl.state_dir), ctl.name, user, role, 3600)


def launch(c, name: str, command: list[str], user: str = "alice", **fields) -> str:
    req = pb.LaunchJobRequest(name=name, user=user, command=command, **fields)
    return c.launch_job(req).job_id


def status(c, job_id: str) -> pb.GetJobStatusResponse:
    return c.get_job_status(pb.GetJobStatusRequest(job_id=job_id, include_tasks=True, include_attempts=True))


def wait_state(c, job_id: str, states=TERMINAL, timeout: float = 30) -> pb.GetJobStatusResponse:
    """Waits until `job_id` is in one of `states`; a timeout says where the job was instead."""
    last: list[pb.GetJobStatusResponse] = []

    def check():
        s = status(c, job_id)
        last[:] = [s]
        return s if s.job.state in states else None

    try:
        return wait_until(check, timeout=timeout, message=f"{job_id} to reach {sorted(states)}")
    except AssertionError as exc:
        if not last:
            raise
        job = last[0].job
        where = f"{job.state}, pending reason {job.pending_reason!r}, error {job.error!r}"
        raise AssertionError(f"{exc}; it was {where}; tasks {[t.state for t in last[0].tasks]}") from None


def logs(c, job_id: str) -> list[str]:
    return [ln.text for ln in c.fetch_logs(pb.FetchLogsRequest(job_id=job_id, task_index=-1)).lines]


def error_code(fn) -> tuple[str, str]:
    try:
        fn()
    except ConnectError as exc:
        return exc.code.name.lower(), exc.message
    raise AssertionError("expected a Connect error")


def pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def job_count(c) -> int:
    return len(c.list_jobs(pb.ListJobsRequest(limit=100000)).jobs)


__all__ = [
    "client",
    "user_token",
    "launch",
    "status",
    "wait_state",
    "logs",
    "error_code",
    "pid_alive",
    "job_count",
    "os",
    "pb",
]
