"""Serving endpoints: which tasks may register one, how long it lives, and the capability tokens
that reach it.

An endpoint's lease is its attempt: a row names the attempt that registered it, and every read
joins the attempts table and keeps only rows whose attempt is still active. So an ended attempt's
endpoint disappears the moment its state is written, with no sweeper to fall behind and no
second clock to disagree with the tick.

A capability token is a JWT minted with the cluster's own signing key (`iris.controller.auth`),
whose subject is the job and whose audience is `iris-endpoint/<name>`. API verification accepts
no audience but a federation peer's, so such a token can never act as an API token, and one
endpoint's token does not open another's.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass

from iris.backends.protocol import Backend
from iris.controller.api import endpoint_hosts
from iris.controller.api.endpoint_hosts import Resolver
from iris.controller.auth import Identity, Role, mint_token, verify_token
from iris.controller.auth.keys import SigningKey
from iris.controller.db.database import sql
from iris.controller.db.jobs import job_not_found
from iris.controller.db.paging import Listing, page_size
from iris.core.errors import FailedPrecondition, InvalidArgument, NotFound, PermissionDenied
from iris.core.names import in_job_tree
from iris.rpc import controller_pb2 as pb

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}\Z")
DEFAULT_URL_TTL_S = 8 * 3600.0
MAX_URL_TTL_S = 30 * 86400.0
# Endpoints one attempt may hold at once: each is a row a task's calls add, so without a bound a
# task could grow the database (and every listing) as fast as it can call.
MAX_ENDPOINTS_PER_ATTEMPT = 64
AUDIENCE_PREFIX = "iris-endpoint/"
LIVE_ATTEMPT_STATES = ("ASSIGNED", "BUILDING", "RUNNING")

_LIVE = (
    "SELECT e.job_id, e.name, e.address, e.attempt_id, e.created_ms, a.backend_id, a.worker_id, a.cluster"
    " FROM endpoints e "
    "JOIN attempts a ON a.attempt_id = e.attempt_id "
    f"WHERE a.state IN ({','.join(repr(s) for s in LIVE_ATTEMPT_STATES)})"
)


def check_name(name: str) -> str:
    if not NAME_PATTERN.match(name or ""):
        raise InvalidArgument(
            f"endpoint name {name!r} is not valid: use 1-63 letters, digits, '_', '.' or '-', starting with a"
            " letter or digit (e.g. 'web' or 'tensorboard')"
        )
    return name


def _check_owner(identity: Identity, job_id: str, owner: str, what: str, tasks_may: bool = False) -> None:
    if identity.role is Role.ADMIN or (identity.role is Role.USER and owner and identity.principal == owner):
        return
    if tasks_may and identity.role is Role.TASK and in_job_tree(job_id, identity.job_scope or "\0"):
        return
    raise PermissionDenied(
        f"{identity.principal} ({identity.role.value}) may not {what} for {job_id}: it belongs to"
        f" {owner or 'nobody'}, and only its owner, its tasks or an admin may"
    )


def check_host(host: str) -> str:
    """`host` when it is spelt as a host name or IP address may be (or empty: the attempt's own host)."""
    if host and not re.match(r"^[A-Za-z0-9.:_\[\]-]{1,253}$", host):
        raise InvalidArgument(f"host {host!r} is not a host name or IP address")
    return host


def register(
    conn,
    identity: Identity,
    req: pb.RegisterEndpointRequest,
    now_ms: int,
    backends: Mapping[str, Backend],
    resolver: Resolver = endpoint_hosts.resolve,
) -> pb.Endpoint:
    """Records (or moves) the endpoint `req.name` of `req.job_id`, leased to a live attempt of that job,
    at an address on the host that attempt runs on (`iris.controller.api.endpoint_hosts`)."""
    name = check_name(req.name)
    if not 0 < req.port < 65536:
        raise InvalidArgument(f"port must be between 1 and 65535, got {req.port}")
    host = check_host(req.host)
    job = conn.execute(sql("SELECT owner FROM jobs WHERE job_id = :j"), {"j": req.job_id}).first()
    if job is None:
        raise NotFound(f"no job {req.job_id!r} on this cluster; register from inside the job's task")
    _check_owner(identity, req.job_id, job[0], "register an endpoint", tasks_may=True)
    attempt = conn.execute(
        sql("SELECT state, backend_id, worker_id, cluster FROM attempts WHERE attempt_id = :a AND job_id = :j"),
        {"a": req.attempt_id, "j": req.job_id},
    ).first()
    if attempt is None:
        raise InvalidArgument(
            f"attempt {req.attempt_id!r} is not an attempt of {req.job_id}: register from inside a running task"
            " (it has IRIS_JOB_ID and IRIS_ATTEMPT_ID set)"
        )
    if attempt[0] not in LIVE_ATTEMPT_STATES:
        raise InvalidArgument(f"attempt {req.attempt_id} has ended ({attempt[0]}); an ended attempt cannot serve")
    held = conn.execute(
        sql("SELECT COUNT(*) FROM endpoints WHERE job_id = :j AND attempt_id = :at AND name != :n"),
        {"j": req.job_id, "at": req.attempt_id, "n": name},
    ).scalar_one()
    if held >= MAX_ENDPOINTS_PER_ATTEMPT:
        raise FailedPrecondition(
            f"attempt {req.attempt_id} already serves {held} endpoints, the most one attempt may; move one of"
            " them (register it again under its name) instead of adding another"
        )
    where = endpoint_hosts.attempt_host(backends, req.attempt_id, attempt[1], attempt[2], attempt[3])
    address = endpoint_hosts.relay_address(host, req.port, where, resolver)
    conn.execute(
        sql(
            "INSERT INTO endpoints (name, job_id, address, created_ms, attempt_id) VALUES (:n, :j, :a, :t, :at)"
            " ON CONFLICT (job_id, name) DO UPDATE SET address = :a, created_ms = :t, attempt_id = :at"
        ),
        {"n": name, "j": req.job_id, "a": address, "t": now_ms, "at": req.attempt_id},
    )
    return pb.Endpoint(job_id=req.job_id, name=name, address=address, attempt_id=req.attempt_id, created_ms=now_ms)


def list_live(conn, job_id: str = "", token: str = "", limit: int = 0, within: str = "") -> pb.ListEndpointsResponse:
    """One page of the endpoints whose attempt is still active, of one job or of all (of the tree
    of job `within` only, when given), by (job, name)."""
    listing = Listing("endpoints", (str, str), (job_id,) + ((within,) if within else ()))
    after = listing.after(token)
    where = " AND e.job_id = :j" if job_id else ""
    params: dict[str, object] = {"j": job_id}
    if within:
        where += " AND (e.job_id = :root OR substr(e.job_id, 1, :rlen) = :below)"
        params.update(root=within, below=within + "/", rlen=len(within) + 1)
    total = conn.execute(sql(f"SELECT COUNT(*) FROM ({_LIVE}{where})"), params).scalar() or 0
    if after is not None:
        where += " AND (e.job_id > :aj OR (e.job_id = :aj AND e.name > :an))"
        params.update(aj=after[0], an=after[1])
    size = page_size(limit)
    params["n"] = size + 1
    rows = conn.execute(sql(_LIVE + where + " ORDER BY e.job_id, e.name LIMIT :n"), params).all()
    more = len(rows) > size
    rows = rows[:size]
    return pb.ListEndpointsResponse(
        endpoints=[pb.Endpoint(job_id=r[0], name=r[1], address=r[2], attempt_id=r[3], created_ms=r[4]) for r in rows],
        next_page_token=listing.token((rows[-1][0], rows[-1][1])) if more else "",
        total=total,
    )


@dataclass(frozen=True, slots=True)
class LiveEndpoint:
    """A live endpoint's stored address and where its attempt was placed."""

    address: str
    attempt_id: str
    backend_id: str | None
    worker_id: str | None
    cluster: str | None


def live_endpoint(conn, job_id: str, name: str) -> LiveEndpoint | None:
    row = conn.execute(sql(_LIVE + " AND e.job_id = :j AND e.name = :n"), {"j": job_id, "n": name}).first()
    return LiveEndpoint(row[2], row[3], row[5], row[6], row[7]) if row else None


def relay_target(
    endpoint: LiveEndpoint, backends: Mapping[str, Backend], resolver: Resolver = endpoint_hosts.resolve
) -> str:
    """The address a relayed request for `endpoint` dials, checked again against where its attempt
    runs now (a row stored before the rule, or a worker calling from another address since);
    PermissionDenied when it is no longer on that host."""
    host, port = endpoint_hosts.split_address(endpoint.address)
    where = endpoint_hosts.attempt_host(
        backends, endpoint.attempt_id, endpoint.backend_id, endpoint.worker_id, endpoint.cluster
    )
    try:
        return endpoint_hosts.relay_address(host, port, where, resolver)
    except InvalidArgument as exc:
        raise PermissionDenied(f"this endpoint is not relayed: {exc.message}") from None


def check_may_mint(conn, identity: Identity, job_id: str, name: str) -> None:
    """Only the job's owner (or an admin) mints a URL, and only for an endpoint that is live now."""
    check_name(name)
    job = conn.execute(sql("SELECT owner FROM jobs WHERE job_id = :j"), {"j": job_id}).first()
    if job is None:
        raise job_not_found(job_id)
    _check_owner(identity, job_id, job[0], "mint an endpoint URL")
    if live_endpoint(conn, job_id, name) is None:
        raise NotFound(f"{job_id} has no live endpoint {name!r}; `iris endpoint list {job_id}` shows the live ones")


def mint_url(
    key: SigningKey, cluster: str, origin: str, parent: str | None, job_id: str, name: str, ttl_s: float
) -> tuple[str, int]:
    """The capability URL for (job, endpoint) and its expiry (epoch ms); tagged for the parent's relay
    when this cluster is reached through `parent`."""
    ttl = ttl_s or DEFAULT_URL_TTL_S
    if ttl <= 0:
        raise InvalidArgument(f"an endpoint URL's ttl must be positive, got {ttl:g} s")
    if ttl > MAX_URL_TTL_S:
        raise InvalidArgument(
            f"an endpoint URL lasts at most {MAX_URL_TTL_S / 86400:g} days, and a ttl of {ttl / 86400:.3g} days"
            " is longer: pass a shorter --ttl, e.g. 8h or 7d"
        )
    now = time.time()
    token = mint_token(key, cluster, job_id, Role.USER, ttl, now=now, audience=AUDIENCE_PREFIX + name)
    if parent:
        base = f"{parent.rstrip('/')}/proxy/t/cluster={cluster}/{token}/{name}/"
    else:
        base = f"{origin.rstrip('/')}/proxy/t/{token}/{name}/"
    return base, int((now + ttl) * 1000)


def verify_capability(key: SigningKey, cluster: str, token: str, name: str) -> str:
    """The job a capability token for endpoint `name` opens; Unauthenticated if it is bad or expired."""
    return verify_token(token, key, cluster, audience=AUDIENCE_PREFIX + name).principal
