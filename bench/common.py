"""Shared helpers for the end-to-end benchmarks: percentiles, process figures and the printed
table. Clusters, ports and waits come from the harness in `iris.testing` that the tests and
`iris demo` use too.

A controller started here runs `python -m iris.controller CONFIG.yaml` in its own session with its
log beside its config. `stop()` sends SIGTERM to that PID (the controller then ends its attempts),
waits, and falls back to SIGKILL; it also kills, by PID, any attempt process the controller left
behind (found through the pid files of its attempt folders, and only when the process carries that
attempt's IRIS_ATTEMPT_ID), so a bench never leaves work running.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

import psutil  # noqa: E402

from iris import testing  # noqa: E402
from iris.testing import ClusterProcess as Controller  # noqa: E402
from iris.testing import free_port, local_backend, process_group  # noqa: E402

PYTHON = sys.executable
IRIS_CLI = str(Path(sys.executable).parent / "iris")

__all__ = ["Controller", "free_port", "local_backend", "process_group"]


class BenchTimeout(RuntimeError):
    """A bounded wait ran out; the bench reports it instead of hanging."""


def wait_until(predicate: Callable[[], Any], timeout: float, interval: float = 0.01, what: str = "condition") -> Any:
    """Polls `predicate` until it returns a truthy value; BenchTimeout after `timeout` seconds."""
    return testing.wait_until(predicate, timeout, interval, what, BenchTimeout)


def pid_gone(pid: int) -> bool:
    """True when `pid` no longer exists or is a zombie (its process has ended, only its exit status is left)."""
    return not testing.pid_alive(pid)


def percentile(values: Sequence[float], p: float) -> float:
    """The p-th percentile (0..100) with linear interpolation between closest ranks; nan when empty."""
    if not values:
        return math.nan
    xs = sorted(values)
    if len(xs) == 1:
        return xs[0]
    k = (len(xs) - 1) * p / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def rss_kb(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak RSS) of a process, in KiB."""
    out = {}
    with open(f"/proc/{pid}/status") as f:  # psutil reports RSS but not its peak (VmHWM)
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0])
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far."""
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def revision() -> str:
    """The commit the measured code is at, marked `+changes` when src/ differs from it."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=5
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "src"], cwd=ROOT, capture_output=True, text=True, timeout=5
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (head or "unknown") + (" +uncommitted changes in src/" if dirty else "")


def fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        if math.isnan(value):
            return "—"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def print_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], out=None) -> None:
    out = out or sys.stdout
    cells = [[fmt(c) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths))
    print(line, file=out)
    print("  ".join("-" * w for w in widths), file=out)
    for r in cells:
        print("  ".join(c.rjust(w) if _numeric(c) else c.ljust(w) for c, w in zip(r, widths)), file=out)


def _numeric(cell: str) -> bool:
    return cell == "—" or cell.rstrip("×%").replace(",", "").replace(".", "", 1).lstrip("-").isdigit()


def dump_json(data: Any) -> None:
    def default(o: Any) -> Any:
        if isinstance(o, float) and math.isnan(o):
            return None
        return str(o)

    def clean(o: Any) -> Any:
        if isinstance(o, float) and (math.isnan(o) or math.isinf(o)):
            return None
        if isinstance(o, dict):
            return {k: clean(v) for k, v in o.items()}
        if isinstance(o, (list, tuple)):
            return [clean(v) for v in o]
        return o

    print(json.dumps(clean(data), indent=2, default=default))


def log(message: str, quiet: bool = False) -> None:
    """Progress lines go to stderr so `--json` output on stdout stays one document."""
    if not quiet:
        print(message, file=sys.stderr, flush=True)


def python_startup_ms(runs: int = 5) -> float:
    """The median wall time of a bare `python -c pass` here: the floor under any process a bench starts."""
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([PYTHON, "-c", "pass"], check=True)
        times.append((time.perf_counter() - t0) * 1000)
    return percentile(times, 50)
