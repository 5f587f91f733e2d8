"""The control tick: the one thread that changes what runs where.

Each pass: collect backend events (exits, logs) → reconcile (stop what the database says must not
run, time out overlong attempts) → load a snapshot and call the pure scheduler → apply its
decisions → start the placed attempts → commit their pids → promote queued federated jobs onto
peers with room. Every step is load → decide (pure: the scheduler, `transitions`) → apply (the
applier's guarded updates) → act (start and stop processes); a decision the rows no longer allow
(a placement whose job was cancelled after the snapshot was read) is refused and counted in
`refused`, never written over the newer state. It runs every `tick_interval` and at
once when woken (a submit, a cancel, an attempt exit), so a short job does not wait for a timer.
A wake-up that only the federation step has work for (a job queued for a peer, a peer's answer
that freed slots) runs that step alone, which a burst of handoffs wakes once per job or answer:
the rest of a pass would find nothing new, and on the parent of a burst it was half of each pass.
A whole pass still runs at least every `tick_interval`; one that finds nothing the scheduler reads
changed since its last step (the database's inputs version, the workers, no deadline or retry
backoff come due) stores events and reconciles but skips scheduling, which for a backlog of 10,000
tasks with nowhere to go cost ~170 ms of CPU a second, holding the interpreter while API calls
waited behind it.

A fault while handling one job (its stored request cannot be parsed, the scheduler raises on it,
its launch spec cannot be built or its process cannot be started) fails that job with the error
and the pass goes on: nothing one job carries may stop the placement of every other job.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sqlalchemy.exc import OperationalError

from iris.backends.protocol import AdoptRecord, Backend, LaunchError, LaunchSpec, WorkerSnapshot
from iris.controller.db import attempts as attempt_db
from iris.controller.db import handoff_stops
from iris.controller.db.attempts import NO_OUTPUT_LIMITS, OutputPolicy
from iris.controller.db.database import Database, run, savepoint, sql
from iris.controller.db.federation import prune_changelog
from iris.controller.db.literals import JOB_PENDING, LIVE_TASKS
from iris.controller.state import applier
from iris.controller.state import transitions as tr
from iris.controller.state.launch_spec import LaunchSpecs, TaskIdentitySource
from iris.controller.state.snapshot import SnapshotLoader
from iris.controller.state.waiting import PassSignal, wait_pass
from iris.core import metrics, spans
from iris.core.availability import Availability
from iris.core.bands import Band
from iris.core.config import BudgetsConfig
from iris.core.errors import DiskFull
from iris.core.names import AttemptName, JobName, TaskName
from iris.core.states import TaskState
from iris.federation.model import QueuedJob
from iris.scheduler import compute_availability, schedule, wait_for_joiners
from iris.scheduler.gating import effective_band, user_spend
from iris.scheduler.snapshot import Estimate

log = logging.getLogger("iris.tick")
MAINTENANCE_INTERVAL_S = 60.0
LIVE_ATTEMPTS = LIVE_TASKS
# An ended attempt whose end came from its backend and was stored: its exit code, or its loss (only a
# backend's report or a dead worker makes an attempt WORKER_FAILED). A stop the controller committed
# stores neither until the backend reports the exit, so such an attempt may still run.
ENDED_AND_STORED = f"(exit_code IS NOT NULL OR state = '{TaskState.WORKER_FAILED.value}')"
DIE_BEFORE_STOP_ENV = "IRIS_TEST_DIE_BEFORE_STOP"


# While a burst of submits waits behind a backlog, the loop rests this many times as long as its
# last pass took: the tick then takes at most a sixth of the process, the rest is the API's.
# Measured with 4 SDK clients submitting to 2 busy slots (bench/submit.py row a): at 1 (half the
# process) the controller spent 1.0-1.1 ms of CPU per submitted job, half of it re-ranking a backlog
# that had nowhere to go; at 3, 0.75-0.8 ms. Once passes cost less (a burst's new configs read in one
# statement), at 3 they came more often (105-110 passes for 4,000 submits, where 27-110 before) and
# spent what they saved again (0.79-0.94 ms per job); at 5 they come about as often as before
# (27-72) and the controller spends 0.69-0.80 ms per job where it spent 0.72-0.87 (4 interleaved runs).
BURST_REST_FACTOR = 5.0
# A backend's note (an attempt's process now runs) is stored by the next pass, or by a light pass
# this long after it: a short job's exit, which wakes a whole pass, mostly comes first and carries
# it, so most attempts cost no pass of their own; a longer one shows RUNNING this much later, with
# the time its process started.
NOTE_DELAY_S = 0.05
# A federation-only pass begins at least this long after the last one began. A burst of submits
# queued for peers wakes the step once per submit group: passes back to back promoted one or two
# jobs each, and every pass and every delivery call pays the same reads, transaction and peer
# round trip whatever it carries. Spaced, a pass takes what queued meanwhile and its calls carry
# it together; a lone submit to a quiet cluster finds the last pass long over and waits nothing.
FEDERATION_PASS_SPACING_S = 0.01


def rest_before_pass(
    api_calls: int, submits_since: int, backlog: int, last_cost_s: float, since_last_s: float, most_s: float
) -> float:
    """Seconds the loop waits before its next pass, once woken.

    Under a burst of submits to a busy cluster, wake-ups arrive faster than passes are useful, and
    each pass schedules the whole backlog again. While API calls are in flight, submits arrived since
    the last pass began (`submits_since`) and that pass left tasks it could not place (`backlog`),
    resting `BURST_REST_FACTOR` times as long as that pass took lets one pass take a whole batch and
    leaves the API most of the process's time however large the queue grows; never longer than
    `most_s` (the timed interval), so a slot an exit frees meanwhile waits at most that long.
    Otherwise a rest would only delay work that can start now: the refill of a slot an exit freed,
    a submit to an idle cluster, or a pass while only status calls and workers' reports come in.
    """
    if not api_calls or submits_since <= 0 or backlog <= 0:
        return 0.0
    return max(0.0, min(BURST_REST_FACTOR * last_cost_s, most_s) - since_last_s)


def _placement_view(workers: tuple[WorkerSnapshot, ...]) -> list[tuple]:
    """What the scheduler reads of the workers: all of each but its last contact, which a worker
    daemon's every report moves."""
    return [(w.worker_id, w.backend_id, w.capacity, w.attributes, w.alive, w.runtime) for w in workers]


@dataclass(frozen=True, slots=True)
class TickStats:
    duration_ms: float
    pending: int
    assigned: int
    exits: int


class ControlLoop:
    def __init__(
        self,
        db: Database,
        backends: Mapping[str, Backend],
        base_env: Mapping[str, str],
        tick_interval: float = 1.0,
        clock: Callable[[], float] = time.time,
        federation=None,
        state_dir: Path | None = None,
        task_identity: TaskIdentitySource | None = None,
        changelog_retention_s: float = 3600.0,
        budgets: BudgetsConfig | None = None,
        output: OutputPolicy = NO_OUTPUT_LIMITS,
    ):
        self.db = db
        self.output = output  # what output the database takes (see db.attempts.admit_output)
        self.changelog_retention_s = changelog_retention_s
        self._budgeted = budgets is not None and (bool(budgets.users) or budgets.default is not None)
        # A wake-up for federation alone runs its step alone, unless budgets judge queued jobs by
        # what runs here now, which only a whole pass reads.
        self._federation_alone = federation is not None and not self._budgeted
        # A wake-up that asks for no placement (the federation's, a backend's `note`) runs a light
        # pass, unless the federation step it runs needs a whole one (see above).
        self._light_alone = federation is None or self._federation_alone
        self._spend: dict[str, int] = {}
        self.backends = dict(backends)
        # The backends whose workers join while the cluster runs (pools of worker daemons).
        self._pools = tuple(b.id for b in self.backends.values() if b.describe().worker_capacity is None)
        self.tick_interval = tick_interval
        self.clock = clock
        self.federation = federation
        self.loader = SnapshotLoader(
            db,
            user_budgets=budgets.users if budgets else None,
            default_budget=budgets.default if budgets else None,
        )
        self.launch_specs = LaunchSpecs(self.loader.config, base_env, state_dir, task_identity)
        self._reasons: dict[str, str] = {}
        # job -> when it first held its reservation, as of the last pass (see `scheduler.reservations`)
        self.reserved_since: dict[str, int] = {}
        self.estimates: Mapping[str, Estimate] = {}  # job -> its expected start, as of the last pass
        self.refused: Counter[str] = Counter()  # decisions the applier refused, by kind of change
        self._next_maintenance = 0.0
        # The inputs version and workers the last completed scheduling step decided over, and when
        # the clock alone changes its answer; the tasks it left pending. A pass that finds all of
        # it unchanged skips the step (`_unchanged`).
        self._scheduled: tuple[int, list[tuple], int | None] | None = None
        self._backlog = 0
        self.schedules = 0  # scheduling steps run (a whole pass that skips its step counts none)
        self.generation = 0
        self.last_stats: TickStats | None = None
        self.storage_error: str | None = None  # set while the database cannot be written (a full disk)
        self.last_pass_ok: float | None = None  # time.monotonic() when a pass last completed
        self.plan_error: str | None = None  # why the last federation step failed (the pass went on)
        self.api_calls = 0  # API calls in flight, counted by the server around each one
        self.submits = 0  # jobs admitted since start, counted by the API (see `rest_before_pass`)
        self._wake = threading.Event()
        self._noted_at: float | None = None  # time.monotonic() by which noted events are to be stored
        # Set by every wake-up but the federation's own: the next pass must be a whole one.
        self._full = True
        self._last_full = float("-inf")  # time.monotonic() when the last whole pass began
        self._last_federation = float("-inf")  # time.monotonic() when the last federation step began
        self._at_once = False  # set by a peer's answer: the next federation step waits for no spacing
        self._in_pass = False  # a whole pass is under way (set by the loop, read by `wait_for_tick`)
        self._done = threading.Condition()
        self.passes = PassSignal()  # API calls waiting for a job's state to change look again after each pass
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # Tests of crash recovery set this to kill the controller after a stop is committed and
        # before any process is signalled: the window a real crash can hit.
        self._die_before_stop = os.environ.get(DIE_BEFORE_STOP_ENV) == "1"

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    @property
    def pools(self) -> tuple[str, ...]:
        """The backends whose workers join while the cluster runs (pools of worker daemons)."""
        return self._pools

    @property
    def queued_band_of(self) -> Callable[[QueuedJob], Band] | None:
        """What the federation step judges a queued job's band by (None: its own band)."""
        return self._queued_band if self._budgeted else None

    # -- lifecycle -----------------------------------------------------------------------------

    def recover(self) -> None:
        """Hands every attempt the database believes is live back to its backend (after a restart),
        and with them each backend's leftovers that the database holds in another state: a stop
        committed just before a crash never reached its process, which the first pass now stops."""
        leftovers = {bid: b.leftovers() for bid, b in self.backends.items()}
        columns = "attempt_id, backend_id, worker_id, pid, devices, stdout_offset, stderr_offset"
        with self.db.read() as conn:
            rows = conn.execute(
                sql(f"SELECT {columns} FROM attempts WHERE state IN {LIVE_ATTEMPTS} AND cluster IS NULL")
            ).all()
            live = {r[0] for r in rows}
            strays = sorted({a for ids in leftovers.values() for a in ids} - live)
            held: dict[str, Any] = {}  # as many as ran when the controller went: each looked up alone
            settled: set[str] = set()
            for attempt_id in strays:
                found = run(
                    conn,
                    f"SELECT {columns}, {ENDED_AND_STORED} FROM attempts WHERE attempt_id = ? AND cluster IS NULL",
                    (attempt_id,),
                )
                for r in found.fetchall():
                    if r[-1]:  # a crash came between storing its end and dropping its marker
                        settled.add(r[0])
                    else:
                        held[r[0]] = r
        by_backend: dict[str, list[AdoptRecord]] = {bid: [] for bid in self.backends}
        orphans = []
        for r in rows:
            if r[1] in self.backends:
                by_backend[r[1]].append(AdoptRecord(r[0], r[2], r[3], r[4] or "", r[5], r[6]))
            else:
                orphans.append(r[0])
        for backend_id, ids in leftovers.items():
            for attempt_id in sorted(ids & held.keys()):
                r = held[attempt_id]
                by_backend[backend_id].append(AdoptRecord(r[0], r[2] or "", r[3], r[4] or "", r[5], r[6]))
        if held:
            log.info(
                "taking back %d attempts no longer live in the database, to stop them and record their ends", len(held)
            )
        for backend_id, records in by_backend.items():
            self.backends[backend_id].adopt(records, frozenset(leftovers[backend_id] & settled))
        if orphans:
            now = self.now_ms()
            with self.db.write() as conn:
                lost = [tr.WorkerLost(a, "its backend is no longer configured") for a in orphans]
                self._count(applier.end_attempts(conn, lost, now))

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="control-tick", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def wake(self) -> None:
        self._full = True  # before the event: the pass it starts reads the flag after clearing it
        self._wake.set()

    def wake_federation(self, at_once: bool = False) -> None:
        """Wakes the loop for the federation step alone: a job queued for a peer, or a peer's
        answer that freed slots, changes nothing a local backend or the scheduler looks at.
        `at_once` (an answer): the step runs without the spacing that gathers a burst's submits,
        since slots a peer just freed stay empty until a pass fills them."""
        if at_once:
            self._at_once = True  # before the event, as `_full` is
        self._wake.set()

    def note(self) -> None:
        """Asks the loop to store backend events that free nothing (an attempt's process now runs,
        with its pid) within `NOTE_DELAY_S`: any pass stores them, else a light pass (see
        `_light_pass`) that schedules nothing."""
        if self._noted_at is None:
            self._noted_at = time.monotonic() + NOTE_DELAY_S

    def submitted(self) -> None:
        """Wakes the loop for a job just admitted (a burst of these is what it may rest for)."""
        self.submits += 1
        self.wake()

    def alive(self) -> bool:
        """False once the loop's thread has died (it is started and not stopped)."""
        return self._thread is None or self._thread.is_alive() or self._stop.is_set()

    def last_pass_age(self) -> float | None:
        """Seconds since a pass last completed without error; None before the first."""
        return None if self.last_pass_ok is None else time.monotonic() - self.last_pass_ok

    async def wait_pass(self, future, timeout: float) -> None:
        """Waits until the pass `future` (from `passes.next_pass()`) stands for has ended, or
        `timeout` seconds. Meanwhile the waiting API call is not counted as one in flight: it waits
        for the tick instead of competing with it, so the tick has no reason to rest for it."""
        self.api_calls -= 1
        try:
            await wait_pass(self.passes, future, timeout)
        finally:
            self.api_calls += 1

    def wait_for_tick(self, timeout: float = 5.0) -> bool:
        """Wakes the loop and waits until a whole pass has run after this call."""
        with self._done:
            # A whole pass under way read the database before this call: the one after it counts.
            pending = self._wake.is_set() or self._in_pass
            target = self.generation + 2 if pending else self.generation + 1
            self.wake()
            return self._done.wait_for(lambda: self.generation >= target, timeout)

    def _run(self) -> None:
        last_end, last_cost, submits_seen = 0.0, 0.0, 0
        while not self._stop.is_set():
            wait = self.tick_interval
            noted = self._noted_at
            if noted is not None:
                wait = min(wait, max(0.0, noted - time.monotonic()))
            self._wake.wait(wait)  # a note come due runs a light pass: the flag for a whole one is unset
            stats = self.last_stats
            backlog = stats.pending - stats.assigned if stats is not None else 0
            since = time.monotonic() - last_end
            arrived = self.submits - submits_seen
            gap = rest_before_pass(self.api_calls, arrived, backlog, last_cost, since, self.tick_interval)
            submits_seen = self.submits
            if gap > 0:
                self._stop.wait(gap)
            elif not self._full and self._federation_alone and not self._at_once:
                spacing = self._last_federation + FEDERATION_PASS_SPACING_S - time.monotonic()
                if spacing > 0:
                    self._stop.wait(spacing)
            self._wake.clear()
            self._at_once = False
            # Taken only when set: a wake-up setting it between this read and a reset would be lost.
            full = self._full
            if full:
                self._full = False
            if self._stop.is_set():
                break
            started = time.monotonic()
            if not full and self._light_alone and started - self._last_full < self.tick_interval:
                self._light_pass()
                continue
            self._last_full = started
            self._in_pass = True  # before the pass reads anything (see `wait_for_tick`)
            try:
                self.last_stats = self.tick_once()
                self.last_pass_ok = time.monotonic()
                if self.storage_error is not None:
                    log.warning("the controller can write to its database again")
                    self.storage_error = None
            except DiskFull as exc:
                self.last_pass_ok = time.monotonic()  # the loop is alive; it waits for space, not wedged
                if self.storage_error is None:
                    log.error("%s; attempt exits and output are kept and stored once space is freed", exc.message)
                self.storage_error = exc.message
            except Exception:
                log.exception("control tick failed; retrying on the next pass")
            last_end = time.monotonic()
            last_cost = last_end - started
            with self._done:
                self.generation += 1
                self._in_pass = False
                self._done.notify_all()
            self.passes.notify()

    # -- one pass ------------------------------------------------------------------------------

    def tick_once(self) -> TickStats:
        t0 = time.perf_counter()
        with spans.span("tick"):
            return self._pass(t0)

    def _pass(self, t0: float) -> TickStats:
        self._maintain()
        with spans.span("tick.events"), metrics.timed(metrics.TICK_SECONDS, "events"):
            exits = self._collect_events()
        with spans.span("tick.reconcile"), metrics.timed(metrics.TICK_SECONDS, "reconcile"):
            self._reconcile()
        with spans.span("tick.schedule"), metrics.timed(metrics.TICK_SECONDS, "schedule"):
            pending, assigned = self._schedule_and_start(stored_exits=exits > 0)
        if self.federation is not None:
            self._plan()
        return TickStats((time.perf_counter() - t0) * 1000, pending, assigned, exits)

    def _light_pass(self) -> None:
        """A pass for a wake-up that asks for no placement (a whole pass still runs at least every
        `tick_interval`): stores what the backends report (an attempt's process now runs) and runs
        the federation step. Not counted in `generation`, which counts whole passes for
        `wait_for_tick`, nor in `last_pass_ok`, which says the whole passes run."""
        with spans.span("tick.light"), metrics.timed(metrics.TICK_SECONDS, "light"):
            try:
                with spans.span("tick.light.events"):
                    self._collect_events()
            except Exception:  # kept by the backends: the next pass stores them
                log.exception("storing backend events failed; retrying on the next pass")
            if self.federation is not None:
                self._plan()
        self.passes.notify()

    def _plan(self) -> None:
        """The federation step: promotes queued jobs onto peers; a failure is kept in
        `plan_error` for health and the pass goes on."""
        assert self.federation is not None
        self._last_federation = time.monotonic()
        try:
            with spans.span("tick.federation"), metrics.timed(metrics.TICK_SECONDS, "federation"):
                self.federation.plan(self.queued_band_of)
            self.plan_error = None
        except Exception as exc:  # handoffs wait for the next pass; local placement (done) goes on
            log.exception("promoting queued jobs onto peers failed; retrying on the next pass")
            self.plan_error = f"promoting queued jobs onto peers fails: {type(exc).__name__}: {exc}"

    def _queued_band(self, job: QueuedJob) -> Band:
        """The band a job queued for a peer competes in: batch while its owner is over budget."""
        user = JobName.parse(job.job_id).user
        return effective_band(job.band, user, self._spend, self.loader.user_budgets, self.loader.default_budget)

    def _count(self, report: applier.Report) -> applier.Report:
        """Counts the refusals of one apply (each was logged at debug by the applier)."""
        self.refused.update(r.change for r in report.refused)
        return report

    def _maintain(self) -> None:
        """Housekeeping that needs no precision: drops federation changelog entries older than
        their retention, and handoff stops past theirs, checking a quarter as often as the
        changelog's retention (at most once a minute)."""
        now = time.monotonic()
        if now < self._next_maintenance:
            return
        self._next_maintenance = now + min(MAINTENANCE_INTERVAL_S, max(1.0, self.changelog_retention_s / 4))
        with self.db.write() as conn:
            prune_changelog(conn, self.now_ms() - int(self.changelog_retention_s * 1000))
            handoff_stops.prune(conn, self.now_ms())

    def _collect_events(self) -> int:
        """Commits what the backends report, then acknowledges it. When the commit fails (a full
        disk) the backends keep the events and offer them again next pass: nothing is lost, and
        `storage_error` says why the cluster makes no progress until a write succeeds again."""
        self._noted_at = None  # before the polls: a note after this comes with an event they may miss
        polled = [(b, b.poll()) for b in self.backends.values()]
        if not any(e.exits or e.logs or e.started or e.waiting or e.spawned for _, e in polled):
            return 0
        now = self.now_ms()
        jobs: list[str] = []
        with self.db.write() as conn:
            for _, e in polled:
                attempt_db.store_logs(conn, e.logs, self.output)
                jobs += [j for r in e.spawned if (j := attempt_db.mark_spawned(conn, r.attempt_id, r.pid, r.at_ms))]
                jobs += [j for a in e.started if (j := attempt_db.mark_running(conn, a, now))]
                attempt_db.store_waiting(conn, e.waiting)
                for ex in e.exits:
                    try:
                        with savepoint(conn):
                            report = self._count(applier.end_attempt(conn, tr.exited(ex), now))
                    except Exception as exc:  # one attempt's bad row fails its own job only
                        if isinstance(exc, OperationalError):
                            raise  # the database itself refuses: the whole pass retries
                        self.loader.poisoned[AttemptName.parse(ex.attempt_id).job_id] = (
                            f"its exit cannot be recorded ({exc})"
                        )
                        continue
                    jobs += report.jobs
            self._count(applier.roll_up(conn, jobs, now))
        for backend, e in polled:
            backend.ack(e)
        exits = sum(len(e.exits) for _, e in polled)
        if jobs or any(e.logs for _, e in polled):
            self.passes.notify()  # a waiting client learns of an end or a line now, not after the whole pass
        return exits

    def _reconcile(self) -> None:
        """Stops attempts that must not run, and ends attempts past their timeout or lost."""
        held = {bid: b.running() for bid, b in self.backends.items()}
        with self.db.read() as conn:
            live = run(
                conn,
                "SELECT a.attempt_id, a.backend_id, a.started_ms, c.timeout_s, a.state FROM attempts a"
                " JOIN job_config c ON c.job_id = a.job_id"
                f" WHERE a.state IN {LIVE_ATTEMPTS} AND a.cluster IS NULL",
            ).fetchall()
        live_ids = {r[0] for r in live}
        self._stop_attempts([(b, a) for b, attempt_ids in held.items() for a in attempt_ids - live_ids])
        now = self.now_ms()
        timed_out, lost = [], []
        for attempt_id, backend_id, started_ms, timeout_s, state in live:
            try:
                if state != TaskState.ASSIGNED.value and attempt_id not in held.get(backend_id, frozenset()):
                    lost.append(attempt_id)
                elif timeout_s and started_ms and now - started_ms > timeout_s * 1000:
                    timed_out.append((attempt_id, backend_id, timeout_s))
            except Exception as exc:  # a poison timeout fails its own job, not the pass
                self.loader.poisoned[AttemptName.parse(attempt_id).job_id] = (
                    f"its timeout {timeout_s!r} is not usable ({exc})"
                )
        if not (timed_out or lost):
            return
        events: list[tr.AttemptEvent] = [
            tr.AttemptExited(a, TaskState.FAILED, f"timed out after {t:g}s") for a, _, t in timed_out
        ]
        events += [tr.WorkerLost(a, "its backend lost the attempt") for a in lost]
        with self.db.write() as conn:
            self._count(applier.end_attempts(conn, events, now))
        self._stop_attempts([(backend_id, attempt_id) for attempt_id, backend_id, _ in timed_out])

    def _stop_attempts(self, attempts: list[tuple[str, str]]) -> None:
        """Signals each (backend, attempt) whose end is already committed to stop."""
        if attempts and self._die_before_stop:
            os.kill(os.getpid(), signal.SIGKILL)  # a crash between the commit and the signal, for tests
        for backend_id, attempt_id in attempts:
            self.backends[backend_id].stop(attempt_id)

    def _unchanged(self, now: int, workers: tuple[WorkerSnapshot, ...]) -> bool:
        """True when scheduling now would decide what the last scheduling step decided: no row it
        reads has changed since (the inputs version), nor a worker, no deadline or retry backoff
        has come due, and no job waits to be failed."""
        if self._scheduled is None or self.loader.poisoned:
            return False
        version, view, due = self._scheduled
        if (due is not None and now >= due) or view != _placement_view(workers):
            return False
        return self.loader.inputs_version() == version

    def _schedule_and_start(self, stored_exits: bool = False) -> tuple[int, int]:
        """Schedules and starts what can run. `stored_exits`: this pass stored an attempt's exit,
        which moved the inputs version, so the step runs without reading it first."""
        now = self.now_ms()
        workers = tuple(w for b in self.backends.values() for w in b.workers())
        if not stored_exits and self._unchanged(now, workers):
            spans.add("tick.schedule.unchanged", 0.0, 0.0)
            return self._backlog, 0
        self._scheduled = None  # until this step completes: a step that raises is retried whole
        self.schedules += 1
        with spans.span("tick.schedule.load"):
            loaded = self.loader.load_versioned(now, workers)
        pending, started = self._decide_and_start(loaded.snapshot, now)
        self._scheduled = (loaded.version, _placement_view(workers), loaded.due_ms)
        self._backlog = pending - started
        return pending, started

    def _decide_and_start(self, snapshot, now: int) -> tuple[int, int]:
        """Schedules `snapshot`, commits the decisions and starts the placed attempts."""
        if self._budgeted:  # what queued federated jobs are judged by in this pass's federation step
            self._spend = user_spend(snapshot.running, snapshot.peer_spend)
        backing_off = self.loader.backing_off
        self._fail_poisoned(now)
        if not snapshot.pending:
            self.estimates = {}
            if backing_off:
                with self.db.write() as conn:
                    self._store_reasons(conn, backing_off)
            return 0, 0
        if self.reserved_since:
            snapshot = replace(snapshot, reserved_since=self.reserved_since)
        with spans.span("tick.schedule.kernel"):
            result = self._schedule_isolated(snapshot, now)
        # Carried to the next pass: a reservation's "since" is when its job first held one.
        self.reserved_since = {r.job_id: r.since_ms for r in result.reservations}
        # Replaced whole, read by API threads: what job status and listings say of expected starts.
        self.estimates = result.estimates
        result = wait_for_joiners(result, snapshot, now, self._pools)
        launches: list[tuple[Backend, LaunchSpec]] = []
        if result.assignments or result.preemptions or result.unschedulable or result.pending_reasons or backing_off:
            with spans.span("tick.schedule.commit"):
                launches, victims = self._commit_decisions(result, now, backing_off)
            self._stop_attempts(victims)
        with spans.span("tick.schedule.start"):
            self._start(launches)
        return len(snapshot.pending), len(launches)

    def _schedule_isolated(self, snapshot, now: int):
        """The scheduler's result; when it raises, the jobs it raises on alone are failed and the
        pass is scheduled again without them (only a fault pays for the search)."""
        try:
            return schedule(snapshot)
        except Exception:
            log.exception("the scheduler raised; looking for the jobs that cause it")
        bad: dict[str, str] = {}
        for job_id in dict.fromkeys(t.job_id for t in snapshot.pending):
            try:
                schedule(replace(snapshot, pending=tuple(t for t in snapshot.pending if t.job_id == job_id)))
            except Exception as exc:
                bad[job_id] = f"the scheduler cannot handle it ({type(exc).__name__}: {exc})"
        if not bad:
            raise RuntimeError("the scheduler raises on this snapshot but on no single job of it")
        self.loader.poisoned.update(bad)
        self._fail_poisoned(now)
        return schedule(replace(snapshot, pending=tuple(t for t in snapshot.pending if t.job_id not in bad)))

    def _fail_poisoned(self, now: int) -> None:
        """Fails the jobs the loader (or the scheduler) could not handle, each with its reason."""
        if not self.loader.poisoned:
            return
        poisoned, self.loader.poisoned = self.loader.poisoned, {}
        for job_id, reason in poisoned.items():
            log.error("failing job %s: %s", job_id, reason)
        with self.db.write() as conn:
            errors = {j: f"the controller cannot run this job: {r}" for j, r in poisoned.items()}
            self._count(applier.fail_jobs(conn, errors, now))

    def availability(self) -> dict[str, Availability]:
        """Each backend's availability block, from the placed work committed now.

        Computed when asked (peers ask once a heartbeat), not on every pass of the tick.
        """
        workers = tuple(w for b in self.backends.values() for w in b.workers())
        blocks = compute_availability(workers, self.loader.load_running(), self.now_ms())
        for backend_id, backend in self.backends.items():
            # A backend shared with work Iris did not place (a Slurm partition) says what that
            # work holds, so free counts only what could start now.
            outside = getattr(backend, "held_outside", None)
            block = blocks.get(backend_id)
            if outside is None or block is None:
                continue
            held = outside()
            if held:
                amounts = {k: max(0.0, v - held.get(k, 0.0)) for k, v in block.amounts.items()}
                blocks[backend_id] = replace(block, amounts=amounts)
        return blocks

    def _store_reasons(self, conn, reasons: dict[str, str]) -> None:
        """Writes the pending reasons that changed since the last pass (an unchanged one costs no write)."""
        changed = [{"r": r, "j": j} for j, r in reasons.items() if self._reasons.get(j) != r]
        if changed:
            conn.execute(
                sql(f"UPDATE jobs SET pending_reason = :r WHERE job_id = :j AND state = {JOB_PENDING}"),
                changed,
            )
        self._reasons = dict(reasons)

    def _commit_decisions(
        self, result, now: int, backing_off: dict[str, str]
    ) -> tuple[list[tuple[Backend, LaunchSpec]], list[tuple[str, str]]]:
        """Commits one scheduling result; returns the attempts to start and the victims to stop."""
        launches: list[tuple[Backend, LaunchSpec]] = []
        with self.db.write() as conn:
            report, victims = applier.commit_schedule(conn, result, now)
            broken: dict[str, str] = {}
            for a in result.assignments:
                job_id = TaskName.parse(a.task_id).job_id
                if job_id in broken:
                    continue
                try:
                    # A savepoint per placement: a job whose launch spec cannot be built (say, its
                    # workspace cannot be unpacked) loses only its own writes.
                    with savepoint(conn):
                        step = applier.place(conn, tr.Placement(a.task_id, a.backend_id, a.worker_id), now)
                        report.refused += step.refused
                        if not step.placed:
                            continue
                        p = step.placed[0]
                        spec = self.launch_specs.build(conn, AttemptName.parse(p.attempt_id), p.worker_id, p.backend_id)
                except Exception as exc:
                    log.exception("cannot prepare %s for launch", a.task_id)
                    broken[job_id] = f"the controller cannot run this job: it could not be prepared ({exc})"
                    continue
                # Not rolled up here: a placed task counts as pending, as it was, so its job's
                # state is unchanged until the start below (which rolls it up) or a failure.
                launches.append((self.backends[a.backend_id], spec))
            if broken:
                launches = [(b, spec) for b, spec in launches if spec.job_id not in broken]
                report.merge(applier.fail_jobs(conn, broken, now))
            report.merge(applier.roll_up(conn, report.jobs, now))
            self._count(report)
            self._store_reasons(conn, {**result.pending_reasons, **backing_off})
        return launches, victims

    def _start(self, launches: list[tuple[Backend, LaunchSpec]]) -> None:
        if not launches:
            return
        started, failed = [], []
        for backend, spec in launches:
            try:
                with spans.span("tick.schedule.start.spawn"):
                    started.append(backend.start(spec))
            except LaunchError as exc:
                failed.append((spec, exc))
            except (ValueError, TypeError, UnicodeError) as exc:  # the request itself cannot be run
                log.exception("backend %s cannot start %s", backend.id, spec.attempt_id)
                failed.append((spec, LaunchError(f"the job's command or environment cannot be started: {exc}")))
            except Exception as exc:  # a backend fault must not leave the attempt ASSIGNED forever
                log.exception("backend %s failed to start %s", backend.id, spec.attempt_id)
                failed.append((spec, LaunchError(f"backend {backend.id} failed to start it: {exc}", retryable=True)))
        # A start whose pid comes later as an event (see `BackendEvents.spawned`) has nothing to
        # record yet unless devices were given it; with no failure either, the pass writes nothing.
        started = [s for s in started if s.running or s.pid or s.devices]
        if not (started or failed):
            return
        now = self.now_ms()
        with self.db.write() as conn:
            jobs = [attempt_db.mark_started(conn, s.attempt_id, s.pid, s.devices, now, s.running) for s in started]
            report = applier.Report()
            for spec, error in failed:
                attempt_db.add_system_log(conn, spec.job_id, spec.task_index, spec.attempt, str(error), now)
                outcome = TaskState.WORKER_FAILED if error.retryable else TaskState.FAILED
                if error.unschedulable:
                    outcome = TaskState.UNSCHEDULABLE
                report.merge(applier.end_attempt(conn, tr.AttemptExited(spec.attempt_id, outcome, str(error)), now))
            report.merge(applier.roll_up(conn, [j for j in jobs if j] + report.jobs, now))
            self._count(report)
        self.passes.notify()
