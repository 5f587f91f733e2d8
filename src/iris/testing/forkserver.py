"""Starts the test harness's controllers by forking a process that has imported them already.

A controller's start is mostly imports (SQLAlchemy, pydantic, uvicorn, Iris itself): about a
second of CPU, paid again by each of the hundreds of controllers the suite starts. The fork server
pays it once per test process: the fork server (`serve(SOCKET)`, in a process of its own) imports what
`python -m iris.controller` imports, then forks a child per request that runs the controller's
`__main__` exactly as that command does, in a session of its own, with the requested environment,
working folder and log. The child is as real as the exec'd one (its own pid, sockets, SQLite
file, attempts), only its imports are inherited.

The server stays single-threaded (a fork of a threaded process may inherit a held lock) and
reaps its children itself; each request's connection stays open and carries the child's pid,
then its exit status, so `ForkedProcess` answers `poll`, `wait` and `returncode` as `Popen`
does. The server leaves when its stdin closes (the test process ended).

Used only where `IRIS_TEST_FORKSERVER=1` (the suite's conftest sets it), and never for a
controller whose environment differs from the server's in what a process reads only as it starts
(LD_PRELOAD, LD_LIBRARY_PATH, PYTHONPATH, a variable a module reads as it is imported): that one
is started the plain way, as a fresh `python -m iris.controller`.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path

ENABLE_ENV = "IRIS_TEST_FORKSERVER"
IMPORT_TIME_ENV = ("IRIS_SPANS",)  # read by iris.core.spans as it is imported


def _read_at_start(env: Mapping[str, str]) -> dict[str, str]:
    """What of `env` takes effect only when a process starts: the dynamic loader's settings
    (LD_PRELOAD, LD_LIBRARY_PATH: a later dlopen does not look again), the interpreter's
    (PYTHONPATH and the like: sitecustomize), and what a module reads as it is imported."""
    return {k: v for k, v in env.items() if k.startswith(("LD_", "PYTHON")) or k in IMPORT_TIME_ENV}


def wanted(env: Mapping[str, str]) -> bool:
    """Whether a controller with environment `env` may be forked rather than exec'd: the fork
    server must be on, and `env` must agree with this process's (which the server started with)
    on everything read at a process's start."""
    return os.environ.get(ENABLE_ENV) == "1" and _read_at_start(env) == _read_at_start(os.environ)


class ForkedProcess:
    """The part of `subprocess.Popen` the harness uses, for a child of the fork server."""

    def __init__(self, pid: int, conn: socket.socket):
        self.pid = pid
        self.returncode: int | None = None
        self._conn = conn
        self._buffer = b""

    def _read(self, timeout: float | None) -> None:
        if self.returncode is not None:
            return
        self._conn.settimeout(timeout)
        try:
            while b"\n" not in self._buffer:
                data = self._conn.recv(64)
                if not data:  # the server is gone: it can no longer say, so look for the process
                    if not _exists(self.pid):
                        self.returncode = -signal.SIGKILL
                    return
                self._buffer += data
        except (TimeoutError, BlockingIOError):
            return
        line, _, self._buffer = self._buffer.partition(b"\n")
        self.returncode = int(line.split()[1])
        self._conn.close()

    def poll(self) -> int | None:
        self._read(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self._read(timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(f"controller pid {self.pid}", timeout or 0)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


class _Client:
    """This process's fork server, started at the first request."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._path = ""
        self._started_with: dict[str, str] = {}

    def close(self) -> None:
        """Ends the server (its stdin closes); the controllers it forked run on."""
        if self._proc is not None:
            if self._proc.stdin is not None:
                self._proc.stdin.close()
            self._proc.wait()
            self._proc = None

    def _server(self) -> str:
        if self._started_with != _read_at_start(os.environ):
            self.close()  # this process's own settings changed since: a server of the new ones
        if self._proc is None or self._proc.poll() is not None:
            self._started_with = _read_at_start(os.environ)
            folder = tempfile.mkdtemp(prefix="iris-forkserver-")
            self._path = os.path.join(folder, "sock")
            self._proc = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    "import sys; from iris.testing.forkserver import serve; serve(sys.argv[1])",
                    self._path,
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                start_new_session=True,
            )
            assert self._proc.stdout is not None
            if self._proc.stdout.readline().strip() != b"ready":
                raise RuntimeError("the controller fork server did not start")
        return self._path

    def spawn(self, argv: list[str], env: Mapping[str, str], log_path: Path) -> ForkedProcess:
        with self._lock:
            path = self._server()
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(path)
        request = {"argv": argv, "env": dict(env), "cwd": os.getcwd(), "log": str(log_path)}
        conn.sendall(json.dumps(request).encode() + b"\n")
        reply = b""
        while not reply.endswith(b"\n"):
            data = conn.recv(64)
            if not data:
                raise RuntimeError("the controller fork server closed the connection before the child's pid")
            reply += data
        return ForkedProcess(int(reply.split()[1]), conn)


CLIENT = _Client()


# -- the server ------------------------------------------------------------------------------------


def serve(path: str) -> None:
    # What the controller's __main__ imports, and what `run_foreground` imports as it starts.
    import psutil  # noqa: F401
    import sqlalchemy.dialects.sqlite  # noqa: F401
    import uvicorn  # noqa: F401
    import uvicorn.protocols.http.httptools_impl  # noqa: F401
    import uvloop  # noqa: F401

    import iris.controller.app  # noqa: F401
    import iris.controller.auth.callers  # noqa: F401
    import iris.controller.http.connections  # noqa: F401
    import iris.controller.http.server  # noqa: F401
    import iris.controller.process  # noqa: F401
    import iris.core.config  # noqa: F401
    import iris.rpc.transport  # noqa: F401

    if threading.active_count() != 1:
        raise RuntimeError("importing the controller started a thread: it cannot be forked safely")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    server = os.getpid()
    try:
        _serve(listener)
    finally:
        if os.getpid() == server:  # not in a child leaving through here
            os.unlink(path)
            os.rmdir(os.path.dirname(path))


def _serve(listener: socket.socket) -> None:
    children: dict[int, socket.socket] = {}
    print("ready", flush=True)
    while True:
        ready, _, _ = select.select([listener, sys.stdin], [], [], 0.05)
        if sys.stdin in ready and not os.read(sys.stdin.fileno(), 1):
            return  # the test process is gone
        if listener in ready:
            conn, _ = listener.accept()
            try:
                request = _request(conn)
            except (OSError, ValueError):
                conn.close()  # a caller that went away, or sent no request
                continue
            pid = os.fork()
            if pid == 0:
                code: int | str | None = 1
                try:
                    listener.close()
                    for other in children.values():
                        other.close()
                    conn.close()
                    code = _become_controller(request)
                except BaseException:
                    import traceback

                    traceback.print_exc()
                # The interpreter's own ending (atexit handlers, flushed streams) with that code;
                # it never reaches the loop again.
                raise SystemExit(code)
            children[pid] = conn
            try:
                conn.sendall(f"pid {pid}\n".encode())
            except OSError:
                pass  # the caller went away; the child's exit is reaped all the same
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            if pid not in children:
                continue
            conn = children.pop(pid)
            try:
                conn.sendall(f"exit {os.waitstatus_to_exitcode(status)}\n".encode())
            except OSError:
                pass  # the test side closed its end
            conn.close()


def _request(conn: socket.socket) -> dict:
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
    return json.loads(data)


def _become_controller(request: dict) -> int | str | None:
    """In the forked child: what `Popen([python, -m, iris.controller, …], start_new_session=True,
    stdin=DEVNULL, stdout=log, stderr=log, env=…)` would have set up, then the controller's main."""
    import runpy

    os.setsid()
    devnull = os.open(os.devnull, os.O_RDONLY)
    log = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(devnull, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(devnull)
    os.close(log)
    sys.stdin = open(0, closefd=False)  # noqa: SIM115  (the descriptors the controller's own streams use)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = ["-m", *request["argv"]]  # runpy puts the module's path first, as `python -m` does
    try:
        runpy.run_module("iris.controller", run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        return exc.code
    return 0
