"""Decides whether a user may submit a job now: a token bucket per principal, refilled at
`controller.submit_rate` tasks a second up to `controller.submit_burst`.

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
forgotten (cachetools' `TLRUCache`, each bucket at the time it would be full), so memory follows the users submitting now, not all users.

A job counts one per task (its replicas), not one per job: what a submit costs the controller is
its tasks (each a row to insert, schedule and report), and a count per job let one user submit
jobs of 100,000 replicas within the rate, each holding the database for seconds, so that other
users' submits took over 20 s (measured on a loaded 2-core host). A job of more tasks than the
burst is taken once the bucket is full and leaves it in debt, so a user's tasks still arrive at
`submit_rate` a second on average. A submit that is refused after it was counted (bad input, a
name already taken, a workspace to resend) gives its count back: a typo costs nothing.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

from cachetools import TLRUCache

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
        rate = per_second if per_second > 0 else 1.0

        def full_again(_principal: str, bucket: tuple[float, float], _now: float) -> float:
            tokens, then = bucket
            return then + (self.burst - tokens) / rate

        # principal → (tokens left, when counted)
        self._buckets: TLRUCache[str, tuple[float, float]] = TLRUCache(MAX_TRACKED, ttu=full_again, timer=clock)
        self._lock = threading.Lock()

    def _exempt(self, identity: Identity) -> bool:
        return self.per_second <= 0 or identity.local_admin or identity.role is Role.ADMIN

    def _tokens(self, principal: str, now: float) -> float:
        tokens, then = self._buckets.get(principal, (float(self.burst), now))
        return min(float(self.burst), tokens + (now - then) * self.per_second)

    def take(self, identity: Identity, tasks: int = 1) -> None:
        """Counts a submit of `tasks` tasks by `identity`; raises SubmitRateExceeded past its rate."""
        if self._exempt(identity):
            return
        self.spend(
            identity.principal,
            tasks,
            lambda wait_s: (
                f"{identity.principal} is submitting faster than this cluster takes from one user"
                f" ({self.per_second:g} tasks a second after a burst of {self.burst}; a job counts one"
                f" per replica); try again in {wait_s:.1f}s (the SDK and iris job run wait and retry"
                " by themselves)"
            ),
        )

    def spend(self, key: str, cost: int, refusal: Callable[[float], str]) -> None:
        """Counts `cost` against the bucket of `key`; past its rate raises SubmitRateExceeded with
        the message `refusal(seconds to wait)`. The buckets of other uses (a worker token's
        registrations) are kept the same way, keyed by what they limit."""
        if self.per_second <= 0:
            return
        cost = max(1, cost)
        need = float(min(cost, self.burst))  # a job larger than the burst waits for a full bucket
        now = self.clock()
        with self._lock:
            tokens = self._tokens(key, now)
            if tokens < need:
                wait_s = (need - tokens) / self.per_second
                self._buckets[key] = (tokens, now)
                raise SubmitRateExceeded(refusal(wait_s), retry_after_s=max(1, math.ceil(wait_s)))
            self._buckets[key] = (tokens - cost, now)

    def give_back(self, identity: Identity, tasks: int = 1) -> None:
        """Returns what `take` counted for a submit that created nothing."""
        if self._exempt(identity):
            return
        now = self.clock()
        with self._lock:
            tokens = self._tokens(identity.principal, now)
            self._buckets[identity.principal] = (min(float(self.burst), tokens + max(1, tasks)), now)
