"""Deletes what finished jobs leave behind once `controller.log_retention` has passed since they
ended: their log lines, whatever their backends keep for their attempts (the local backend's
attempt folders), their workdir files, and each workspace layer (a bundle's stored bytes and its
unpacked folder, a set of workdir files' folder) that no job still within retention names. A job
replaced (`--existing replace`, or a handed-off job run again under a new nonce) has its tree
deleted at once; the layers it named are recorded in `released_layers` by that same transaction and
released here in the same way once the retention has passed since the replace.

Why a thread of its own that deletes in small batches: a long job may have millions of log lines,
and deleting them in one transaction would hold the database's single write lock for seconds,
stalling the control tick and every submit. Here each transaction deletes at most `BATCH` rows and
the control tick never waits on retention. Each pass looks only at jobs that ended since the last
pass (a high-water mark on `finished_ms`), so the cost of a pass does not grow with history; the
first pass after a start catches up on everything already due.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from iris.backends.protocol import Backend
from iris.backends.staging import bundle_folder
from iris.controller.db import workspace
from iris.controller.db.attempts import release_output
from iris.controller.db.database import Database, sql

log = logging.getLogger("iris.retention")
BATCH = 5000
JOBS_PER_PASS = 500
TERMINAL = ("SUCCEEDED", "FAILED", "KILLED", "UNSCHEDULABLE")


def sweep_interval(retention_s: float) -> float:
    """How often to look for expired jobs: a quarter of the retention, between 1 s and a minute."""
    return min(60.0, max(1.0, retention_s / 4))


class LogRetention:
    def __init__(
        self,
        db: Database,
        backends: Mapping[str, Backend],
        retention_s: float,
        clock: Callable[[], float] = time.time,
        state_dir: Path | None = None,
        pins: workspace.LayerPins | None = None,
    ):
        self.db = db
        self.backends = backends
        self.retention_s = retention_s
        self.clock = clock
        self.state_dir = state_dir  # where workspace layers are unpacked (None: leave them be)
        self.pins = pins or workspace.LayerPins()
        self._mark = -1  # jobs that finished at or before this (ms) have been swept
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self.retention_s <= 0:
            return
        self._thread = threading.Thread(target=self._run, name="log-retention", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(sweep_interval(self.retention_s)):
            try:
                while self.sweep_once() == JOBS_PER_PASS and not self._stop.is_set():
                    pass
            except Exception:  # a full disk or a busy database: try again next pass
                log.exception("log retention pass failed; retrying on the next pass")

    def sweep_once(self) -> int:
        """Deletes the logs, attempt files and workspace of jobs whose retention has run out, and
        releases the layers of replaced jobs whose retention has; returns how many jobs or released
        layers it swept, whichever is more (at most JOBS_PER_PASS)."""
        cutoff = int((self.clock() - self.retention_s) * 1000)
        with self.db.read() as conn:
            jobs = conn.execute(
                sql(
                    "SELECT job_id, finished_ms FROM jobs WHERE finished_ms > :mark AND finished_ms <= :cutoff"
                    f" AND state IN {TERMINAL} ORDER BY finished_ms LIMIT :n"
                ),
                {"mark": self._mark, "cutoff": cutoff, "n": JOBS_PER_PASS},
            ).all()
        for job_id, finished_ms in jobs:
            self._delete_logs(job_id)
            self._discard_attempts(job_id)
            self._discard_workspace(job_id, cutoff)
            self._mark = max(self._mark, finished_ms)
        return max(len(jobs), self._sweep_released(cutoff))

    def _discard_workspace(self, job_id: str, cutoff_ms: int) -> None:
        """Deletes the job's workdir files, then each layer it named that nothing retained names."""
        with self.db.write() as conn:
            layers = workspace.release_job_files(conn, job_id)
        for content_id in layers:
            self._release_layer(content_id, cutoff_ms, f"expired job {job_id}")

    def _sweep_released(self, cutoff_ms: int) -> int:
        """Releases the layers that replaced jobs' deleted trees named (`released_layers`) once the
        retention has passed since their deletion. Read from the table on every pass, not after the
        high-water mark, so a record written just before a crash is released after the restart."""
        with self.db.read() as conn:
            due = workspace.released_layers_due(conn, cutoff_ms, JOBS_PER_PASS)
        for content_id, released_ms in due:
            self._release_layer(content_id, cutoff_ms, "a replaced job", released_ms)
        return len(due)

    def _release_layer(self, content_id: str, cutoff_ms: int, whose: str, released_ms: int | None = None) -> None:
        """Removes a layer unless a submit holds it or a job within retention names it. A record in
        `released_layers` (its `released_ms`) goes once decided: kept while a submit holds the layer,
        since that submit may yet fail; dropped when a retained job names it, whose own retention
        releases it in turn; else dropped only after the folder is gone, so a crash in between
        leaves it for the next pass."""
        with self.pins.removable(content_id) as free:
            if not free:
                return  # a submit is about to name it
            with self.db.write() as conn:
                in_use = workspace.layer_in_use(conn, content_id, cutoff_ms)
                if in_use and released_ms is not None:
                    workspace.forget_released(conn, content_id, released_ms)
                if not in_use:
                    workspace.forget_bundle(conn, content_id)
            if in_use:
                return
            if self.state_dir is not None:
                shutil.rmtree(bundle_folder(self.state_dir, content_id), ignore_errors=True)
            if released_ms is not None:
                with self.db.write() as conn:
                    workspace.forget_released(conn, content_id, released_ms)
            log.info("workspace layer %s of %s removed", content_id, whose)

    def _delete_logs(self, job_id: str) -> None:
        with self.db.write() as conn:
            release_output(conn, [job_id])
        while not self._stop.is_set():
            with self.db.write() as conn:
                deleted = conn.execute(
                    sql("DELETE FROM logs WHERE seq IN (SELECT seq FROM logs WHERE job_id = :j ORDER BY seq LIMIT :n)"),
                    {"j": job_id, "n": BATCH},
                ).rowcount
            if deleted < BATCH:
                return

    def _discard_attempts(self, job_id: str) -> None:
        with self.db.read() as conn:
            rows = conn.execute(
                sql("SELECT attempt_id, backend_id FROM attempts WHERE job_id = :j AND cluster IS NULL"),
                {"j": job_id},
            ).all()
        by_backend: dict[str, list[str]] = {}
        for attempt_id, backend_id in rows:
            by_backend.setdefault(backend_id, []).append(attempt_id)
        for backend_id, attempt_ids in by_backend.items():
            backend = self.backends.get(backend_id)
            if backend is not None:
                backend.discard(attempt_ids)
