"""Running a controller as a process: in the foreground, detached, and stopping one.

A controller holds an exclusive lock on `<state_dir>/controller.lock` for its whole life, so two
controllers can never write one database; `controller.pid` and `controller.log` beside it let
`iris cluster stop` and a person find it. The lock file also names its holder (pid and start time),
so asking whether a controller runs reads that and looks the process up: a question that took the
lock, however briefly, would make a controller starting at that instant find it taken and exit. A start that finds the lock held is told apart from one
whose port another program holds only by its message: both are the same mistake (the place is
taken) and exit 3, the running controller's URL and the command that stops it named.

With `tls:` in the config the TCP port speaks only TLS (uvicorn's own TLS, with the context
`server_tls_context` builds before anything starts, so a certificate that cannot be used is an
error naming its key, not a controller that never answers); the Unix socket stays plain, as the
kernel, not a certificate, says who is on its other end. The controller asks itself whether it
answers (`probe`) trusting its own certificate, and presenting it where callers must present one.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import logging
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from iris.controller.tls import check_peer_cas, self_tls, server_tls_context
from iris.core.config import ClusterConfig
from iris.core.errors import InvalidArgument, IrisError, Unavailable
from iris.core.processes import listening_port, pid_alive, started_at

TYPE_CHECKING = False
if TYPE_CHECKING:
    import ssl

    from iris.rpc.transport import ClientTls


def pid_path(config: ClusterConfig) -> Path:
    return config.state_path / "controller.pid"


def log_path(config: ClusterConfig) -> Path:
    return config.state_path / "controller.log"


def socket_path(config: ClusterConfig) -> Path:
    """The controller's Unix socket, the tokenless way in on its host (see `iris.controller.auth.callers`)."""
    from iris.rpc.transport import SOCKET_NAME

    return config.state_path / SOCKET_NAME


def _unix_listener(path: Path, backlog: int):
    """A listening Unix socket at `path` (a leftover of an earlier run replaced: the caller holds the
    state directory's lock) that every local account may connect to: who connects is told by the
    kernel, not by the file's mode."""
    import socket

    from iris.rpc.transport import unix_address

    path.unlink(missing_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with unix_address(str(path)) as address:
            sock.bind(address)
        os.chmod(path, 0o666)
        sock.listen(backlog)
    except BaseException:
        sock.close()
        raise
    return sock


def probe(url: str, timeout: float = 1.0, tls: ClientTls | None = None) -> dict | None:
    """GetClusterInfo over Connect JSON; None when nothing (or nothing that speaks Connect) answers."""
    from iris.rpc.transport import ConnectTransport

    transport = ConnectTransport(url, timeout=timeout, local_socket=False, tls=tls)
    try:
        return transport.call_json("GetClusterInfo", {})
    except IrisError:
        return None
    finally:
        transport.close()


def _gone(pid: int) -> bool:
    """True when `pid` has exited; reaps it if it is our child, and treats a zombie as exited."""
    try:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return True
    except ChildProcessError:
        pass
    return not pid_alive(pid)


def read_pid(config: ClusterConfig) -> int | None:
    try:
        pid = int(pid_path(config).read_text().strip())
    except (OSError, ValueError):
        return None
    return None if _gone(pid) else pid


def port_holder(port: int) -> str | None:
    """Who listens on TCP `port` on this machine, in words (None when nobody, or it cannot be told)."""
    import psutil

    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.Error, OSError):
        return None
    for conn in conns:
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port:
            if conn.pid is None:
                return f"another program (its pid is not visible to this user) listens on port {port}"
            try:
                proc = psutil.Process(conn.pid)
                cmdline = " ".join(proc.cmdline()) or proc.name()
            except psutil.Error:
                cmdline = "?"
            return f"pid {conn.pid} ({cmdline[:120]}) listens on port {port}"
    return None


def check_state_dir(config: ClusterConfig) -> None:
    """Refuses a state directory that cannot be created or written, saying how to fix it."""
    path = config.state_path
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe_file = path / f".write-test-{os.getpid()}"
        probe_file.write_text("")
        probe_file.unlink()
    except OSError as exc:
        raise InvalidArgument(
            f"the state directory {path} cannot be created or written ({exc.strerror or exc});"
            " point state_dir in the config (or $IRIS_HOME for --local) at a folder you can write"
        ) from None


def lock_path(config: ClusterConfig) -> Path:
    return config.state_path / "controller.lock"


def lock_holder(config: ClusterConfig) -> int | None:
    """The pid of the controller holding this state directory's lock now, None when none does;
    answered from what the holder wrote in the lock file, without ever taking the lock."""
    try:
        pid_text, _, started = lock_path(config).read_text().partition(" ")
        pid, recorded = int(pid_text), float(started)
    except (OSError, ValueError):
        return None
    now = started_at(pid)
    # A pid reused by a later process is not the holder: its start time tells them apart.
    return pid if now is not None and abs(now - recorded) < 1.0 else None


def lock_held(config: ClusterConfig) -> bool:
    """Whether a controller holds this state directory's lock now (it runs, or is starting)."""
    return lock_holder(config) is not None


def _take_lock(config: ClusterConfig, argv: Sequence[str]) -> int:
    """Takes the state directory's lock for this process's life and names this process in it;
    returns the lock file's descriptor. Raises `already_running` when a controller holds it."""
    fd = os.open(lock_path(config), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise already_running(config, argv) from None
    record = f"{os.getpid()} {started_at(os.getpid())}\n".encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, record, 0)
    return fd


def _release_lock(fd: int) -> None:
    """Forgets the holder, then lets the lock go (closing the file releases it)."""
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
    os.close(fd)


def already_running(config: ClusterConfig, argv: Sequence[str] = ()) -> Unavailable:
    """The error for a start of a cluster whose controller already runs: where it is, and how to stop it.

    Where it is comes from the running process's own listening socket: `--local --port N` names a
    port, but the controller holding the state directory may have been started on another one."""
    pid = read_pid(config) or lock_holder(config)
    url = config.url
    port = listening_port(pid) if pid else None
    if port is not None and port != config.port and not config.public_url:
        url = f"http://{config.listen.rpartition(':')[0]}:{port}"
        argv = [a for i, a in enumerate(argv) if a != "--port" and (i == 0 or argv[i - 1] != "--port")]
    stop = " ".join(["iris cluster stop", *argv])
    return Unavailable(
        f"cluster {config.name} is already running at {url}"
        + (f" (pid {pid})" if pid else "")
        + f", with its state in {config.state_path}; use it as it is (export IRIS_CONTROLLER={url}),"
        f" or stop it first with `{stop}`"
    )


def _port_error(config: ClusterConfig, answered: dict | None) -> Unavailable:
    if answered and answered.get("name"):
        holder = f"another iris controller (cluster {answered['name']}, pid {answered.get('pid', '?')}) answers there"
    else:
        holder = port_holder(config.port) or "another program holds it"
    return Unavailable(
        f"cluster {config.name} cannot listen on {config.listen}: {holder}; stop that, or choose another"
        " port (`listen:` in the config, --port with --local)"
    )


def _server_class():
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn re-raises SIGTERM/SIGINT after a graceful shutdown, which would kill the process
        before the controller stops its attempts; forget the captured signal instead."""

        on_exit: tuple = ()  # called at once on SIGTERM/SIGINT, before uvicorn drains requests
        unix_socket = None  # a listening Unix socket served beside the TCP port, once that is bound
        # With TLS: how long a connection may take over its handshake (None: the event loop's 60 s).
        # The connection guard (iris.controller.http.connections) sees a TLS connection only once
        # its handshake is done, so a caller that connects and never shakes hands would otherwise
        # hold a descriptor for a minute, where one that sends nothing is closed after the guard's
        # read timeout.
        handshake_timeout: float | None = None

        async def startup(self, sockets=None) -> None:
            import asyncio

            if self.handshake_timeout is None or self.config.ssl is None or sockets is not None:
                await super().startup(sockets)
            else:
                await self._tls_startup()
            if self.should_exit or self.unix_socket is None:
                return
            loop = asyncio.get_running_loop()
            self.servers.append(
                await loop.create_unix_server(self._protocol, sock=self.unix_socket, backlog=self.config.backlog)
            )

        def _protocol(self, _loop=None):
            """A connection's protocol, as uvicorn's own start-up makes it."""
            config = self.config
            return config.http_protocol_class(
                config=config, server_state=self.server_state, app_state=self.lifespan.state, _loop=_loop
            )

        async def _tls_startup(self) -> None:
            """uvicorn's start-up on HOST:PORT with TLS, its handshakes bounded by `handshake_timeout`."""
            import asyncio

            from uvicorn.config import STARTUP_FAILURE

            await self.lifespan.startup()
            config = self.config
            try:
                server = await asyncio.get_running_loop().create_server(
                    self._protocol,
                    host=config.host,
                    port=config.port,
                    ssl=config.ssl,
                    backlog=config.backlog,
                    ssl_handshake_timeout=self.handshake_timeout,
                )
            except OSError as exc:  # the port is taken: as uvicorn's own start-up does
                logging.getLogger("uvicorn.error").error(exc)
                await self.lifespan.shutdown()
                sys.exit(STARTUP_FAILURE)
            self.servers = [server]
            self.started = True

        @contextlib.contextmanager
        def capture_signals(self):
            with super().capture_signals():
                yield
                self._captured_signals.clear()

        def handle_exit(self, sig, frame):
            for hook in self.on_exit:
                hook()
            super().handle_exit(sig, frame)

    return Server


def _http_protocol(settings):
    """uvicorn's httptools protocol, giving each connection one `Peer` for every request's scope,
    so what the controller learns about a connection's client is kept for the connection's life,
    and holding connections to `iris.controller.http.connections`' limits."""
    import socket
    import struct

    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    from iris.controller.auth.callers import Peer
    from iris.controller.http.connections import guarded
    from iris.controller.http.server import JoinedWrites

    class Protocol(HttpToolsProtocol):
        def connection_made(self, transport) -> None:
            # An answer's head and body leave in one write (see iris.controller.http.server).
            super().connection_made(JoinedWrites(transport, self.loop))  # type: ignore[arg-type]
            sock = transport.get_extra_info("socket")
            if sock is not None and sock.family == socket.AF_UNIX:
                # Who connected, as the kernel recorded it at connect(): true even when the caller
                # has already sent its request and closed.
                pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
                self.client = Peer.local(pid, uid)
            elif self.client is not None:
                self.client = Peer(self.client)

    return guarded(Protocol, settings.request_read_timeout, settings.max_connections)


def run_foreground(config: ClusterConfig, on_ready=lambda: None, argv: Sequence[str] = ()) -> None:
    """Serves the cluster until SIGINT/SIGTERM, then stops its tick and attempts cleanly (`argv`:
    the options that name the cluster, for the hint when it already runs)."""
    import uvicorn

    from iris.controller.app import Controller

    _Server = _server_class()
    from iris.controller.http.server import build_app

    # Everything the controller writes (database, WAL, keys, logs) is its own alone.
    os.umask(0o077)
    tls_context = server_tls_context(config)
    check_peer_cas(config)
    check_state_dir(config)
    lock = _take_lock(config, argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # httpx logs every request it sends at INFO: each call relayed to an endpoint or a peer would
    # add a line to controller.log, at whatever rate users drive them.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    controller = Controller(config)
    unix = None
    pid_path(config).write_text(f"{os.getpid()}\n")
    try:
        controller.start()
        app = build_app(controller)
        # What start-up built (modules, the schema, the API's descriptors and handlers) lives as
        # long as the process: kept out of the cycle collector's passes, each full pass walks only
        # what came since. With 4 clients submitting, a full pass held the interpreter lock for
        # about 70 ms of CPU every 15-20 s, and each pass over the young objects found them among more.
        gc.freeze()
        server = _Server(
            uvicorn.Config(
                app,
                host=config.host,
                port=config.port,
                log_level="warning",
                lifespan="off",
                access_log=False,
                # The C HTTP parser and event loop: with uvicorn's pure-Python defaults (h11,
                # asyncio's loop) parsing and answering a small call cost the controller about a
                # third of its CPU per submitted job.
                http=_http_protocol(config.controller),
                loop="uvloop",
                # Who a call comes from is its socket's address (auth.trusted_cidrs decides what that
                # address may do); uvicorn's default would take it from an X-Forwarded-For header
                # sent from loopback, which any local process, a task among them, can write.
                proxy_headers=False,
                # No request may hold a stop for long: running raw queries are aborted on the
                # signal, and anything else still open after this is cut off.
                timeout_graceful_shutdown=5,
                **(_uvicorn_tls(tls_context) if tls_context is not None else {}),
            )
        )
        server.on_exit = (controller.queries.close,)
        server.handshake_timeout = config.controller.request_read_timeout
        server.unix_socket = unix = _unix_listener(socket_path(config), server.config.backlog)
        logging.getLogger("iris.controller").info(
            "cluster %s serving on %s (state in %s)", config.name, config.url, config.state_path
        )
        _call_when_started(server, on_ready)
        server.run()
        if not server.started:
            raise _port_error(config, probe(config.url, timeout=0.5, tls=self_tls(config)))
    finally:
        if unix is not None:
            unix.close()
            socket_path(config).unlink(missing_ok=True)
        controller.shutdown()
        pid_path(config).unlink(missing_ok=True)
        _release_lock(lock)


def _uvicorn_tls(context: ssl.SSLContext) -> dict:
    """uvicorn's TLS options serving `context` (`server_tls_context`: already loaded and checked)."""
    return {"ssl_context_factory": lambda _config, _default: context}


def _call_when_started(server, on_ready) -> None:
    """Calls `on_ready` once uvicorn has bound its socket (from a helper thread)."""
    import threading

    def wait() -> None:
        while not server.should_exit:
            if server.started:
                on_ready()
                return
            time.sleep(0.05)

    threading.Thread(target=wait, name="on-ready", daemon=True).start()


def start_detached(config: ClusterConfig, argv: list[str], timeout: float = 30) -> int:
    """Starts `iris cluster start <argv>` in the background; returns its pid once it answers
    (waiting at most `timeout` seconds; 0: as long as it takes). The background controller records
    nothing in ~/.iris/clusters.yaml: whoever starts it decides that (`iris cluster start --detach`
    does; `iris demo`'s throw-away clusters do not)."""
    check_state_dir(config)
    server_tls_context(config)  # a certificate that cannot be used is said here, not in the log
    check_peer_cas(config)
    if lock_held(config):
        raise already_running(config, argv)
    log = open(log_path(config), "ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "iris.cli.main", "cluster", "start", *argv, "--no-remember"],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
        start_new_session=True,
        close_fds=True,
    )
    log.close()
    # Success only once *this* process answers, on this port, with this state dir: something else
    # answering on the port (another controller, any program) is never taken for it.
    deadline = time.monotonic() + timeout if timeout else math.inf
    answered = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            if lock_held(config):  # another start took the lock after this one looked
                raise already_running(config, argv)
            if not _can_bind(config):
                raise _port_error(config, answered or probe(config.url, timeout=0.5, tls=self_tls(config)))
            tail = log_path(config).read_text(errors="replace").strip().splitlines()[-5:]
            raise Unavailable(f"the controller exited with code {proc.returncode}: " + " | ".join(tail))
        answered = probe(config.url, timeout=0.5, tls=self_tls(config))
        if answered and answered.get("pid") == proc.pid:
            if os.path.realpath(answered.get("stateDir", "")) != os.path.realpath(config.state_path):
                proc.terminate()
                raise Unavailable(f"the controller answered with another state directory: {answered.get('stateDir')}")
            return proc.pid
        time.sleep(0.05)
    proc.terminate()
    raise Unavailable(f"the controller did not answer at {config.url} within {timeout:g}s; see {log_path(config)}")


def port_taken(config: ClusterConfig) -> Unavailable | None:
    """The error for a cluster whose port another process holds, naming the holder; None when free."""
    if _can_bind(config):
        return None
    return _port_error(config, probe(config.url, timeout=0.5, tls=self_tls(config)))


def _can_bind(config: ClusterConfig) -> bool:
    import socket

    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((config.host, config.port))
        except OSError:
            return False
    return True


def stop(config: ClusterConfig, timeout: float = 15) -> bool:
    """Stops the controller recorded in `controller.pid`, killing it if it has not exited after
    `timeout` seconds (0: never, it is waited for); False when none was running."""
    pid = read_pid(config)
    if pid is None:
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout if timeout else math.inf
    while time.monotonic() < deadline:
        if _gone(pid):
            return True
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    return True
