"""What each role may do: a default-deny allowlist of ControllerService methods, job ownership for
stops, the submitter allowlist and the checks a peer runs on a handoff.

Every rule is a pure function of an Identity and plain values, so the service can call it with
whatever it has already loaded and tests can check each rule alone.

The allowlist is default-deny: a method not listed for a role is refused, so a method added to the
API later is admin-only until someone decides otherwise. Admin is the one exception and may call
anything. The dashboard role is read-only; it may call ExecuteRawQuery because that RPC runs on a
read-only SQLite connection that refuses anything but SELECT, so it can read every table but change
nothing (a deployment that wants tables hidden from dashboards should not mint dashboard tokens). A
federation-peer gets exactly the calls the handoff protocol makes (deliver, observe, cancel, relay
logs, sync, probe) and every per-job call it makes is further scoped to jobs it handed off
(`may_stop`, `check_sync_requester`).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from types import MappingProxyType

from iris.controller.auth.identity import LOCAL_ADMIN, Identity, Role
from iris.core.errors import PermissionDenied, Unauthenticated
from iris.core.names import check_accountable_name, in_job_tree

CONTROLLER_METHODS = frozenset(
    {
        "LaunchJob",
        "PlanJob",
        "HandOffJobs",
        "GetJobStatus",
        "ListJobs",
        "ListTasks",
        "TerminateJob",
        "FetchLogs",
        "ListBackends",
        "ListWorkers",
        "ListPeers",
        "ExecuteRawQuery",
        "ExplainJob",
        "GetClusterInfo",
        "FederationSync",
        "RegisterWorker",
        "WorkerPoll",
        "FetchBundle",
        "RegisterEndpoint",
        "ListEndpoints",
        "MintEndpointUrl",
    }
)

WORKER_METHODS = frozenset({"RegisterWorker", "WorkerPoll", "FetchBundle"})

READ_METHODS = frozenset(
    {
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
    }
)

ROLE_METHODS: Mapping[Role, frozenset[str]] = MappingProxyType(
    {
        Role.ADMIN: CONTROLLER_METHODS,
        Role.USER: CONTROLLER_METHODS - {"FederationSync", "HandOffJobs"} - WORKER_METHODS,
        Role.DASHBOARD: READ_METHODS,
        # A worker daemon joins its pool and exchanges attempts and reports; nothing else.
        Role.WORKER: WORKER_METHODS,
        # What a task's own client asks of its controller, each call further confined to the task's
        # job and its descendants (`check_may_read`, `check_may_create`, `may_stop`).
        Role.TASK: frozenset(
            {
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
            }
        ),
        # A tokenless TCP caller: what anyone may read, the cluster's name and health.
        Role.ANONYMOUS: frozenset({"GetClusterInfo"}),
        Role.FEDERATION_PEER: frozenset(
            {
                "LaunchJob",
                "HandOffJobs",
                "GetJobStatus",
                "ListTasks",
                "TerminateJob",
                "FetchLogs",
                "ListBackends",
                "FederationSync",
                "GetClusterInfo",
            }
        ),
    }
)


def method_name(method: str) -> str:
    """`LaunchJob` from either `LaunchJob` or a full RPC path like `/iris.v1.ControllerService/LaunchJob`."""
    return method.rstrip("/").rsplit("/", 1)[-1]


def is_allowed(role: Role, method: str) -> bool:
    """Whether `role` may call `method`; admin may call anything, the other roles only what is listed."""
    return role is Role.ADMIN or method_name(method) in ROLE_METHODS.get(role, frozenset())


def authorize(identity: Identity, method: str) -> None:
    """Returns if `identity` may call `method`; otherwise PermissionDenied naming the role and method."""
    if is_allowed(identity.role, method):
        return
    name = method_name(method)
    if identity.role is Role.ANONYMOUS:
        raise Unauthenticated(
            f"{name} needs a caller Iris knows, and this request carries no token (over TCP a caller without one"
            " may only read the cluster's health and info). Pass --token or set IRIS_TOKEN (an admin mints one"
            " with `iris token create --user NAME`); on the controller's own host, `iris` and the SDK reach it"
            " without a token through the Unix socket in its state directory"
        )
    allowed = ", ".join(sorted(ROLE_METHODS.get(identity.role, frozenset()))) or "nothing"
    why = " (the dashboard role is read-only)" if identity.role is Role.DASHBOARD else ""
    raise PermissionDenied(
        f"role {identity.role.value!r} ({identity.principal}) may not call {name}{why}; "
        f"it may call: {allowed}. Ask an admin for a token with a role that allows {name}"
    )


def may_stop(identity: Identity, job_owner: str, job_requester: str | None = None, job_id: str = "") -> bool:
    """Whether `identity` may stop a job owned by `job_owner` and (if received) handed off by `job_requester`.

    A job's owner is the user component of its id. An admin (local_admin included) may stop any
    job; a user only jobs they own; a task only its own job and its descendants; a federation peer
    only jobs it handed to this cluster; dashboards and workers none.
    """
    if identity.role is Role.ADMIN:
        return True
    if identity.role is Role.USER:
        return bool(job_owner) and identity.principal == job_owner
    if identity.role is Role.TASK:
        return identity.principal == job_owner and in_job_tree(job_id, identity.job_scope or "\0")
    if identity.role is Role.FEDERATION_PEER:
        return job_requester is not None and identity.principal == job_requester
    return False


def check_may_stop(identity: Identity, job_id: str, job_owner: str, job_requester: str | None = None) -> None:
    """`may_stop` as a check: PermissionDenied saying whose job it is."""
    if may_stop(identity, job_owner, job_requester, job_id):
        return
    if identity.role is Role.FEDERATION_PEER:
        raise PermissionDenied(f"peer {identity.principal!r} may stop only jobs it handed off; {job_id} is not one")
    if identity.role is Role.TASK:
        raise PermissionDenied(
            f"a task of {identity.job_scope} may stop only its own job and its descendants; {job_id} is not one"
        )
    raise PermissionDenied(
        f"{identity.principal} ({identity.role.value}) may not stop {job_id}: it belongs to {job_owner or 'nobody'}, "
        "and only its owner or an admin may stop it"
    )


def submitter_allowed(principal: str, globs: Iterable[str]) -> bool:
    """Whether `principal` matches one of the `auth.allowed_submitters` globs (case-sensitive fnmatch)."""
    return bool(principal) and any(fnmatch.fnmatchcase(principal, g) for g in globs)


def check_may_federate(identity: Identity) -> None:
    """On the parent: refuses to hand off a job submitted by local_admin, whom no peer could hold to account."""
    if identity.local_admin or identity.principal == LOCAL_ADMIN:
        raise PermissionDenied(
            "this job would be handed to a federation peer, but it was submitted without a token (local_admin); "
            "only jobs of an accountable user federate: submit with a token (`iris token create --user NAME`)"
        )


def check_handoff(
    caller: Identity, requester: str, submitter: str, allowed_submitters: Iterable[str], owner: str | None = None
) -> None:
    """On the peer: admits a handoff only from the peer it names, naming its owner, for a submitter
    this cluster allows. `owner` defaults to the submitter (for callers that check only that)."""
    owner = submitter if owner is None else owner
    if caller.role is not Role.FEDERATION_PEER:
        raise PermissionDenied(
            f"a handoff must be signed by the requesting cluster's own key; the caller {caller.principal!r} "
            f"is a {caller.role.value}, not a federation peer"
        )
    if caller.principal != requester:
        raise PermissionDenied(
            f"the handoff names requester {requester!r} but is signed by peer {caller.principal!r}; "
            "a peer may hand off only its own jobs"
        )
    check_accountable_name("the handoff's owner_principal", owner)
    if LOCAL_ADMIN in (owner, submitter):
        submitter = LOCAL_ADMIN
    elif not owner:
        raise PermissionDenied(
            f"the handoff from peer {requester!r} names no owner (owner_principal); a handed-off job must name "
            "the accountable user it runs for"
        )
    if not submitter or submitter == LOCAL_ADMIN:
        raise PermissionDenied(
            f"peer {requester!r} handed off a job submitted by local_admin (no token); only jobs of an "
            "accountable user are admitted from a peer"
        )
    globs = list(allowed_submitters)
    if not submitter_allowed(submitter, globs):
        raise PermissionDenied(
            f"submitter {submitter!r} is not allowed on this cluster: it matches none of auth.allowed_submitters "
            f"({', '.join(globs) or 'empty'})"
        )


def check_sync_requester(identity: Identity, requester: str) -> None:
    """FederationSync for `requester`: only that peer's own identity, or an admin, may read its jobs."""
    if identity.role is Role.ADMIN:
        return
    if identity.role is Role.FEDERATION_PEER and identity.principal == requester:
        return
    raise PermissionDenied(
        f"{identity.principal} ({identity.role.value}) may not sync the jobs of requester {requester!r}; "
        "only that peer or an admin may"
    )


def check_may_create(identity: Identity, job_id: str, namespace_user: str) -> None:
    """Creating (or replacing) `job_id`, whose id puts it in `namespace_user`'s namespace.

    Only that user, a task of one of that user's jobs (below its own job), or an admin may; a
    peer creates jobs only through a handoff record, checked by `check_handoff`.
    """
    role = identity.role
    if role is Role.ADMIN:
        return
    if role is Role.USER and identity.principal == namespace_user:
        return
    if role is Role.TASK:
        scope = identity.job_scope or ""
        if identity.principal == namespace_user and job_id != scope and in_job_tree(job_id, scope):
            return
        raise PermissionDenied(
            f"a task of {scope} may submit only child jobs below its own job ({scope}/<name>), not {job_id}"
        )
    if role is Role.FEDERATION_PEER:
        raise PermissionDenied(
            f"peer {identity.principal!r} may launch jobs only through a handoff record naming the requesting "
            "cluster and the job's owner; this LaunchJob carries none"
        )
    raise PermissionDenied(
        f"{identity.principal} ({role.value}) may not create {job_id}: it is in the namespace of user "
        f"{namespace_user!r}, and only that user, their tasks or an admin may create, replace or add jobs there. "
        f"Submit under /{identity.principal}/… instead"
    )


def check_may_read(identity: Identity, job_id: str, job_requester: str | None) -> None:
    """Reading one job's status, tasks or logs: a task only its own job's tree, a peer only its handoffs."""
    if identity.role is Role.TASK and not in_job_tree(job_id, identity.job_scope or "\0"):
        raise PermissionDenied(
            f"a task of {identity.job_scope} may read only its own job and its descendants; {job_id} is not one"
        )
    if identity.role is Role.FEDERATION_PEER and job_requester != identity.principal:
        raise PermissionDenied(f"peer {identity.principal!r} may read only jobs it handed off; {job_id} is not one")
