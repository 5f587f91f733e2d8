"""Federation under faults: a parent crash mid-handoff, a peer outage. Exactly one run, nothing lost."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from iris.rpc import controller_pb2 as pb
from tests.conftest import wait_until
from tests.controller.helpers import client, logs, status, wait_state
from tests.integration.test_federation import FAST, gpu_job, on_peer, start_federation


def handoff_state(c, job_id: str) -> str:
    return status(c, job_id).job.handoff_state


@pytest.fixture
def runs() -> Iterator[Path]:
    """A file a task may append to: a task runs under its user's uid, not the test's, and pytest
    keeps its own temporary folders closed to other uids."""
    folder = Path(tempfile.mkdtemp(prefix="iris-runs-"))
    try:
        folder.chmod(0o711)
        path = folder / "runs.txt"
        path.touch()
        path.chmod(0o666)
        yield path
    finally:
        shutil.rmtree(folder)


def test_parent_killed_between_promotion_and_delivery_ack_runs_the_job_exactly_once(controller_factory, runs):
    fed = start_federation(controller_factory)
    marin, h100 = fed.marin, fed.h100
    # One heartbeat only, so the stopped peer still looks reachable and the job is promoted to it.
    marin.stop()
    marin.rewrite(controller={**FAST, "federation_heartbeat_interval": "1h"})
    marin.start()
    c = client(marin, fed.token)
    wait_until(lambda: any(p.reachable for p in c.list_peers(pb.ListPeersRequest()).peers), message="first heartbeat")
    os.kill(h100.proc.pid, signal.SIGSTOP)
    try:
        job = c.launch_job(gpu_job("once", "h100", command=("sh", "-c", f"echo run >> {runs}"))).job_id
        wait_until(lambda: handoff_state(c, job) == "PENDING_HANDOFF", message="promoted, delivery in flight")
        time.sleep(0.5)  # let the delivery call reach the stopped peer's socket
        marin.kill()
    finally:
        os.kill(h100.proc.pid, signal.SIGCONT)
    marin.start()
    c = client(marin, fed.token)
    final = wait_state(c, job, timeout=40)
    assert final.job.state == "SUCCEEDED" and final.job.cluster == "cw-h100", logs(client(h100), on_peer(job))
    assert runs.read_text().splitlines() == ["run"]
    peer_run = status(client(h100), on_peer(job))
    assert len(peer_run.tasks) == 1 and len(peer_run.tasks[0].attempts) == 1
    handles = (
        client(h100)
        .execute_raw_query(
            pb.ExecuteRawQueryRequest(
                sql=f"SELECT COUNT(*) FROM federated_jobs WHERE job_id = '{on_peer(job)}' AND direction = 'RECEIVED'"
            )
        )
        .rows
    )
    assert handles[0].values[0].number_value == 1


def test_peer_outage_keeps_the_last_known_state_and_converges_when_it_returns(controller_factory):
    fed = start_federation(controller_factory)
    marin, h100 = fed.marin, fed.h100
    c = client(marin, fed.token)
    job = c.launch_job(gpu_job("patient", "h100", command=("sleep", "6"))).job_id
    wait_until(lambda: status(c, job).job.state == "RUNNING", timeout=30, message="running on the peer")
    os.kill(h100.proc.pid, signal.SIGSTOP)
    try:
        # Five of the parent's peer-call timeouts (3 s) and thirty sync and heartbeat intervals.
        outage_end = time.monotonic() + 15
        wait_until(lambda: status(c, job).job.stale, timeout=15, message="marked stale")
        while time.monotonic() < outage_end:
            job_now = status(c, job).job
            assert job_now.state == "RUNNING", "a peer outage must never fail or kill a healthy job"
            time.sleep(0.5)
    finally:
        os.kill(h100.proc.pid, signal.SIGCONT)
    final = wait_state(c, job, timeout=30)
    assert final.job.state == "SUCCEEDED"
    wait_until(lambda: not status(c, job).job.stale, message="fresh again")
