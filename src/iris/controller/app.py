"""The controller: one cluster's database, backends and control tick, wired from its config.

Each concern lives in a module named for it: who is calling (`identity`), why a job waits
(`explain`), what an attempt starts with (`launch_spec`), the control loop (`tick`). This object
builds them, starts and stops them, and hands the API handlers the parts they use.

Stopping it gracefully ends the attempts its backends run, recording them WORKER_FAILED
first so they are retried on the next start rather than counted as failures of the job. A crash
(SIGKILL) leaves them running instead, to be re-adopted by the next controller.
"""

from __future__ import annotations

import logging
import os
import time

from iris.backends import registry
from iris.backends.protocol import BackendContext
from iris.controller.api.explain import Explainer
from iris.controller.api.raw_query import RawQueryRunner
from iris.controller.auth.callers import Identities
from iris.controller.auth.isolation import not_isolated_reason, secure_state_dir
from iris.controller.db import attempts as attempt_db
from iris.controller.db.attempts import OutputPolicy
from iris.controller.db.database import Database, sql
from iris.controller.db.group_commit import GroupCommit
from iris.controller.db.workspace import LayerPins
from iris.controller.state import applier
from iris.controller.state.budgets import spend_report
from iris.controller.state.gauges import ClusterGauges
from iris.controller.state.health import Health, Watchdog, assess
from iris.controller.state.retention import LogRetention
from iris.controller.state.tick import LIVE_ATTEMPTS, ControlLoop
from iris.controller.state.transitions import WorkerLost
from iris.controller.tls import peer_tls, task_ca
from iris.core import metrics
from iris.core.config import ClusterConfig
from iris.rpc import controller_pb2 as pb

log = logging.getLogger("iris.controller")


class Controller:
    def __init__(self, config: ClusterConfig, clock=time.time):
        self.config = config
        self.clock = clock
        self.started_at = clock()
        state = config.state_path
        state.mkdir(parents=True, exist_ok=True)
        self.db = Database(state / "controller.db")
        settings = config.controller
        self.output = OutputPolicy(
            state,
            attempt=settings.log_max_output,
            job=settings.log_max_job_output,
            user=settings.max_user_log_bytes,
            min_free_disk=settings.min_free_disk,
        )
        self.commits = GroupCommit(self.db)  # submits that arrive together share one commit
        self.identities = Identities(config, self.db, clock)
        self.auth = self.identities.auth
        secure_state_dir(state)
        self.isolation_warning = not_isolated_reason(config.auth.task_uids.enabled)
        if self.isolation_warning:
            log.warning("cluster %s: %s", config.name, self.isolation_warning)
        context = BackendContext(
            config.name,
            state,
            config.url,
            wake=self._wake,
            note=self._note,
            output_cap=config.controller.log_max_output,
            worker_grace_period=config.controller.worker_grace_period,
            backend_ids=frozenset(b.id for b in config.backends),
            tasks_have_own_uids=self.identities.tasks.enabled,
        )
        self.backends = {b.id: registry.build(b, context) for b in config.backends}
        self.router = self._router()
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
            task_identity=self.identities.task_identity,
            changelog_retention_s=config.controller.federation_changelog_retention,
            budgets=config.budgets,
            output=self.output,
        )
        self.layer_pins = LayerPins()  # workspace layers submits in flight are about to name
        self.retention = LogRetention(
            self.db, self.backends, config.controller.log_retention, clock=clock, state_dir=state, pins=self.layer_pins
        )
        self.gauges = ClusterGauges(self.tick.loader, self.backends, self.federation, self.now_ms)
        metrics.REGISTRY.register(self.gauges)
        self.explainer = Explainer(
            self.db,
            self.tick.loader,
            self.backends,
            self.federation,
            config.controller.federation_heartbeat_interval,
            self.now_ms,
            lambda: self.tick.reserved_since,
        )

    def _router(self):
        """What decides at submit whether a job runs here, queues for a peer or is refused: built
        for every cluster, so one with no peers refuses at once what none of its backends can host.
        """
        from iris.federation.model import LocalBackendShape
        from iris.federation.router import PeerRouter
        from iris.federation.shape import shapes_feasibility

        described = [b.describe() for b in self.backends.values()]
        shapes = [
            LocalBackendShape(d.id, d.worker_capacity, d.attributes) for d in described if d.worker_capacity is not None
        ]
        # A pool whose members join later has no fixed shape: it can host what a worker joined now
        # can, and a job none can host waits for one that can to join.
        pools = [self.backends[d.id] for d in described if d.worker_capacity is None]

        def members():
            return (
                LocalBackendShape(w.backend_id, w.capacity, w.attributes)
                for pool in pools
                for w in pool.workers()
                if w.alive
            )

        return PeerRouter(shapes_feasibility(shapes, members if pools else None), pools=[p.id for p in pools])

    def _federation(self):
        """The federation manager, built only when peers are configured: with no peers there are
        no peer clients, no threads and no federation writes at all."""
        from iris.controller.state.federation_store import ControllerFederationStore
        from iris.federation.manager import FederationManager

        settings = self.config.controller
        return FederationManager(
            self.config.name,
            {pid: peer.address for pid, peer in self.config.peers.items()},
            ControllerFederationStore(self.db, self.config.name, self.now_ms, self.commits, self.output),
            self.router,
            heartbeat_interval=settings.federation_heartbeat_interval,
            sync_interval=settings.federation_sync_interval,
            max_per_peer=settings.max_federation_handoffs_per_cycle,
            reroute_after=settings.federation_reroute_after,
            token_source=self.auth.peer_token,
            clock=self.clock,
            wake_tick=lambda: self.tick.wake_federation(at_once=True),
            peer_tls=peer_tls(self.config),
        )

    def _wake(self) -> None:
        self.tick.wake()

    def _note(self) -> None:
        self.tick.note()

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    def base_env(self) -> dict[str, str]:
        """The env every task starts from: the controller's own, the cluster's task_env defaults,
        and where to reach this controller (a job's own env is layered on top at launch)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("IRIS_")}
        env.update(self.config.defaults.task_env)
        env.update(PYTHONUNBUFFERED="1", IRIS_CONTROLLER=self.config.url, IRIS_CLUSTER=self.config.name)
        ca = task_ca(self.config)
        if ca and "IRIS_CA" not in self.config.defaults.task_env:
            env["IRIS_CA"] = ca  # so that a task's own calls check the controller's certificate
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
        self.commits.close()  # the submits already queued are written before the database closes
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
                # what was read before the stop
                attempt_db.store_logs(conn, backend.poll().logs, self.output)
        self.db.close()
        metrics.REGISTRY.unregister(self.gauges)

    def spend(self) -> list[pb.UserSpend]:
        """Per user, what their placed work is worth against their budget (see `budgets`)."""
        running, peer_spend = self.tick.loader.load_spend_inputs()
        return spend_report(running, peer_spend, self.config.budgets.users, self.config.budgets.default)
