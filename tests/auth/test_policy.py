"""The role allowlist, job ownership for stops, submitter globs and the peer-side handoff checks."""

from __future__ import annotations

import pytest

from iris.controller.auth import (
    CONTROLLER_METHODS,
    LOCAL_ADMIN,
    Identity,
    Role,
    authorize,
    check_handoff,
    check_may_federate,
    check_may_stop,
    check_sync_requester,
    may_stop,
    submitter_allowed,
)
from iris.core.errors import InvalidArgument, PermissionDenied, Unauthenticated

ADMIN = Identity("root@example.org", Role.ADMIN, "marin")
LOCAL = Identity(LOCAL_ADMIN, Role.ADMIN, "marin", local_admin=True)
ALICE = Identity("alice", Role.USER, "marin")
BOB = Identity("bob", Role.USER, "marin")
DASHBOARD = Identity("grafana", Role.DASHBOARD, "marin")
WORKER = Identity("worker-3", Role.WORKER, "marin")
PEER = Identity("marin", Role.FEDERATION_PEER, "marin")

ALL = sorted(CONTROLLER_METHODS)
READS = [
    "GetJobStatus",
    "ListJobs",
    "ListTasks",
    "FetchLogs",
    "ListBackends",
    "ListWorkers",
    "ListPeers",
    "ExecuteRawQuery",
    "ExplainJob",
    "GetClusterInfo",
    "ListEndpoints",
]
PEER_CALLS = [
    "LaunchJob",
    "HandOffJobs",
    "GetJobStatus",
    "ListTasks",
    "TerminateJob",
    "FetchLogs",
    "ListBackends",
    "FederationSync",
    "GetClusterInfo",
]
WORKER_CALLS = ["RegisterWorker", "WorkerPoll", "FetchBundle"]

EXPECTED = {
    Role.ADMIN: set(ALL),
    Role.USER: set(ALL) - {"FederationSync", "HandOffJobs"} - set(WORKER_CALLS),
    Role.DASHBOARD: set(READS),
    Role.WORKER: set(WORKER_CALLS),
    Role.FEDERATION_PEER: set(PEER_CALLS),
    Role.TASK: {
        "GetClusterInfo",
        "GetJobStatus",
        "ListJobs",
        "ListTasks",
        "FetchLogs",
        "ExplainJob",
        "LaunchJob",
        "PlanJob",
        "TerminateJob",
        "RegisterEndpoint",
        "ListEndpoints",
    },
    Role.ANONYMOUS: {"GetClusterInfo"},
}


@pytest.mark.parametrize("role", list(Role))
@pytest.mark.parametrize("method", ALL)
def test_authorize_role_method_matches_allowlist(role, method):
    ident = Identity("someone", role, "marin")
    if method in EXPECTED[role]:
        authorize(ident, method)
    else:
        # Anonymous is told to authenticate; a known caller that it may not.
        with pytest.raises(Unauthenticated if role is Role.ANONYMOUS else PermissionDenied):
            authorize(ident, method)


@pytest.mark.parametrize("method", ["LaunchJob", "TerminateJob", "FederationSync"])
def test_authorize_dashboard_write_permission_denied_names_role_and_method(method):
    with pytest.raises(PermissionDenied) as err:
        authorize(DASHBOARD, method)
    assert f"role 'dashboard' (grafana) may not call {method} (the dashboard role is read-only)" in err.value.message
    assert err.value.code == "permission_denied"


def test_authorize_user_federation_sync_permission_denied():
    with pytest.raises(PermissionDenied, match=r"role 'user' \(alice\) may not call FederationSync"):
        authorize(ALICE, "FederationSync")


def test_authorize_full_rpc_path_uses_method_name():
    authorize(DASHBOARD, "/iris.v1.ControllerService/ListJobs")
    with pytest.raises(PermissionDenied, match=r"may not call LaunchJob"):
        authorize(DASHBOARD, "/iris.v1.ControllerService/LaunchJob")


def test_authorize_unlisted_method_denied_except_admin():
    authorize(ADMIN, "DropEverything")
    authorize(LOCAL, "DropEverything")
    for ident in (ALICE, DASHBOARD, WORKER, PEER):
        with pytest.raises(PermissionDenied, match=r"may not call DropEverything"):
            authorize(ident, "DropEverything")


def test_may_stop_user_own_job_only():
    assert may_stop(ALICE, "alice")
    assert not may_stop(ALICE, "bob")
    assert not may_stop(BOB, "alice")
    assert not may_stop(ALICE, "")


def test_may_stop_admin_and_local_admin_any_job():
    assert may_stop(ADMIN, "alice")
    assert may_stop(LOCAL, "alice", job_requester="cw-h100")


def test_may_stop_peer_only_jobs_it_handed_off():
    assert may_stop(PEER, "alice@example.org", job_requester="marin")
    assert not may_stop(PEER, "alice@example.org", job_requester="cw-gb200")
    assert not may_stop(PEER, "alice@example.org", job_requester=None)
    assert not may_stop(PEER, "marin")


def test_may_stop_dashboard_and_worker_never():
    assert not may_stop(DASHBOARD, "grafana")
    assert not may_stop(WORKER, "worker-3")


def test_check_may_stop_other_users_job_permission_denied_names_owner():
    check_may_stop(ALICE, "/alice/train", "alice")
    with pytest.raises(PermissionDenied, match=r"bob \(user\) may not stop /alice/train: it belongs to alice"):
        check_may_stop(BOB, "/alice/train", "alice")
    with pytest.raises(PermissionDenied, match=r"peer 'marin' may stop only jobs it handed off"):
        check_may_stop(PEER, "/alice/train", "alice", job_requester=None)


@pytest.mark.parametrize(
    ("principal", "globs", "allowed"),
    [
        ("alice@example.org", ["*@example.org"], True),
        ("alice@evil.org", ["*@example.org"], False),
        ("alice@example.org.evil", ["*@example.org"], False),
        ("alice", ["*"], True),
        ("alice", [], False),
        ("bob", ["alice", "b?b"], True),
        ("Alice@Example.org", ["*@example.org"], False),
        ("", ["*"], False),
    ],
)
def test_submitter_allowed_globs(principal, globs, allowed):
    assert submitter_allowed(principal, globs) is allowed


def test_check_handoff_matching_peer_allowed_submitter_admitted():
    check_handoff(PEER, "marin", "alice@example.org", ["*@example.org"])


@pytest.mark.parametrize("owner", ["alice smith", "alice\n", "\u200balice", "a" * 257])
def test_check_handoff_owner_that_is_no_user_name_invalid(owner):
    with pytest.raises(InvalidArgument, match=r"owner_principal .* is not a user name"):
        check_handoff(PEER, "marin", "alice@example.org", ["*"], owner=owner)


def test_check_handoff_requester_not_caller_permission_denied():
    with pytest.raises(PermissionDenied, match=r"names requester 'cw-gb200' but is signed by peer 'marin'"):
        check_handoff(PEER, "cw-gb200", "alice@example.org", ["*"])


@pytest.mark.parametrize("caller", [ADMIN, LOCAL, ALICE])
def test_check_handoff_caller_not_peer_permission_denied(caller):
    with pytest.raises(PermissionDenied, match=r"must be signed by the requesting cluster's own key"):
        check_handoff(caller, "marin", "alice@example.org", ["*"])


def test_check_handoff_local_admin_submitter_permission_denied():
    with pytest.raises(PermissionDenied, match=r"submitted by local_admin"):
        check_handoff(PEER, "marin", LOCAL_ADMIN, ["*"])


def test_check_handoff_without_owner_permission_denied():
    with pytest.raises(PermissionDenied, match=r"names no owner"):
        check_handoff(PEER, "marin", "alice@example.org", ["*"], owner="")


def test_check_handoff_submitter_outside_allowlist_permission_denied():
    with pytest.raises(PermissionDenied, match=r"'bob@other.org' is not allowed.*\(\*@example.org\)"):
        check_handoff(PEER, "marin", "bob@other.org", ["*@example.org"])


def test_check_may_federate_local_admin_permission_denied_user_allowed():
    check_may_federate(ALICE)
    with pytest.raises(PermissionDenied, match=r"submitted without a token \(local_admin\)"):
        check_may_federate(LOCAL)


def test_check_sync_requester_own_peer_or_admin_only():
    check_sync_requester(PEER, "marin")
    check_sync_requester(ADMIN, "marin")
    with pytest.raises(PermissionDenied, match=r"may not sync the jobs of requester 'cw-gb200'"):
        check_sync_requester(PEER, "cw-gb200")
    with pytest.raises(PermissionDenied):
        check_sync_requester(ALICE, "marin")
