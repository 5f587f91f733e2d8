"""HandOffJobs on a real peer controller: several handoffs in one call, each admitted or refused on
its own, each run exactly once however often the call is repeated."""

from __future__ import annotations

import pytest

from iris.controller.api.inbound_handoffs import MAX_HANDOFFS_PER_CALL
from iris.controller.auth import SigningKey, mint_peer_token, public_key_pem
from iris.rpc import controller_pb2 as pb
from tests.conftest import wait_until
from tests.controller.helpers import client, error_code, user_token, wait_state
from tests.integration.test_federation import FAST, gpu_backend, gpu_job, on_peer


def _handoff(name: str, runs, nonce: str = "n1", requester: str = "marin") -> pb.LaunchJobRequest:
    req = gpu_job(name, "h100", count=1, command=("sh", "-c", f"echo {name} >> {runs}"))
    req.name, req.user = f"/alice/{name}", ""
    req.handoff.CopyFrom(
        pb.HandoffRecord(requester_cluster=requester, owner_principal="alice", submitting_user="alice", nonce=nonce)
    )
    return req


@pytest.fixture
def peer(controller_factory):
    key = SigningKey.generate()
    ctl = controller_factory(
        "cw-h100",
        backends=gpu_backend("h100"),
        controller=FAST,
        auth={"federation_peers": {"marin": public_key_pem(key)}},
    )
    return ctl, mint_peer_token(key, "marin", "cw-h100")


def test_hand_off_jobs_admits_each_on_its_own_and_runs_each_exactly_once(peer, tmp_path):
    ctl, token = peer
    runs = tmp_path / "runs"
    c = client(ctl, token)
    batch = [
        _handoff("a", runs),
        _handoff("b", runs),
        _handoff("a", runs),  # the same job and nonce twice in one call: the second is a replay
        _handoff("spoofed", runs, requester="cw-gb200"),  # not the caller's to hand off
        _handoff("nonceless", runs, nonce=""),
    ]
    outcomes = c.hand_off_jobs(pb.HandOffJobsRequest(jobs=batch)).outcomes
    assert [o.job_id for o in outcomes] == ["/alice/a", "/alice/b", "/alice/a", "/alice/spoofed", "/alice/nonceless"]
    assert [o.accepted.disposition for o in outcomes[:3]] == ["local", "local", "existing"]
    assert outcomes[0].accepted.job_id == on_peer("/alice/a") and not outcomes[0].error_code
    assert outcomes[3].error_code == "permission_denied" and "cw-gb200" in outcomes[3].error_message
    assert outcomes[4].error_code == "invalid_argument" and "nonce" in outcomes[4].error_message
    admin = client(ctl)
    for job in ("a", "b"):
        assert wait_state(admin, on_peer(f"/alice/{job}"), timeout=30).job.state == "SUCCEEDED"
    for job in ("spoofed", "nonceless"):
        code, _ = error_code(
            lambda job=job: admin.get_job_status(pb.GetJobStatusRequest(job_id=on_peer(f"/alice/{job}")))
        )
        assert code == "not_found"  # a refusal wrote nothing
    # The whole call again (its answer lost, say): every job is a replay, nothing runs twice.
    again = c.hand_off_jobs(pb.HandOffJobsRequest(jobs=batch[:2])).outcomes
    assert [o.accepted.disposition for o in again] == ["existing", "existing"]
    wait_until(lambda: sorted(runs.read_text().split()) == ["a", "b"], message="one run of each")
    assert sorted(runs.read_text().split()) == ["a", "b"]


def test_hand_off_jobs_is_refused_to_users_and_past_its_size(peer, tmp_path):
    ctl, token = peer
    code, message = error_code(
        lambda: client(ctl, user_token(ctl, "alice")).hand_off_jobs(
            pb.HandOffJobsRequest(jobs=[_handoff("mine", tmp_path / "runs")])
        )
    )
    assert code == "permission_denied" and "HandOffJobs" in message
    too_many = pb.HandOffJobsRequest(
        jobs=[_handoff(f"j{i}", tmp_path / "runs") for i in range(MAX_HANDOFFS_PER_CALL + 1)]
    )
    code, message = error_code(lambda: client(ctl, token).hand_off_jobs(too_many))
    assert code == "invalid_argument" and f"at most {MAX_HANDOFFS_PER_CALL}" in message
    assert client(ctl).list_jobs(pb.ListJobsRequest()).jobs == []  # nothing of the refused call was admitted


def test_a_handoff_naming_an_owner_no_user_could_have_is_refused_alone(peer, tmp_path):
    ctl, token = peer
    runs = tmp_path / "runs"
    batch = [_handoff("good", runs)]
    for name, owner in (("spaced", "alice smith"), ("control", "alice\x07"), ("long", "a" * 5000)):
        req = _handoff(name, runs)
        req.handoff.owner_principal = owner
        batch.append(req)
    outcomes = client(ctl, token).hand_off_jobs(pb.HandOffJobsRequest(jobs=batch)).outcomes
    assert outcomes[0].accepted.disposition == "local" and not outcomes[0].error_code
    for outcome in outcomes[1:]:
        assert outcome.error_code == "invalid_argument", outcome
        assert "owner_principal" in outcome.error_message and len(outcome.error_message) < 400
    assert [j.job_id for j in client(ctl).list_jobs(pb.ListJobsRequest()).jobs] == [on_peer("/alice/good")]
