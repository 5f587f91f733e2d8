"""A peer's sync report that this cluster cannot read (a state of a newer version, a task that is
not the job's) is skipped, not mirrored: the job keeps states this cluster knows, a user can still
stop it, and the next readable report is mirrored as usual. Real controllers; a loopback relay in
front of the peer rewrites its FederationSync answers while the test says so."""

from __future__ import annotations

import threading

from iris.rpc import controller_pb2 as pb
from tests.conftest import wait_until
from tests.controller.helpers import client, status, user_token, wait_state
from tests.integration.test_federation import gpu_job, on_peer
from tests.integration.test_federation_auth import _RelayHandler, relay_federation  # noqa: F401

_TAMPER = threading.Event()
_TAMPERED = [0]


class _RewritingHandler(_RelayHandler):
    def _answer(self, code: int, headers, data: bytes) -> None:
        if code == 200 and self.path.endswith("/FederationSync") and _TAMPER.is_set():
            resp = pb.FederationSyncResponse.FromString(data)
            for synced in resp.jobs:
                synced.job.state = "PAUSED"
                for task in synced.tasks:
                    task.task_id = "/bob/elsewhere/0"
            data = resp.SerializeToString()
            _TAMPERED[0] += 1
        super()._answer(code, headers, data)


def test_an_unreadable_sync_report_is_skipped_and_the_job_can_still_be_stopped(relay_federation):  # noqa: F811
    marin, h100, relay = relay_federation
    relay.RequestHandlerClass = _RewritingHandler
    c = client(marin, user_token(marin, "alice"))
    job = c.launch_job(gpu_job("skewed", "h100", command=("sleep", "300"))).job_id
    peer = client(h100)

    def running_on_peer() -> bool:
        try:
            return status(peer, on_peer(job)).job.state == "RUNNING"
        except Exception:  # not handed off yet
            return False

    wait_until(running_on_peer, timeout=60, message="running on the peer")
    _TAMPER.set()
    try:
        start = _TAMPERED[0]
        wait_until(lambda: _TAMPERED[0] >= start + 2, timeout=30, message="two rewritten sync answers")
        seen = status(c, job)
        assert seen.job.state in ("PENDING", "RUNNING")  # never the unknown state
        assert all(t.task_id.startswith(job) for t in seen.tasks)
        c.terminate_job(pb.TerminateJobRequest(job_id=job))  # stopping reads the mirror: it must be readable
    finally:
        _TAMPER.clear()
    final = wait_state(c, job, timeout=60)
    assert final.job.state == "KILLED"
    assert status(peer, on_peer(job)).job.state == "KILLED"
