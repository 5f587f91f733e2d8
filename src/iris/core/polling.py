"""Waiting for a condition with a deadline: the one polling loop the demo, the benchmarks and the
tests share, so none of them sleeps a fixed time and hopes."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_until(
    predicate: Callable[[], Any],
    timeout: float = 20.0,
    interval: float = 0.02,
    what: str = "condition",
    error: type[Exception] = TimeoutError,
) -> Any:
    """Polls `predicate` until it returns a truthy value (returned); raises `error` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise error(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)
