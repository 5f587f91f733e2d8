"""Whether the controller is doing its job: the control tick completes passes and the backends'
own threads are alive. Answers `/health` and `GetClusterInfo`, and exits a wedged controller.

A thread that died or a loop that stalled leaves the API answering while nothing is scheduled, so
health is judged from the work itself (the age of the last completed pass, whether each thread
is alive), never from the API answering. A controller that stays wedged past
`tick_stall_timeout` exits non-zero rather than living on: everything it acknowledged is in its
database, and a restarted controller re-adopts the attempts that still run.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("iris.health")
EXIT_WEDGED = 70  # EX_SOFTWARE: an internal fault, for a supervisor to restart the controller


@dataclass(frozen=True, slots=True)
class Health:
    ok: bool
    problems: tuple[str, ...]
    last_tick_age_s: float | None  # since the last completed pass; None before the first
    # Whether restarting would help: a dead or stuck thread does not recover by itself, while a full
    # disk (unhealthy too) is waited out by a live controller.
    wedged: bool = False

    def as_dict(self) -> dict:
        return {"ok": self.ok, "problems": list(self.problems), "last_tick_age_s": self.last_tick_age_s}


def assess(
    tick_alive: bool,
    last_tick_age_s: float | None,
    uptime_s: float,
    stall_timeout_s: float,
    thread_problems: tuple[str, ...] = (),
    conditions: tuple[str, ...] = (),
) -> Health:
    """Judges health from the tick's liveness, the age of its last completed pass and the
    backends' `thread_problems` (all wedging), and `conditions` the controller waits out (a full
    disk: unhealthy, not wedged)."""
    wedging = list(thread_problems)
    if not tick_alive:
        wedging.append("the control tick thread has died; nothing is being scheduled")
    age = last_tick_age_s if last_tick_age_s is not None else uptime_s
    if tick_alive and age > stall_timeout_s:
        wedging.append(f"the control tick has not completed a pass for {age:.0f}s (limit {stall_timeout_s:g}s)")
    problems = (*conditions, *wedging)
    return Health(not problems, problems, last_tick_age_s, wedged=bool(wedging))


class Watchdog:
    """Checks `probe` every `interval_s`; after it has been wedged for `grace_s`, logs why and
    ends the process with `EXIT_WEDGED` (through `exit`, which tests and embedders may replace)."""

    def __init__(
        self,
        probe: Callable[[], Health],
        grace_s: float,
        interval_s: float = 1.0,
        exit: Callable[[int], None] = os._exit,
    ):
        self.probe = probe
        self.grace_s = grace_s
        self.interval_s = interval_s
        self._exit = exit
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="watchdog", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        unhealthy_since: float | None = None
        while not self._stop.wait(self.interval_s):
            health = self.probe()
            if not health.wedged:
                unhealthy_since = None
                continue
            now = time.monotonic()
            unhealthy_since = unhealthy_since if unhealthy_since is not None else now
            if now - unhealthy_since >= self.grace_s and not self._stop.is_set():
                log.critical("controller is wedged, exiting to be restarted: %s", "; ".join(health.problems))
                for handler in logging.getLogger().handlers:
                    handler.flush()
                self._exit(EXIT_WEDGED)
                return
