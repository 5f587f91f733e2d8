"""Starts attempt wrappers from a small helper process, each one born inside its own cgroup.

It decides how an attempt's first process comes to exist: in its session, with its output files,
working folder and umask, and already a member of its cgroup (or marked a child subreaper where
there is no cgroup) before it runs a single instruction of its own.

Why a helper. Moving a process into a cgroup (writing `cgroup.procs`) takes the kernel's global
cgroup threadgroup lock for writing, which waits for an RCU grace period whenever no other move
happened just before: 10-15 ms of wall time per attempt on an idle host, more than everything
else between a submit and its exit. `clone3(CLONE_INTO_CGROUP)` (Linux 5.7) creates the process in
its cgroup instead, with no move and no wait. Python has no clone3, and calling it through ctypes
from the controller is unsafe: the controller has many threads, and a child cloned from one of
them may inherit a lock (the GIL's hand-off, an allocator's) that no thread of the child will
ever release. The helper has one thread, so the child is as safe as after `os.fork`: the
controller sends it a request over a socket; it clones, the child sets itself up and execs, and
the helper answers with the pid. It stays the parent, so it reaps every child and reports each
exit status on a second socket, which is how the controller learns the code of a wrapper killed
by a signal. Forking the helper, small and single-threaded, is also cheaper than forking the
controller. A caller may wait for the answer (`spawn`) or go on and read answers later, in the
order it asked (`submit`, `read_answers`): the local backend's tick then starts a process at the
cost of one write to a socket.

Where clone3 is refused (an older kernel, a seccomp filter) the child joins its cgroup itself
before it execs: slower, equally contained. The file runs as a script (`python -I -S spawner.py`)
and imports only the standard library, so the helper starts in a few milliseconds.
"""

from __future__ import annotations

import collections
import ctypes
import errno
import json
import os
import resource
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

SYS_CLONE3 = 435  # the same number on every architecture that has it
CLONE_INTO_CGROUP = 0x200000000
PR_SET_CHILD_SUBREAPER = 36
_HEADER = struct.Struct("!I")


@dataclass(frozen=True, slots=True)
class Spawned:
    """A process the helper started: its pid, and the serial number its exit will be reported under
    (a pid may come back for another process; a serial never does)."""

    pid: int
    serial: int
    at_ms: int = 0  # when the helper started it (wall clock), where it said


class SpawnerGone(RuntimeError):
    """The helper has exited; the caller starts the process some other way."""


class _CloneArgs(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_uint64)
        for name in (
            "flags",
            "pidfd",
            "child_tid",
            "parent_tid",
            "exit_signal",
            "stack",
            "stack_size",
            "tls",
            "set_tid",
            "set_tid_size",
            "cgroup",
        )
    ]


def _send(sock: socket.socket, message: dict) -> None:
    data = json.dumps(message).encode()
    sock.sendall(_HEADER.pack(len(data)) + data)


def _recv_exact(sock: socket.socket, size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        chunk = sock.recv(left)
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _recv(sock: socket.socket) -> dict | None:
    """The next message, or None at end of stream."""
    header = _recv_exact(sock, _HEADER.size)
    if header is None:
        return None
    data = _recv_exact(sock, _HEADER.unpack(header)[0])
    return None if data is None else json.loads(data)


def _request(
    argv: list[str],
    env: dict[str, str],
    cwd: str,
    stdout: str,
    stderr: str,
    cgroup: str,
    umask: int,
    subreaper: bool,
    early: bool,
    nproc: int = 0,
    stdin: str | None = None,
) -> dict:
    return {
        "argv": argv,
        "env": env,
        "cwd": cwd,
        "stdout": stdout,
        "stderr": stderr,
        "cgroup": cgroup,
        "umask": umask,
        "subreaper": subreaper,
        "early": early,
        "nproc": nproc,
        "stdin": stdin,
    }


def _answered(answer: dict) -> Spawned:
    """The process a helper's answer names; OSError when it says none could be started."""
    if "pid" in answer:
        return Spawned(int(answer["pid"]), int(answer["serial"]), int(answer.get("at_ms", 0)))
    raise OSError(answer.get("errno") or errno.EIO, answer.get("error", "cannot start the process"))


def _split(buffer: bytes) -> tuple[list[dict], bytes]:
    """The whole messages at the front of `buffer`, and what is left of it after them."""
    out, at = [], 0
    while len(buffer) - at >= _HEADER.size:
        size = _HEADER.unpack_from(buffer, at)[0]
        if len(buffer) - at < _HEADER.size + size:
            break
        out.append(json.loads(buffer[at + _HEADER.size : at + _HEADER.size + size]))
        at += _HEADER.size + size
    return out, buffer[at:]


# -- the controller's side -----------------------------------------------------------------------


class Spawner:
    """The controller's handle on one helper: `spawn` from any thread, exits read by one thread."""

    def __init__(self) -> None:
        # Imported here: as a script (the helper) this file may import only the standard library.
        from iris.backends.privileged import fixed_env

        self._requests, requests_child = socket.socketpair()
        self._exits, exits_child = socket.socketpair()
        self._lock = threading.Lock()
        self._buffer = b""
        self._answers = b""  # answers to `submit`s read so far, not yet whole
        # What each `submit` was made for, in the order sent: the helper answers in that order.
        self._unanswered: collections.deque[object] = collections.deque()
        self._failures: dict[int, str] = {}  # why each early-answered start failed, by serial
        with requests_child, exits_child:
            self._proc = subprocess.Popen(
                [
                    sys.executable,
                    "-I",
                    "-S",
                    os.path.abspath(__file__),
                    str(requests_child.fileno()),
                    str(exits_child.fileno()),
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                close_fds=True,
                pass_fds=(requests_child.fileno(), exits_child.fileno()),
                env=fixed_env(),  # it runs as root; what it starts gets the env each request names
            )
        self._exits.setblocking(False)

    @property
    def pid(self) -> int:
        return self._proc.pid

    def exits_fd(self) -> int:
        """Readable when the helper has reported exits (or has gone: `read_exits` returns None)."""
        return self._exits.fileno()

    def spawn(
        self,
        argv: list[str],
        env: dict[str, str],
        cwd: str,
        stdout: str,
        stderr: str,
        cgroup: str = "",
        umask: int = -1,
        subreaper: bool = False,
        early: bool = False,
        nproc: int = 0,
        stdin: str | None = None,
    ) -> Spawned:
        """A new process running `argv` with exactly `env`, in a session of its own with stdin from
        /dev/null (or reading `stdin`, from an in-memory file: how a task's environment reaches its
        command without a command line or a file on disk) and stdout/stderr appended to the named files; in `cgroup` (a folder) from birth, or a child
        subreaper. OSError when the process cannot be set up (say, `cwd` is missing); SpawnerGone
        when the helper has exited.

        With `early`, the answer comes as soon as the process exists, before it has set itself up
        and exec'd: the caller goes on while the new process runs its first instructions (on a busy
        host, most of a start's wall time), and a set-up that fails is reported with the exit, as
        code 127 and the reason `start_error` gives for its serial.

        With `nproc`, the process and its children may hold at most that many processes of their
        uid (RLIMIT_NPROC, soft and hard): a root process is exempt, a command that drops to its
        task's uid is held to it, as under `prlimit --nproc`, without that program's exec.

        Waits for the helper's answer; a spawner serves either these calls or `submit`, not both."""
        request = _request(argv, env, cwd, stdout, stderr, cgroup, umask, subreaper, early, nproc, stdin)
        with self._lock:
            try:
                _send(self._requests, request)
                answer = _recv(self._requests)
            except OSError:
                answer = None
        if answer is None:
            raise SpawnerGone("the process-starting helper has exited")
        return _answered(answer)

    def submit(
        self,
        token: object,
        argv: list[str],
        env: dict[str, str],
        cwd: str,
        stdout: str,
        stderr: str,
        cgroup: str = "",
        umask: int = -1,
        subreaper: bool = False,
        nproc: int = 0,
        stdin: str | None = None,
    ) -> None:
        """Asks for a process as `spawn(..., early=True)` does, without waiting for the answer:
        `read_answers` hands it back with `token`. SpawnerGone when the helper has exited (the
        request is then not sent; `unanswered` never lists its token).

        A start then costs its caller one write to a socket: the helper's clone, and the thread
        switches of waiting for it, happen while the caller goes on (the control tick commits
        and starts the rest of its pass meanwhile)."""
        request = _request(argv, env, cwd, stdout, stderr, cgroup, umask, subreaper, True, nproc, stdin)
        data = json.dumps(request).encode()
        with self._lock:
            self._unanswered.append(token)
            try:
                self._send_taking_answers(_HEADER.pack(len(data)) + data)
            except OSError:
                self._unanswered.pop()  # the last one, ours: sends are serialised by the lock
                raise SpawnerGone("the process-starting helper has exited") from None

    def _send_taking_answers(self, data: bytes) -> None:
        """Sends `data` to the helper, taking in its answers whenever the socket is full: a helper
        blocked on answers no one reads would stop reading requests, and a pass starting hundreds
        of attempts would wait on it forever. OSError when the helper has gone."""
        view = memoryview(data)
        while view:
            try:
                view = view[self._requests.send(view, socket.MSG_DONTWAIT) :]
            except BlockingIOError:
                select.select([self._requests], [self._requests], [])
                if not self._take_in():
                    raise OSError(errno.EPIPE, "the process-starting helper has exited") from None

    def _take_in(self) -> bool:
        """Appends what the helper has answered to the buffer, without waiting; False at its end."""
        try:
            while True:
                data = self._requests.recv(65536, socket.MSG_DONTWAIT)
                if not data:
                    return False
                self._answers += data
        except BlockingIOError:
            return True
        except OSError:
            return False

    def read_answers(self, wait: bool = True) -> list[tuple[object, Spawned | OSError]] | None:
        """(token, the process started or why none could be) for each `submit` answered so far, in
        the order submitted; None once the helper has gone. Never waits on the helper; without
        `wait`, not on a `submit` under way either (none are read then: it takes them in itself,
        and its helper may be waiting for its caller to read the exits it reports)."""
        if not self._lock.acquire(blocking=wait):
            return []
        try:
            gone = not self._take_in()
            messages, self._answers = _split(self._answers)
            tokens = [self._unanswered.popleft() for _ in messages]
        finally:
            self._lock.release()
        out: list[tuple[object, Spawned | OSError]] = []
        for token, message in zip(tokens, messages):
            try:
                out.append((token, _answered(message)))
            except OSError as exc:
                out.append((token, exc))
        # Answers read before the end are handed over first; the next call (the end stays
        # readable) says the helper has gone.
        return None if gone and not out else out

    def waiting(self) -> int:
        """How many `submit`s the helper has not answered, or whose answers are not yet read."""
        return len(self._unanswered)

    def unanswered(self) -> list[object]:
        """The tokens of `submit`s the helper has not answered (asked once it has gone: each such
        process may or may not have been started). Forgotten once asked."""
        with self._lock:  # not while a `submit` is half-way: it either sent its request or took it back
            tokens = list(self._unanswered)
            self._unanswered.clear()
        return tokens

    def read_exits(self) -> list[tuple[int, int]] | None:
        """(serial, exit code as `Popen.returncode` gives it) for each exit reported so far, or None once
        the helper has gone. Never blocks."""
        try:
            while True:
                data = self._exits.recv(65536)
                if not data:
                    return None
                self._buffer += data
        except BlockingIOError:
            pass
        except OSError:
            return None
        out = []
        messages, self._buffer = _split(self._buffer)
        for message in messages:
            serial = int(message["serial"])
            if message.get("error") is not None:
                self._failures[serial] = message["error"]
            out.append((serial, int(message["code"])))
        return out

    def start_error(self, serial: int) -> str | None:
        """Why the process of an early-answered start (see `spawn`) never ran its command, once its exit
        has been read; None when it did. Forgotten once asked."""
        return self._failures.pop(serial, None)

    def close(self) -> None:
        """Ends the helper (it exits when its request socket closes); the processes it started go on."""
        for sock in (self._requests, self._exits):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


# -- the helper's side ---------------------------------------------------------------------------


class _Helper:
    def __init__(self, requests: socket.socket, exits: socket.socket):
        self.requests = requests
        self.exits = exits
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.clone3 = True  # until the kernel refuses it
        self.serial = 0
        self.children: dict[int, int] = {}  # pid -> serial of each child not yet reaped
        # pid -> the read end of its set-up report pipe, for each child answered before it exec'd:
        # read when it is reaped (its write end closed by then: at the exec, or at its exit)
        self.setups: dict[int, int] = {}

    def serve(self) -> None:
        wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # only to wake the select below
        while True:
            requests = self.requests.fileno()
            ready, _, _ = select.select([requests, wake_r], [], [])
            if wake_r in ready:
                try:
                    os.read(wake_r, 4096)
                except BlockingIOError:
                    pass
            if requests in ready:
                request = _recv(self.requests)
                if request is None:
                    return  # the controller has gone or closed us; the attempts live on
                _send(self.requests, self.start(request))
            self.reap()

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            serial = self.children.pop(pid, 0)
            report: dict = {"serial": serial, "code": os.waitstatus_to_exitcode(status)}
            setup = self.setups.pop(pid, None)
            if setup is not None:
                failure = _read_all(setup)
                if failure:
                    report["error"] = failure.decode(errors="replace").partition(":")[2]
            try:
                _send(self.exits, report)
            except OSError:
                pass  # the controller has gone; a new one reads the exit file instead

    def start(self, request: dict) -> dict:
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        cgroup_fd = -1
        try:
            if request["cgroup"] and self.clone3:
                cgroup_fd = os.open(request["cgroup"], os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            pid = self.clone(cgroup_fd)
            if pid == 0:
                _child(request, err_w, joined=cgroup_fd >= 0, libc=self.libc)  # never returns
        except OSError as exc:
            os.close(err_r)
            os.close(err_w)
            return {"errno": exc.errno or errno.EIO, "error": f"cannot start the process: {exc.strerror or exc}"}
        finally:
            if cgroup_fd >= 0:
                os.close(cgroup_fd)
        os.close(err_w)
        if request.get("early"):
            self.serial += 1
            self.children[pid] = self.serial
            self.setups[pid] = err_r
            return {"pid": pid, "serial": self.serial, "at_ms": int(time.time() * 1000)}
        failure = _read_all(err_r)
        if not failure:  # the exec happened (the pipe closed on it)
            self.serial += 1
            self.children[pid] = self.serial
            return {"pid": pid, "serial": self.serial}
        os.waitpid(pid, 0)  # reaped here, so its exit is never reported for a pid the caller never got
        code, _, message = failure.decode(errors="replace").partition(":")
        return {"errno": int(code) if code.isdigit() else errno.EIO, "error": message}

    def clone(self, cgroup_fd: int) -> int:
        """fork(), or clone3 into the cgroup open as `cgroup_fd`: 0 in the child, its pid in the parent."""
        if cgroup_fd < 0:
            return os.fork()
        args = _CloneArgs(flags=CLONE_INTO_CGROUP, exit_signal=signal.SIGCHLD, cgroup=cgroup_fd)
        pid = self.libc.syscall(SYS_CLONE3, ctypes.byref(args), ctypes.sizeof(args))
        if pid >= 0:
            return pid
        code = ctypes.get_errno()
        if code in (errno.ENOSYS, errno.EPERM, errno.E2BIG, errno.EINVAL, errno.EOPNOTSUPP):
            self.clone3 = False  # refused outright: the children join their cgroups themselves
            return os.fork()
        raise OSError(code, os.strerror(code))


def _memfd(data: bytes) -> int:
    """An in-memory file holding `data`, open for reading at its start."""
    fd = os.memfd_create("iris-env")
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _read_all(fd: int) -> bytes:
    """Everything left in the pipe `fd` (its write ends all closed), which it then closes."""
    data = b""
    try:
        while chunk := os.read(fd, 4096):
            data += chunk
    finally:
        os.close(fd)
    return data


def _child(request: dict, err_w: int, joined: bool, libc) -> None:
    """Runs in the new process: sets it up and execs, or reports why not on `err_w`."""
    try:
        os.setsid()
        if request["cgroup"] and not joined:
            with open(os.path.join(request["cgroup"], "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
        if request["subreaper"]:
            libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        for target, path, flags in (
            (0, "/dev/null", os.O_RDONLY),
            (1, request["stdout"], os.O_WRONLY | os.O_APPEND | os.O_CREAT),
            (2, request["stderr"], os.O_WRONLY | os.O_APPEND | os.O_CREAT),
        ):
            if target == 0 and request.get("stdin") is not None:
                fd = _memfd(request["stdin"].encode())
            else:
                fd = os.open(path, flags, 0o600)
            if fd != target:
                os.dup2(fd, target)
                os.close(fd)
        os.chdir(request["cwd"])
        if request["umask"] >= 0:
            os.umask(request["umask"])
        if request.get("nproc"):
            resource.setrlimit(resource.RLIMIT_NPROC, (request["nproc"], request["nproc"]))
        # What Python and this helper ignore or catch goes back to the default, as for Popen.
        for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        signal.set_wakeup_fd(-1)
        os.closerange(3, err_w)
        os.closerange(err_w + 1, 65536)
        argv = request["argv"]
        os.execve(argv[0], argv, request["env"])
    except BaseException as exc:  # noqa: BLE001 - the child must never return into the helper's loop
        code = getattr(exc, "errno", None) or errno.EIO
        text = getattr(exc, "strerror", None) or str(exc)
        try:
            os.write(err_w, f"{code}:{text}".encode()[:4000])
        except OSError:
            pass
    finally:
        os._exit(127)


def main(argv: list[str]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a ^C in the controller's terminal is the controller's
    # One set-up pipe held per running child answered early: as many as the hard limit allows.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            pass
    requests = socket.socket(fileno=int(argv[1]))
    exits = socket.socket(fileno=int(argv[2]))
    for sock in (requests, exits):
        sock.set_inheritable(False)
    _Helper(requests, exits).serve()


if __name__ == "__main__":
    main(sys.argv)
