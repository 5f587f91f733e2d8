"""A worker daemon's fence: a small guard process that ends every attempt of the daemon the moment
the daemon can no longer vouch for them, so that an attempt never runs on while the controller
retries it elsewhere.

Two things end a daemon's say over its attempts, and the guard watches both:

- **The daemon dies.** The guard reads a pipe whose only write end the daemon holds (not inherited
  by anything it starts). A `kill -9` of the daemon, an OOM kill, a crash: the kernel closes the
  pipe, the guard reads end-of-file and kills every attempt at once.
- **The daemon's lease runs out.** Each call the controller answers renews the daemon's lease until
  the call's start plus `lease_s` (the controller's `fence_lease`, shorter than its grace period),
  and the daemon writes the new deadline to the pipe. A daemon that is stopped (SIGSTOP), hung or
  cut off from the controller renews nothing: at the deadline the guard kills every attempt, and
  keeps killing what appears until the lease is renewed. The controller declares the worker dead
  only a grace period after its last call, past the deadline, and only then retries its attempts.
  A refused connection to the controller's address renews the lease too: no controller runs, and
  one that starts holds the attempts it finds for longer than a lease before retrying any, so a
  controller's restart leaves the attempts running.

The guard kills the way a restarted daemon clears its leftovers (`kill_leftover_attempts`: each
attempt's cgroup, else its process group), plus the daemon's containers when it runs images. It
runs in a session of its own, so a signal to the daemon's process group does not reach it, and
holds the daemon's work-dir lock (an inherited descriptor), so a new daemon in the same folder
waits until the guard has finished. A daemon that stops on purpose ends its attempts itself and
retires the guard, which then leaves at once: the daemon's stop stays as fast as before.

Deadlines travel as CLOCK_MONOTONIC seconds, the clock both processes share. The guard imports the
killing code only when a kill may be near (end-of-file, or half the lease gone), so an idle daemon's
guard costs a bare interpreter's start.
"""

from __future__ import annotations

import logging
import math
import os
import select
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

log = logging.getLogger("iris.worker")

RECORD = struct.Struct("!dd")  # (deadline, lease) in monotonic seconds; a NaN deadline retires the guard
RESCAN_S = 0.5  # while the lease is out, how often the guard looks for attempts to kill again
LAST_LOOK_S = 0.2  # after the daemon died: a start it sent its spawner just before is killed too


class Fence:
    """The daemon's side of its fence: starts the guard, renews the lease, retires the guard."""

    def __init__(self, work_dir: Path, lock_fd: int, containers: Sequence[str] = ()):
        """`lock_fd` is the daemon's work-dir lock, which the guard holds too; `containers`, for a
        daemon that runs images, is the `docker ps --filter` that finds its containers followed by
        the docker command (with its options) that lists and removes them."""
        self.work_dir = work_dir
        self._lock_fd = lock_fd
        self._containers = tuple(containers)
        self.until = -math.inf  # no lease yet: nothing may start
        self.lease = 0.0
        self._write = -1
        self.proc: subprocess.Popen | None = None
        self._start()

    def _start(self) -> None:
        read, self._write = os.pipe()  # neither end is inherited by what the daemon starts
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-m", "iris.worker.fence", str(self.work_dir), str(read), *self._containers],
                stdin=subprocess.DEVNULL,
                pass_fds=(read, self._lock_fd),
                start_new_session=True,
            )
        finally:
            os.close(read)
        os.set_blocking(self._write, False)
        if self.until > -math.inf:
            self._send(self.until, self.lease)

    def valid(self) -> bool:
        """Whether the lease holds now: an attempt may start only while it does."""
        return time.monotonic() < self.until

    def renew(self, since: float, lease_s: float) -> None:
        """Extends the lease to `since` (the monotonic time a call the controller answered was
        sent) plus `lease_s`; a lease of 0 (none given) never runs out, only the daemon's death
        fences its attempts then."""
        until = since + lease_s if lease_s > 0 else math.inf
        if until <= self.until:
            return
        self.until, self.lease = until, lease_s
        self._send(until, lease_s)

    def _send(self, until: float, lease_s: float) -> None:
        try:
            os.write(self._write, RECORD.pack(until, lease_s))
        except BlockingIOError:
            pass  # the guard has not read the older deadlines yet; it reads this one with the next
        except BrokenPipeError:
            log.warning("the fence of this worker exited (code %s); starting a new one", self._exit_code())
            os.close(self._write)
            self._start()

    def _exit_code(self) -> int | None:
        return self.proc.poll() if self.proc is not None else None

    def retire(self) -> None:
        """The daemon stops on purpose and has ended its attempts: the guard leaves without a kill."""
        if self._write < 0:
            return
        try:
            os.set_blocking(self._write, True)
            os.write(self._write, RECORD.pack(math.nan, 0.0))
        except OSError:
            pass
        os.close(self._write)
        self._write = -1


# -- the guard -----------------------------------------------------------------------------------


def _killer(work_dir: Path, containers: Sequence[str]) -> Callable[[], int]:
    """Kills every attempt of the daemon in `work_dir` and, given `containers` (a `docker ps`
    filter, then the docker command), its containers; returns how many it found running."""
    from iris.backends.local.leftovers import kill_leftover_attempts

    def kill() -> int:
        killed = len(kill_leftover_attempts(work_dir))
        if containers:
            found = subprocess.run(
                [*containers[1:], "ps", "-aq", "--filter", containers[0]], capture_output=True, text=True, check=False
            )
            ids = found.stdout.split()
            if ids:
                subprocess.run([*containers[1:], "rm", "-f", *ids], capture_output=True, check=False)
                killed += len(ids)
        return killed

    return kill


def guard(work_dir: Path, fd: int, containers: Sequence[str] = ()) -> str:
    """Watches the daemon's pipe `fd` until the daemon retires it (returns "retired") or dies
    (kills its attempts, returns "fenced"), killing them meanwhile whenever the lease runs out."""
    deadline: float | None = None  # none until the daemon's first lease
    lease = 0.0
    kill: Callable[[], int] | None = None
    out = False  # the lease ran out and has not been renewed since
    buffer = b""
    while True:
        now = time.monotonic()
        left = math.inf if deadline is None else deadline - now
        if kill is None and (left < lease / 2 or out):
            kill = _killer(work_dir, containers)  # a kill may be near: have it ready
        timeout = RESCAN_S if out else (None if left == math.inf else max(0.0, left))
        ready, _, _ = select.select([fd], [], [], timeout)
        if ready:
            data = os.read(fd, 65536)
            if not data:
                kill = kill or _killer(work_dir, containers)
                killed = kill()
                time.sleep(LAST_LOOK_S)
                killed += kill()
                if killed:
                    _say(f"the daemon exited; killed {killed} of its attempts")
                return "fenced"
            buffer += data
            whole = len(buffer) - len(buffer) % RECORD.size
            for at in range(0, whole, RECORD.size):
                until, lease_s = RECORD.unpack_from(buffer, at)
                if math.isnan(until):
                    return "retired"
                if deadline is None or until > deadline:
                    deadline, lease = until, lease_s
            buffer = buffer[whole:]
        if deadline is not None and time.monotonic() >= deadline:
            kill = kill or _killer(work_dir, containers)
            killed = kill()
            if killed or not out:
                _say(f"the daemon's lease ran out; killed {killed} of its attempts")
            out = True
        else:
            out = False


def _say(line: str) -> None:
    print(f"iris worker fence: {line}", file=sys.stderr, flush=True)


def main(argv: list[str]) -> int:
    """`python -m iris.worker.fence WORK_DIR FD [FILTER DOCKER…]`, as `Fence` starts it."""
    guard(Path(argv[0]), int(argv[1]), argv[2:])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
