"""The controller's implementation of the federation store: each method one short transaction.

The writes every handed-off job of a burst passes through (its promotion, the start of its
delivery, its acceptance) are items of the submit group's transactions (`GroupCommit`) when the
controller has one: on the parent of a burst they otherwise took the write lock between the groups
of the submits still arriving, each a transaction of its own that the next group waited behind.

`apply_sync` folds a peer's report into mirrored rows (job, tasks, attempts stamped with the
peer's name; tasks and attempts written in place, see `_MirroredRows`) and advances the cursor in
the same transaction, so a crash between the two can only make the next sync repeat work, never
skip it. A job this cluster cancelled never moves back to a live state because a report from
before the cancel arrives late, and a job that ended here never moves back at all: a report of it
live is an older one (the manager already drops a change-feed answer that ends before the cursor
it asked from; this covers a full resync replayed). A report of a job whose states this cluster does not know (a peer
of another version) or whose tasks are not that job's is skipped with a warning: it would
otherwise write rows that stopping or rolling up the job cannot read.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from typing import TypeVar

from sqlalchemy.engine import Connection

from iris.controller.db import federation as fed
from iris.controller.db import withdrawal
from iris.controller.db.attempts import NO_OUTPUT_LIMITS, OutputPolicy, admit_output
from iris.controller.db.database import Database, run, run_many, sql
from iris.controller.db.group_commit import GroupCommit
from iris.controller.db.jobs import TERMINAL_JOB_SQL
from iris.controller.db.literals import FAILED, HANDED_OFF, JOB_PENDING, PENDING_HANDOFF, SENT
from iris.core.states import JobState, TaskState
from iris.federation.model import (
    HandoffState,
    LogTarget,
    PendingCancel,
    PendingDelivery,
    Promotion,
    QueuedJob,
    Withdrawal,
)
from iris.rpc import controller_pb2 as pb

log = logging.getLogger(__name__)
_JOB_STATES = frozenset(s.value for s in JobState)
_TASK_STATES = frozenset(s.value for s in TaskState)
_ENDED = frozenset(s.value for s in JobState if s.is_terminal)
T = TypeVar("T")


class ControllerFederationStore:
    def __init__(
        self,
        db: Database,
        cluster_name: str,
        now_ms,
        commits: GroupCommit | None = None,
        output: OutputPolicy = NO_OUTPUT_LIMITS,
    ):
        self.db = db
        self.cluster_name = cluster_name
        self.now_ms = now_ms
        self.commits = commits
        self.output = output  # what output the database takes, relayed lines included

    def _burst_write(self, work: Callable[[Connection], T]) -> T:
        """Runs one of a burst's handoff writes (promotion, delivery start, acceptance) in a
        transaction of the submit group when the controller has one: it joins the submits being
        committed instead of taking the write lock between their groups."""
        if self.commits is not None:
            return self.commits.run(work)
        with self.db.write() as conn:
            return work(conn)

    def queued_jobs(self) -> list[QueuedJob]:
        with self.db.read() as conn:
            return fed.queued_jobs(conn)

    def expire_queued(self) -> list[str]:
        now = self.now_ms()
        with self.db.read() as conn:  # the common case (nothing due) takes no write lock
            if not fed.queued_past_deadline(conn, now):
                return []
        with self.db.write() as conn:
            return fed.expire_queued(conn, now)

    def set_queued_reasons(self, reasons: dict[str, str]) -> None:
        self._burst_write(lambda conn: fed.set_queued_reasons(conn, reasons))

    def promote_all(self, promotions: Sequence[Promotion]) -> list[Promotion]:
        """Applies a pass's promotions in one transaction; returns those whose conditional update
        held (a cancel or a promotion that raced the pass beats it)."""
        now = self.now_ms()
        return self._burst_write(lambda conn: [p for p in promotions if fed.promote(conn, p, now)])

    def handoffs_in_flight(self) -> dict[str, int]:
        with self.db.read() as conn:
            return fed.handoffs_in_flight(conn)

    def pending_deliveries(self) -> list[PendingDelivery]:
        with self.db.read() as conn:
            rows = run(
                conn,
                "SELECT f.job_id, f.peer_id, j.cancel_requested, j.state FROM federated_jobs f"
                f" JOIN jobs j ON j.job_id = f.job_id WHERE f.direction = {SENT} AND f.handoff_state = {PENDING_HANDOFF}"
                " ORDER BY f.updated_ms, f.job_id",
            ).fetchall()
        # An ended job (stopped before its delivery) is never delivered, like a cancelled one.
        return [PendingDelivery(r[0], r[1], bool(r[2]) or r[3] in _ENDED) for r in rows]

    def delivery_requests(self, job_ids: Sequence[str]) -> dict[str, pb.LaunchJobRequest]:
        """The LaunchJob each job's peer receives, read in one snapshot."""
        with self.db.read() as conn:
            return fed.delivery_requests(conn, job_ids, self.cluster_name)

    def mark_handed_off(self, job_ids: Sequence[str]) -> None:
        """The peer admitted these jobs: each is HANDED_OFF, all in one transaction."""
        now = self.now_ms()
        self._burst_write(lambda conn: fed.mark_handed_off(conn, job_ids, now))

    def mark_rejected(self, job_id: str, message: str) -> None:
        with self.db.write() as conn:
            fed.mark_rejected(conn, job_id, message, self.now_ms())

    def note_pending_reason(self, job_id: str, reason: str) -> None:
        with self.db.write() as conn:
            conn.execute(
                sql(f"UPDATE jobs SET pending_reason = :r WHERE job_id = :j AND state = {JOB_PENDING}"),
                {"r": reason, "j": job_id},
            )

    def pending_cancels(self) -> list[PendingCancel]:
        with self.db.read() as conn:
            return [
                PendingCancel(h["job_id"], h["peer_id"], h["cancel_intent_version"], h["nonce"])
                for h in fed.sent_handles(conn, (HandoffState.HANDED_OFF.value, HandoffState.PENDING_HANDOFF.value))
                if h["cancel_intent_version"] > h["cancel_relayed_version"]
                and (h["handoff_state"] == HandoffState.HANDED_OFF.value or h["delivery_started"])
            ]

    def mark_cancel_relayed(self, job_id: str, version: int) -> None:
        with self.db.write() as conn:
            fed.mark_cancel_relayed(conn, job_id, version, self.now_ms())

    def sync_cursor(self, peer_id: str) -> int:
        with self.db.read() as conn:
            return (
                conn.execute(
                    sql("SELECT cursor FROM federation_sync_state WHERE peer_id = :p"), {"p": peer_id}
                ).scalar()
                or 0
            )

    def mark_stale(self, peer_id: str) -> None:
        """The last sync failed: mirrored jobs keep their state, flagged stale until one succeeds."""
        with self.db.write() as conn:
            conn.execute(
                sql(
                    "INSERT INTO federation_sync_state (peer_id, cursor, stale) VALUES (:p, 0, 1)"
                    " ON CONFLICT(peer_id) DO UPDATE SET stale = 1"
                ),
                {"p": peer_id},
            )

    def followed_unreported(self, peer_id: str, reported: set[str]) -> list[str]:
        """Jobs handed to `peer_id` that this cluster still follows (live here, or awaiting their
        first report or their last log lines) and that a full resync did not mention."""
        with self.db.read() as conn:
            return [j for j in _followed(conn, peer_id) if j not in reported]

    def peers_with_handles(self) -> set[str]:
        with self.db.read() as conn:
            rows = conn.execute(
                sql(
                    f"SELECT DISTINCT f.peer_id FROM federated_jobs f JOIN jobs j ON j.job_id = f.job_id"
                    f" WHERE f.direction = {SENT} AND f.handoff_state IN ({PENDING_HANDOFF},{HANDED_OFF})"
                    f" AND (j.state NOT IN {TERMINAL_JOB_SQL} OR f.first_report = 0 OR j.finished_ms > :recent"
                    f" OR (f.handoff_state = {HANDED_OFF} AND f.logs_complete = 0))"
                ),
                {"recent": self.now_ms() - 60_000},
            ).all()
        return {r[0] for r in rows if r[0]}

    def log_targets(self, peer_id: str) -> list[LogTarget]:
        """The jobs on `peer_id` whose log lines may still have to be relayed. A job the peer
        reports as never started yet has printed nothing, so it costs the peer no call until it
        starts or ends (a burst waiting for room there would otherwise be asked about every sync)."""
        with self.db.read() as conn:
            rows = conn.execute(
                sql(
                    "SELECT f.job_id, f.log_cursor FROM federated_jobs f JOIN jobs j ON j.job_id = f.job_id"
                    f" WHERE f.direction = {SENT} AND f.peer_id = :p AND f.handoff_state = {HANDED_OFF}"
                    " AND f.first_report = 1 AND f.logs_complete = 0"
                    f" AND (j.started_ms IS NOT NULL OR j.state != {JOB_PENDING})"
                ),
                {"p": peer_id},
            ).all()
        return [LogTarget(r[0], r[1]) for r in rows]

    def append_relayed_logs(self, job_id: str, lines: list[pb.LogLine], cursor: int, complete: bool = False) -> None:
        """Stores relayed lines and the cursor after them in one transaction; `complete` records that
        the peer said the job is over and no line remains, which ends relay for that job."""
        with self.db.write() as conn:
            if not lines:
                conn.execute(
                    sql(f"UPDATE federated_jobs SET logs_complete = :d WHERE job_id = :j AND direction = {SENT}"),
                    {"d": int(complete), "j": job_id},
                )
                return
            rows = [(job_id, ln.task_index, ln.attempt, ln.stream, ln.ts_ms, ln.text) for ln in lines]
            rows = admit_output(conn, [(job_id, "", rows)], self.output)
            if rows:
                run_many(
                    conn,
                    "INSERT INTO logs (job_id, task_index, attempt, stream, ts_ms, text) VALUES (?, ?, ?, ?, ?, ?)",
                    rows,
                )
            conn.execute(
                sql(
                    f"UPDATE federated_jobs SET log_cursor = :c, logs_complete = :d WHERE job_id = :j AND direction = {SENT}"
                ),
                {"c": cursor, "d": int(complete), "j": job_id},
            )

    def mark_logs_complete(self, job_ids: Sequence[str]) -> None:
        """Ends relay for jobs their peer reports over with no line after their cursors, all in
        one transaction: a burst's jobs end together, and one write each took the write lock as
        many times between the submits of the next burst."""
        with self.db.write() as conn:
            run_many(
                conn,
                f"UPDATE federated_jobs SET logs_complete = 1 WHERE job_id = ? AND direction = {SENT}",
                [(j,) for j in job_ids],
            )

    def active_counts(self) -> dict[str, int]:
        with self.db.read() as conn:
            return fed.active_counts(conn)

    def start_delivery(self, job_id: str) -> bool:
        return bool(self.start_deliveries([job_id]))

    def start_deliveries(self, job_ids: Sequence[str]) -> list[str]:
        """Records that a delivery of each job is about to start, in one transaction; returns those
        that may go (a job cancelled or no longer awaiting delivery since it was read may not)."""
        return self._burst_write(lambda conn: [j for j in job_ids if fed.start_delivery(conn, j)])

    def begin_deliveries(self, job_ids: Sequence[str]) -> dict[str, pb.LaunchJobRequest]:
        """Records the start of each job's delivery and reads the requests of those that may go,
        in one transaction (a job cancelled, or no longer awaiting delivery, since it was read may
        not): the rows a request is built from are those its start was recorded against."""

        def begin(conn: Connection) -> dict[str, pb.LaunchJobRequest]:
            startable = [j for j in job_ids if fed.start_delivery(conn, j)]
            return fed.delivery_requests(conn, startable, self.cluster_name)

        return self._burst_write(begin)

    # -- withdrawal of jobs a peer cannot place (see db/withdrawal.py) ----------------------------

    def begin_withdrawal(self, job_id: str, peer_id: str, reason: str) -> bool:
        with self.db.write() as conn:
            return withdrawal.begin(conn, job_id, peer_id, reason, self.now_ms())

    def unplaced_past(self, peer_id: str, cutoff_ms: int) -> list[str]:
        with self.db.write() as conn:
            return withdrawal.unplaced_past(conn, peer_id, cutoff_ms, self.now_ms())

    def withdrawals(self) -> list[Withdrawal]:
        with self.db.read() as conn:
            return withdrawal.withdrawing(conn)

    def requeue(self, job_id: str, peer_id: str, configured: frozenset[str]) -> str:
        with self.db.write() as conn:
            return withdrawal.requeue(conn, job_id, peer_id, configured, self.now_ms())

    def abandon_peer(self, peer_id: str) -> list[str]:
        with self.db.write() as conn:
            return withdrawal.abandon(conn, peer_id, self.now_ms())

    # -- folding a sync batch ------------------------------------------------------------------

    def apply_sync(self, peer_id: str, resp: pb.FederationSyncResponse, accepted_since: Collection[str] = ()) -> None:
        """Folds one sync answer. `accepted_since` holds the jobs the peer accepted after it was
        asked (the delivery adds each before recording it); read once this transaction holds the
        write lock, it names every acceptance already recorded that the answer may predate, and no
        such job is dropped: not by the set-replacement of a full resync, nor by a tombstone of an
        earlier run of the same job."""
        now = self.now_ms()
        with self.db.write() as conn:
            fresh = set(accepted_since)
            reported = set()
            for synced in resp.jobs:
                reported.add(synced.job.job_id)
                _mirror_job(conn, peer_id, synced, now)
            dropped = list(resp.tombstones)
            if resp.cursor_stale:
                dropped += [j for j in _followed(conn, peer_id) if j not in reported]
            for job_id in dropped:
                if job_id not in fresh:
                    _drop_handle(conn, peer_id, job_id, now)
            conn.execute(
                sql(
                    "INSERT INTO federation_sync_state (peer_id, cursor, last_sync_ms, stale) VALUES (:p, :c, :now, 0)"
                    " ON CONFLICT(peer_id) DO UPDATE SET cursor = :c, last_sync_ms = :now, stale = 0"
                ),
                {"p": peer_id, "c": resp.cursor, "now": now},
            )


def _unreadable(synced: pb.SyncedJob) -> str | None:
    """Why a peer's report of one job cannot be mirrored, or None when it can."""
    job = synced.job
    if job.state not in _JOB_STATES:
        return f"job state {job.state!r} is not one this cluster knows"
    for t in synced.tasks:
        if t.job_id != job.job_id or not t.task_id.startswith(f"{job.job_id}/"):
            return f"task {t.task_id!r} is not a task of the job"
        if t.state not in _TASK_STATES:
            return f"task {t.task_id} has state {t.state!r}, which this cluster does not know"
        for a in t.attempts:
            if not a.attempt_id.startswith(f"{t.task_id}:") or a.state not in _TASK_STATES:
                return f"attempt {a.attempt_id!r} (state {a.state!r}) is not a known attempt of task {t.task_id}"
    return None


_HANDLE_SQL = (
    f"SELECT handoff_state FROM federated_jobs WHERE job_id = :j AND direction = {SENT} AND peer_id = :p"
    " AND withdraw_reason = ''"
)
# Each a job's row, written only where it differs: a peer reports a job again for a change this
# cluster does not mirror (its output's size moves with each batch of log lines), and rewriting the
# row unchanged would move the scheduler's inputs (`SCHEDULE_INPUTS`) at every sync of a chatty job.
_STOPPING_SQL = (
    "UPDATE jobs SET state = :s, started_ms = :st, pending_reason = :r, cluster = :p"
    " WHERE job_id = :j AND (state, started_ms, pending_reason, cluster) IS NOT (:s, :st, :r, :p)"
)
_MIRROR_JOB_SQL = (
    "UPDATE jobs SET state = :s, started_ms = :st, finished_ms = :fin, error = :e, pending_reason = :r,"
    " cluster = :p WHERE job_id = :j"
    " AND (state, started_ms, finished_ms, error, pending_reason, cluster) IS NOT (:s, :st, :fin, :e, :r, :p)"
)


class _MirroredRows:
    """Writes a job's mirrored rows of one table in place: a reported row that is new is inserted,
    one that differs from the stored row is updated, and a stored row the report no longer names is
    deleted (`first_only` columns keep the value first written).

    In place and only where changed: deleting a job's mirrored tasks and inserting them again sent
    the snapshot loader back to a read of every pending task after each sync of a handed-off job
    (a deleted task is a change its stamps cannot name; see `SCHEDULE_CHANGES`), and rewriting an
    unchanged row stamps its task and moves the scheduler's inputs for nothing. Not an UPSERT:
    SQLite applies an outer statement's conflict clause to the statements of the triggers it
    fires, and the stamp trigger's INSERT OR REPLACE then fails on a task stamped before."""

    def __init__(self, table: str, key: str, columns: tuple[str, ...], first_only: tuple[str, ...] = ()):
        self.key = key
        changed = [c for c in columns if c != key and c not in first_only]
        self._keys_sql = f"SELECT {key} FROM {table} WHERE job_id = :j"
        self._delete_sql = f"DELETE FROM {table} WHERE {key} = :{key}"
        self._insert_sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join(f':{c}' for c in columns)})"
        self._update_sql = (
            f"UPDATE {table} SET {', '.join(f'{c} = :{c}' for c in changed)} WHERE {key} = :{key}"
            f" AND ({', '.join(changed)}) IS NOT ({', '.join(f':{c}' for c in changed)})"
        )

    def write(self, conn, job_id: str, rows: list[dict]) -> None:
        stored = {r[0] for r in run(conn, self._keys_sql, {"j": job_id})}
        reported = {r[self.key] for r in rows}
        gone = [{self.key: k} for k in stored - reported]  # rare: a report names every row of its job
        if gone:
            run_many(conn, self._delete_sql, gone)
        known = [r for r in rows if r[self.key] in stored]
        if known:
            run_many(conn, self._update_sql, known)
        new = [r for r in rows if r[self.key] not in stored]
        if new:
            run_many(conn, self._insert_sql, new)


_MIRRORED_TASKS = _MirroredRows(
    "tasks",
    "task_id",
    tuple(
        "task_id job_id idx state attempt backend_id worker_id failure_count preemption_count exit_code started_ms"
        " finished_ms error cluster".split()
    ),
)
_MIRRORED_ATTEMPTS = _MirroredRows(
    "attempts",
    "attempt_id",
    tuple(
        "attempt_id task_id job_id idx attempt state backend_id worker_id exit_code created_ms started_ms finished_ms"
        " error cluster".split()
    ),
    first_only=("created_ms",),
)
_REARM_CANCEL_SQL = (
    "UPDATE federated_jobs SET cancel_intent_version = cancel_intent_version + 1"
    f" WHERE job_id = :j AND direction = {SENT} AND cancel_relayed_version >= cancel_intent_version"
)
_REPORTED_SQL = (
    "UPDATE federated_jobs SET first_report = 1, updated_ms = :now,"
    f" handoff_state = CASE WHEN handoff_state = {PENDING_HANDOFF} THEN {HANDED_OFF} ELSE handoff_state END"
    f" WHERE job_id = :j AND direction = {SENT}"
)


def _mirror_job(conn, peer_id: str, synced: pb.SyncedJob, now_ms: int) -> None:
    """Mirrors one reported job (its row, tasks and attempts) onto this cluster's copy.

    On the driver (`run`): a sync folds every job a burst changed, several statements each, and
    through SQLAlchemy's statement path those statements were most of the parent's sync cost."""
    job = synced.job
    problem = _unreadable(synced)
    if problem is not None:
        log.warning(
            "peer %s reported job %s in a form this cluster cannot mirror; skipped: %s", peer_id, job.job_id, problem
        )
        return
    if run(conn, _HANDLE_SQL, {"j": job.job_id, "p": peer_id}).fetchone() is None:
        return  # not a job this cluster handed to that peer, or one being withdrawn from it
    local = run(conn, "SELECT state, cancel_requested FROM jobs WHERE job_id = :j", {"j": job.job_id}).fetchone()
    peer_live = job.state not in _ENDED
    if local is not None and local[0] in _ENDED and peer_live and not local[1]:
        # A job that ended here never runs again on the same handle: a report of it live is older
        # than the one that ended it (an answer replayed, or overtaken by a later one).
        log.warning(
            "peer %s reported job %s %s after it ended here as %s; ignored", peer_id, job.job_id, job.state, local[0]
        )
        return
    keep_local_state = local is not None and local[1] and local[0] in ("KILLED",) and peer_live
    started = job.started_ms or None
    if local is not None and local[1] and peer_live and not keep_local_state:
        # Stopping, not yet confirmed by the peer: its state moves, the stopping reason stays.
        params = {"s": job.state, "st": started, "r": fed.stopping_reason(peer_id), "p": peer_id, "j": job.job_id}
        run(conn, _STOPPING_SQL, params)
    elif keep_local_state:
        # Cancelled and confirmed here, yet the peer reports the job live (a peer that answered
        # the stop before a late handoff of it arrived): the cancel is relayed once more.
        run(conn, _REARM_CANCEL_SQL, {"j": job.job_id})
    else:
        params = {
            "s": job.state,
            "st": started,
            "fin": job.finished_ms or None,
            "e": job.error,
            "r": job.pending_reason,
            "p": peer_id,
            "j": job.job_id,
        }
        run(conn, _MIRROR_JOB_SQL, params)
    tasks: list[dict] = []
    attempts: list[dict] = []
    for t in synced.tasks:
        tasks.append(
            {
                "task_id": t.task_id,
                "job_id": job.job_id,
                "idx": t.index,
                "state": t.state,
                "attempt": t.attempt,
                "backend_id": t.backend_id,
                "worker_id": t.worker_id,
                "failure_count": t.failure_count,
                "preemption_count": t.preemption_count,
                "exit_code": t.exit_code if t.has_exit_code else None,
                "started_ms": t.started_ms or None,
                "finished_ms": t.finished_ms or None,
                "error": t.error,
                "cluster": peer_id,
            }
        )
        attempts.extend(
            {
                "attempt_id": a.attempt_id,
                "task_id": t.task_id,
                "job_id": job.job_id,
                "idx": t.index,
                "attempt": a.attempt,
                "state": a.state,
                "backend_id": a.backend_id,
                "worker_id": a.worker_id,
                "exit_code": a.exit_code if a.has_exit_code else None,
                "created_ms": now_ms,
                "started_ms": a.started_ms or None,
                "finished_ms": a.finished_ms or None,
                "error": a.error,
                "cluster": peer_id,
            }
            for a in t.attempts
        )
    _MIRRORED_TASKS.write(conn, job.job_id, tasks)
    _MIRRORED_ATTEMPTS.write(conn, job.job_id, attempts)
    run(conn, _REPORTED_SQL, {"now": now_ms, "j": job.job_id})


def _followed(conn, peer_id: str) -> list[str]:
    """Handed-off jobs on `peer_id` whose mirror is not settled: live here, never reported, or with
    log lines still to relay. A settled one needs nothing more from the peer."""
    rows = conn.execute(
        sql(
            "SELECT f.job_id FROM federated_jobs f JOIN jobs j ON j.job_id = f.job_id"
            f" WHERE f.direction = {SENT} AND f.peer_id = :p AND f.handoff_state = {HANDED_OFF}"
            f" AND f.withdraw_reason = ''"
            f" AND (j.state NOT IN {TERMINAL_JOB_SQL} OR f.first_report = 0 OR f.logs_complete = 0)"
        ),
        {"p": peer_id},
    ).all()
    return [r[0] for r in rows]


def _drop_handle(conn, peer_id: str, job_id: str, now_ms: int) -> None:
    """The peer no longer holds the job: fail it here if it was still live, and drop the handle.

    Only a handed-off handle: one still awaiting delivery is a newer run the peer has not been
    given yet (delivery re-drives it), which a tombstone for the run before must not touch.
    """
    handed_off = conn.execute(
        sql(
            f"DELETE FROM federated_jobs WHERE job_id = :j AND direction = {SENT} AND peer_id = :p"
            f" AND handoff_state = {HANDED_OFF}"
        ),
        {"j": job_id, "p": peer_id},
    ).rowcount
    if not handed_off:
        return
    conn.execute(
        sql(
            f"UPDATE jobs SET state = {FAILED}, finished_ms = :now, pending_reason = '', error = :e"
            f" WHERE job_id = :j AND state NOT IN {TERMINAL_JOB_SQL}"
        ),
        {
            "now": now_ms,
            "e": f"peer {peer_id} no longer holds this job (it was deleted or replaced there); its outcome is unknown",
            "j": job_id,
        },
    )
