"""Fixtures for worker daemons: a controller with a `workers` backend, and real `iris worker start`
processes joining it. Every daemon is stopped by its PID at teardown, and whatever attempts it
left behind (a SIGKILLed daemon's, by design) are killed through its work dir."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from iris.backends.local.attempts_root import remove_attempts_root
from iris.backends.local.backend import kill_leftover_attempts
from iris.controller.auth import LOCAL_ADMIN
from iris.rpc import controller_pb2 as pb
from tests.conftest import wait_until
from tests.controller.helpers import client, user_token

GRACE = "2s"


def workers_backends(*attrs: dict) -> list[dict]:
    return [{"id": "pool", "kind": "workers", **({"attributes": attrs[0]} if attrs else {})}]


@dataclass
class WorkerProc:
    name: str
    work_dir: Path
    proc: subprocess.Popen
    log: Path

    def attempt_pids(self) -> list[int]:
        """The pids of the attempts this worker runs now (from their pid files)."""
        pids = []
        for pid_file in (self.work_dir / "attempts").glob("*/pid"):
            try:
                pids.append(int(pid_file.read_text().strip()))
            except (OSError, ValueError):
                pass
        return pids

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)


class WorkerFactory:
    def __init__(self, base: Path):
        self.base = base
        self.started: list[WorkerProc] = []

    def __call__(
        self,
        ctl,
        name: str,
        *args: str,
        backend: str = "pool",
        env: dict | None = None,
        wait: bool = True,
        relative: bool = False,
        label: str | None = None,
    ):
        """Starts a daemon; `relative` runs it from the base folder with its --work-dir relative to it.
        `label` names its work dir and log instead of `name` (a second daemon asking for a name)."""
        work_dir = self.base / "workers" / (label or name)
        work_dir.mkdir(parents=True, exist_ok=True)
        log = self.base / "workers" / f"{label or name}.log"
        out = open(log, "ab")
        cmd = [sys.executable, "-m", "iris.cli.main", "worker", "start", "--controller", ctl.url]
        cmd += [
            "--backend",
            backend,
            "--name",
            name,
            "--work-dir",
            str(work_dir.relative_to(self.base)) if relative else str(work_dir),
            "--cpu",
            "2",
            "--memory",
            "4G",
            *args,
        ]
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=out,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env={**(os.environ if env and "IRIS_TOKEN" in env else operator_env(ctl)), **(env or {})},
            cwd=self.base,
        )
        out.close()
        worker = WorkerProc(name, work_dir, proc, log)
        self.started.append(worker)
        if wait:
            self.wait_joined(ctl, name)
        return worker

    def wait_joined(self, ctl, name: str) -> None:
        c = client(ctl)

        def joined():
            return any(w.worker_id == name and w.alive for w in c.list_workers(pb.ListWorkersRequest()).workers)

        wait_until(joined, timeout=30, message=f"worker {name} to join")

    def cleanup(self) -> None:
        for w in self.started:
            if w.proc.poll() is None:
                w.signal(signal.SIGCONT)
                w.proc.terminate()
                try:
                    w.proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    w.proc.kill()
                    w.proc.wait()
            kill_leftover_attempts(w.work_dir)
            remove_attempts_root(w.work_dir)  # a root daemon's attempts live in a temp folder of its own


def operator_env(ctl) -> dict[str, str]:
    """The environment of a daemon the operator starts: with an admin token for `local_admin`, as
    a daemon authenticates with a token (a tokenless one is anonymous over TCP)."""
    return {**os.environ, "IRIS_TOKEN": user_token(ctl, LOCAL_ADMIN, role="admin")}


@pytest.fixture
def worker_factory(tmp_path):
    factory = WorkerFactory(tmp_path)
    try:
        yield factory
    finally:
        factory.cleanup()


@pytest.fixture
def pool(controller_factory):
    """A controller whose only backend is a workers pool, with a short grace period."""
    return controller_factory(
        "pool", backends=workers_backends(), controller={"tick_interval": "1s", "worker_grace_period": GRACE}
    )


@pytest.fixture
def uid_pool(controller_factory):
    """A root controller with a workers pool, assigning each user's tasks a uid of that user's own."""
    return controller_factory(
        "pool",
        backends=workers_backends(),
        controller={"tick_interval": "1s", "worker_grace_period": GRACE},
        auth={"task_uids": {"enabled": True, "range": "200000-299999", "max_processes": 256}},
    )


@dataclass
class Docker:
    host: str  # DOCKER_HOST for clients of this daemon
    image: str  # a local image with a busybox userland


def _docker(host: str, *args: str, input: bytes | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["docker", *args], env={**os.environ, "DOCKER_HOST": host}, capture_output=True, input=input, timeout=timeout
    )


@pytest.fixture(scope="session")
def dockerd(tmp_path_factory):
    """A Docker daemon of the tests' own on a private socket, with a busybox image built by import
    (never pulled); stopped by its PID at the end. Skips, saying why, where Docker cannot start."""
    import shutil
    import tarfile
    import time

    missing = [tool for tool in ("dockerd", "docker", "busybox") if not shutil.which(tool)]
    if missing:
        pytest.skip(f"Docker tests need {', '.join(missing)} (apt-get install docker.io busybox-static)")
    if os.geteuid() != 0:
        pytest.skip("Docker tests start their own dockerd, which needs root")
    base = Path(tempfile.mkdtemp(prefix="iris-docker-"))  # short: the socket path has a length limit
    host = f"unix://{base}/docker.sock"
    log = open(base / "dockerd.log", "ab")
    proc = subprocess.Popen(
        [
            "dockerd", f"--host={host}", f"--data-root={base}/data", f"--exec-root={base}/exec",
            f"--pidfile={base}/dockerd.pid", "--iptables=false", "--ip-forward=false", "--ip-masq=false",
            "--bridge=none",
        ],
        stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    log.close()
    try:
        deadline = time.monotonic() + 60
        while _docker(host, "version", timeout=10).returncode != 0:
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = (base / "dockerd.log").read_text(errors="replace")[-1500:]
                pytest.skip(f"dockerd did not start here: {tail}")
            time.sleep(0.2)
        rootfs = base / "rootfs.tar"
        with tarfile.open(rootfs, "w") as tar:
            tar.add(shutil.which("busybox"), arcname="bin/busybox")
            for tool in ("sh", "cat", "head", "tr", "sleep", "echo", "true"):
                link = tarfile.TarInfo(f"bin/{tool}")
                link.type, link.linkname = tarfile.SYMTYPE, "busybox"
                tar.addfile(link)
        made = _docker(host, "import", "-", "local/busybox:1", input=rootfs.read_bytes())
        assert made.returncode == 0, made.stderr
        yield Docker(host, "local/busybox:1")
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(base, ignore_errors=True)
