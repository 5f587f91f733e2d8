"""Federation's writes and reads on the controller database: queueing, promotion (a conditional
update a cancel always beats), delivery bookkeeping, admission of received jobs, the changelog a
peer serves, and folding a peer's sync batch into mirrored rows.

The parent keeps a SENT handle per federated job; the peer keeps a RECEIVED handle. A received
job's changes reach `federation_changelog` through triggers, in the same transaction as the change
itself, so a sync can never miss a change or see one that was rolled back.
"""

from __future__ import annotations

import functools
import json
import secrets
from collections.abc import Sequence

from sqlalchemy.engine import Connection

from iris.controller.db import handoff_stops, workspace
from iris.controller.db.database import run, run_many, sql
from iris.controller.db.jobs import TERMINAL_JOB_SQL, insert_job, parse_constraints, parse_resources
from iris.controller.db.literals import (
    FAILED,
    HANDED_OFF,
    HANDOFF_REJECTED,
    JOB_PENDING,
    KILLED,
    PENDING_HANDOFF,
    QUEUED_HANDOFF,
    RECEIVED,
    SENT,
    UNSCHEDULABLE,
)
from iris.core.bands import Band
from iris.core.errors import AlreadyExists, FailedPrecondition, InvalidArgument
from iris.core.job import JobSpec
from iris.core.states import JobState
from iris.federation.model import HandoffState, Promotion, QueuedJob, SyncBatch
from iris.federation.reasons import (
    awaiting_acceptance_reason,
    awaiting_first_report_reason,
    queued_reason,
)
from iris.rpc import controller_pb2 as pb
from iris.rpc.codec import constraint_to_proto, resources_to_proto


def new_nonce() -> str:
    return secrets.token_hex(12)


# -- parent side ------------------------------------------------------------------------------------


def queue_job(
    conn: Connection, spec: JobSpec, peer_id: str | None, owner: str, now_ms: int, existing_policy: str = "error"
) -> bool:
    """Writes a job (no tasks), its config and a SENT handle in QUEUED_HANDOFF; False if kept."""
    # cluster '' (not NULL, which means "here"): the job runs on a peer not yet chosen.
    state, created = insert_job(conn, spec, now_ms, existing_policy, cluster=peer_id or "", with_tasks=False)
    if not created:
        return False
    # On the driver (`run`), as the rest of the submit path's statements are: a burst queues many.
    run(conn, "UPDATE jobs SET pending_reason = :r WHERE job_id = :j", {"r": queued_reason(peer_id), "j": spec.job_id})
    run(
        conn,
        "INSERT INTO federated_jobs (job_id, direction, peer_id, owner_principal, submitting_user, handoff_state,"
        f" nonce, updated_ms) VALUES (:j, {SENT}, :p, :o, :u, {QUEUED_HANDOFF}, :n, :now)",
        {"j": spec.job_id, "p": peer_id or "", "o": owner, "u": spec.user, "n": new_nonce(), "now": now_ms},
    )
    return True


def reject_job(conn: Connection, spec: JobSpec, reason: str, now_ms: int, existing_policy: str = "error") -> bool:
    """Stores a job that nothing can host as UNSCHEDULABLE at once, with the router's reason."""
    _, created = insert_job(conn, spec, now_ms, existing_policy, with_tasks=False)
    if created:
        conn.execute(
            sql(
                f"UPDATE jobs SET state = {UNSCHEDULABLE}, error = :e, finished_ms = :now, pending_reason = '' WHERE job_id = :j"
            ),
            {"e": f"no local backend or federation peer can host it: {reason}", "now": now_ms, "j": spec.job_id},
        )
    return created


def queued_past_deadline(conn: Connection, now_ms: int) -> list:
    """(job, deadline, submitted, peer) of each queued job whose scheduling timeout has passed."""
    # On the driver (`run`), like the other reads every pass of the tick makes.
    return run(
        conn,
        "SELECT j.job_id, j.scheduling_deadline_ms, j.submitted_ms, f.peer_id FROM federated_jobs f"
        f" JOIN jobs j ON j.job_id = f.job_id WHERE f.direction = {SENT} AND f.handoff_state = {QUEUED_HANDOFF}"
        " AND j.scheduling_deadline_ms IS NOT NULL AND j.scheduling_deadline_ms <= :now"
        f" AND j.state NOT IN {TERMINAL_JOB_SQL}",
        {"now": now_ms},
    ).fetchall()


def expire_queued(conn: Connection, now_ms: int) -> list[str]:
    """Ends as UNSCHEDULABLE the queued jobs whose scheduling timeout passed before any peer took them.

    Conditional on the handle still being queued, so a promotion that won the race is never undone.
    """
    rows = queued_past_deadline(conn, now_ms)
    for job_id, deadline, submitted, peer in rows:
        waited = (deadline - submitted) / 1000
        where = f"peer {peer}" if peer else "any federation peer"
        conn.execute(
            sql(
                f"UPDATE jobs SET state = {UNSCHEDULABLE}, error = :e, finished_ms = :now, pending_reason = ''"
                f" WHERE job_id = :j AND state NOT IN {TERMINAL_JOB_SQL}"
            ),
            {
                "e": f"not placed within its scheduling timeout ({waited:g}s): {where} never reported room for it",
                "now": now_ms,
                "j": job_id,
            },
        )
    return [r[0] for r in rows]


def set_queued_reasons(conn: Connection, reasons: dict[str, str]) -> None:
    """Rewrites the pending reason of jobs that are still queued (a promoted one has its own)."""
    conn.execute(
        sql(
            f"UPDATE jobs SET pending_reason = :r WHERE job_id = :j AND state = {JOB_PENDING} AND EXISTS"
            f" (SELECT 1 FROM federated_jobs f WHERE f.job_id = :j AND f.direction = {SENT}"
            f" AND f.handoff_state = {QUEUED_HANDOFF})"
        ),
        [{"j": j, "r": r} for j, r in reasons.items()],
    )


@functools.lru_cache(maxsize=4096)
def _queued_job(
    job_id: str,
    band: str,
    submitted_ms: int,
    replicas: int,
    resources: str,
    constraints: str,
    peer_id: str,
    excluded_peers: str,
    pending_reason: str | None,
) -> QueuedJob:
    """One queued job from its row's values: a job is read on every pass while it waits, so the
    same row is built once (the values are the whole key, so a changed row builds anew)."""
    return QueuedJob(
        job_id,
        Band.parse(band),
        submitted_ms,
        parse_resources(resources),
        replicas,
        parse_constraints(constraints),
        peer_id or None,
        frozenset(p for p in excluded_peers.split(",") if p),
        pending_reason,
    )


def queued_jobs(conn: Connection) -> list[QueuedJob]:
    rows = run(
        conn,
        "SELECT j.job_id, j.band, j.submitted_ms, j.replicas, c.resources, c.constraints, f.peer_id,"
        " f.excluded_peers, j.pending_reason"
        " FROM federated_jobs f JOIN jobs j ON j.job_id = f.job_id JOIN job_config c ON c.job_id = f.job_id"
        f" WHERE f.direction = {SENT} AND f.handoff_state = {QUEUED_HANDOFF} AND j.cancel_requested = 0"
        f" AND j.state NOT IN {TERMINAL_JOB_SQL}",
    ).fetchall()
    return [_queued_job(*r) for r in rows]


def promote(conn: Connection, p: Promotion, now_ms: int) -> bool:
    """QUEUED_HANDOFF → PENDING_HANDOFF, only if still queued, not cancelled and not terminal."""
    # On the driver (`run`): a burst's passes promote a few jobs each, many times a second.
    result = run(
        conn,
        f"UPDATE federated_jobs SET handoff_state = {PENDING_HANDOFF}, peer_id = :p, backend_id = :b, updated_ms = :now"
        f" WHERE job_id = :j AND direction = {SENT} AND handoff_state = {QUEUED_HANDOFF} AND (peer_id = '' OR peer_id = :p)"
        f" AND EXISTS (SELECT 1 FROM jobs WHERE job_id = :j AND cancel_requested = 0 AND state NOT IN {TERMINAL_JOB_SQL})",
        {"p": p.peer_id, "b": p.backend_id, "now": now_ms, "j": p.job_id},
    )
    if result.rowcount != 1:
        return False
    run(
        conn,
        "UPDATE jobs SET cluster = :p, pending_reason = :r WHERE job_id = :j",
        {"p": p.peer_id, "r": awaiting_acceptance_reason(p.peer_id), "j": p.job_id},
    )
    return True


def handoffs_in_flight(conn: Connection) -> dict[str, int]:
    """Per peer, how many live jobs are promoted to it and not yet accepted there."""
    rows = run(
        conn,
        f"SELECT f.peer_id, COUNT(*) FROM federated_jobs f JOIN jobs j ON j.job_id = f.job_id"
        f" WHERE f.direction = {SENT} AND f.handoff_state = {PENDING_HANDOFF}"
        f" AND j.state NOT IN {TERMINAL_JOB_SQL} GROUP BY f.peer_id",
    ).fetchall()
    return {r[0]: r[1] for r in rows}


def sent_handles(conn: Connection, states: tuple[str, ...]) -> list[dict]:
    marks = ",".join(f":s{i}" for i in range(len(states)))
    rows = (
        conn.execute(
            sql(
                f"SELECT f.*, j.state AS job_state, j.cancel_requested FROM federated_jobs f JOIN jobs j ON j.job_id = f.job_id"
                f" WHERE f.direction = {SENT} AND f.handoff_state IN ({marks}) ORDER BY f.updated_ms, f.job_id"
            ),
            {f"s{i}": s for i, s in enumerate(states)},
        )
        .mappings()
        .all()
    )
    return [dict(r) for r in rows]


_DELIVERY_COLUMNS = (
    "j.job_id, j.user, j.replicas, j.band, c.command, c.resources, c.constraints, c.env, c.max_retries_failure,"
    " c.max_retries_preemption, c.timeout_s, c.coschedule, c.image, c.bundle_id, f.backend_id, f.owner_principal,"
    " f.submitting_user, f.nonce"
)


def delivery_requests(conn: Connection, job_ids: Sequence[str], requester: str) -> dict[str, pb.LaunchJobRequest]:
    """The LaunchJob each job's peer receives: this cluster's id (the peer files it under this
    cluster's namespace), env and shape, files inline, a handoff record. One statement per table for
    the whole call, not per job: a burst's deliveries are read while the submits go on. A job whose
    rows are gone is left out."""
    if not job_ids:
        return {}
    marks = ",".join("?" * len(job_ids))
    rows = run(
        conn,
        f"SELECT {_DELIVERY_COLUMNS} FROM jobs j JOIN job_config c ON c.job_id = j.job_id"
        f" JOIN federated_jobs f ON f.job_id = j.job_id AND f.direction = {SENT} WHERE j.job_id IN ({marks})",
        list(job_ids),
    ).fetchall()
    files: dict[str, dict[str, bytes]] = {}
    for job_id, name, data in run(
        conn, f"SELECT job_id, name, data FROM job_files WHERE job_id IN ({marks})", list(job_ids)
    ).fetchall():
        if name != workspace.BUNDLE:
            files.setdefault(job_id, {})[name] = bytes(data)
    bundle_ids = sorted({r[13] for r in rows if r[13]})
    bundles = (
        {
            c: bytes(d)
            for c, d in run(
                conn,
                f"SELECT content_id, data FROM bundles WHERE content_id IN ({','.join('?' * len(bundle_ids))})"
                " AND data IS NOT NULL",
                bundle_ids,
            ).fetchall()
        }
        if bundle_ids
        else {}
    )
    out = {}
    for (
        job_id,
        user,
        replicas,
        band,
        command,
        resources,
        constraints_json,
        env,
        max_failure,
        max_preemption,
        timeout_s,
        coschedule,
        image,
        bundle_id,
        backend_id,
        owner,
        submitting_user,
        nonce,
    ) in rows:
        constraints = [
            constraint_to_proto(c) for c in parse_constraints(constraints_json) if c.key not in ("cluster", "backend")
        ]
        if backend_id:
            # The backend the placement pass chose, as a preference: the peer's scheduler has the last word.
            constraints.append(pb.Constraint(key="backend", op="EQ", values=[backend_id], preferred=True))
        req = pb.LaunchJobRequest(
            name=job_id,
            user=user,
            command=json.loads(command),
            resources=resources_to_proto(parse_resources(resources)),
            replicas=replicas,
            priority=band,
            constraints=constraints,
            env=json.loads(env),
            max_retries_failure=max_failure,
            max_retries_preemption=max_preemption,
            timeout_s=timeout_s,
            coschedule=bool(coschedule),
            image=image,
            handoff=pb.HandoffRecord(
                requester_cluster=requester,
                owner_principal=owner,
                submitting_user=submitting_user or user,
                nonce=nonce,
            ),
        )
        # The peer cannot resolve this cluster's content ids: the bundle and files travel inline.
        if bundle_id in bundles:
            req.workspace_bundle, req.bundle_id = bundles[bundle_id], bundle_id
        for name, content in files.get(job_id, {}).items():
            req.workdir_files[name] = content
        out[job_id] = req
    return out


def mark_handed_off(conn: Connection, job_ids: Sequence[str], now_ms: int) -> None:
    """The peer admitted these jobs (still awaiting delivery here): each is HANDED_OFF, and a
    pending one says it awaits its first report from its peer."""
    handles = run(
        conn,
        f"SELECT job_id, peer_id FROM federated_jobs WHERE direction = {SENT} AND handoff_state = {PENDING_HANDOFF}"
        f" AND job_id IN ({','.join('?' * len(job_ids))})",
        list(job_ids),
    ).fetchall()
    run_many(
        conn,
        f"UPDATE federated_jobs SET handoff_state = {HANDED_OFF}, updated_ms = ? WHERE job_id = ? AND direction = {SENT}",
        [(now_ms, job_id) for job_id, _ in handles],
    )
    run_many(
        conn,
        f"UPDATE jobs SET pending_reason = ? WHERE job_id = ? AND state = {JOB_PENDING}",
        [(awaiting_first_report_reason(peer_id or ""), job_id) for job_id, peer_id in handles],
    )


def mark_rejected(conn: Connection, job_id: str, message: str, now_ms: int) -> None:
    conn.execute(
        sql(
            f"UPDATE federated_jobs SET handoff_state = {HANDOFF_REJECTED}, error = :e, updated_ms = :now"
            f" WHERE job_id = :j AND direction = {SENT}"
        ),
        {"e": message, "now": now_ms, "j": job_id},
    )
    conn.execute(
        sql(
            f"UPDATE jobs SET state = {FAILED}, error = :e, finished_ms = :now, pending_reason = ''"
            f" WHERE job_id = :j AND state NOT IN {TERMINAL_JOB_SQL}"
        ),
        {"e": f"the peer refused the handoff: {message}", "now": now_ms, "j": job_id},
    )


def _peer_of(conn: Connection, job_id: str) -> str:
    return (
        conn.execute(
            sql(f"SELECT peer_id FROM federated_jobs WHERE job_id = :j AND direction = {SENT}"), {"j": job_id}
        ).scalar()
        or ""
    )


def cancel_sent(conn: Connection, job_id: str, reason: str, now_ms: int) -> bool:
    """Cancels a federated job on the parent; True when it has a SENT handle and has not ended.

    Queued or awaiting delivery: it ends KILLED here and is never delivered. Handed off: the
    cancel intent is bumped so the sync loop relays TerminateJob to the peer until it lands; until
    the peer confirms, the job keeps its state with a pending reason saying it is stopping there.
    """
    handle = conn.execute(
        sql(
            "SELECT f.handoff_state, f.peer_id, f.delivery_started FROM federated_jobs f"
            f" JOIN jobs j ON j.job_id = f.job_id WHERE f.job_id = :j AND f.direction = {SENT}"
            f" AND j.state NOT IN {TERMINAL_JOB_SQL}"
        ),
        {"j": job_id},
    ).first()
    if handle is None:  # not federated, or ended: nothing to relay, and the caller says it had finished
        return False
    conn.execute(
        sql(
            "UPDATE federated_jobs SET cancel_intent_version = cancel_intent_version + 1, updated_ms = :now"
            f" WHERE job_id = :j AND direction = {SENT}"
        ),
        {"now": now_ms, "j": job_id},
    )
    # Before handoff only while no delivery can have reached the peer: once one started, the peer
    # may have admitted the job, so it is stopped there and confirmed like a handed-off one.
    before_handoff = handle[0] == HandoffState.QUEUED_HANDOFF.value or (
        handle[0] == HandoffState.PENDING_HANDOFF.value and not handle[2]
    )
    if not before_handoff:
        conn.execute(
            sql(
                f"UPDATE jobs SET cancel_requested = 1, pending_reason = :r, error = :e"
                f" WHERE job_id = :j AND state NOT IN {TERMINAL_JOB_SQL}"
            ),
            {"r": stopping_reason(handle[1]), "e": reason, "j": job_id},
        )
        return True
    conn.execute(
        sql(
            f"UPDATE jobs SET state = {KILLED}, cancel_requested = 1, finished_ms = :now, pending_reason = '',"
            f" error = :e WHERE job_id = :j AND state NOT IN {TERMINAL_JOB_SQL}"
        ),
        {"now": now_ms, "j": job_id, "e": "Cancelled before handoff" if before_handoff else reason},
    )
    return True


def start_delivery(conn: Connection, job_id: str) -> bool:
    """Records that a delivery of `job_id` is about to start; False when it must not (cancelled,
    or no longer awaiting delivery). A cancel and this are serialised by the database, so a cancel
    either stops the job before any delivery or knows it must be confirmed by the peer."""
    # On the driver (`run`): every job of a burst passes here once.
    result = run(
        conn,
        f"UPDATE federated_jobs SET delivery_started = 1 WHERE job_id = :j AND direction = {SENT}"
        f" AND handoff_state = {PENDING_HANDOFF}"
        f" AND EXISTS (SELECT 1 FROM jobs WHERE job_id = :j AND cancel_requested = 0 AND state NOT IN {TERMINAL_JOB_SQL})",
        {"j": job_id},
    )
    return result.rowcount == 1


def stopping_reason(peer_id: str) -> str:
    return f"stopping: waiting for peer {peer_id} to confirm the cancel"


def mark_cancel_relayed(conn: Connection, job_id: str, version: int, now_ms: int) -> None:
    """The peer confirmed the cancel (or no longer knows the job): it ends KILLED here."""
    conn.execute(
        sql(
            f"UPDATE jobs SET state = {KILLED}, finished_ms = :now, pending_reason = ''"
            f" WHERE job_id = :j AND cancel_requested = 1 AND state NOT IN {TERMINAL_JOB_SQL}"
        ),
        {"now": now_ms, "j": job_id},
    )
    conn.execute(
        sql(
            "UPDATE federated_jobs SET cancel_relayed_version = MAX(cancel_relayed_version, :v)"
            f" WHERE job_id = :j AND direction = {SENT}"
        ),
        {"v": version, "j": job_id},
    )


def active_counts(conn: Connection) -> dict[str, int]:
    rows = conn.execute(
        sql(
            f"SELECT f.peer_id, COUNT(*) FROM federated_jobs f JOIN jobs j ON j.job_id = f.job_id"
            f" WHERE f.direction = {SENT} AND f.peer_id != '' AND j.state NOT IN {TERMINAL_JOB_SQL} GROUP BY f.peer_id"
        )
    ).all()
    return {r[0]: r[1] for r in rows}


# -- peer side ------------------------------------------------------------------------------------


def admit_received(
    conn: Connection, spec: JobSpec, handoff: pb.HandoffRecord, files: dict[str, bytes], now_ms: int
) -> str:
    """Admits a handed-off job under the id the requester's namespace gives it (`spec.job_id`, see
    `iris.federation.ids`). Returns 'created' or 'existing'.

    The same nonce again is a replay (idempotent); a new nonce over a finished run re-runs it; over
    a live run, or over a job this cluster did not receive, it is refused as already existing. A
    run its requester stopped before it arrived (`handoff_stops`) is refused and never started.
    """
    if handoff_stops.stopped(conn, handoff.requester_cluster, spec.job_id, handoff.nonce, now_ms):
        raise FailedPrecondition(
            f"peer {handoff.requester_cluster} stopped job {spec.job_id} (run {handoff.nonce}) before this"
            " handoff of it arrived, so it is not started; hand it off under a new nonce to run it again"
        )
    # On the driver (`run`), as the submit path's statements are: a burst admits dozens per call.
    existing = run(
        conn,
        "SELECT j.state, f.nonce, f.peer_id FROM jobs j"
        f" LEFT JOIN federated_jobs f ON f.job_id = j.job_id AND f.direction = {RECEIVED} WHERE j.job_id = :j",
        {"j": spec.job_id},
    ).fetchone()
    if existing is not None:
        state, nonce, requester = existing
        if nonce is None or requester != handoff.requester_cluster:
            raise AlreadyExists(
                f"job {spec.job_id} already exists on this cluster and was not handed off by {handoff.requester_cluster}"
            )
        if nonce == handoff.nonce:
            return "existing"
        if not JobState(state).is_terminal:
            raise AlreadyExists(f"job {spec.job_id} is still {state} here; a new run must wait until it ends")
    insert_job(conn, spec, now_ms, "replace")  # a finished earlier run is replaced, under a new insertion
    workspace.store_files(conn, spec.job_id, files)
    run(
        conn,
        "INSERT INTO federated_jobs (job_id, direction, peer_id, owner_principal, submitting_user, handoff_state,"
        f" nonce, updated_ms) VALUES (:j, {RECEIVED}, :p, :o, :u, {HANDED_OFF}, :n, :now)",
        {
            "j": spec.job_id,
            "p": handoff.requester_cluster,
            "o": handoff.owner_principal,
            "u": handoff.submitting_user,
            "n": handoff.nonce,
            "now": now_ms,
        },
    )
    run(
        conn,
        "INSERT INTO federation_changelog (job_id, requester, task_index, tombstone, ts_ms)"
        " VALUES (:j, :r, NULL, 0, :now)",
        {"j": spec.job_id, "r": handoff.requester_cluster, "now": now_ms},
    )
    return "created"


def received_requester(conn: Connection, job_id: str) -> str | None:
    return conn.execute(
        sql(f"SELECT peer_id FROM federated_jobs WHERE job_id = :j AND direction = {RECEIVED}"), {"j": job_id}
    ).scalar()


MAX_SYNC_JOB_IDS = 1000  # jobs one follow-up may name; the parent asks in pages of fewer


def changelog_bounds(conn: Connection) -> tuple[int, int]:
    """(head, pruned_through): the last seq ever written, and the last one pruned away.

    The head comes from SQLite's own AUTOINCREMENT record, so it survives pruning every entry;
    pruning only removes a prefix, so everything after `pruned_through` is still there.
    """
    head = conn.execute(sql("SELECT seq FROM sqlite_sequence WHERE name = 'federation_changelog'")).scalar() or 0
    oldest = conn.execute(sql("SELECT MIN(seq) FROM federation_changelog")).scalar()
    return head, head if oldest is None else oldest - 1


def _latest_entries(conn: Connection, requester: str, after: int, head: int) -> tuple[list[str], list[str]]:
    """(changed, tombstoned) jobs of `requester` with an entry after `after`, each judged by its
    latest entry: a job replaced since (tombstone, then a new admission) counts as changed."""
    rows = conn.execute(
        sql(
            # SQLite takes the bare column `tombstone` from the row holding MAX(seq).
            "SELECT job_id, tombstone, MAX(seq) FROM federation_changelog"
            " WHERE requester = :r AND seq > :c AND seq <= :h GROUP BY job_id"
        ),
        {"r": requester, "c": after, "h": head},
    ).all()
    return [r[0] for r in rows if not r[1]], [r[0] for r in rows if r[1]]


def changes_since(conn: Connection, requester: str, cursor: int, job_ids: Sequence[str] = ()) -> SyncBatch:
    """What one FederationSync answers `requester`.

    A cursor inside the retained changelog gets the jobs changed after it, each once. A cursor of
    0, one from before the pruned prefix, or one past the head (this database was replaced) gets a
    full resync: the requester's active jobs plus whatever changed within the retained window,
    never every job it ever handed here. `job_ids` asks about named jobs instead (the parent's
    follow-up for jobs it still follows but the full resync did not mention): each is reported if
    it was received from the requester, else tombstoned.
    """
    head, pruned = changelog_bounds(conn)
    if job_ids:
        if len(job_ids) > MAX_SYNC_JOB_IDS:
            raise InvalidArgument(
                f"FederationSync names {len(job_ids)} jobs; ask about at most {MAX_SYNC_JOB_IDS} per call"
            )
        marks = ",".join(f":j{i}" for i in range(len(job_ids)))
        held = {
            r[0]
            for r in conn.execute(
                sql(
                    f"SELECT job_id FROM federated_jobs WHERE direction = {RECEIVED} AND peer_id = :r"
                    f" AND job_id IN ({marks})"
                ),
                {"r": requester, **{f"j{i}": j for i, j in enumerate(job_ids)}},
            )
        }
        wanted = list(dict.fromkeys(job_ids))
        return SyncBatch(tuple(j for j in wanted if j in held), tuple(j for j in wanted if j not in held), head, False)
    if 0 < cursor and pruned <= cursor <= head:
        changed, tombstones = _latest_entries(conn, requester, cursor, head)
        return SyncBatch(tuple(changed), tuple(tombstones), head, False)
    active = [
        r[0]
        for r in conn.execute(
            sql(
                "SELECT f.job_id FROM federated_jobs f JOIN jobs j ON j.job_id = f.job_id"
                f" WHERE f.direction = {RECEIVED} AND f.peer_id = :r AND j.state NOT IN {TERMINAL_JOB_SQL}"
            ),
            {"r": requester},
        )
    ]
    recent, tombstones = _latest_entries(conn, requester, pruned, head)
    changed = list(dict.fromkeys([*active, *recent]))
    return SyncBatch(tuple(changed), tuple(t for t in tombstones if t not in set(changed)), head, True)


def log_heads(conn: Connection, job_ids: Sequence[str]) -> dict[str, int]:
    """For each job, the seq of its last log line (0: none yet), leaving out a job whose own lines
    are still being relayed here from a peer of this cluster: its head is not final."""
    heads: dict[str, int] = {}
    for job_id in job_ids:
        relaying = conn.execute(
            sql(
                f"SELECT 1 FROM federated_jobs WHERE job_id = :j AND direction = {SENT}"
                f" AND handoff_state = {HANDED_OFF} AND logs_complete = 0"
            ),
            {"j": job_id},
        ).first()
        if relaying is None:
            heads[job_id] = int(
                conn.execute(sql("SELECT COALESCE(MAX(seq), 0) FROM logs WHERE job_id = :j"), {"j": job_id}).scalar()
                or 0
            )
    return heads


def prune_changelog(conn: Connection, cutoff_ms: int) -> int:
    """Drops the changelog's entries (tombstones included) written before `cutoff_ms`, as a prefix
    of seqs so that `changelog_bounds` stays exact; returns how many went."""
    return conn.execute(
        sql(
            "DELETE FROM federation_changelog WHERE seq <="
            " (SELECT COALESCE(MAX(seq), 0) FROM federation_changelog WHERE ts_ms < :cutoff)"
        ),
        {"cutoff": cutoff_ms},
    ).rowcount


def received_counts(conn: Connection) -> dict[str, int]:
    """Per cluster that handed jobs here (the requester of a received job), how many of them have not ended."""
    rows = conn.execute(
        sql(
            f"SELECT f.peer_id, SUM(CASE WHEN j.state NOT IN {TERMINAL_JOB_SQL} THEN 1 ELSE 0 END)"
            f" FROM federated_jobs f JOIN jobs j ON j.job_id = f.job_id"
            f" WHERE f.direction = {RECEIVED} AND f.peer_id != '' GROUP BY f.peer_id"
        )
    ).all()
    return {r[0]: int(r[1] or 0) for r in rows}
