"""The controller: one cluster's database, backends and control tick, wired from its config.

Stopping it gracefully ends the attempts its backends run, recording them WORKER_FAILED
first so they are retried on the next start rather than counted as failures of the job. A crash
(SIGKILL) leaves them running instead, to be re-adopted by the next controller.
"""

from __future__ import annotations

import logging
import os
import time

from iris import scheduler
from iris.backends import registry
from iris.backends.protocol import BackendContext
from iris.controller import applier
from iris.controller.auth import Authenticator, Identity, Role, mint_token
from iris.controller.auth.isolation import TaskIdentities, loopback_socket_uid, secure_state_dir
from iris.controller.auth.tokens import token_expiry
from iris.controller.budgets import spend_report
from iris.controller.db import attempts as attempt_db
from iris.controller.db.database import Database, sql
from iris.controller.db.jobs import require_job
from iris.controller.db.literals import SENT
from iris.controller.health import Health, Watchdog, assess
from iris.controller.raw_query import RawQueryRunner
from iris.controller.retention import LogRetention
from iris.controller.snapshot import TaskIdentity
from iris.controller.tick import LIVE_ATTEMPTS, ControlLoop
from iris.controller.transitions import WorkerLost
from iris.controller.workspace import LayerPins
from iris.core.bands import Band
from iris.core.config import ClusterConfig
from iris.core.errors import InvalidArgument, PermissionDenied, Unauthenticated
from iris.federation.explain import PeerExplanation, explain_peers
from iris.federation.model import Submitter
from iris.rpc import controller_pb2 as pb

log = logging.getLogger("iris.controller")
_LIVE_ATTEMPT_STATES = ("ASSIGNED", "BUILDING", "RUNNING")


class Controller:
    def __init__(self, config: ClusterConfig, clock=time.time):
        self.config = config
        self.clock = clock
        self.started_at = clock()
        state = config.state_path
        state.mkdir(parents=True, exist_ok=True)
        self.db = Database(state / "controller.db")
        uids = config.auth.task_uids
        self.tasks = TaskIdentities.from_config(uids.range, config.auth.task_accounts, uids.enabled)
        with self.db.read() as conn:
            self.revoked = {r[0] for r in conn.execute(sql("SELECT jti FROM revoked_tokens"))}
        self.auth = Authenticator.from_config(config, revoked=self.revoked)
        secure_state_dir(state, tasks_have_own_uids=self.tasks.enabled)
        self._verified: dict[str, tuple] = {}
        context = BackendContext(
            config.name,
            state,
            config.url,
            wake=self._wake,
            output_cap=config.controller.log_max_output,
            worker_grace_period=config.controller.worker_grace_period,
        )
        self.backends = {b.id: registry.build(b, context) for b in config.backends}
        self.federation = self._federation() if config.peers else None
        self.queries = RawQueryRunner(str(self.db.path), config.controller.query_timeout)
        exit_after = config.controller.watchdog_exit_after
        self.watchdog = Watchdog(self.health, exit_after) if exit_after > 0 else None
        self.tick = ControlLoop(
            self.db,
            self.backends,
            self.base_env(),
            config.controller.tick_interval,
            clock=clock,
            federation=self.federation,
            state_dir=state,
            task_identity=self.task_identity,
            changelog_retention_s=config.controller.federation_changelog_retention,
            budgets=config.budgets,
        )
        self.layer_pins = LayerPins()  # workspace layers submits in flight are about to name
        self.retention = LogRetention(
            self.db, self.backends, config.controller.log_retention, clock=clock, state_dir=state, pins=self.layer_pins
        )

    def _federation(self):
        """The federation manager, built only when peers are configured: with no peers there are
        no peer clients, no threads and no federation writes at all."""
        from iris.controller.federation_store import ControllerFederationStore
        from iris.federation.manager import FederationManager
        from iris.federation.model import LocalBackendShape
        from iris.federation.router import PeerRouter

        shapes = [
            LocalBackendShape(d.id, d.worker_capacity, d.attributes)
            for d in (b.describe() for b in self.backends.values())
            if d.worker_capacity is not None  # a pool whose members join later has no fixed shape
        ]
        settings = self.config.controller
        return FederationManager(
            self.config.name,
            {pid: peer.address for pid, peer in self.config.peers.items()},
            ControllerFederationStore(self.db, self.config.name, self.now_ms),
            PeerRouter(shapes),
            heartbeat_interval=settings.federation_heartbeat_interval,
            sync_interval=settings.federation_sync_interval,
            max_per_peer=settings.max_federation_handoffs_per_cycle,
            token_source=self.auth.peer_token,
            clock=self.clock,
        )

    def task_identity(self, conn, job_id: str, owner: str, user: str, attempt_id: str) -> TaskIdentity:
        """Who one attempt runs as: a token confined to its job that ends with the attempt, and
        (when the controller is root) the uid of the job's user, never the controller's own.

        The token speaks for the user whose namespace the job is in, so the child jobs a task
        submits are that user's. A handed-off job's tasks get this cluster's token, never the
        parent's: credentials do not travel between clusters.
        """
        token = mint_token(
            self.auth.signing_key,
            self.config.name,
            user or owner,
            Role.TASK,
            self.config.auth.token_lifetime(Role.TASK.value),
            job_scope=job_id,
            attempt_id=attempt_id,
        )
        return TaskIdentity(token, self.tasks.account_for(conn, user or owner))

    def _wake(self) -> None:
        self.tick.wake()

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    def base_env(self) -> dict[str, str]:
        """The env every task starts from: the controller's own, the cluster's task_env defaults,
        and where to reach this controller (a job's own env is layered on top at launch)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("IRIS_")}
        env.update(self.config.defaults.task_env)
        env.update(PYTHONUNBUFFERED="1", IRIS_CONTROLLER=self.config.url, IRIS_CLUSTER=self.config.name)
        return env

    def problems(self) -> list[str]:
        """What keeps this controller from doing its work right now (empty when healthy)."""
        return [self.tick.storage_error] if self.tick.storage_error else []

    def start(self) -> None:
        self.retention.start()
        self.tick.recover()
        self.tick.start()
        self.tick.wake()
        if self.federation is not None:
            self.federation.start()
        if self.watchdog is not None:
            self.watchdog.start()

    def health(self) -> Health:
        """Whether the tick completes passes and every backend's own threads are alive, and what
        else keeps the controller from its work (`problems`)."""
        threads: list[str] = []
        for backend in self.backends.values():
            # A backend without threads of its own has nothing to report.
            threads.extend(getattr(backend, "problems", tuple)())
        return assess(
            self.tick.alive(),
            self.tick.last_pass_age(),
            self.clock() - self.started_at,
            self.config.controller.tick_stall_timeout,
            tuple(threads),
            (*self.problems(), *([self.tick.plan_error] if self.tick.plan_error else [])),
        )

    def shutdown(self) -> None:
        self.queries.close()
        if self.watchdog is not None:
            self.watchdog.stop()
        if self.federation is not None:
            self.federation.stop()
        self.retention.stop()
        self.tick.stop()
        now = self.now_ms()
        with self.db.write() as conn:
            live = conn.execute(
                sql(f"SELECT attempt_id FROM attempts WHERE state IN {LIVE_ATTEMPTS} AND cluster IS NULL")
            ).all()
            applier.end_attempts(conn, [WorkerLost(r[0], "the controller stopped") for r in live], now)
        for backend in self.backends.values():
            backend.shutdown()
        with self.db.write() as conn:
            for backend in self.backends.values():
                attempt_db.store_logs(conn, backend.poll().logs)  # what was read before the stop
        self.db.close()

    # -- federation and explain seams ----------------------------------------------------------

    # -- identity seams (tokens and peer keys plug in here) --------------------------------------

    def identify(self, authorization: str | None, client_address: str | None):
        """The caller of one request: its token's identity, or local_admin from a trusted address."""
        host, _, port = client_address.rpartition(":") if client_address else (None, "", "")
        if not authorization:
            return self.auth.identify(None, host, caller_is_task=self._from_task(host, port))
        # Verifying a signature costs far more than the rest of a small call: remember a verified
        # token until it expires (the cache is bounded; a bad token is never cached, and a
        # revocation empties it).
        cached = self._verified.get(authorization)
        if cached is not None and cached[1] > time.time():
            identity = cached[0]
        else:
            identity = self.auth.identify(authorization, host)
            if len(self._verified) >= 10_000:
                self._verified.clear()
            self._verified[authorization] = (identity, token_expiry(authorization))
        if identity.role is Role.TASK:
            self._check_attempt_live(identity)
        return identity

    def _from_task(self, host: str | None, port: str) -> bool:
        """Whether a tokenless caller is one of this cluster's tasks: the uid owning its loopback
        socket is a task uid (see `auth.isolation`). Only decidable when tasks have uids of their own."""
        if not self.tasks.enabled or not host or not port.isdigit() or not self.auth.is_trusted(host):
            return False
        uid = loopback_socket_uid(host, int(port), self.config.port)
        return uid is not None and self.tasks.is_task_uid(uid)

    def _check_attempt_live(self, identity: Identity) -> None:
        """A task token works only while its attempt runs."""
        with self.db.read() as conn:
            state = conn.execute(
                sql("SELECT state FROM attempts WHERE attempt_id = :a"), {"a": identity.attempt_id}
            ).scalar()
        if state not in _LIVE_ATTEMPT_STATES:
            raise Unauthenticated(
                f"this task token belonged to attempt {identity.attempt_id}, which has ended "
                f"({(state or 'unknown').lower()}); a task token works only while its attempt runs"
            )

    def revoke(self, token_id: str, subject: str, expires_ms: int) -> bool:
        """Adds a token id to the deny list (persisted); False when it was already there."""
        if not token_id.strip():
            raise InvalidArgument("name the token to revoke: pass the token itself or its id (jti)")
        with self.db.write() as conn:
            inserted = conn.execute(
                sql(
                    "INSERT INTO revoked_tokens (jti, subject, expires_ms, revoked_ms) VALUES (:j, :s, :e, :now)"
                    " ON CONFLICT (jti) DO NOTHING"
                ),
                {"j": token_id.strip(), "s": subject, "e": expires_ms, "now": self.now_ms()},
            ).rowcount
        self.revoked.add(token_id.strip())
        self._verified.clear()
        return bool(inserted)

    def submitter(self, req: pb.LaunchJobRequest, identity):
        """Who is accountable for a submission. A user token submits only as its own user."""
        if identity.role is Role.USER and req.user and req.user != identity.principal and not req.parent_job_id:
            raise PermissionDenied(f"your token is for user {identity.principal}; it cannot submit jobs as {req.user}")
        return Submitter(principal=identity.principal, local_admin=identity.local_admin)

    def spend(self) -> list[pb.UserSpend]:
        """Per user, what their placed work is worth against their budget (see `budgets`)."""
        running, peer_spend = self.tick.loader.load_spend_inputs()
        return spend_report(running, peer_spend, self.config.budgets.users, self.config.budgets.default)

    def list_peers(self) -> pb.ListPeersResponse:
        return self.federation.list_peers() if self.federation is not None else pb.ListPeersResponse()

    def explain(self, job_id: str) -> pb.ExplainJobResponse:
        """Why a job waits: the scheduler's own filters for a local job; for a federated one, its
        handoff stage and what each peer last reported for the job's device."""
        with self.db.read() as conn:
            row = require_job(conn, job_id)
            handle = conn.execute(
                sql(f"SELECT handoff_state, peer_id FROM federated_jobs WHERE job_id = :j AND direction = {SENT}"),
                {"j": job_id},
            ).first()
            token = self.tick.loader.config(conn, job_id, row["insertion"]).resources.device.token if handle else ""
        resp = pb.ExplainJobResponse(job_id=job_id, band=Band.parse(row["band"]).label)
        if row["state"] != "PENDING":
            resp.summary = f"job is {row['state']}" + (f": {row['error']}" if row["error"] else "")
            return resp
        if handle is not None:
            resp.summary = row["pending_reason"] or f"handoff {handle[0]}"
            peers = self._peer_explanation(token, Band.parse(row["band"]), handle[1])
            resp.lines.extend(peers.lines)
            resp.peer_backends.extend(peers.backends)
            return resp
        workers = tuple(w for b in self.backends.values() for w in b.workers())
        result = scheduler.explain(self.tick.loader.load(self.now_ms(), workers), job_id)
        resp.summary = result.summary
        for g in result.groups:
            resp.groups.add(
                backend_id=g.backend_id, group=g.group, workers=g.workers, verdict=g.verdict, reasons=list(g.reasons)
            )
        resp.lines.extend(result.lines)
        return resp

    def _peer_explanation(self, token: str, band: Band, pinned: str) -> PeerExplanation:
        if self.federation is None:
            return PeerExplanation((), ())
        stale_after = 2 * self.config.controller.federation_heartbeat_interval * 1000
        return explain_peers(self.federation.statuses(), token, band, pinned, self.now_ms(), stale_after)
