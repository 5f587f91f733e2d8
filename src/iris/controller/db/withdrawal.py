"""Withdrawal of a handed-off job its peer cannot place and its return to the queue; and giving up on
the jobs of a peer removed from the config.

A job is withdrawn in three steps, each its own short transaction, so a crash between any two
repeats a step and never skips one: (1) the handle is marked withdrawing, with the reason, and
from then on the peer's reports of it are not mirrored; (2) the manager asks the peer to stop it
and waits for the peer to confirm (a terminal state or NOT_FOUND); (3) only then is the job queued
again, with the peer added to the ones it will not be handed to, a new nonce, and no mirrored
tasks. Because step 3 needs the peer's confirmation, the job never has two live runs. A job
pinned to its peer (`cluster=`) or being stopped by its owner is never withdrawn.
"""

from __future__ import annotations

from sqlalchemy.engine import Connection

from iris.controller.db.database import sql
from iris.controller.db.federation import new_nonce
from iris.controller.db.jobs import parse_constraints
from iris.controller.db.literals import (
    FAILED,
    HANDED_OFF,
    JOB_PENDING,
    PENDING_HANDOFF,
    QUEUED_HANDOFF,
    SENT,
    TERMINAL_JOBS,
    UNSCHEDULABLE,
)
from iris.federation.model import Withdrawal
from iris.federation.reasons import queued_reason

_REROUTABLE = (
    f"f.direction = {SENT} AND f.handoff_state = {HANDED_OFF} AND f.withdraw_reason = ''"
    f" AND j.cancel_requested = 0 AND j.state NOT IN {TERMINAL_JOBS}"
)


def excluded_peers(raw: str) -> frozenset[str]:
    return frozenset(p for p in raw.split(",") if p)


def _pinned(conn: Connection, job_id: str) -> bool:
    raw = conn.execute(sql("SELECT constraints FROM job_config WHERE job_id = :j"), {"j": job_id}).scalar()
    return any(c.key == "cluster" and not c.preferred for c in parse_constraints(raw or "[]"))


def begin(conn: Connection, job_id: str, peer_id: str, reason: str, now_ms: int) -> bool:
    """Marks a job handed to `peer_id` as withdrawing; False (nothing changed) when it is pinned,
    being stopped, already withdrawing, over, or not that peer's."""
    row = conn.execute(
        sql(
            f"SELECT 1 FROM federated_jobs f JOIN jobs j ON j.job_id = f.job_id"
            f" WHERE f.job_id = :j AND f.peer_id = :p AND {_REROUTABLE}"
        ),
        {"j": job_id, "p": peer_id},
    ).first()
    if row is None or _pinned(conn, job_id):
        return False
    conn.execute(
        sql(
            f"UPDATE federated_jobs SET withdraw_reason = :r, updated_ms = :now WHERE job_id = :j AND direction = {SENT}"
        ),
        {"r": reason, "now": now_ms, "j": job_id},
    )
    conn.execute(
        sql("UPDATE jobs SET pending_reason = :r WHERE job_id = :j"),
        {"r": f"withdrawing from peer {peer_id} to try another: {reason}", "j": job_id},
    )
    return True


def unplaced_past(conn: Connection, peer_id: str, cutoff_ms: int, now_ms: int) -> list[str]:
    """Jobs `peer_id` admitted at or before `cutoff_ms` and still reports unplaced (PENDING).

    The admission time is stamped here, the first time a handle is seen handed off, so it holds
    however the handoff was confirmed (the launch's answer or a sync that found the job there).
    """
    conn.execute(
        sql(
            f"UPDATE federated_jobs SET handed_off_ms = :now WHERE direction = {SENT} AND peer_id = :p"
            f" AND handoff_state = {HANDED_OFF} AND handed_off_ms IS NULL"
        ),
        {"now": now_ms, "p": peer_id},
    )
    rows = conn.execute(
        sql(
            f"SELECT f.job_id FROM federated_jobs f JOIN jobs j ON j.job_id = f.job_id WHERE f.peer_id = :p"
            f" AND {_REROUTABLE} AND f.first_report = 1 AND j.state = {JOB_PENDING} AND f.handed_off_ms <= :cut"
        ),
        {"p": peer_id, "cut": cutoff_ms},
    ).all()
    return [r[0] for r in rows if not _pinned(conn, r[0])]


def withdrawing(conn: Connection, peer_id: str | None = None) -> list[Withdrawal]:
    """Every handle being withdrawn (from `peer_id` only, when given)."""
    rows = conn.execute(
        sql(
            "SELECT f.job_id, f.peer_id, f.withdraw_reason, f.nonce FROM federated_jobs f JOIN jobs j ON j.job_id = f.job_id"
            f" WHERE f.direction = {SENT} AND f.handoff_state = {HANDED_OFF} AND f.withdraw_reason != ''"
            " AND (:p IS NULL OR f.peer_id = :p)"
        ),
        {"p": peer_id},
    ).all()
    return [Withdrawal(r[0], r[1], r[2], r[3]) for r in rows]


def requeue(conn: Connection, job_id: str, peer_id: str, configured: frozenset[str], now_ms: int) -> str:
    """The peer confirmed the job stopped: queue it again for another peer ('queued'), or end it
    UNSCHEDULABLE when every configured peer has been tried ('unschedulable'). A job its owner
    stopped meanwhile is left to the cancel ('cancelled')."""
    row = conn.execute(
        sql(
            "SELECT f.withdraw_reason, f.excluded_peers, j.cancel_requested FROM federated_jobs f"
            f" JOIN jobs j ON j.job_id = f.job_id WHERE f.job_id = :j AND f.direction = {SENT} AND f.peer_id = :p"
            f" AND f.handoff_state = {HANDED_OFF} AND f.withdraw_reason != ''"
        ),
        {"j": job_id, "p": peer_id},
    ).first()
    if row is None:
        return "gone"
    reason, excluded = row[0], excluded_peers(row[1]) | {peer_id}
    if row[2]:
        conn.execute(
            sql(f"UPDATE federated_jobs SET withdraw_reason = '' WHERE job_id = :j AND direction = {SENT}"),
            {"j": job_id},
        )
        return "cancelled"
    note = f"withdrawn from peer {peer_id}: {reason}"
    conn.execute(sql("DELETE FROM attempts WHERE job_id = :j"), {"j": job_id})
    conn.execute(sql("DELETE FROM tasks WHERE job_id = :j"), {"j": job_id})
    if configured <= excluded:
        conn.execute(
            sql(
                # logs_complete: the peer confirmed the stop and no run is left to relay lines from, so
                # a reader following the job's logs (`job run`, `logs -f`) ends instead of waiting on.
                "UPDATE federated_jobs SET withdraw_reason = '', excluded_peers = :x, error = :e, updated_ms = :now,"
                f" logs_complete = 1 WHERE job_id = :j AND direction = {SENT}"
            ),
            {"x": ",".join(sorted(excluded)), "e": note, "now": now_ms, "j": job_id},
        )
        conn.execute(
            sql(
                f"UPDATE jobs SET state = {UNSCHEDULABLE}, finished_ms = :now, pending_reason = '', error = :e"
                f" WHERE job_id = :j AND state NOT IN {TERMINAL_JOBS}"
            ),
            {
                "now": now_ms,
                "e": f"no federation peer could place it (tried {', '.join(sorted(excluded))}); last: {note}",
                "j": job_id,
            },
        )
        return "unschedulable"
    conn.execute(
        sql(
            f"UPDATE federated_jobs SET handoff_state = {QUEUED_HANDOFF}, peer_id = '', backend_id = '',"
            " withdraw_reason = '', excluded_peers = :x, nonce = :n, first_report = 0, log_cursor = 0,"
            " logs_complete = 0, handed_off_ms = NULL, error = :e, updated_ms = :now"
            f" WHERE job_id = :j AND direction = {SENT}"
        ),
        {"x": ",".join(sorted(excluded)), "n": new_nonce(), "e": note, "now": now_ms, "j": job_id},
    )
    conn.execute(
        sql(
            f"UPDATE jobs SET state = {JOB_PENDING}, cluster = '', started_ms = NULL, pending_reason = :r WHERE job_id = :j"
        ),
        {"r": f"{queued_reason()} ({note})", "j": job_id},
    )
    return "queued"


def abandon(conn: Connection, peer_id: str, now_ms: int) -> list[str]:
    """Gives up on the jobs handed to a peer no longer in this cluster's config: nothing of theirs
    can be read any more, so relay of their logs ends and a live one fails saying so (it may still
    run on that peer, where only its operators can stop it). Returns the jobs failed."""
    live = [
        r[0]
        for r in conn.execute(
            sql(
                f"SELECT f.job_id FROM federated_jobs f JOIN jobs j ON j.job_id = f.job_id WHERE f.direction = {SENT}"
                f" AND f.peer_id = :p AND f.handoff_state IN ({PENDING_HANDOFF},{HANDED_OFF})"
                f" AND j.state NOT IN {TERMINAL_JOBS}"
            ),
            {"p": peer_id},
        )
    ]
    conn.execute(
        sql(
            "UPDATE federated_jobs SET logs_complete = 1, first_report = 1, withdraw_reason = '', updated_ms = :now"
            f" WHERE direction = {SENT} AND peer_id = :p AND handoff_state IN ({PENDING_HANDOFF},{HANDED_OFF})"
        ),
        {"now": now_ms, "p": peer_id},
    )
    message = (
        f"peer {peer_id} is no longer in this cluster's peers: its state and any further log lines cannot be"
        f" read here; if it still runs there, stop it on {peer_id}"
    )
    for job_id in live:
        conn.execute(
            sql(
                f"UPDATE jobs SET state = {FAILED}, finished_ms = :now, pending_reason = '', error = :e"
                f" WHERE job_id = :j AND state NOT IN {TERMINAL_JOBS}"
            ),
            {"now": now_ms, "e": message, "j": job_id},
        )
    return live
