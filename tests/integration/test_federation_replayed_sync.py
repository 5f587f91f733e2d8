"""A sync answer replayed to the parent after the job ended there never moves the job back: not an
answer from before the cursor the parent asked from, nor one dressed up as a full resync. Real
controllers; a loopback relay in front of the peer records the peer's sync answers and, once the
job has finished, answers the parent's syncs with the one that reported it running."""

from __future__ import annotations

import threading
import time

from iris.rpc import controller_pb2 as pb
from tests.conftest import wait_until
from tests.controller.helpers import client, status, user_token, wait_state
from tests.integration.test_federation import gpu_job
from tests.integration.test_federation_auth import relay_federation  # noqa: F401  (a fixture)


class Recorder:
    """The relay's rewrite: keeps the last change-feed answer that reports the job running and, once
    `replay` is set, sends that answer (as it is, or marked a full resync) in place of each new one."""

    def __init__(self) -> None:
        self.running: bytes | None = None
        self.replay: bytes | None = None
        self.replayed = 0
        self.lock = threading.Lock()

    def __call__(self, path: str, data: bytes) -> bytes:
        if not path.endswith("/FederationSync"):
            return data
        with self.lock:
            if self.replay is not None:
                self.replayed += 1
                return self.replay
            answer = pb.FederationSyncResponse.FromString(data)
            if not answer.cursor_stale and any(s.job.state == "RUNNING" for s in answer.jobs):
                self.running = data  # the latest such answer of the change feed (not a full resync)
        return data


def test_a_replayed_sync_answer_never_moves_a_finished_job_back(relay_federation):  # noqa: F811
    marin, h100, relay = relay_federation
    recorder = Recorder()
    relay.rewrite = recorder
    c = client(marin, user_token(marin, "alice"))
    wait_until(lambda: c.list_peers(pb.ListPeersRequest()).peers[0].reachable, message="first heartbeat")
    # Its first task ends two seconds before its second: the change feed reports the job running.
    brief = gpu_job("brief", "h100", count=4, command=("sh", "-c", "sleep $((1 + 2 * IRIS_TASK_INDEX))"), replicas=2)
    job = c.launch_job(brief).job_id
    final = wait_state(c, job, timeout=40)
    assert final.job.state == "SUCCEEDED" and final.job.cluster == "cw-h100"
    assert recorder.running is not None, "no sync answer reported the job running"

    old = pb.FederationSyncResponse.FromString(recorder.running)
    as_resync = pb.FederationSyncResponse()
    as_resync.CopyFrom(old)
    as_resync.cursor_stale = True
    # As it was, it ends before the cursor the parent asks from; as a full resync it passes that
    # check, and the job's own end is what refuses it. The parent's log says which check held.
    for answer, said in (
        (recorder.running, "before the"),
        (as_resync.SerializeToString(), f"reported job {job} RUNNING after it ended here as SUCCEEDED"),
    ):
        with recorder.lock:
            recorder.replay, recorder.replayed = answer, 0
        wait_until(lambda: recorder.replayed >= 3, timeout=20, message="the old answer replayed three times")
        time.sleep(0.2)  # the fold of the last one
        now = status(c, job)
        assert now.job.state == "SUCCEEDED", now.job
        assert [t.state for t in now.tasks] == ["SUCCEEDED", "SUCCEEDED"]
        assert said in marin.log.read_text()
        # Its owner is no longer charged for it on the peer.
        spend = client(marin).get_cluster_info(pb.GetClusterInfoRequest()).spend
        assert all(s.on_peers == 0 for s in spend if s.user == "alice"), spend
