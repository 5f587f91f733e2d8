"""Who a request comes from, who is accountable for a submission, which tokens are revoked, and the
identity an attempt runs with: the controller's side of authentication, over the pure rules in
`iris.controller.auth`.

Verifying an Ed25519 signature costs more than the rest of a small call, so a verified token is
remembered: in a bounded TTL cache (cachetools' `TLRUCache`), each entry until the earlier of its
token's own expiry and `VERIFIED_TOKEN_TTL_S`, so nothing a verification decided outlives a short
window. A token that fails verification is never remembered. Revocation takes effect at once: the
deny list is consulted on every call, cache hit or not, and a revocation also empties the cache.

A task token works only while its attempt runs; that check reads the database on every call and is
never cached, since an attempt may end between two calls.

Who a tokenless caller is comes from the kernel, never from a guess after the fact. On the
controller's host the CLI and the SDK reach the controller through its Unix socket
(`<state_dir>/controller.sock`), and the HTTP server reads the caller's uid with `SO_PEERCRED` as it
accepts the connection: the kernel recorded it when the caller connected, so a caller that sends its
request and closes at once is still named truly. That uid is kept on the connection's `Peer` and
decides (`local_caller`): the controller's own uid and root are the operator (local_admin); a uid
of `auth.task_uids.range` is a task, refused without its task token; another account is the Iris
user it maps to (`auth.task_accounts` read backwards, else the account's name). A tokenless TCP
caller is anonymous unless `auth.trusted_cidrs` opts its network in (see `Authenticator.identify`).
"""

from __future__ import annotations

import os
import pwd
import threading
import time
from collections.abc import Callable
from contextvars import ContextVar

from cachetools import TLRUCache

from iris.controller.auth import Authenticator, Identity, Role, mint_token
from iris.controller.auth.isolation import TaskIdentities, TaskIdentity
from iris.controller.auth.sites import OwnSites
from iris.controller.auth.tokens import token_expiry
from iris.controller.db.database import Database, sql
from iris.core.config import ClusterConfig
from iris.core.errors import InvalidArgument, PermissionDenied, Unauthenticated
from iris.core.names import check_accountable_name
from iris.core.states import TaskState
from iris.federation.model import Submitter
from iris.rpc import controller_pb2 as pb

VERIFIED_TOKEN_TTL_S = 60.0
MAX_REMEMBERED_TOKENS = 10_000


class Peer(tuple[str, int]):
    """The client end of one connection, (host, port), as the HTTP server puts it in the scope of
    each request on that connection. `uid` is set only for a connection to the Unix socket: the
    caller's uid as the kernel recorded it at connect time (`SO_PEERCRED`); its host is `LOCAL_HOST`
    and its port the caller's pid."""

    uid: int | None = None
    identity: Identity | None = None  # who `uid` is, once asked: it cannot change while connected

    @classmethod
    def local(cls, pid: int, uid: int) -> Peer:
        peer = cls((LOCAL_HOST, pid))
        peer.uid = uid
        return peer


LOCAL_HOST = "unix"  # the host of a Unix-socket connection's Peer: never an address


# The connection of the request being handled (set by the API's entry for each request).
calling_peer: ContextVar[Peer | None] = ContextVar("calling_peer", default=None)


class Identities:
    """One controller's callers: verifies (and remembers) tokens, keeps the deny list, mints task tokens."""

    def __init__(self, config: ClusterConfig, db: Database, clock: Callable[[], float] = time.time):
        self.config = config
        self.db = db
        self.clock = clock
        uids = config.auth.task_uids
        self.tasks = TaskIdentities.from_config(uids.range, config.auth.task_accounts, uids.enabled, uids.max_processes)
        with db.read() as conn:
            self.revoked = {r[0] for r in conn.execute(sql("SELECT jti FROM revoked_tokens"))}
        self.auth = Authenticator.from_config(config, revoked=self.revoked)  # shares the live deny list
        self.sites = OwnSites.of(config.listen, config.public_url)
        # key: the Authorization header; value: (its identity, when its token expires, epoch seconds)
        self._verified: TLRUCache[str, tuple[Identity, float]] = TLRUCache(
            MAX_REMEMBERED_TOKENS, ttu=_remember_until, timer=clock
        )
        self._lock = threading.Lock()  # handlers run on many threads; the cache is not thread-safe

    def identify(
        self,
        authorization: str | None,
        client_address: str | None,
        relayed: bool = False,
        site: str | None = None,
        origin: str | None = None,
    ) -> Identity:
        """The caller of one request: its token's identity; without one, who the kernel says is on
        the other end of a Unix-socket connection (`local_caller`), else what `auth.trusted_cidrs`
        makes of the address (local_admin, or anonymous). Never local_admin for a request relayed
        through a capability URL (see `RELAYED_HEADER`), nor for one naming another site in its Host
        or Origin header (see `iris.controller.auth.sites`)."""
        host = client_address.rpartition(":")[0] if client_address else None
        if not authorization and relayed:
            raise Unauthenticated(
                "this request was relayed through a capability URL (/proxy/t/) and carries no token; a relayed "
                "request never acts as local_admin. Call the controller's API at its own address, with a token"
            )
        peer = calling_peer.get()
        if not authorization and peer is not None and peer.uid is not None:
            if peer.identity is None:
                peer.identity = self.local_caller(peer.uid)
            return peer.identity
        if not authorization and (site or origin):
            foreign = self.sites.refusal(site, origin)
            if foreign is not None:
                raise Unauthenticated(
                    f"this request carries no token and {foreign}: a web page of another site never acts as"
                    f" local_admin. Call the controller by its address ({self.config.url}) or send a token"
                )
        if not authorization:
            return self.auth.identify(None, host)
        with self._lock:
            cached = self._verified.get(authorization)
        if cached is not None and cached[0].token_id not in self.revoked:
            identity = cached[0]
        else:
            identity = self.auth.identify(authorization, host)  # raises for a bad or revoked token
            with self._lock:
                self._verified[authorization] = (identity, token_expiry(authorization))
        if identity.role is Role.TASK:
            if identity.credential in self.revoked:
                raise Unauthenticated(
                    f"this task token acts for {identity.principal!r} under token {identity.credential}, which"
                    f" submitted {identity.job_scope} and has since been revoked; the job's tasks may no longer"
                    " act for anyone"
                )
            self._check_attempt_live(identity)
        return identity

    def remembered(self) -> int:
        """How many verified tokens are remembered now."""
        with self._lock:
            self._verified.expire()
            return len(self._verified)

    def local_caller(self, uid: int) -> Identity:
        """Who a tokenless connection to the Unix socket from `uid` is (see the module docstring)."""
        if uid == 0 or uid == os.geteuid():
            return self.auth.local_admin()
        user = self.tasks.user_of(uid)
        if user is None:
            low, high = self.tasks.uid_range
            if low <= uid <= high:
                raise Unauthenticated(
                    f"this request comes from uid {uid}, one Iris tasks run as (auth.task_uids.range {low}-{high}),"
                    " and carries no token; a task never acts without its task token. Tasks call the controller"
                    " with the token in their IRIS_TOKEN environment variable"
                )
            try:
                user = pwd.getpwuid(uid).pw_name
            except KeyError:
                raise Unauthenticated(
                    f"this request comes from uid {uid}, which has no account on this host, and carries no token;"
                    " pass --token or set IRIS_TOKEN (an admin mints one with `iris token create --user NAME`)"
                ) from None
        try:
            check_accountable_name("the account", user)
        except InvalidArgument as exc:
            raise Unauthenticated(f"{exc.message}; pass --token or set IRIS_TOKEN instead") from None
        return Identity(user, Role.USER, self.config.name)

    def _check_attempt_live(self, identity: Identity) -> None:
        """A task token works only while its attempt runs."""
        with self.db.read() as conn:
            state = conn.execute(
                sql("SELECT state FROM attempts WHERE attempt_id = :a"), {"a": identity.attempt_id}
            ).scalar()
        if state is None or not TaskState(state).is_active:
            raise Unauthenticated(
                f"this task token belonged to attempt {identity.attempt_id}, which has ended "
                f"({(state or 'unknown').lower()}); a task token works only while its attempt runs"
            )

    def revoke(self, token_id: str, subject: str, expires_ms: int) -> bool:
        """Adds a token id to the deny list (persisted); False when it was already there."""
        token_id = token_id.strip()
        if not token_id:
            raise InvalidArgument("name the token to revoke: pass the token itself or its id (jti)")
        with self.db.write() as conn:
            inserted = conn.execute(
                sql(
                    "INSERT INTO revoked_tokens (jti, subject, expires_ms, revoked_ms) VALUES (:j, :s, :e, :now)"
                    " ON CONFLICT (jti) DO NOTHING"
                ),
                {"j": token_id, "s": subject, "e": expires_ms, "now": int(self.clock() * 1000)},
            ).rowcount
        self.revoked.add(token_id)
        with self._lock:
            self._verified.clear()
        return bool(inserted)

    def submitter(self, req: pb.LaunchJobRequest, identity: Identity) -> Submitter:
        """Who is accountable for a submission. A user token submits only as its own user."""
        if identity.role is Role.USER and req.user and req.user != identity.principal and not req.parent_job_id:
            raise PermissionDenied(f"your token is for user {identity.principal}; it cannot submit jobs as {req.user}")
        return Submitter(identity.principal, identity.local_admin, identity.submitted_with)

    def task_identity(
        self, conn, job_id: str, owner: str, user: str, attempt_id: str, credential: str = ""
    ) -> TaskIdentity:
        """Who one attempt runs as: a token confined to its job that ends with the attempt, and
        (when the controller is root) the uid of the job's user, never the controller's own.

        The token speaks for the user whose namespace the job is in, so the child jobs a task
        submits are that user's, and names `credential`, the token the job's tree was submitted
        with: revoking that token ends this one too. A handed-off job's tasks get this cluster's
        token, never the parent's: credentials do not travel between clusters.
        """
        token = mint_token(
            self.auth.signing_key,
            self.config.name,
            user or owner,
            Role.TASK,
            self.config.auth.token_lifetime(Role.TASK.value),
            job_scope=job_id,
            attempt_id=attempt_id,
            credential=credential or None,
        )
        return TaskIdentity(token, self.tasks.account_for(conn, user or owner))


def _remember_until(_header: str, value: tuple[Identity, float], now: float) -> float:
    """When a verified token is verified again: at its own expiry, or after the short TTL if sooner."""
    return min(value[1], now + VERIFIED_TOKEN_TTL_S)
