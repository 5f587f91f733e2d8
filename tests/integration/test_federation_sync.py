"""Bounded, exact federation sync through real controllers: a full resync carries the active jobs
and recent changes only, and a parent back after the peer pruned its changelog reclaims a job the
peer deleted (a tombstone it never saw) and learns the real outcome of one that ended meanwhile."""

from __future__ import annotations

from iris.controller.auth import load_or_create_signing_key, public_key_pem
from iris.rpc import controller_pb2 as pb
from tests.conftest import start_together, wait_until
from tests.controller.helpers import client, logs, status, user_token, wait_state
from tests.integration.test_federation import FAST, gpu_backend, gpu_job, on_peer


def start_pair(controller_factory, peer_controller: dict | None = None, peer_workers: int = 3, **parent_config):
    """marin (CPU only) peered with cw-h100 alone; returns (marin, h100, alice's token on marin)."""
    marin = controller_factory(
        "marin",
        start=False,
        controller=FAST,
        backends=[{"id": "cpu", "kind": "local", "workers": 1, "capacity": {"cpu": 2, "memory": "4G"}}],
        **parent_config,
    )
    auth = {"federation_peers": {"marin": public_key_pem(load_or_create_signing_key(None, marin.state_dir))}}
    h100 = controller_factory(
        "cw-h100",
        start=False,
        backends=gpu_backend("h100", workers=peer_workers),
        controller={**FAST, **(peer_controller or {})},
        auth=auth,
    )
    marin.rewrite(peers={"cw-h100": {"address": h100.url}})
    start_together(h100, marin)
    c = client(marin)
    wait_until(lambda: all(p.reachable for p in c.list_peers(pb.ListPeersRequest()).peers), message="peer reachable")
    return marin, h100, user_token(marin, "alice")


def changelog_rows(ctl) -> int:
    resp = client(ctl).execute_raw_query(pb.ExecuteRawQueryRequest(sql="SELECT COUNT(*) FROM federation_changelog"))
    return int(resp.rows[0].values[0].number_value)


def test_full_resync_carries_active_jobs_and_recent_changes_not_every_job(controller_factory):
    marin, h100, token = start_pair(controller_factory)
    c, peer = client(marin, token), client(h100)
    done = c.launch_job(gpu_job("done", "h100", command=("true",))).job_id
    live = c.launch_job(gpu_job("live", "h100", command=("sleep", "300"))).job_id
    wait_state(c, done, timeout=60)
    wait_until(lambda: status(c, live).job.state == "RUNNING", timeout=60, message="live job running on the peer")
    full = peer.federation_sync(pb.FederationSyncRequest(requester="marin"))
    assert full.cursor_stale and {j.job.job_id for j in full.jobs} == {on_peer(done), on_peer(live)}  # both recent

    # Once the window has passed, the finished job leaves the full resync; the live one stays.
    h100.kill()  # a crash: its attempts run on and are adopted again
    h100.rewrite(controller={**FAST, "federation_changelog_retention": "1s"})
    h100.start()
    wait_until(lambda: changelog_rows(h100) == 0, timeout=30, message="changelog pruned")
    full = peer.federation_sync(pb.FederationSyncRequest(requester="marin"))
    assert full.cursor_stale and [j.job.job_id for j in full.jobs] == [on_peer(live)]
    asked = [on_peer(done), on_peer("/alice/never")]
    named = peer.federation_sync(pb.FederationSyncRequest(requester="marin", job_ids=asked))
    assert [j.job.job_id for j in named.jobs] == asked[:1] and list(named.tombstones) == asked[1:]
    assert named.jobs[0].job.state == "SUCCEEDED"


def test_parent_back_after_the_peer_pruned_its_changelog_reclaims_a_deleted_job_and_learns_an_ended_one(
    controller_factory, tmp_path
):
    marin, h100, token = start_pair(controller_factory, {"federation_changelog_retention": "1s"})
    c, peer = client(marin, token), client(h100)
    flag = tmp_path / "finish"
    ends = c.launch_job(gpu_job("ends", "h100", command=("sh", "-c", f"while [ ! -f {flag} ]; do sleep 0.1; done")))
    deleted = c.launch_job(gpu_job("deleted", "h100", command=("sleep", "300")))
    for job in (ends.job_id, deleted.job_id):
        wait_until(lambda job=job: status(c, job).job.state == "RUNNING", timeout=60, message=f"{job} running")

    marin.stop()
    # While the parent is away: one job ends on the peer, the other is stopped there and replaced by
    # a job of the peer's own under the same id (the received one is deleted: a tombstone).
    flag.touch()
    ended, removed = on_peer(ends.job_id), on_peer(deleted.job_id)
    wait_until(lambda: status(peer, ended).job.state == "SUCCEEDED", timeout=30, message="ended on the peer")
    peer.terminate_job(pb.TerminateJobRequest(job_id=removed))
    wait_state(peer, removed, timeout=30)
    peer.launch_job(pb.LaunchJobRequest(name=removed, user="alice", command=["true"], existing_job_policy="replace"))
    wait_until(lambda: changelog_rows(h100) == 0, timeout=30, message="tombstone pruned on the peer")

    marin.start()
    c = client(marin, token)
    gone = wait_state(c, deleted.job_id, timeout=30).job
    assert gone.state == "FAILED" and "no longer holds this job" in gone.error
    assert wait_state(c, ends.job_id, timeout=30).job.state == "SUCCEEDED"
    handles = client(marin).execute_raw_query(
        pb.ExecuteRawQueryRequest(sql="SELECT job_id FROM federated_jobs WHERE direction = 'SENT'")
    )
    assert [r.values[0].string_value for r in handles.rows] == [ends.job_id]


def test_sync_reports_each_jobs_last_log_line_and_the_parent_relays_every_line(controller_factory):
    marin, h100, token = start_pair(controller_factory)
    c, peer = client(marin, token), client(h100)
    quiet = c.launch_job(gpu_job("quiet", "h100", count=1, command=("true",))).job_id
    chatty = c.launch_job(gpu_job("chatty", "h100", count=1, command=("sh", "-c", "echo one; echo two"))).job_id
    for job in (quiet, chatty):
        wait_state(c, job, timeout=60)

    def relayed() -> bool:
        rows = c.execute_raw_query(
            pb.ExecuteRawQueryRequest(sql="SELECT COUNT(*) FROM federated_jobs WHERE logs_complete = 1")
        ).rows
        return int(rows[0].values[0].number_value) == 2

    wait_until(relayed, timeout=30, message="both jobs' logs relayed in full")
    assert [ln.text for ln in c.fetch_logs(pb.FetchLogsRequest(job_id=chatty, task_index=-1)).lines] == [
        "one",
        "two",
    ]
    assert not c.fetch_logs(pb.FetchLogsRequest(job_id=quiet, task_index=-1)).lines
    full = peer.federation_sync(pb.FederationSyncRequest(requester="marin"))
    last = peer.fetch_logs(pb.FetchLogsRequest(job_id=on_peer(chatty), task_index=-1)).lines[-1].seq
    assert full.reports_log_heads
    assert dict(full.log_heads) == {on_peer(quiet): 0, on_peer(chatty): last}


def test_syncs_of_a_handed_off_job_update_its_mirrored_tasks_in_place_and_never_force_a_full_pending_read(
    controller_factory, tmp_path
):
    marin, _, token = start_pair(controller_factory)
    c = client(marin, token)
    flag = tmp_path / "finish"
    wait = ("sh", "-c", f"while [ ! -f {flag} ]; do sleep 0.1; done")
    job = c.launch_job(gpu_job("away", "h100", count=1, replicas=2, command=wait)).job_id
    wait_until(
        lambda: [t.state for t in status(c, job).tasks] == ["RUNNING", "RUNNING"],
        timeout=60,
        message="both tasks running on the peer, as mirrored here",
    )
    flag.touch()
    done = wait_state(c, job, timeout=30)
    assert done.job.state == "SUCCEEDED"
    assert [(t.state, t.cluster) for t in done.tasks] == [("SUCCEEDED", "cw-h100")] * 2
    # Deleting a task is the one write the scheduler's loader answers with a read of every pending
    # task; the syncs that took the mirrored tasks from pending to running to done deleted none.
    assert schedule_inputs(marin)[1] == 0


def schedule_inputs(ctl) -> tuple[int, int]:
    """The version every change to what the scheduler reads moves, and how many tasks were deleted."""
    sql = "SELECT version, deletes FROM schedule_inputs WHERE id = 0"
    row = client(ctl).execute_raw_query(pb.ExecuteRawQueryRequest(sql=sql)).rows[0]
    return int(row.values[0].number_value), int(row.values[1].number_value)


def test_syncs_of_a_handed_off_job_that_only_prints_move_nothing_the_parents_scheduler_reads(
    controller_factory, tmp_path
):
    marin, _, token = start_pair(controller_factory)
    c = client(marin, token)
    flag = tmp_path / "finish"
    chatty = ("sh", "-c", f"while [ ! -f {flag} ]; do echo line; sleep 0.05; done")
    job = c.launch_job(gpu_job("chatty", "h100", count=1, command=chatty)).job_id
    wait_until(lambda: [t.state for t in status(c, job).tasks] == ["RUNNING"], timeout=60, message="running")
    wait_until(lambda: logs(c, job), timeout=30, message="first lines relayed")
    before = schedule_inputs(marin)
    # Each batch of lines the peer stores makes it report the job again; its state stays as it was.
    seen = len(logs(c, job))
    wait_until(lambda: len(logs(c, job)) >= seen + 40, timeout=30, message="more lines relayed, over several syncs")
    assert status(c, job).job.state == "RUNNING"
    assert schedule_inputs(marin) == before
    flag.touch()
    assert wait_state(c, job, timeout=30).job.state == "SUCCEEDED"
