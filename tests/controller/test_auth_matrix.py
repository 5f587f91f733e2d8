"""The auth matrix through a real controller: for every identity and every way it might overreach,
the call is refused with the right code and nothing is written.

One controller serves the whole module (each case only reads what it compares). It trusts a peer
cluster `marin` by key and admits handoffs only for owners matching `*@example.org`.
"""

from __future__ import annotations

import io
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass

import jwt
import pytest

from iris.controller.auth import SigningKey, load_or_create_signing_key, mint_peer_token, mint_token, public_key_pem
from iris.rpc import controller_pb2 as pb
from tests.conftest import ControllerFactory, wait_until
from tests.controller.helpers import client, error_code, launch, logs, status, wait_state

MARIN = SigningKey.generate()


@dataclass(frozen=True)
class Cluster:
    ctl: object
    u1: str
    u2: str
    admin: str
    dashboard: str
    peer: str

    def token(self, user: str, role: str = "user", ttl: float = 3600, **claims) -> str:
        key = load_or_create_signing_key(None, self.ctl.state_dir)
        return mint_token(key, self.ctl.name, user, role, ttl, **claims)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    factory = ControllerFactory(tmp_path_factory.mktemp("matrix"))
    try:
        ctl = factory(
            "iris",
            auth={
                "federation_peers": {"marin": public_key_pem(MARIN)},
                "allowed_submitters": ["*@example.org"],
                "max_token_lifetime": {"user": "2d"},
            },
        )
        key = load_or_create_signing_key(None, ctl.state_dir)

        def tok(user: str, role: str = "user") -> str:
            return mint_token(key, ctl.name, user, role, 3600)

        c = Cluster(ctl, tok("u1"), tok("u2"), tok("root", "admin"), tok("ops", "dashboard"), "")
        c = Cluster(ctl, c.u1, c.u2, c.admin, c.dashboard, mint_peer_token(MARIN, "marin", ctl.name))
        u2 = client(ctl, c.u2)
        launch(u2, "done", ["sh", "-c", "echo u2-history"], user="u2")
        wait_state(u2, "/u2/done")
        launch(u2, "job", ["sleep", "120"], user="u2", env={"U2_SECRET": "hunter2"})
        # Settled before any case compares snapshots: the attempt started and recorded its pid.
        wait_until(
            lambda: any(a.pid for t in status(u2, "/u2/job").tasks for a in t.attempts), message="/u2/job started"
        )
        yield c
    finally:
        factory.cleanup()


def snapshot(c: Cluster) -> list:
    """Every row of the tables a refused call might touch, as the admin reads them."""
    admin = client(c.ctl, c.admin)
    out = []
    for table in ("jobs", "job_config", "tasks", "federated_jobs", "logs"):
        rows = admin.execute_raw_query(pb.ExecuteRawQueryRequest(sql=f"SELECT * FROM {table}", limit=10000)).rows
        out.append([[v.WhichOneof("kind") and getattr(v, v.WhichOneof("kind")) for v in r.values] for r in rows])
    return out


def handoff_request(name: str, owner: str, requester: str = "marin") -> pb.LaunchJobRequest:
    req = pb.LaunchJobRequest(name=name, command=["true"])
    req.handoff.CopyFrom(
        pb.HandoffRecord(requester_cluster=requester, owner_principal=owner, submitting_user="u1", nonce="n1")
    )
    return req


# (case, identity, call, expected code, a word the message must contain)
Case = tuple[str, Callable[[Cluster], str], Callable[[object], object], str, str]

CASES: list[Case] = [
    (
        "user creates a job in another user's namespace",
        lambda c: c.u1,
        lambda k: k.launch_job(pb.LaunchJobRequest(name="/u2/impostor", command=["true"])),
        "permission_denied",
        "namespace of user 'u2'",
    ),
    (
        "user replaces another user's finished job",
        lambda c: c.u1,
        lambda k: k.launch_job(pb.LaunchJobRequest(name="/u2/done", command=["true"], existing_job_policy="replace")),
        "permission_denied",
        "namespace of user 'u2'",
    ),
    (
        "user adds a child under another user's job (it would inherit that job's env)",
        lambda c: c.u1,
        lambda k: k.launch_job(pb.LaunchJobRequest(parent_job_id="/u2/job", name="leak", command=["env"])),
        "permission_denied",
        "namespace of user 'u2'",
    ),
    (
        "user stops another user's job",
        lambda c: c.u1,
        lambda k: k.terminate_job(pb.TerminateJobRequest(job_id="/u2/job")),
        "permission_denied",
        "belongs to u2",
    ),
    (
        "dashboard submits",
        lambda c: c.dashboard,
        lambda k: k.launch_job(pb.LaunchJobRequest(name="/ops/x", command=["true"])),
        "permission_denied",
        "read-only",
    ),
    (
        "peer launches without a handoff record",
        lambda c: c.peer,
        lambda k: k.launch_job(pb.LaunchJobRequest(name="/u1/x", command=["true"])),
        "permission_denied",
        "only through a handoff",
    ),
    (
        "peer hands off a job naming no owner",
        lambda c: c.peer,
        lambda k: k.launch_job(handoff_request("/u1/anon", owner="")),
        "permission_denied",
        "names no owner",
    ),
    (
        "peer hands off a job whose owner the allowlist refuses",
        lambda c: c.peer,
        lambda k: k.launch_job(handoff_request("/u1/outsider", owner="u1@other.org")),
        "permission_denied",
        "allowed_submitters",
    ),
    (
        "peer hands off a job in another cluster's name",
        lambda c: c.peer,
        lambda k: k.launch_job(handoff_request("/u1/forged", owner="u1@example.org", requester="cw-h100")),
        "permission_denied",
        "signed by peer 'marin'",
    ),
    (
        "peer reads a job it did not hand off",
        lambda c: c.peer,
        lambda k: k.get_job_status(pb.GetJobStatusRequest(job_id="/u2/job")),
        "permission_denied",
        "only jobs it handed off",
    ),
    (
        "peer reads the logs of a job it did not hand off",
        lambda c: c.peer,
        lambda k: k.fetch_logs(pb.FetchLogsRequest(job_id="/u2/done", task_index=-1)),
        "permission_denied",
        "only jobs it handed off",
    ),
    (
        "peer stops a job it did not hand off",
        lambda c: c.peer,
        lambda k: k.terminate_job(pb.TerminateJobRequest(job_id="/u2/job")),
        "permission_denied",
        "only jobs it handed off",
    ),
    (
        "task token reads a job outside its own tree",
        lambda c: c.token("u1", "task", job_scope="/u1/driver", attempt_id="/u1/driver/0:0"),
        lambda k: k.get_job_status(pb.GetJobStatusRequest(job_id="/u2/job")),
        "unauthenticated",  # no such attempt runs: the token is dead before its scope is even read
        "has ended",
    ),
    (
        "token minted longer than its role may live",
        lambda c: c.token("u1", ttl=5 * 86400),
        lambda k: k.list_jobs(pb.ListJobsRequest()),
        "unauthenticated",
        "auth.max_token_lifetime",
    ),
    (
        "expired token",
        lambda c: mint_token(
            load_or_create_signing_key(None, c.ctl.state_dir), c.ctl.name, "u1", "user", 1, now=time.time() - 600
        ),
        lambda k: k.list_jobs(pb.ListJobsRequest()),
        "unauthenticated",
        "expired",
    ),
    (
        "token signed by another key",
        lambda c: mint_token(SigningKey.generate(), c.ctl.name, "u2", "admin", 600),
        lambda k: k.list_jobs(pb.ListJobsRequest()),
        "unauthenticated",
        "does not verify",
    ),
    (
        "unsigned token (alg none)",
        lambda c: jwt.encode(
            {"iss": c.ctl.name, "sub": "u2", "role": "admin", "iat": int(time.time()), "exp": int(time.time()) + 60},
            None,
            algorithm="none",
        ),
        lambda k: k.list_jobs(pb.ListJobsRequest()),
        "unauthenticated",
        "EdDSA",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_auth_matrix_refuses_and_writes_nothing(cluster, case):
    _, who, call, code, words = case
    before = snapshot(cluster)
    got, message = error_code(lambda: call(client(cluster.ctl, who(cluster))))
    assert (got, words in message) == (code, True), message
    assert snapshot(cluster) == before
    assert status(client(cluster.ctl, cluster.u2), "/u2/done").job.state == "SUCCEEDED"
    assert logs(client(cluster.ctl, cluster.u2), "/u2/done") == ["u2-history"]


def test_raw_queries_read_no_env_even_for_admins(cluster):
    for token in (cluster.u1, cluster.admin):
        rows = (
            client(cluster.ctl, token)
            .execute_raw_query(pb.ExecuteRawQueryRequest(sql="SELECT job_id, env FROM job_config ORDER BY job_id"))
            .rows
        )
        assert [r.values[0].string_value for r in rows] == ["/u2/done", "/u2/job"]
        assert all(r.values[1].WhichOneof("kind") == "null_value" for r in rows)
    star = client(cluster.ctl, cluster.u1).execute_raw_query(pb.ExecuteRawQueryRequest(sql="SELECT * FROM job_config"))
    assert "hunter2" not in str(star)


def test_a_revoked_token_is_refused_at_once_and_after_a_restart(controller):
    alice = mint_token(load_or_create_signing_key(None, controller.state_dir), controller.name, "alice", "user", 600)
    assert client(controller, alice).list_jobs(pb.ListJobsRequest()).jobs == []  # verified, and remembered
    revoke = controller.cli("token", "revoke", alice, "-o", "json")
    assert revoke.returncode == 0, revoke.stderr
    code, message = error_code(lambda: client(controller, alice).list_jobs(pb.ListJobsRequest()))
    assert code == "unauthenticated" and "revoked" in message
    controller.restart()
    code, _ = error_code(lambda: client(controller, alice).list_jobs(pb.ListJobsRequest()))
    assert code == "unauthenticated"
    bob = mint_token(load_or_create_signing_key(None, controller.state_dir), controller.name, "bob", "user", 600)
    denied = controller.cli("--token", bob, "token", "revoke", alice)
    assert denied.returncode != 0 and "RevokeToken" in denied.stderr


def test_raw_queries_read_no_workspace_contents(cluster):
    """A job's workspace (its bundle and workdir files) is its owner's code and files, often with
    credentials among them: another user's raw query reads their bytes as NULL."""
    packed = io.BytesIO()
    with zipfile.ZipFile(packed, "w") as zf:
        zf.writestr(".env", "U2_BUNDLED_SECRET=hunter3")
    u2 = client(cluster.ctl, cluster.u2)
    job = launch(
        u2,
        "shipped",
        ["cat", "creds.txt"],
        user="u2",
        workspace_bundle=packed.getvalue(),
        workdir_files={"creds.txt": b"hunter4"},
    )
    assert wait_state(u2, job).job.state == "SUCCEEDED" and logs(u2, job) == ["hunter4"]
    u1 = client(cluster.ctl, cluster.u1)
    for table in ("bundles", "job_files"):
        for query in (f"SELECT * FROM {table}", f"SELECT hex(data), length(data), data IS NULL FROM {table}"):
            result = u1.execute_raw_query(pb.ExecuteRawQueryRequest(sql=query))
            assert result.rows, f"{table} holds the job's {table}"
            seen = str(result)
            assert "hunter" not in seen and b"hunter".hex().upper() not in seen, seen
