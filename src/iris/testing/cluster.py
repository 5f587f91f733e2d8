"""A controller process on a free loopback port, started from a config it writes, stopped by PID.

`ClusterProcess` runs `python -m iris.controller CONFIG.yaml` in its own session, its folder laid
out as `<base>/<name>/{cluster.yaml, state/, controller.log}`. Its fields are the config: `rewrite`
changes them and the file together, so a restart always runs what the fields say. `stop` is a
SIGTERM (the controller ends its attempts), then SIGKILL if it lingers, then the attempts a killed
controller left behind (by the pids in their folders, checked to be attempts first). `ClusterSet`
remembers every cluster it made and stops them all together at teardown, even when a test fails.
"""

from __future__ import annotations

import fcntl
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import yaml

from iris.backends.local.attempts_root import remove_attempts_root
from iris.backends.local.backend import kill_leftover_attempts
from iris.controller.process import probe
from iris.controller.tls import self_tls
from iris.core.config import parse_config
from iris.core.polling import wait_until
from iris.testing import forkserver
from iris.testing.processes import pid_alive

START_TIMEOUT_S = 60.0
PORT_FLOOR = 20000
PORT_CLAIMS = Path(tempfile.gettempdir()) / "iris-test-ports"
CLAIMS_HELD = 256
_claims: dict[int, IO[str]] = {}
_CLAIMS_LOCK = threading.Lock()
_RANDOM = random.SystemRandom()
STOP_TIMEOUT_S = 20.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now.

    It is drawn below the kernel's ephemeral range: a port the kernel hands to `bind(0)` (a test's
    in-process server, an outgoing connection) can then never be the one a controller is about to
    take, which would leave a test talking to some other server on "its" controller's port. And it
    is claimed among every process on this host that draws ports here (see `_claim`): a controller
    stopped for a restart leaves its port free, and a test running beside it must not draw it.
    """
    low = _ephemeral_low()
    for _ in range(100):
        port = _RANDOM.randrange(PORT_FLOOR, low) if low - PORT_FLOOR >= 1000 else 0
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            port = s.getsockname()[1]
        if port and _claim(port):
            return port
    raise RuntimeError("no free loopback port found below the ephemeral range")


def _claim(port: int) -> bool:
    """Takes a lock on `port` under `PORT_CLAIMS`, held while this process lives (its last
    `CLAIMS_HELD` claims, so the open files stay bounded); False when another process holds it."""
    try:
        PORT_CLAIMS.mkdir(mode=0o777, exist_ok=True)
        claim = open(PORT_CLAIMS / str(port), "a")
    except OSError:
        return True  # no shared folder: the bind check alone decides
    try:
        fcntl.flock(claim, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        claim.close()
        return False
    with _CLAIMS_LOCK:
        _claims[port] = claim
        while len(_claims) > CLAIMS_HELD:
            _claims.pop(next(iter(_claims))).close()
    return True


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def local_backend(
    backend_id: str = "cpu",
    workers: int = 1,
    cpu: float = 4,
    memory: str = "8G",
    disk: str = "10G",
    gpu: str | None = None,
    gpu_count: int = 8,
) -> dict[str, Any]:
    """A `kind: local` entry for `backends:`; with `gpu`, its hosts advertise `gpu_count` of them."""
    backend: dict[str, Any] = {
        "id": backend_id,
        "kind": "local",
        "workers": workers,
        "capacity": {"cpu": cpu, "memory": memory, "disk": disk},
    }
    if gpu:
        backend["devices"] = {"gpu": gpu, "count": gpu_count}
    return backend


@dataclass
class ClusterProcess:
    """One controller process and its folder."""

    name: str
    base: Path
    backends: list[dict] = field(default_factory=lambda: [local_backend(workers=2)])
    settings: dict = field(default_factory=lambda: {"tick_interval": "1s"})  # the `controller:` block
    extra: dict = field(default_factory=dict)  # other top-level keys: peers, auth, defaults, …
    port: int = 0
    env: Mapping[str, str] | None = None  # the controller's environment (default: this process's)
    proc: subprocess.Popen | forkserver.ForkedProcess | None = None

    def __post_init__(self) -> None:
        self.port = self.port or free_port()
        self.dir = self.base / self.name
        self.state_dir = self.dir / "state"
        self.config_path = self.dir / "cluster.yaml"
        self.log_path = self.dir / "controller.log"

    @property
    def url(self) -> str:
        return f"{'https' if self.extra.get('tls') else 'http'}://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise RuntimeError(f"controller {self.name} is not running")
        return self.proc.pid

    def config(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "listen": f"127.0.0.1:{self.port}",
            "state_dir": str(self.state_dir),
            "backends": self.backends,
            "controller": self.settings,
            **self.extra,
        }

    def write_config(self) -> Path:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(yaml.safe_dump(self.config(), sort_keys=False))
        return self.config_path

    def rewrite(self, **changes: Any) -> None:
        """Changes top-level keys of the config (`controller=`, `backends=` and `state_dir=` included) and its file."""
        for key, value in changes.items():
            if key == "controller":
                self.settings = value
            elif key == "backends":
                self.backends = value
            elif key == "state_dir":
                self.state_dir = Path(value)
            elif key in ("name", "listen"):
                raise ValueError(f"{key} is fixed for a ClusterProcess; make another one instead")
            else:
                self.extra[key] = value
        self.write_config()

    def start(self, timeout: float = START_TIMEOUT_S) -> ClusterProcess:
        """Starts the controller and returns once it answers; raises with its log's tail if it cannot."""
        self.write_config()
        env = dict(self.env) if self.env is not None else dict(os.environ)
        if forkserver.wanted(env):
            self.proc = forkserver.CLIENT.spawn([str(self.config_path)], env, self.log_path)
        else:
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen(
                    [sys.executable, "-m", "iris.controller", str(self.config_path)],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    start_new_session=True,
                    env=env,
                )
        # Ready once *this* process answers: while it starts, another server (a controller of a
        # test running beside this one, on a port it drew while this one was stopped) may answer
        # on the port, and a test must never be handed that one.
        deadline = time.monotonic() + timeout
        tls = self_tls(parse_config(self.config())) if self.extra.get("tls") else None
        while (answer := probe(self.url, timeout=0.5, tls=tls)) is None or answer.get("pid") != self.proc.pid:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = self.log_path.read_text(errors="replace")[-3000:]
                self.stop()
                other = f"; another server (pid {answer.get('pid', '?')}) answers there" if answer else ""
                raise RuntimeError(f"controller {self.name} did not start at {self.url}{other}:\n{tail}")
            time.sleep(0.05)
        return self

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM by PID, SIGKILL if it lingers; then any attempt process left behind, by PID."""
        proc = self.proc  # kept after the stop: its returncode says how the controller ended
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        killed = kill_leftover_attempts(self.state_dir)
        wait_until(lambda: not any(pid_alive(p) for p in killed), timeout, what="leftover attempts to exit")

    def kill(self) -> None:
        """SIGKILL: a crash. Its attempts keep running, to be re-adopted by the next start."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def pause(self) -> None:
        """SIGSTOP: the controller stops answering but keeps its sockets (a hung peer)."""
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def restart(self) -> ClusterProcess:
        self.stop()
        return self.start()

    def __enter__(self) -> ClusterProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ClusterSet:
    """Clusters made under one folder; `close` stops every one of them, together."""

    def __init__(self, base: Path):
        self.base = base
        self.clusters: list[ClusterProcess] = []

    def add(self, cluster: ClusterProcess) -> ClusterProcess:
        self.clusters.append(cluster)
        return cluster

    def make(self, name: str, backends: list[dict] | None = None, **kwargs: Any) -> ClusterProcess:
        """A cluster `name` under this set's folder, its config file written (not started)."""
        if backends is not None:
            kwargs["backends"] = backends
        cluster = self.add(ClusterProcess(name, self.base, **kwargs))
        cluster.write_config()
        return cluster

    def close(self) -> None:
        """Stops every cluster at once: each stop is mostly a wait for that controller to wind down."""

        def stop(cluster: ClusterProcess) -> str | None:
            try:
                cluster.stop()
            except Exception as exc:  # keep stopping the others; report after
                return f"{cluster.name}: {exc}"
            return None

        with ThreadPoolExecutor(max(1, len(self.clusters))) as pool:
            errors = [e for e in pool.map(stop, reversed(self.clusters)) if e]
        for cluster in self.clusters:  # a root cluster's attempts may live in a folder of the temp folder
            remove_attempts_root(cluster.state_dir)
        if errors:
            raise RuntimeError("could not stop every cluster: " + "; ".join(errors))

    def __enter__(self) -> ClusterSet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
