"""Decides when an API call that waits for a job to change state looks at the job again.

A client waiting for its job to start or end would otherwise poll: every poll costs a request the
controller must serve beside the work it waits for, and a job that ends between two polls is seen
up to one interval late. Instead the call waits on the controller: job states change in the control
tick's passes (a submit, an exit and a cancel each wake one), so the call looks again after each
pass, and at least every `RECHECK_S` for changes that come another way (a peer's sync). Waiters are
futures on the server's event loop, woken from the tick's thread, so a waiting call holds no
thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from iris.core.errors import InvalidArgument

T = TypeVar("T")

RECHECK_S = 0.2  # the longest a waiting call goes without looking again
MAX_WAIT_MS = 60_000  # the longest one call may wait


class PassSignal:
    """Tells coroutines on any event loop that a pass of the tick has ended."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future]] = []

    def notify(self) -> None:
        """Wakes every current waiter (called from the tick's thread after each pass)."""
        with self._lock:
            waiters, self._waiters = self._waiters, []
        for loop, future in waiters:
            try:
                loop.call_soon_threadsafe(_resolve, future)
            except RuntimeError:
                pass  # that loop has closed; nothing waits there any more

    def next_pass(self) -> asyncio.Future:
        """A future resolved at the end of the next pass. Taken *before* reading the state it
        guards, so a pass that ends between the read and the wait is never missed."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        with self._lock:
            self._waiters.append((loop, future))
        return future

    def forget(self, future: asyncio.Future) -> None:
        """Drops a future that timed out before any pass resolved it."""
        with self._lock:
            self._waiters = [(lo, f) for lo, f in self._waiters if f is not future]

    def waiting(self) -> int:
        with self._lock:
            return len(self._waiters)


def _resolve(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)


async def wait_pass(signal: PassSignal, future: asyncio.Future, timeout: float) -> None:
    """Waits until `future` (from `signal.next_pass`) resolves or `timeout` seconds pass."""
    try:
        await asyncio.wait_for(future, max(0.0, timeout))
    except TimeoutError:
        signal.forget(future)


async def long_poll(tick: Any, read: Callable[[], T], settled: Callable[[T], bool], wait_ms: int) -> T:
    """`read()`'s answer once `settled` by it, or its last answer after `wait_ms` ms.

    `tick` is the control loop (its `passes` and `wait_pass`); `read` runs on a worker thread and
    again after each pass, or at least every `RECHECK_S`."""
    if wait_ms > MAX_WAIT_MS:
        raise InvalidArgument(f"wait_ms {wait_ms} is longer than a call may wait ({MAX_WAIT_MS}); wait again instead")
    if wait_ms < 0:
        raise InvalidArgument(f"wait_ms {wait_ms} is negative; give 0 (answer at once) up to {MAX_WAIT_MS}")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_ms / 1000
    while True:
        next_pass = tick.passes.next_pass()
        answer = await asyncio.to_thread(read)
        left = deadline - loop.time()
        if settled(answer) or left <= 0:
            tick.passes.forget(next_pass)
            return answer
        await tick.wait_pass(next_pass, min(left, RECHECK_S))
