"""The ControllerService RPC handlers: thin translations between messages and the store.

Each handler gets the caller already authenticated and authorised by `handler.rpc`, which also runs
its blocking database work on a thread and turns typed errors into the Connect code they declare.
The service holds the parts of the controller it uses (database, identities, backends, tick,
explainer), never the controller object itself, so a handler reads as what it does.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import TYPE_CHECKING

from iris import REVISION_DATE, __version__
from iris.controller.api import endpoint_hosts, endpoints
from iris.controller.api.handler import rpc
from iris.controller.api.inbound_handoffs import Handoffs
from iris.controller.api.inbound_peers import InboundPeers
from iris.controller.api.launch import Submits
from iris.controller.api.plan import Planner
from iris.controller.api.submit_rate import SubmitRate
from iris.controller.api.workers import REGISTRATION_BURST, REGISTRATIONS_PER_S, WorkerCalls
from iris.controller.auth import Identity, Role, check_may_stop, check_sync_requester
from iris.controller.auth.policy import check_may_read
from iris.controller.db import attempts as attempt_db
from iris.controller.db import federation as fed
from iris.controller.db import handoff_stops, reads
from iris.controller.db.answers import Answers
from iris.controller.db.database import sql
from iris.controller.db.jobs import require_job
from iris.controller.db.paging import Listing, page_of
from iris.controller.state import waiting
from iris.controller.state.applier import stop_job
from iris.core.errors import InvalidArgument, IrisError, NotFound
from iris.core.limits import MAX_REPLICAS
from iris.core.names import JobName, in_job_tree
from iris.core.states import JobState
from iris.federation.reasons import unknown_start
from iris.rpc import controller_pb2 as pb
from iris.rpc.codec import fill_availability, resources_to_proto

if TYPE_CHECKING:
    from iris.controller.app import Controller

# How long a registration waits for a backend to say where its attempt runs (Slurm's next answer).
ATTEMPT_HOST_WAIT_S = 3.0


log = logging.getLogger(__name__)
_JOB_STATES = tuple(s.value for s in JobState)


class ControllerServiceImpl(WorkerCalls):
    """The API's handlers, holding the parts of the controller they use and nothing else."""

    def __init__(self, controller: Controller):
        self.config = controller.config
        self.name = controller.config.name
        self.db = controller.db
        self.commits = controller.commits
        self.identities = controller.identities
        self.isolation_warning = controller.isolation_warning
        self.auth = controller.auth
        self.backends = controller.backends
        self.federation = controller.federation
        self.tick = controller.tick
        self.explainer = controller.explainer
        self.queries = controller.queries
        self.health = controller.health
        self.now_ms = controller.now_ms
        self.started_at = controller.started_at
        self.running_tasks = controller.tick.loader.load_running
        self.spend = controller.spend
        self.layer_pins = controller.layer_pins
        self.submits = Submits(controller)
        self.planner = Planner(controller, self.submits)
        self.handoffs = Handoffs(controller, self.submits)
        settings = controller.config.controller
        self.submit_rate = SubmitRate(settings.submit_rate, settings.submit_burst)
        self.registrations = SubmitRate(REGISTRATIONS_PER_S, REGISTRATION_BURST)
        self.inbound = InboundPeers(controller.config.auth.federation_peers, controller.now_ms)
        self.listings: Answers[pb.ListJobsResponse] = Answers(controller.db)

    @rpc
    async def launch_job(self, req: pb.LaunchJobRequest, identity: Identity) -> pb.LaunchJobResponse:
        if req.HasField("handoff"):
            self.inbound.note(identity, "LaunchJob")
            return await self.handoffs.launch_job(req, identity)
        tasks = min(max(req.replicas, 1), MAX_REPLICAS)
        self.submit_rate.take(identity, tasks)
        try:
            resp = await self.submits.launch(req, identity)
        except IrisError:
            self.submit_rate.give_back(identity, tasks)
            raise
        if resp.bundle_missing:
            self.submit_rate.give_back(identity, tasks)  # counted when it is sent again with its bytes
        return resp

    @rpc
    def plan_job(self, req: pb.LaunchJobRequest, identity: Identity) -> pb.PlanJobResponse:
        """A dry run of LaunchJob: what the same request would meet now (see `plan`); writes nothing."""
        return self.planner.plan(req, identity)

    @rpc
    async def hand_off_jobs(self, req: pb.HandOffJobsRequest, identity: Identity) -> pb.HandOffJobsResponse:
        """Several handoffs from one peer in one call, each admitted or refused on its own
        (`handoffs`): one transaction and one wake-up of the tick for all of them."""
        self.inbound.note(identity, "HandOffJobs")
        return await self.handoffs.hand_off_jobs(req, identity)

    @rpc
    async def get_job_status(self, req: pb.GetJobStatusRequest, identity: Identity) -> pb.GetJobStatusResponse:
        """The job's status; with `wait_while_state`, once the job has left that state (a long poll,
        see `waiting`) or `wait_ms` has passed."""
        if not req.wait_while_state:
            return await asyncio.to_thread(self._job_status, req, identity)
        if req.wait_while_state not in _JOB_STATES:
            raise InvalidArgument(
                f"wait_while_state {req.wait_while_state!r} is not a job state; use one of {', '.join(_JOB_STATES)}"
            )
        return await waiting.long_poll(
            self.tick,
            lambda: self._job_status(req, identity),
            lambda resp: resp.job.state != req.wait_while_state,
            req.wait_ms,
        )

    def _job_status(self, req: pb.GetJobStatusRequest, identity: Identity) -> pb.GetJobStatusResponse:
        with self.db.read() as conn:
            self._check_read(conn, identity, req.job_id)
            job = reads.get_job(conn, req.job_id, self.name)
            self._estimate(job)
            if not req.include_tasks:
                return pb.GetJobStatusResponse(job=job)
            tasks, token, total = reads.task_page(conn, req.job_id, req.include_attempts, self.name)
        return pb.GetJobStatusResponse(job=job, tasks=tasks, next_task_page_token=token, total_tasks=total)

    @rpc
    def list_jobs(self, req: pb.ListJobsRequest, identity: Identity) -> pb.ListJobsResponse:
        within = ""
        if identity.role is Role.TASK:
            within = identity.job_scope or "\0"  # a task lists only its own job's tree
            if not in_job_tree(req.prefix, within):
                scoped = pb.ListJobsRequest()
                scoped.CopyFrom(req)
                scoped.prefix = within
                req = scoped
        return self.listings.get(
            (req.SerializeToString(deterministic=True), within), lambda: self._list_jobs(req, within)
        )

    def _list_jobs(self, req: pb.ListJobsRequest, within: str) -> pb.ListJobsResponse:
        with self.db.read() as conn:
            resp = reads.list_jobs(conn, req, self.name, within)
        for job in resp.jobs:
            if job.state == "PENDING":
                self._estimate(job)
        return resp

    def _estimate(self, job: pb.JobStatus) -> None:
        """Adds to a pending job's status the expected start the tick's last pass worked out."""
        if job.state != "PENDING":
            return
        found = self.tick.estimates.get(job.job_id)
        if found is not None:
            job.start_earliest_ms = found.earliest_ms
            job.start_latest_ms = found.latest_ms or 0
            job.start_basis = found.basis
        elif (reported := self._peer_estimate(job)) is not None:
            job.start_earliest_ms = reported.earliest_ms
            job.start_latest_ms = reported.latest_ms
            job.start_basis = f"on peer {job.cluster}: {reported.basis}"
        elif (basis := unknown_start(job.handoff_state, job.cluster)) is not None:
            job.start_basis = basis

    def _peer_estimate(self, job: pb.JobStatus) -> pb.StartEstimate | None:
        """A job waiting on a peer: its expected start there, as the peer's last sync reported it."""
        if job.handoff_state != "HANDED_OFF" or self.federation is None:
            return None
        return self.federation.estimate(job.cluster, job.job_id)

    @rpc
    def list_tasks(self, req: pb.ListTasksRequest, identity: Identity) -> pb.ListTasksResponse:
        with self.db.read() as conn:
            self._check_read(conn, identity, req.job_id)
            tasks, token, total = reads.task_page(
                conn, req.job_id, req.include_attempts, self.name, req.page_token, req.limit
            )
        return pb.ListTasksResponse(tasks=tasks, next_page_token=token, total=total)

    @rpc
    def terminate_job(self, req: pb.TerminateJobRequest, identity: Identity) -> pb.TerminateJobResponse:
        now = self.now_ms()
        reason = req.reason or "stopped by request"
        with self.db.write() as conn:
            # A peer's stop of a run not admitted here yet leaves a tombstone, committed with the
            # answer: NOT_FOUND then stays true when the handoff itself arrives late.
            unheld = identity.role is Role.FEDERATION_PEER and handoff_stops.stop_unheld(
                conn, identity.principal, req.job_id, req.nonce, now
            )
            if not unheld:
                require_job(conn, req.job_id)
                owner = JobName.parse(req.job_id).user
                check_may_stop(identity, req.job_id, owner, fed.received_requester(conn, req.job_id))
                if fed.cancel_sent(conn, req.job_id, reason, now):
                    stopped = [req.job_id]
                else:
                    stopped = stop_job(conn, req.job_id, reason, now)
        if unheld:
            raise NotFound(
                f"job {req.job_id} (run {req.nonce or 'any'}) is not on this cluster; a handoff of that run"
                " arriving later is refused"
            )
        if self.federation is not None and stopped:
            self.federation.wake()
        if stopped:
            # Return once the tick has stopped the processes, so "stopped" means gone.
            self.tick.wait_for_tick(timeout=5)
        with self.db.read() as conn:
            state = reads.get_job(conn, req.job_id, self.name).state
        return pb.TerminateJobResponse(terminated=stopped, state=state)

    @rpc
    async def fetch_logs(self, req: pb.FetchLogsRequest, identity: Identity) -> pb.FetchLogsResponse:
        """Lines after `after_seq` (or the last `tail`); with `wait_ms`, once there is one or the job
        is finished (a long poll, see `waiting`), or when the wait is over."""
        if not req.wait_ms:
            return await asyncio.to_thread(self._fetch_logs, req, identity)
        return await waiting.long_poll(
            self.tick,
            lambda: self._fetch_logs(req, identity),
            lambda resp: bool(resp.lines) or resp.job_finished,
            req.wait_ms,
        )

    def _fetch_logs(self, req: pb.FetchLogsRequest, identity: Identity) -> pb.FetchLogsResponse:
        """One read; a job that reads as finished costs one lookup per attempt of it, and a second
        read, never a walk over every running attempt (a follower asks again and again)."""
        with self.db.read() as conn:
            self._check_read(conn, identity, req.job_id)
            resp = reads.fetch_logs(conn, req.job_id, req.task_index, req.after_seq, req.tail, req.limit)
            attempts = attempt_db.job_attempts(conn, req.job_id) if resp.job_finished else []
        if not resp.job_finished:
            return resp
        # A stopped job is over in the database before its killed processes have exited and their
        # last lines are stored; a backend holds an attempt until the tick has stored its exit and
        # output. One held now: lines may still come, and the caller keeps reading. None held: read
        # on, after the question, so the lines of an attempt let go since the first read are in this
        # answer (only those after the first read's last line are read again).
        if any(b.holds(a) for a, backend_id in attempts if (b := self.backends.get(backend_id)) is not None):
            resp.job_finished = False
            return resp
        with self.db.read() as conn:
            return reads.fetch_more_logs(conn, resp, req.job_id, req.task_index, req.tail, req.limit)

    @rpc
    def list_backends(self, req: pb.ListBackendsRequest, identity: Identity) -> pb.ListBackendsResponse:
        page = page_of(
            list(self.backends.values()), lambda b: (b.id,), Listing("backends", (str,)), req.page_token, req.limit
        )
        resp = pb.ListBackendsResponse(cluster=self.name, next_page_token=page.next_token, total=page.total)
        availability = self.tick.availability()
        for backend in page.rows:
            d = backend.describe()
            workers = backend.workers()
            live = [w.capacity for w in workers if w.alive]
            info = resp.backends.add(
                id=d.id,
                kind=d.kind,
                attributes=dict(d.attributes),
                workers=len(workers),
                live_workers=len(live),
                problem=getattr(backend, "capacity_error", ""),  # only backends that ask another system have one
            )
            if d.worker_capacity is not None:
                info.worker_capacity.CopyFrom(resources_to_proto(d.worker_capacity))
            info.capacity.CopyFrom(
                pb.Resources(
                    cpu=sum(r.cpu for r in live),
                    memory_bytes=sum(r.memory for r in live),
                    disk_bytes=sum(r.disk for r in live),
                )
            )
            if live and live[0].device.is_accelerator:
                info.capacity.device.CopyFrom(
                    pb.Device(kind=live[0].device.kind, count=sum(r.device.count for r in live))
                )
            avail = availability.get(d.id)
            if avail is not None:
                fill_availability(info.availability, avail)
        return resp

    @rpc
    def list_workers(self, req: pb.ListWorkersRequest, identity: Identity) -> pb.ListWorkersResponse:
        if req.backend_id and req.backend_id not in self.backends:
            raise NotFound(
                f"backend {req.backend_id!r} does not exist on this cluster; its backends: {', '.join(self.backends)}"
            )
        workers = [
            w
            for backend in self.backends.values()
            if not req.backend_id or backend.id == req.backend_id
            for w in backend.workers()
        ]
        listing = Listing("workers", (str, str), (req.backend_id,))
        page = page_of(workers, lambda w: (w.backend_id, w.worker_id), listing, req.page_token, req.limit)
        used: dict[str, list] = {}
        tasks: dict[str, list[str]] = {}
        for t in self.running_tasks():
            used.setdefault(t.worker_id, []).append(t.resources)
            tasks.setdefault(t.worker_id, []).append(t.task_id)
        resp = pb.ListWorkersResponse(next_page_token=page.next_token, total=page.total)
        for w in page.rows:
            rs = used.get(w.worker_id, [])
            u = pb.Resources(
                cpu=sum(r.cpu for r in rs),
                memory_bytes=sum(r.memory for r in rs),
                disk_bytes=sum(r.disk for r in rs),
            )
            u.device.count = sum(r.device.count for r in rs)
            resp.workers.add(
                worker_id=w.worker_id,
                backend_id=w.backend_id,
                alive=w.alive,
                capacity=resources_to_proto(w.capacity),
                used=u,
                attributes=dict(w.attributes),
                running_tasks=len(rs),
                last_contact_ms=w.last_contact_ms,
                runtime=w.runtime,
                running=sorted(tasks.get(w.worker_id, [])),
                isolation_warning=w.isolation_warning,
            )
        return resp

    @rpc
    def list_peers(self, req: pb.ListPeersRequest, identity: Identity) -> pb.ListPeersResponse:
        peers = list(self.federation.list_peers().peers) if self.federation is not None else []
        page = page_of(peers, lambda p: (p.peer_id,), Listing("peers", (str,)), req.page_token, req.limit)
        with self.db.read() as conn:
            inbound = self.inbound.listing(conn)
        return pb.ListPeersResponse(peers=page.rows, next_page_token=page.next_token, total=page.total, inbound=inbound)

    @rpc
    async def execute_raw_query(self, req: pb.ExecuteRawQueryRequest, identity: Identity) -> pb.ExecuteRawQueryResponse:
        # On the query pool's own threads: the API's threads never wait on a raw query.
        caller = "" if identity.role is Role.ADMIN else identity.principal  # admins: the operator
        return await asyncio.wrap_future(self.queries.submit(req.sql, req.limit, caller))

    @rpc
    def explain_job(self, req: pb.ExplainJobRequest, identity: Identity) -> pb.ExplainJobResponse:
        with self.db.read() as conn:
            self._check_read(conn, identity, req.job_id)
        return self.explainer.explain(req.job_id)

    @staticmethod
    def _check_read(conn, identity: Identity, job_id: str) -> None:
        """A task reads only its own job's tree and a peer only its handoffs; others read every job."""
        if identity.role in (Role.TASK, Role.FEDERATION_PEER):
            check_may_read(identity, job_id, fed.received_requester(conn, job_id))

    @rpc
    def get_cluster_info(self, req: pb.GetClusterInfoRequest, identity: Identity) -> pb.GetClusterInfoResponse:
        with self.db.read() as conn:
            counts = {s: n for s, n in conn.execute(sql("SELECT state, COUNT(*) FROM jobs GROUP BY state"))}
        health = self.health()
        return pb.GetClusterInfoResponse(
            name=self.name,
            version=__version__,
            revision_date=REVISION_DATE,
            uptime_s=time.time() - self.started_at,
            job_counts=counts,
            backends=len(self.backends),
            peers=len(self.config.peers),
            pid=os.getpid(),
            state_dir=str(self.config.state_path),
            caller=identity.principal,
            caller_role=identity.role.value,
            healthy=health.ok,
            problems=health.problems,
            last_tick_age_s=-1 if health.last_tick_age_s is None else health.last_tick_age_s,
            spend=self.spend(),
            last_tick_ms=self.tick.last_stats.duration_ms if self.tick.last_stats is not None else 0.0,
            task_isolation_warning=self.isolation_warning,
        )

    @rpc
    def revoke_token(self, req: pb.RevokeTokenRequest, identity: Identity) -> pb.RevokeTokenResponse:
        # Admin only: RevokeToken is on no other role's allowlist.
        newly = self.identities.revoke(req.token_id, req.subject, req.expires_ms)
        return pb.RevokeTokenResponse(token_id=req.token_id.strip(), newly_revoked=newly)

    @rpc
    def federation_sync(self, req: pb.FederationSyncRequest, identity: Identity) -> pb.FederationSyncResponse:
        if not req.requester:
            raise InvalidArgument("FederationSync needs the requesting cluster's name")
        check_sync_requester(identity, req.requester)
        self.inbound.note(identity, "FederationSync")
        with self.db.read() as conn:
            batch = fed.changes_since(conn, req.requester, req.cursor, req.job_ids)
            resp = pb.FederationSyncResponse(cursor=batch.cursor, cursor_stale=batch.full, tombstones=batch.tombstones)
            for job_id in batch.changed:
                resp.jobs.add(
                    job=reads.get_job(conn, job_id, self.name), tasks=reads.list_tasks(conn, job_id, True, self.name)
                )
            resp.log_heads.update(fed.log_heads(conn, batch.changed))
            resp.reports_log_heads = True
        self._report_estimates(req.requester, resp)
        return resp

    def _report_estimates(self, requester: str, resp: pb.FederationSyncResponse) -> None:
        """Adds the expected start of each root job received from `requester` that waits here: the
        tick's last figures, read from memory (a received root job is `/user/<requester>.name`)."""
        prefix = f"{requester}."
        for job_id, found in self.tick.estimates.items():
            parts = job_id.split("/")
            if len(parts) == 3 and parts[2].startswith(prefix):
                resp.estimates[job_id].CopyFrom(
                    pb.StartEstimate(earliest_ms=found.earliest_ms, latest_ms=found.latest_ms or 0, basis=found.basis)
                )

    @rpc
    def register_endpoint(self, req: pb.RegisterEndpointRequest, identity: Identity) -> pb.RegisterEndpointResponse:
        # A host name is looked up before the write, never inside it: a lookup that hangs must not
        # hold the database's write lock (and every submit and scheduling pass behind it).
        resolver = endpoint_hosts.resolved_host(endpoints.check_host(req.host))
        self._await_attempt_host(req.attempt_id)
        with self.db.write() as conn:
            return pb.RegisterEndpointResponse(
                endpoint=endpoints.register(conn, identity, req, self.now_ms(), self.backends, resolver)
            )

    def _await_attempt_host(self, attempt_id: str) -> None:
        """Lets a backend that learns where an attempt runs only by asking (Slurm) find out before
        the registration's write, which must not wait on it."""
        with self.db.read() as conn:
            row = conn.execute(sql("SELECT backend_id FROM attempts WHERE attempt_id = :a"), {"a": attempt_id}).first()
        wait = getattr(self.backends.get(row[0] if row else ""), "await_attempt_host", None)
        if wait is not None:
            wait(attempt_id, ATTEMPT_HOST_WAIT_S)

    @rpc
    def list_endpoints(self, req: pb.ListEndpointsRequest, identity: Identity) -> pb.ListEndpointsResponse:
        with self.db.read() as conn:
            if req.job_id:
                require_job(conn, req.job_id)
                self._check_read(conn, identity, req.job_id)
            within = (identity.job_scope or "\0") if identity.role is Role.TASK else ""
            return endpoints.list_live(conn, req.job_id, req.page_token, req.limit, within)

    @rpc
    def mint_endpoint_url(self, req: pb.MintEndpointUrlRequest, identity: Identity) -> pb.MintEndpointUrlResponse:
        with self.db.read() as conn:
            endpoints.check_may_mint(conn, identity, req.job_id, req.name)
        cfg = self.config
        url, expires_ms = endpoints.mint_url(
            self.auth.signing_key, cfg.name, cfg.url, cfg.federation_public_parent, req.job_id, req.name, req.ttl_s
        )
        return pb.MintEndpointUrlResponse(url=url, expires_ms=expires_ms)
