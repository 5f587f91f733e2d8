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
