"""Log relay on each sync: a job the sync names with nothing after its cursor costs the peer no
FetchLogs call, and is done when the report says it is over; any other job is asked as before."""

from __future__ import annotations

import pytest

from iris.core.errors import Unavailable
from iris.federation.manager import FederationManager
from iris.federation.model import LogTarget
from iris.rpc import controller_pb2 as pb


class Client:
    def __init__(self):
        self.asked: list[str] = []

    def fetch_logs(self, job_id: str, after_seq: int) -> pb.FetchLogsResponse:
        self.asked.append(job_id)
        return pb.FetchLogsResponse(next_seq=after_seq, job_finished=False)


class Store:
    def __init__(self, targets: list[LogTarget]):
        self.targets = targets
        self.done: list[str] = []
        self.writes = 0  # transactions that recorded jobs done

    def log_targets(self, peer_id):
        return self.targets

    def append_relayed_logs(self, job_id, lines, cursor, complete=False):
        if complete:
            self.done.append(job_id)

    def mark_logs_complete(self, job_ids):
        self.done.extend(job_ids)
        self.writes += 1


def report(heads: dict[str, int] | None, states: dict[str, str]) -> pb.FederationSyncResponse:
    resp = pb.FederationSyncResponse(
        jobs=[pb.SyncedJob(job=pb.JobStatus(job_id=j, state=s)) for j, s in states.items()]
    )
    if heads is not None:
        resp.log_heads.update(heads)
        resp.reports_log_heads = True
    return resp


def relay(targets: list[LogTarget], resp: pb.FederationSyncResponse) -> tuple[list[str], list[str]]:
    store, client = Store(targets), Client()
    manager = FederationManager("marin", {}, store=store, router=None)
    try:
        manager._relay_logs("cw", client, resp)  # type: ignore[arg-type]
    finally:
        manager.stop()
    return client.asked, store.done


def test_jobs_reported_with_nothing_after_their_cursor_are_not_asked_and_ended_ones_are_done():
    targets = [
        LogTarget("/u/ended", 0),
        LogTarget("/u/running", 7),
        LogTarget("/u/printed", 3),
        LogTarget("/u/unnamed", 0),
    ]
    heads = {"/u/ended": 0, "/u/running": 7, "/u/printed": 9}
    states = {"/u/ended": "SUCCEEDED", "/u/running": "RUNNING", "/u/printed": "SUCCEEDED"}
    asked, done = relay(targets, report(heads, states))
    assert asked == ["/u/printed", "/u/unnamed"]  # new lines, or not named by this report
    assert done == ["/u/ended"]


def test_a_peer_that_reports_no_heads_is_asked_about_every_job():
    targets = [LogTarget("/u/ended", 0), LogTarget("/u/running", 7)]
    asked, done = relay(targets, report(None, {"/u/ended": "SUCCEEDED", "/u/running": "RUNNING"}))
    assert asked == ["/u/ended", "/u/running"] and done == []


class FinishedClient(Client):
    """A peer that reports each job over with nothing left, and drops the connection on `broken`."""

    def __init__(self, broken: str = ""):
        super().__init__()
        self.broken = broken

    def fetch_logs(self, job_id: str, after_seq: int) -> pb.FetchLogsResponse:
        if job_id == self.broken:
            raise Unavailable("peer cw went away")
        self.asked.append(job_id)
        return pb.FetchLogsResponse(next_seq=after_seq, job_finished=True)


def test_jobs_found_over_in_one_sync_are_recorded_done_in_one_write():
    targets = [LogTarget(f"/u/j{i}", 0) for i in range(5)]
    heads = {"/u/j0": 0, "/u/j1": 0}  # over with nothing after the cursor: not even asked
    store, client = Store(targets), FinishedClient()
    manager = FederationManager("marin", {}, store=store, router=None)
    try:
        manager._relay_logs("cw", client, report(heads, {"/u/j0": "SUCCEEDED", "/u/j1": "FAILED"}))  # type: ignore[arg-type]
    finally:
        manager.stop()
    assert client.asked == ["/u/j2", "/u/j3", "/u/j4"]
    assert store.done == [f"/u/j{i}" for i in range(5)] and store.writes == 1


def test_jobs_found_over_before_a_failed_call_are_recorded_done():
    targets = [LogTarget(f"/u/j{i}", 0) for i in range(3)]
    store, client = Store(targets), FinishedClient(broken="/u/j1")
    manager = FederationManager("marin", {}, store=store, router=None)
    try:
        with pytest.raises(Unavailable):
            manager._relay_logs("cw", client, report(None, {}))  # type: ignore[arg-type]
    finally:
        manager.stop()
    assert store.done == ["/u/j0"]  # the sync fails as before, and what it learned is kept
