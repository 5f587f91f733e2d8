"""On a peer: which handed-off runs their parent stopped before this cluster admitted them, so
that a late handoff of such a run is refused instead of started.

A parent that gives up on a handoff call (its timeout, a transport error, its own restart) cannot
know whether the request still sits in this cluster's socket buffer or admission queue. When the
job is then cancelled or withdrawn there, the parent asks this cluster to stop it; if the run is
not here yet, a plain NOT_FOUND would be a lie the moment the late request is admitted (a cancel
lost, or a withdrawn job running twice). So a stop from a peer for a run this cluster does not
hold leaves a tombstone (requesting peer, job id, nonce), written in the same transaction that
answers NOT_FOUND; admission checks it in its own transaction, and SQLite serialises the two, so
either the stop finds the job (and stops it) or the admission finds the tombstone (and refuses).

Only the peer that handed a job off can leave one: the job id must lie in its namespace
(`ids.received_job_id`), so a peer can block only its own jobs. A stop that names no nonce (an
older parent) blocks every run of that job from that peer while the tombstone lasts.

Bounded: a tombstone lasts `STOP_TOMBSTONE_TTL_MS` (a day: far beyond the parent's 3 s call
timeout and any restart, yet short enough that nothing accumulates), and each peer keeps at most
`MAX_STOPS_PER_PEER`, its oldest dropped first, so a hostile peer cannot grow the table without
limit and can evict only its own.
"""

from __future__ import annotations

from sqlalchemy.engine import Connection

from iris.controller.db.database import run, sql
from iris.controller.db.literals import RECEIVED
from iris.core.errors import InvalidArgument
from iris.core.names import JobName

STOP_TOMBSTONE_TTL_MS = 24 * 3600 * 1000
MAX_STOPS_PER_PEER = 10_000
MAX_NONCE_CHARS = 128  # this cluster's own nonces have 24


def in_namespace(requester: str, job_id: str) -> bool:
    """Whether `job_id` is a root job id this cluster files `requester`'s handoffs under."""
    try:
        name = JobName.parse(job_id)
    except InvalidArgument:
        return False  # no job could have that id: the ordinary stop answers it
    return name.is_root and name.parts[0].startswith(f"{requester}.")


def stop_unheld(conn: Connection, requester: str, job_id: str, nonce: str, now_ms: int) -> bool:
    """Records that `requester` stopped run `nonce` of `job_id` if this cluster does not hold that
    run (no such job, or one received under another nonce); True when it recorded that (the stop
    is answered NOT_FOUND), False when the run is here or the job is not the requester's."""
    if not in_namespace(requester, job_id):
        return False
    if len(nonce) > MAX_NONCE_CHARS:
        raise InvalidArgument(
            f"the stop names a nonce of {len(nonce)} characters; a handoff nonce has at most {MAX_NONCE_CHARS}"
        )
    held = conn.execute(
        sql(
            "SELECT f.peer_id, f.nonce FROM jobs j LEFT JOIN federated_jobs f"
            f" ON f.job_id = j.job_id AND f.direction = {RECEIVED} WHERE j.job_id = :j"
        ),
        {"j": job_id},
    ).first()
    if held is not None and (held[0] != requester or not nonce or held[1] == nonce):
        return False  # held (or not this requester's to reach): the ordinary stop decides
    record(conn, requester, job_id, nonce, now_ms)
    return True


def record(conn: Connection, requester: str, job_id: str, nonce: str, now_ms: int) -> None:
    """Leaves a tombstone for run `nonce` ('' for every run) of `job_id` from `requester`, first
    dropping that requester's expired ones, then its oldest beyond the cap."""
    conn.execute(
        sql("DELETE FROM handoff_stops WHERE requester = :r AND stopped_ms <= :cut"),
        {"r": requester, "cut": now_ms - STOP_TOMBSTONE_TTL_MS},
    )
    conn.execute(
        sql(
            "INSERT INTO handoff_stops (requester, job_id, nonce, stopped_ms) VALUES (:r, :j, :n, :now)"
            " ON CONFLICT (requester, job_id, nonce) DO UPDATE SET stopped_ms = :now"
        ),
        {"r": requester, "j": job_id, "n": nonce, "now": now_ms},
    )
    # Its oldest beyond the cap, walked in the age index's order: a count and a few deletes, not a
    # set of every tombstone it keeps (that cost a peer at its cap ~20x more per stop, on the writer).
    conn.execute(
        sql(
            "DELETE FROM handoff_stops WHERE rowid IN (SELECT rowid FROM handoff_stops WHERE requester = :r"
            " ORDER BY stopped_ms, rowid LIMIT max(0, (SELECT COUNT(*) FROM handoff_stops WHERE requester = :r) - :cap))"
        ),
        {"r": requester, "cap": MAX_STOPS_PER_PEER},
    )


def prune(conn: Connection, now_ms: int) -> int:
    """Drops every peer's expired tombstones (the control tick's housekeeping); returns how many."""
    return conn.execute(
        sql("DELETE FROM handoff_stops WHERE stopped_ms <= :cut"), {"cut": now_ms - STOP_TOMBSTONE_TTL_MS}
    ).rowcount


def stopped(conn: Connection, requester: str, job_id: str, nonce: str, now_ms: int) -> bool:
    """Whether `requester` stopped run `nonce` of `job_id` (or every run of it) within the last
    `STOP_TOMBSTONE_TTL_MS`, before this cluster admitted it.

    On the driver (`run`): every admitted handoff asks, and through SQLAlchemy's statement path
    the question cost as much as the rest of an admission. The age is compared here, not in the
    statement: with a range on `stopped_ms` there, SQLite walks the requester's age index instead
    of looking the job up by its key."""
    row = run(
        conn,
        "SELECT MAX(stopped_ms) FROM handoff_stops WHERE requester = :r AND job_id = :j AND nonce IN ('', :n)",
        {"r": requester, "j": job_id, "n": nonce},
    ).fetchone()
    return row[0] is not None and row[0] > now_ms - STOP_TOMBSTONE_TTL_MS
