"""Decides nothing: adds up where a process spends its time, per named stage, when asked to.

With `IRIS_SPANS=<file>` in a controller's environment, every `span(name)` block adds its wall
time and the CPU time of its own thread to a per-name total, and the totals are written to that
file as JSON when the process exits. Without it a span costs one global lookup and one branch,
so the stages of the submit path stay instrumented in production code. Stages nest: a span's
time includes that of the spans inside it, and `bench/submit.py` prints them as a tree.

Spans, not a sampling profiler, because the question is "how much of one submitted job's CPU is
decoding, validation, insert, tick, process start, exit and logs" on a live multi-threaded
controller, and cProfile sees only the thread it was started in and slows the hot path severalfold.
"""

from __future__ import annotations

import atexit
import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

_PATH = os.environ.get("IRIS_SPANS", "")
_totals: dict[str, list[float]] = {}  # name -> [count, wall seconds, cpu seconds]
_lock = threading.Lock()


def enabled() -> bool:
    return bool(_PATH)


@contextmanager
def span(name: str) -> Iterator[None]:
    """Counts the block's wall and thread CPU time under `name` (nothing when spans are off)."""
    if not _PATH:
        yield
        return
    wall, cpu = time.perf_counter(), time.thread_time()
    try:
        yield
    finally:
        add(name, time.perf_counter() - wall, time.thread_time() - cpu)


def add(name: str, wall_s: float, cpu_s: float, count: int = 1) -> None:
    """Adds a measurement taken elsewhere (say, across an `await`) to `name`'s totals."""
    if not _PATH:
        return
    with _lock:
        entry = _totals.setdefault(name, [0, 0.0, 0.0])
        entry[0] += count
        entry[1] += wall_s
        entry[2] += cpu_s


def mark() -> tuple[float, float]:
    """Now, as (wall, thread CPU), for `add_since` where a block does not fit a `with`."""
    return (time.perf_counter(), time.thread_time()) if _PATH else (0.0, 0.0)


def add_since(name: str, start: tuple[float, float]) -> None:
    """Counts the time since `mark()` under `name`."""
    if _PATH:
        add(name, time.perf_counter() - start[0], time.thread_time() - start[1])


def totals() -> dict[str, dict[str, float]]:
    with _lock:
        return {name: {"count": c, "wall_s": w, "cpu_s": p} for name, (c, w, p) in sorted(_totals.items())}


def _write() -> None:
    if _PATH:
        tmp = f"{_PATH}.tmp"
        with open(tmp, "w") as f:
            json.dump(totals(), f, indent=1)
        os.replace(tmp, _PATH)


atexit.register(_write)
