"""Shared helpers for the end-to-end benchmarks: real controller processes on free loopback ports in
a throw-away directory, stopped by PID; percentiles; bounded polling; and the printed table.

A controller started here runs `python -m iris.controller CONFIG.yaml` in its own session with its
log beside its config. `stop()` sends SIGTERM to that PID (the controller then ends its attempts),
waits, and falls back to SIGKILL; it also kills, by PID, any attempt process the controller left
behind (found through the pid files of its attempt folders, and only when the process carries that
attempt's IRIS_ATTEMPT_ID), so a bench never leaves work running.
"""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

import yaml  # noqa: E402

from iris.backends.local.backend import kill_leftover_attempts  # noqa: E402
from iris.controller.process import probe  # noqa: E402
from iris.core import polling  # noqa: E402

PYTHON = sys.executable
IRIS_CLI = str(Path(sys.executable).parent / "iris")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class BenchTimeout(RuntimeError):
    """A bounded wait ran out; the bench reports it instead of hanging."""


def wait_until(predicate: Callable[[], Any], timeout: float, interval: float = 0.01, what: str = "condition") -> Any:
    """Polls `predicate` until it returns a truthy value; BenchTimeout after `timeout` seconds."""
    return polling.wait_until(predicate, timeout, interval, what, BenchTimeout)


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


def pid_gone(pid: int) -> bool:
    """True when `pid` no longer exists or is a zombie (its process has ended, only its exit status is left)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in (b"Z", b"X")


def process_group(pgid: int) -> list[int]:
    """The live processes whose process group is `pgid` (a job's whole process tree on the local backend)."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            members.append(int(entry))
    return members


def rss_kb(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak RSS) of a process, in KiB."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0])
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def local_backend(
    backend_id: str, workers: int, cpu: float, memory: str = "8G", gpu: str | None = None, gpu_count: int = 8
) -> dict:
    backend: dict[str, Any] = {
        "id": backend_id,
        "kind": "local",
        "workers": workers,
        "capacity": {"cpu": cpu, "memory": memory, "disk": "10G"},
    }
    if gpu:
        backend["devices"] = {"gpu": gpu, "count": gpu_count}
    return backend


@dataclass
class Controller:
    """One controller process on a free loopback port, with its config and state under `base`."""

    name: str
    base: Path
    backends: list[dict]
    settings: dict = field(default_factory=lambda: {"tick_interval": "1s"})
    extra: dict = field(default_factory=dict)
    port: int = 0
    proc: subprocess.Popen | None = None

    def __post_init__(self) -> None:
        self.port = self.port or free_port()
        self.dir = self.base / self.name
        self.state_dir = self.dir / "state"
        self.config_path = self.dir / "cluster.yaml"
        self.log_path = self.dir / "controller.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def write_config(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        config = {
            "name": self.name,
            "listen": f"127.0.0.1:{self.port}",
            "state_dir": str(self.state_dir),
            "backends": self.backends,
            "controller": self.settings,
            **self.extra,
        }
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))

    def start(self, timeout: float = 60.0) -> Controller:
        self.write_config()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [PYTHON, "-m", "iris.controller", str(self.config_path)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                cwd=str(ROOT),
            )
        deadline = time.monotonic() + timeout
        while not probe(self.url, timeout=0.5):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = self.log_path.read_text(errors="replace")[-2000:]
                self.stop()
                raise RuntimeError(f"controller {self.name} did not start at {self.url}:\n{tail}")
            time.sleep(0.05)
        return self

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM by PID, SIGKILL if it lingers; then any attempt process left behind, by PID."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._kill_leftover_attempts()

    def _kill_leftover_attempts(self) -> None:
        kill_leftover_attempts(self.state_dir)

    def restart(self) -> Controller:
        self.stop()
        return self.start()

    def __enter__(self) -> Controller:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


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
