"""Why a job waits (`iris job explain`): for a local job, the scheduler's own filters over a fresh
snapshot; for a federated one, its handoff stage and what each peer last reported for the job's
device and band (`iris.federation.explain`).

It only reads: the database in a read transaction, the backends' workers and the peers' last
heartbeat. So asking never changes what the tick decides, and the answer uses the very filters
that placed (or did not place) the job rather than a second account of them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from iris import scheduler
from iris.backends.protocol import Backend
from iris.controller.db.database import Database, sql
from iris.controller.db.jobs import require_job
from iris.controller.db.literals import PENDING, SENT
from iris.controller.state.snapshot import JobConfig, SnapshotLoader
from iris.core.bands import Band
from iris.core.constraints import constraint_value
from iris.core.states import JobState
from iris.federation.explain import PeerExplanation, explain_peers
from iris.rpc import controller_pb2 as pb

if TYPE_CHECKING:
    from iris.federation.manager import FederationManager


class Explainer:
    def __init__(
        self,
        db: Database,
        loader: SnapshotLoader,
        backends: Mapping[str, Backend],
        federation: FederationManager | None,
        heartbeat_interval_s: float,
        now_ms: Callable[[], int],
        reserved_since: Callable[[], Mapping[str, int]] = dict,
    ):
        self.db = db
        self.loader = loader
        self.backends = backends
        self.federation = federation
        self.stale_after_ms = 2 * heartbeat_interval_s * 1000
        self.now_ms = now_ms
        self.reserved_since = reserved_since  # the tick's: when each job first held its reservation

    def explain(self, job_id: str) -> pb.ExplainJobResponse:
        """Why `job_id` waits, or what state it is in when it no longer does."""
        with self.db.read() as conn:
            row = require_job(conn, job_id)
            handle = conn.execute(
                sql(f"SELECT handoff_state, peer_id FROM federated_jobs WHERE job_id = :j AND direction = {SENT}"),
                {"j": job_id},
            ).first()
            config = self.loader.config(conn, job_id, row["insertion"]) if handle else None
            waiting = conn.execute(
                sql(f"SELECT COUNT(*) FROM tasks WHERE job_id = :j AND state = {PENDING}"), {"j": job_id}
            ).scalar()
        token = config.resources.device.token if config else ""
        band = Band.parse(row["band"])
        resp = pb.ExplainJobResponse(job_id=job_id, band=band.label)
        if row["state"] == JobState.RUNNING.value and handle is None and waiting:
            # Some replicas run and the rest wait (no coscheduling): why those wait is the question.
            self._explain_local(resp, job_id)
            resp.summary = f"job is RUNNING; {waiting} of its {row['replicas']} tasks wait: {resp.summary}"
            return resp
        if row["state"] != JobState.PENDING.value:
            resp.summary = f"job is {row['state']}" + (f": {row['error']}" if row["error"] else "")
            if handle is not None and handle[1] and config is not None:
                resp.summary += f"; it was sent to peer {handle[1]} (handoff {handle[0]})"
                resp.lines.append(_why_sent(config, handle[1]))
            return resp
        if handle is not None:
            resp.summary = row["pending_reason"] or f"handoff {handle[0]}"
            peers = self._peers(token, band, handle[1])
            resp.lines.extend(peers.lines)
            resp.peer_backends.extend(peers.backends)
            return resp
        self._explain_local(resp, job_id)
        return resp

    def _explain_local(self, resp: pb.ExplainJobResponse, job_id: str) -> None:
        """Fills `resp` with the scheduler's own account of the job's waiting tasks, per worker group."""
        workers = tuple(w for b in self.backends.values() for w in b.workers())
        snapshot = replace(self.loader.load(self.now_ms(), workers), reserved_since=self.reserved_since())
        result = scheduler.explain(snapshot, job_id)
        resp.summary = result.summary
        for g in result.groups:
            resp.groups.add(
                backend_id=g.backend_id, group=g.group, workers=g.workers, verdict=g.verdict, reasons=list(g.reasons)
            )
        resp.lines.extend(result.lines)

    def _peers(self, token: str, band: Band, pinned: str) -> PeerExplanation:
        """What each peer last reported for a job of `band` needing device `token`."""
        if self.federation is None:
            return PeerExplanation((), ())
        return explain_peers(self.federation.statuses(), token, band, pinned, self.now_ms(), self.stale_after_ms)


def _why_sent(config: JobConfig, peer: str) -> str:
    """Why the job left this cluster: its pin, or no local backend could host its shape."""
    if constraint_value(config.constraints, "cluster") is not None:
        return f"why: it was pinned to {peer} (--target-cluster {peer})"
    return (
        f"why: no local backend can host {config.resources.describe()}, so it was queued for a federation "
        f"peer and placed on {peer}, which reported room for it"
    )
