"""Federation with more than one parent and more than one candidate peer, through real controllers:
two parents hand off the same job name to one peer, and a job a peer cannot place is withdrawn
there and run on another peer, exactly once."""

from __future__ import annotations

from iris.controller.auth import load_or_create_signing_key, public_key_pem
from iris.rpc import controller_pb2 as pb
from tests.conftest import wait_until
from tests.controller.helpers import client, error_code, logs, status, user_token, wait_state
from tests.integration.test_federation import FAST, gpu_backend, gpu_job, on_peer


def _cpu_parent(controller_factory, name: str, **settings):
    return controller_factory(
        name,
        start=False,
        controller={**FAST, **settings},
        backends=[{"id": "cpu", "kind": "local", "workers": 1, "capacity": {"cpu": 2, "memory": "2G"}}],
    )


def _key(ctl) -> str:
    return public_key_pem(load_or_create_signing_key(None, ctl.state_dir))


def _wait_reachable(ctl, count: int) -> None:
    c = client(ctl)
    wait_until(
        lambda: sum(p.reachable for p in c.list_peers(pb.ListPeersRequest()).peers) >= count,
        message=f"{ctl.name} to reach {count} peer(s)",
    )


def test_two_parents_hand_off_the_same_job_name_and_both_run(controller_factory):
    marin, lab = _cpu_parent(controller_factory, "marin"), _cpu_parent(controller_factory, "lab")
    trust = {"federation_peers": {"marin": _key(marin), "lab": _key(lab)}}
    h100 = controller_factory("cw-h100", backends=gpu_backend("h100", workers=2), controller=FAST, auth=trust)
    # A local user on the peer cannot take the name marin's handoff of /u1/train will be filed under.
    squatter = gpu_job("marin.train", "h100")
    squatter.user = "u1"
    code, message = error_code(lambda: client(h100, user_token(h100, "u1")).launch_job(squatter))
    assert code == "invalid_argument" and "kept for jobs cluster 'marin'" in message, message
    assert list(client(h100).list_jobs(pb.ListJobsRequest()).jobs) == []
    for parent in (marin, lab):
        parent.rewrite(peers={"cw-h100": {"address": h100.url}})
        parent.start()
        _wait_reachable(parent, 1)
    clients = {p.name: client(p, user_token(p, "u1")) for p in (marin, lab)}
    for name, c in clients.items():
        req = gpu_job("train", "h100", command=("sh", "-c", f"echo from {name} as $IRIS_JOB_ID"))
        req.user = "u1"
        assert c.launch_job(req).job_id == "/u1/train"
    for name, c in clients.items():
        done = wait_state(c, "/u1/train", timeout=60)
        assert done.job.state == "SUCCEEDED", done.job.error
        assert done.job.job_id == "/u1/train" and done.job.cluster == "cw-h100"
        assert [t.task_id for t in done.tasks] == ["/u1/train/0"]
        assert all(a.attempt_id.startswith("/u1/train/0:") for a in done.tasks[0].attempts)
        expected = [f"from {name} as {on_peer('/u1/train', name)}"]
        wait_until(lambda c=c, expected=expected: logs(c, "/u1/train") == expected, message=f"{name}'s logs")
    peer = client(h100)
    received = {j.job_id for j in peer.list_jobs(pb.ListJobsRequest()).jobs}
    assert received == {"/u1/marin.train", "/u1/lab.train"}
    rows = peer.execute_raw_query(
        pb.ExecuteRawQueryRequest(sql="SELECT job_id, peer_id FROM federated_jobs WHERE direction = 'RECEIVED'")
    ).rows
    assert sorted((r.values[0].string_value, r.values[1].string_value) for r in rows) == [
        ("/u1/lab.train", "lab"),
        ("/u1/marin.train", "marin"),
    ]
    # Each parent reads and stops only its own copy: marin's token cannot reach lab's job there.
    from iris.controller.auth import mint_peer_token

    marins = client(h100, mint_peer_token(load_or_create_signing_key(None, marin.state_dir), "marin", "cw-h100"))
    assert status(marins, "/u1/marin.train").job.state == "SUCCEEDED"
    assert error_code(lambda: status(marins, "/u1/lab.train"))[0] == "permission_denied"


def _cpu_peer(controller_factory, name: str, memory: str, trust: dict, start: bool = True):
    backend = {"id": f"{name}-mem", "kind": "local", "workers": 1, "capacity": {"cpu": 4, "memory": memory}}
    return controller_factory(name, backends=[backend], controller=FAST, auth=trust, start=start)


def _memory_job(name: str, memory_gib: int, runs, **kw) -> pb.LaunchJobRequest:
    return pb.LaunchJobRequest(
        name=name,
        user="alice",
        command=["sh", "-c", f"echo $IRIS_CLUSTER >> {runs}; echo ran {name}"],
        resources=pb.Resources(cpu=1, memory_bytes=memory_gib * 1024**3),
        **kw,
    )


def test_job_a_peer_cannot_place_is_withdrawn_and_runs_once_on_another_peer(controller_factory, tmp_path):
    """cw-a cannot place `huge` (it reports it unschedulable) nor `blocked` (its only host is busy
    past the reroute limit): both are withdrawn there, confirmed stopped, and run once on cw-b,
    the backend chosen by the parent travelling as a preference. A job pinned to cw-a is not moved."""
    marin = _cpu_parent(controller_factory, "marin", federation_reroute_after="2s")
    trust = {"federation_peers": {"marin": _key(marin)}}
    cw_a = _cpu_peer(controller_factory, "cw-a", "16G", trust)
    cw_b = _cpu_peer(controller_factory, "cw-b", "32G", trust, start=False)  # away until cw-a has failed them
    marin.rewrite(peers={"cw-a": {"address": cw_a.url}, "cw-b": {"address": cw_b.url}})
    marin.start()
    _wait_reachable(marin, 1)
    blocker = client(cw_a).launch_job(
        pb.LaunchJobRequest(
            name="blocker",
            user="ops",
            command=["sleep", "300"],
            resources=pb.Resources(cpu=1, memory_bytes=12 * 1024**3),
        )
    )
    wait_until(lambda: status(client(cw_a), blocker.job_id).job.state == "RUNNING", message="cw-a busy")
    c = client(marin, user_token(marin, "alice"))
    runs = {n: tmp_path / f"{n}.runs" for n in ("huge", "blocked", "pinned")}
    huge = c.launch_job(_memory_job("huge", 20, runs["huge"])).job_id
    blocked = c.launch_job(_memory_job("blocked", 8, runs["blocked"])).job_id
    pin = pb.Constraint(key="cluster", op="EQ", values=["cw-a"])
    pinned = c.launch_job(_memory_job("pinned", 20, runs["pinned"], constraints=[pin])).job_id

    def withdrawn(job_id: str):
        row = c.execute_raw_query(
            pb.ExecuteRawQueryRequest(
                sql=f"SELECT handoff_state, error FROM federated_jobs WHERE job_id = '{job_id}' AND direction = 'SENT'"
            )
        ).rows[0]
        return (
            row.values[0].string_value == "QUEUED_HANDOFF" and "withdrawn from peer cw-a" in row.values[1].string_value
        )

    seen: dict[str, set[str]] = {huge: set(), blocked: set()}

    def both_withdrawn():
        for job_id in seen:
            seen[job_id].add(status(c, job_id).job.state)
        return all(withdrawn(j) for j in seen)

    wait_until(both_withdrawn, timeout=60, message="both jobs withdrawn from cw-a")
    on_a = client(cw_a)
    assert status(on_a, on_peer(huge)).job.state == "UNSCHEDULABLE"
    assert status(on_a, on_peer(blocked)).job.state == "KILLED"
    assert not any(t.attempts for j in (huge, blocked) for t in status(on_a, on_peer(j)).tasks)
    assert wait_state(c, pinned, timeout=30).job.state == "UNSCHEDULABLE"  # pinned: mirrored, not moved
    assert status(c, huge).job.state == "PENDING" and status(c, huge).job.cluster == ""

    cw_b.start()
    for job_id in seen:

        def done(job_id=job_id):
            s = status(c, job_id)
            seen[job_id].add(s.job.state)
            return s if s.job.state in ("SUCCEEDED", "FAILED", "KILLED", "UNSCHEDULABLE") else None

        final = wait_until(done, timeout=60, message=f"{job_id} to finish on cw-b")
        assert final.job.state == "SUCCEEDED" and final.job.cluster == "cw-b", final.job.error
        assert seen[job_id] <= {"PENDING", "RUNNING", "SUCCEEDED"}, seen[job_id]  # never shown as failed
        handle = c.execute_raw_query(
            pb.ExecuteRawQueryRequest(
                sql=f"SELECT backend_id FROM federated_jobs WHERE job_id = '{job_id}' AND direction = 'SENT'"
            )
        ).rows[0]
        on_b = status(client(cw_b), on_peer(job_id))
        assert on_b.tasks[0].backend_id == handle.values[0].string_value == "cw-b-mem"
        assert any(c.key == "backend" and c.preferred and list(c.values) == ["cw-b-mem"] for c in on_b.job.constraints)
    assert runs["huge"].read_text().splitlines() == ["cw-b"]
    assert runs["blocked"].read_text().splitlines() == ["cw-b"]
    assert not runs["pinned"].exists()
    client(cw_a).terminate_job(pb.TerminateJobRequest(job_id=blocker.job_id))


def test_job_no_peer_can_place_ends_unschedulable_and_its_log_readers_end(controller_factory, tmp_path):
    """cw-a, the only peer, reports `huge` unschedulable: once withdrawn there it ends UNSCHEDULABLE
    on marin, and a reader following its logs is told it has finished instead of waiting for ever."""
    marin = _cpu_parent(controller_factory, "marin")
    cw_a = _cpu_peer(controller_factory, "cw-a", "16G", {"federation_peers": {"marin": _key(marin)}})
    marin.rewrite(peers={"cw-a": {"address": cw_a.url}})
    marin.start()
    _wait_reachable(marin, 1)
    c = client(marin, user_token(marin, "alice"))
    huge = c.launch_job(_memory_job("huge", 20, tmp_path / "huge.runs")).job_id
    final = wait_state(c, huge, timeout=60)
    assert final.job.state == "UNSCHEDULABLE" and "no federation peer could place it" in final.job.error
    answer = c.fetch_logs(pb.FetchLogsRequest(job_id=huge, wait_ms=10_000))
    assert answer.job_finished and answer.job_state == "UNSCHEDULABLE"
    followed = marin.cli("job", "logs", "-f", huge, timeout=60)
    assert followed.returncode == 0 and "ended UNSCHEDULABLE" in followed.stderr, followed.stderr
