"""Decides whether a user may submit a job now: a token bucket per principal, refilled at
`controller.submit_rate` jobs a second up to `controller.submit_burst`.

One user submitting at full speed (hundreds of jobs a second from a few connections) slowed every
other user's submits tenfold and grew the database by the same rate; the API answered in turn, so
nobody was refused, but one user set everybody's pace. A bucket per principal (a user and the
tasks of that user's jobs share one) lets each user submit a burst at once and then at a steady
rate, independent of others. A submit past it is refused as `resource_exhausted` with a
`retry-after` header, which the SDK waits for and then sends the job again, so a script's loop of
submits slows down instead of failing.

Admins (a token of role admin, or local_admin on the controller's host) are not limited: they are
the operator. Federation handoffs are not either: a peer's pace is set by
`max_federation_handoffs_per_cycle` on the parent. A bucket that would be full again is
forgotten (cachetools' `TTLCache`), so memory follows the users submitting now, not all users.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

from cachetools import TTLCache

from iris.controller.auth import Identity, Role
from iris.core.errors import IrisError

MAX_TRACKED = 100_000  # principals remembered at once; one past it forgets the oldest bucket


class SubmitRateExceeded(IrisError):
    """A user submits faster than their rate; `retry_after_s` says when the next submit is taken
    (answered as a `retry-after` header)."""

    code = "resource_exhausted"

    def __init__(self, message: str, retry_after_s: int):
        super().__init__(message)
        self.retry_after_s = retry_after_s


class SubmitRate:
    """Per-principal token buckets of `burst` submits refilled at `per_second` (0: no limit)."""

    def __init__(self, per_second: float, burst: int, clock: Callable[[], float] = time.monotonic):
        self.per_second = per_second
        self.burst = max(1, burst)
        self.clock = clock
        refill_s = self.burst / per_second if per_second > 0 else 1.0
        # principal → (tokens left, when counted)
        self._buckets: TTLCache[str, tuple[float, float]] = TTLCache(MAX_TRACKED, ttl=refill_s, timer=clock)
        self._lock = threading.Lock()

    def take(self, identity: Identity) -> None:
        """Counts one submit of `identity`; raises SubmitRateExceeded past its rate."""
        if self.per_second <= 0 or identity.local_admin or identity.role is Role.ADMIN:
            return
        now = self.clock()
        with self._lock:
            tokens, then = self._buckets.get(identity.principal, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - then) * self.per_second)
            if tokens < 1.0:
                wait_s = (1.0 - tokens) / self.per_second
                self._buckets[identity.principal] = (tokens, now)
                raise SubmitRateExceeded(
                    f"{identity.principal} is submitting faster than this cluster takes from one user"
                    f" ({self.per_second:g} jobs a second after a burst of {self.burst}); try again in"
                    f" {wait_s:.1f}s (the SDK and iris job run wait and retry by themselves)",
                    retry_after_s=max(1, math.ceil(wait_s)),
                )
            self._buckets[identity.principal] = (tokens - 1.0, now)
