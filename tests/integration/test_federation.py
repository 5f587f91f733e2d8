"""Federation end to end: three real controllers on loopback (a CPU parent, two GPU peers).

Tests that leave the federation as they found it (every job they start has ended when they return)
share one, built once per module: starting three controllers costs more than most of these tests. A
test that needs other settings, or breaks what it runs on, starts its own with `start_federation`.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from iris.controller.auth import load_or_create_signing_key, public_key_pem
from iris.federation.ids import received_job_id
from iris.rpc import controller_pb2 as pb
from tests.conftest import ControllerFactory, free_port, start_together, wait_until
from tests.controller.helpers import TERMINAL, client, error_code, logs, pid_alive, status, user_token, wait_state

FAST = {"tick_interval": "1s", "federation_heartbeat_interval": "0.5s", "federation_sync_interval": "0.5s"}


def gpu_backend(variant: str, workers: int = 1, count: int = 8) -> list[dict]:
    return [
        {
            "id": variant,
            "kind": "local",
            "workers": workers,
            "capacity": {"cpu": 8, "memory": "16G"},
            "devices": {"gpu": variant, "count": count},
        }
    ]


@dataclass
class Federation:
    marin: object
    h100: object
    gb200: object
    token: str  # alice's token on marin: only an accountable user's jobs federate

    def __iter__(self):
        return iter((self.marin, self.h100, self.gb200))


def start_federation(
    controller_factory,
    peer_auth: dict | None = None,
    parent_defaults: dict | None = None,
    parent_settings: dict | None = None,
) -> Federation:
    """marin (CPU only) peered with cw-h100 and cw-gb200, which trust marin's key."""
    marin = controller_factory(
        "marin",
        start=False,
        controller={**FAST, **(parent_settings or {})},
        backends=[{"id": "cpu", "kind": "local", "workers": 2, "capacity": {"cpu": 4, "memory": "8G"}}],
        **({"defaults": parent_defaults} if parent_defaults else {}),
    )
    marin_key = public_key_pem(load_or_create_signing_key(None, marin.state_dir))
    auth = {"federation_peers": {"marin": marin_key}, **(peer_auth or {})}
    defaults = {"task_env": {"SHARED": "peer-default", "PEER_ONLY": "peer-set"}}
    h100 = controller_factory(
        "cw-h100", start=False, backends=gpu_backend("h100"), controller=FAST, auth=auth, defaults=defaults
    )
    gb200 = controller_factory("cw-gb200", start=False, backends=gpu_backend("gb200"), controller=FAST, auth=auth)
    marin.rewrite(
        peers={
            "cw-h100": {"address": h100.url},
            "cw-gb200": {"address": gb200.url},
            "cw-gone": {"address": f"http://127.0.0.1:{free_port()}"},
        }
    )
    start_together(h100, gb200, marin)
    c = client(marin)
    wait_until(
        lambda: sum(p.reachable for p in c.list_peers(pb.ListPeersRequest()).peers) == 2, message="peers reachable"
    )
    return Federation(marin, h100, gb200, user_token(marin, "alice"))


class SharedFederation:
    """One federation lent to test after test; replaced when a test left a job unfinished or a
    controller gone, so what one test breaks never reaches the next."""

    def __init__(self, base):
        self.base = base
        self.built = 0
        self.factory: ControllerFactory | None = None
        self.current: Federation | None = None

    def lend(self) -> Federation:
        if self.current is None:
            self.built += 1
            self.factory = ControllerFactory(self.base / f"federation-{self.built}")
            self.current = start_federation(self.factory)
        return self.current

    def check_returned(self) -> None:
        """Discards the federation unless all three controllers run and every job on each has ended."""
        fed = self.current
        if fed is None:
            return

        def settled() -> bool:
            for ctl in fed:
                if ctl.proc is None or ctl.proc.poll() is not None:
                    return False
                jobs = client(ctl).list_jobs(pb.ListJobsRequest(limit=100000)).jobs
                if any(job.state not in TERMINAL for job in jobs):
                    return False
            return True

        try:
            wait_until(settled, timeout=10, interval=0.1, message="the shared federation's jobs to end")
        except Exception:
            self.close()

    def close(self) -> None:
        factory, self.factory, self.current = self.factory, None, None
        if factory is not None:
            factory.cleanup()


@pytest.fixture(scope="module")
def shared_federation(tmp_path_factory):
    shared = SharedFederation(tmp_path_factory.mktemp("federation"))
    try:
        yield shared
    finally:
        shared.close()


@pytest.fixture
def federation(shared_federation) -> Federation:
    fed = shared_federation.lend()
    yield fed
    shared_federation.check_returned()


def on_peer(job_id: str, requester: str = "marin") -> str:
    """The id a peer files a job handed off by `requester` under."""
    return received_job_id(requester, job_id)


def gpu_job(
    name: str,
    variant: str,
    count: int = 8,
    command=("sh", "-c", "echo on $IRIS_CLUSTER gpus=$CUDA_VISIBLE_DEVICES"),
    **kw,
):
    return pb.LaunchJobRequest(
        name=name,
        user="alice",
        command=list(command),
        resources=pb.Resources(device=pb.Device(kind="gpu", variant=variant, count=count)),
        **kw,
    )


def test_cpu_job_runs_locally_and_gpu_job_runs_on_the_peer_with_state_and_logs_mirrored(federation):
    marin, h100, _ = federation
    c = client(marin, federation.token)
    local = c.launch_job(pb.LaunchJobRequest(name="cpu-work", user="alice", command=["true"]))
    assert local.disposition == "local"
    sent = c.launch_job(
        gpu_job(
            "train",
            "h100",
            command=("sh", "-c", "echo on $IRIS_CLUSTER gpus=$CUDA_VISIBLE_DEVICES $(cat cfg.txt) $SHARED $PEER_ONLY"),
            workdir_files={"cfg.txt": b"with-files"},
            env={"SHARED": "from-parent"},
        )
    )
    assert sent.disposition == "queued" and sent.peer_id == ""
    assert status(c, sent.job_id).job.cluster in ("", "cw-h100")  # no peer chosen yet, never "marin"
    final = wait_state(c, sent.job_id, timeout=30)
    assert final.job.state == "SUCCEEDED"
    assert final.job.cluster == "cw-h100" and final.job.handoff_state == "HANDED_OFF"
    assert final.tasks and final.tasks[0].cluster == "cw-h100" and final.tasks[0].exit_code == 0
    again = c.terminate_job(pb.TerminateJobRequest(job_id=sent.job_id))  # ended: nothing is stopped
    assert list(again.terminated) == [] and again.state == "SUCCEEDED"
    explained = c.explain_job(pb.ExplainJobRequest(job_id=sent.job_id))
    assert explained.summary == "job is SUCCEEDED; it was sent to peer cw-h100 (handoff HANDED_OFF)"
    assert list(explained.lines) == [
        "why: no local backend can host cpu=1 memory=1G gpu=h100x8, so it was queued for a federation peer and"
        " placed on cw-h100, which reported room for it"
    ]
    on_peer_status = status(client(h100), on_peer(sent.job_id))
    assert on_peer_status.job.state == "SUCCEEDED"
    wait_until(
        lambda: logs(c, sent.job_id) == ["on cw-h100 gpus=0,1,2,3,4,5,6,7 with-files from-parent peer-set"],
        message="relayed logs",
    )
    assert wait_state(c, local.job_id).job.cluster == "marin"
    # A listing says what describe says of where each job went and how it ended.
    listed = {j.job_id: j for j in c.list_jobs(pb.ListJobsRequest()).jobs}
    assert (listed[sent.job_id].peer_id, listed[sent.job_id].handoff_state) == ("cw-h100", "HANDED_OFF")
    assert (listed[local.job_id].peer_id, listed[local.job_id].handoff_state) == ("", "")
    assert all(listed[j].has_exit_code and listed[j].exit_code == 0 for j in (sent.job_id, local.job_id))
    rows = c.execute_raw_query(
        pb.ExecuteRawQueryRequest(
            sql="SELECT job_id, peer_id, owner_principal, handoff_state FROM federated_jobs"
            f" WHERE job_id IN ('{local.job_id}', '{sent.job_id}')"
        )
    ).rows
    assert [[v.string_value for v in r.values] for r in rows] == [[sent.job_id, "cw-h100", "alice", "HANDED_OFF"]]


def test_a_burst_past_the_per_peer_cap_moves_on_answers_alone_and_runs_each_job_once(controller_factory):
    """With one unaccepted handoff allowed per peer and a tick that never fires on its own, every
    job of a burst still reaches its peer: submits queued while the peers are full skip the tick,
    and each answer from a peer wakes it to promote the next."""
    fed = start_federation(
        controller_factory, parent_settings={"tick_interval": "600s", "max_federation_handoffs_per_cycle": 1}
    )
    c = client(fed.marin, fed.token)
    jobs = [c.launch_job(gpu_job(f"burst-{i}", "h100", count=1, command=("true",))).job_id for i in range(6)]
    for job_id in jobs:
        final = wait_state(c, job_id, timeout=60)
        assert final.job.state == "SUCCEEDED" and final.job.cluster == "cw-h100"
    on_h100 = client(fed.h100)
    for job_id in jobs:
        runs = on_h100.execute_raw_query(
            pb.ExecuteRawQueryRequest(sql=f"SELECT COUNT(*) FROM attempts WHERE job_id = '{on_peer(job_id)}'")
        )
        assert runs.rows[0].values[0].number_value == 1


def test_pinned_job_goes_to_its_peer_even_when_it_could_run_locally(federation):
    marin, _, gb200 = federation
    c = client(marin, federation.token)
    resp = c.launch_job(
        pb.LaunchJobRequest(
            name="pinned",
            user="alice",
            command=["true"],
            constraints=[pb.Constraint(key="cluster", op="EQ", values=["cw-gb200"])],
        )
    )
    assert resp.disposition == "queued" and resp.peer_id == "cw-gb200"
    assert wait_state(c, resp.job_id).job.cluster == "cw-gb200"
    explained = c.explain_job(pb.ExplainJobRequest(job_id=resp.job_id))
    assert "it was sent to peer cw-gb200" in explained.summary
    assert list(explained.lines) == ["why: it was pinned to cw-gb200 (--target-cluster cw-gb200)"]
    assert status(client(gb200), on_peer(resp.job_id)).job.state == "SUCCEEDED"


def test_a_job_nothing_can_host_fails_at_once(federation):
    marin, _, _ = federation
    c = client(marin, federation.token)
    resp = c.launch_job(gpu_job("impossible", "b300"))
    assert resp.disposition == "rejected" and resp.state == "UNSCHEDULABLE"
    job = status(c, resp.job_id).job
    assert job.state == "UNSCHEDULABLE" and "b300" in job.error


def test_refusals_unknown_pin_and_child_job(federation):
    marin, _, _ = federation
    c = client(marin, federation.token)
    code, message = error_code(
        lambda: c.launch_job(
            pb.LaunchJobRequest(
                name="x",
                user="alice",
                command=["true"],
                constraints=[pb.Constraint(key="cluster", op="EQ", values=["nowhere"])],
            )
        )
    )
    assert code == "invalid_argument" and "nowhere" in message
    parent = c.launch_job(pb.LaunchJobRequest(name="parent", user="alice", command=["sleep", "60"])).job_id
    wait_state(c, parent, {"RUNNING"})
    child = gpu_job("child", "h100", parent_job_id=parent)
    child.user = ""
    code, message = error_code(lambda: c.launch_job(child))
    assert code == "invalid_argument" and "--target-cluster" in message
    c.terminate_job(pb.TerminateJobRequest(job_id=parent))


def test_cancel_while_queued_is_never_delivered(federation):
    marin, _, _ = federation
    c = client(marin, federation.token)
    resp = c.launch_job(
        pb.LaunchJobRequest(
            name="stuck",
            user="alice",
            command=["true"],
            constraints=[pb.Constraint(key="cluster", op="EQ", values=["cw-gone"])],
        )
    )
    # The reason names the cause once a heartbeat has found the peer silent.
    assert status(c, resp.job_id).job.pending_reason.startswith("Queued for peer cw-gone to report free capacity")
    c.terminate_job(pb.TerminateJobRequest(job_id=resp.job_id))
    job = status(c, resp.job_id).job
    assert job.state == "KILLED" and job.error == "Cancelled before handoff"
    assert job.handoff_state == "QUEUED_HANDOFF"


def test_cancel_after_handoff_stops_the_process_on_the_peer(federation):
    marin, h100, _ = federation
    c, p = client(marin, federation.token), client(h100)
    resp = c.launch_job(gpu_job("long", "h100", command=("sleep", "300")))
    wait_until(lambda: status(c, resp.job_id).job.state == "RUNNING", timeout=30, message="running on the peer")
    pid = wait_until(
        lambda: (
            status(p, on_peer(resp.job_id)).tasks[0].attempts[0].pid
            if status(p, on_peer(resp.job_id)).tasks[0].attempts
            else 0
        ),
        message="peer pid",
    )
    assert pid_alive(pid)
    c.terminate_job(pb.TerminateJobRequest(job_id=resp.job_id))
    wait_until(lambda: not pid_alive(pid), timeout=20, message="peer process gone")
    wait_until(lambda: status(p, on_peer(resp.job_id)).job.state == "KILLED", message="killed on the peer")
    # The parent records KILLED once the peer's answer to the relayed stop is back, a moment after
    # the peer has written it.
    wait_until(lambda: status(c, resp.job_id).job.state == "KILLED", timeout=20, message="killed on the parent")


def test_list_peers_reports_reachability_and_availability(federation):
    marin, _, _ = federation
    peers = {p.peer_id: p for p in client(marin).list_peers(pb.ListPeersRequest()).peers}
    assert set(peers) == {"cw-h100", "cw-gb200", "cw-gone"}
    assert peers["cw-h100"].reachable and peers["cw-h100"].cluster == "cw-h100"
    assert not peers["cw-gone"].reachable and peers["cw-gone"].last_error
    backend = peers["cw-h100"].backends[0]
    assert backend.attributes["device-variant"] == "h100"
    assert backend.availability.total_amounts["h100"] == 8


def test_no_peers_means_federation_is_inert(controller):
    c = client(controller)
    assert list(c.list_peers(pb.ListPeersRequest()).peers) == []
    c.launch_job(pb.LaunchJobRequest(name="plain", user="alice", command=["true"]))
    for table in ("federated_jobs", "federation_sync_state", "federation_changelog"):
        rows = c.execute_raw_query(pb.ExecuteRawQueryRequest(sql=f"SELECT COUNT(*) FROM {table}")).rows
        assert rows[0].values[0].number_value == 0


def test_local_admin_submission_never_federates(federation):
    marin, _, _ = federation
    code, message = error_code(lambda: client(marin).launch_job(gpu_job("anon", "h100")))
    assert code == "permission_denied" and "local_admin" in message


def test_handoff_signed_by_an_unknown_key_or_for_another_requester_is_refused(federation, tmp_path):
    marin, h100, _ = federation
    from iris.controller.auth import SigningKey, mint_peer_token

    def handoff(token: str, requester: str):
        req = gpu_job("sneaky", "h100")
        req.name = "/alice/sneaky"
        req.handoff.CopyFrom(
            pb.HandoffRecord(requester_cluster=requester, owner_principal="alice", submitting_user="alice", nonce="n1")
        )
        return lambda: client(h100, token).launch_job(req)

    rogue = mint_peer_token(SigningKey.generate(), "rogue", "cw-h100")
    code, message = error_code(handoff(rogue, "rogue"))
    assert code == "unauthenticated" and "does not trust" in message
    marins = mint_peer_token(load_or_create_signing_key(None, marin.state_dir), "marin", "cw-h100")
    code, message = error_code(handoff(marins, "cw-gb200"))
    assert code == "permission_denied" and "cw-gb200" in message
    code, _ = error_code(lambda: status(client(h100), on_peer("/alice/sneaky")))
    assert code == "not_found"


def test_submitter_outside_the_peer_allowlist_is_refused(controller_factory):
    fed = start_federation(controller_factory, peer_auth={"allowed_submitters": ["*@example.org"]})
    c = client(fed.marin, fed.token)
    job = c.launch_job(gpu_job("outsider", "h100")).job_id
    final = wait_state(c, job, timeout=30)
    assert final.job.state == "FAILED" and final.job.handoff_state == "HANDOFF_REJECTED"
    assert "alice" in final.job.error and "allowed_submitters" in final.job.error


def test_explain_of_a_queued_job_shows_its_stage_and_what_peers_report(federation):
    marin, _, _ = federation
    c = client(marin, federation.token)
    job = c.launch_job(
        pb.LaunchJobRequest(
            name="waiting",
            user="alice",
            command=["true"],
            constraints=[pb.Constraint(key="cluster", op="EQ", values=["cw-gone"])],
        )
    ).job_id
    explained = c.explain_job(pb.ExplainJobRequest(job_id=job))
    assert explained.summary.startswith("Queued for peer cw-gone to report free capacity")
    assert explained.lines[0].startswith("peer cw-gone: unreachable")
    c.terminate_job(pb.TerminateJobRequest(job_id=job))


def test_federation_sync_is_only_for_the_requesting_peer_itself(federation):
    marin, h100, _ = federation
    from iris.controller.auth import mint_peer_token

    marins = mint_peer_token(load_or_create_signing_key(None, marin.state_dir), "marin", "cw-h100")
    assert client(h100, marins).federation_sync(pb.FederationSyncRequest(requester="marin", cursor=0)).cursor_stale
    code, _ = error_code(lambda: client(h100, marins).federation_sync(pb.FederationSyncRequest(requester="cw-gb200")))
    assert code == "permission_denied"
    users = user_token(h100, "alice")
    code, _ = error_code(lambda: client(h100, users).federation_sync(pb.FederationSyncRequest(requester="marin")))
    assert code == "permission_denied"


def test_dry_run_names_the_peer_the_submit_then_goes_to_and_hands_nothing_off(federation):
    marin, h100, gb200 = federation
    c = client(marin, federation.token)

    def counts() -> tuple[int, ...]:
        handles = c.execute_raw_query(pb.ExecuteRawQueryRequest(sql="SELECT COUNT(*) FROM federated_jobs")).rows
        jobs = [len(client(ctl).list_jobs(pb.ListJobsRequest(limit=100000)).jobs) for ctl in federation]
        return (int(handles[0].values[0].number_value), *jobs)

    before = counts()
    request = gpu_job("planned", "h100")
    answer = c.plan_job(request)
    assert (answer.disposition, answer.state, answer.peer_id, answer.peer_backend_id) == (
        "queued",
        "PENDING",
        "cw-h100",
        "h100",
    )
    assert answer.route == "no local backend can host cpu=1 memory=1G gpu=h100x8"
    assert "cw-h100" in answer.candidate_peers and "cw-gb200" not in answer.candidate_peers
    assert answer.pending_reason == "Queued for a federation peer to report free capacity"
    assert answer.start_basis == "no estimate: it is being handed to peer cw-h100"
    assert counts() == before  # no row here, no handoff to any peer

    sent = c.launch_job(request)
    assert sent.disposition == answer.disposition and sent.message == answer.message
    final = wait_state(c, sent.job_id, timeout=30)
    assert final.job.state == "SUCCEEDED" and final.job.cluster == answer.peer_id
