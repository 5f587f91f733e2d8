"""What staging a big workspace costs the scheduling thread and the disk, before and after.

A workspace of `--files` small files (20,000 by default) is unpacked once, as a submit does, and a
job of `--replicas` replicas (45) is started on a real local backend running as root, each attempt
under a uid of its own, as a root controller's are:

  before  the copy the tick made per attempt until now (`own_uid.give_workspace`: every file
          copied and handed to the task's uid, on the scheduling thread), timed for a few replicas
          (`--before`, 3) and scaled to the job; disk is what those copies hold (blocks of distinct
          files), per replica and for the job.
  after   `LocalBackend.start` of every replica, as the tick calls it: the time the tick spends
          (all starts together, and the longest one), then the time until every replica's process
          runs (its folder made by the staging pool), and the time from one more start of another
          user's attempt without a workspace, made right after, until its process runs. Disk: the
          blocks of distinct files under the attempts' folders.

  controller  the same job submitted to a real root controller (tasks under uids of their own, a
          local backend of 4 workers with room for every replica), then another user's `true`:
          the time from that submit until it succeeded, and until every replica of the big job
          runs; the controller must still be up at the end (its watchdog ended it before).

Prints a bare `python -c pass` beside, as a scale for this host. Run as root (the uids need it).
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from iris.backends.local.backend import LocalBackend  # noqa: E402
from iris.backends.local.own_uid import give_workspace  # noqa: E402
from iris.backends.protocol import LaunchSpec  # noqa: E402
from iris.backends.staging import content_id, unpack_bundle  # noqa: E402
from iris.core.config import LocalBackendConfig  # noqa: E402
from iris.core.resources import Resources  # noqa: E402

UID = 231_000


def bundle(files: int) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for i in range(files):
            zf.writestr(f"pkg{i // 200}/mod{i % 200}.py", f"VALUE = {i}\n")
    return buf.getvalue()


def disk_bytes(*roots: Path) -> tuple[int, int]:
    """(bytes of blocks, distinct files) of the regular files under `roots`, each inode counted once."""
    seen: dict[tuple[int, int], int] = {}
    for root in roots:
        for folder, _, names in os.walk(root):
            for name in names:
                st = os.lstat(os.path.join(folder, name))
                seen[(st.st_dev, st.st_ino)] = st.st_blocks * 512
    return sum(seen.values()), len(seen)


def python_pass_ms() -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return (time.perf_counter() - t) * 1000


def spec(job: str, index: int, layers: tuple[str, ...], command: tuple[str, ...]) -> LaunchSpec:
    return LaunchSpec(
        f"{job}/{index}:0", job, index, 0, "cpu-0", command, {}, Resources(cpu=0.1),
        workspace=layers, uid=UID + index, gid=UID + index,
    )  # fmt: skip


def controller_phase(base: Path, data: bytes, replicas: int) -> None:
    from common import Controller, local_backend, wait_until

    from iris.rpc import controller_pb2 as pb
    from iris.rpc.controller_connect import ControllerServiceClientSync

    auth = {"task_uids": {"enabled": True, "range": "240000-249999"}}
    with Controller("staging", base, [local_backend(workers=4, cpu=64, memory="256G")], extra={"auth": auth}) as ctl:
        c = ControllerServiceClientSync(ctl.url)
        small_res = pb.Resources(cpu=0.5, memory_bytes=64 * 1024**2)
        t = time.perf_counter()
        big = c.launch_job(
            pb.LaunchJobRequest(
                name="big", user="alice", command=["sleep", "300"], replicas=replicas, workspace_bundle=data,
                resources=small_res,
            )
        ).job_id  # fmt: skip
        submit_s = time.perf_counter() - t
        t = time.perf_counter()
        small = c.launch_job(pb.LaunchJobRequest(name="small", user="bob", command=["true"], resources=small_res))
        state = lambda job: c.get_job_status(pb.GetJobStatusRequest(job_id=job, include_tasks=True))  # noqa: E731
        wait_until(lambda: state(small.job_id).job.state == "SUCCEEDED", 120, what="bob's job to succeed")
        small_s = time.perf_counter() - t
        wait_until(
            lambda: sum(x.state == "RUNNING" for x in state(big).tasks) == replicas, 600, what="every replica to run"
        )
        all_s = time.perf_counter() - t
        alive = ctl.proc is not None and ctl.proc.poll() is None
        c.terminate_job(pb.TerminateJobRequest(job_id=big))
        print(f"controller: the big submit answered in {submit_s:.1f} s; another user's `true` succeeded"
              f" {small_s * 1000:.0f} ms after its submit; every replica running {all_s:.1f} s after it;"
              f" controller {'still up' if alive else 'GONE'}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=20_000)
    parser.add_argument("--replicas", type=int, default=45)
    parser.add_argument("--before", type=int, default=3, help="replicas copied the old way (scaled to --replicas)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root: each attempt gets a uid of its own, as under a root controller")
    state = Path(tempfile.mkdtemp(prefix="iris-bench-staging-"))
    try:
        data = bundle(args.files)
        t = time.perf_counter()
        layer = str(unpack_bundle(state, content_id(data), data))
        unpack_s = time.perf_counter() - t
        shared, _ = disk_bytes(Path(layer))
        print(f"python -c pass: {python_pass_ms():.0f} ms; bundle: {args.files} files, {len(data)} bytes zipped,"
              f" unpacked once in {unpack_s:.2f} s, {shared / 1e6:.1f} MB on disk")  # fmt: skip

        copies = state / "before"
        copies.mkdir()
        t = time.perf_counter()
        for i in range(args.before):
            give_workspace(copies / str(i), (layer,), UID + i, UID + i)
        per_copy = (time.perf_counter() - t) / args.before
        before_disk, _ = disk_bytes(copies)
        per_disk = before_disk / args.before
        print(f"before: {per_copy:.2f} s on the tick per replica -> {per_copy * args.replicas:.1f} s for"
              f" {args.replicas}; disk {per_disk / 1e6:.1f} MB per replica -> {per_disk * args.replicas / 1e6:.0f} MB"
              " for the job (plus the shared copy)")  # fmt: skip
        shutil.rmtree(copies)

        backend = LocalBackend(LocalBackendConfig(id="cpu", kind="local"), state, tasks_have_own_uids=True)
        try:
            starts = []
            began = time.perf_counter()
            for i in range(args.replicas):
                t = time.perf_counter()
                backend.start(spec("/alice/big", i, (layer,), ("sleep", "60")))
                starts.append(time.perf_counter() - t)
            ticked = time.perf_counter() - began
            t = time.perf_counter()
            backend.start(spec("/bob/small", 0, (), ("true",)))
            small = "/bob/small/0:0"
            seen: set[str] = set()
            small_s = all_s = 0.0
            while len(seen) < args.replicas + 1 and time.perf_counter() - began < 600:
                events = backend.poll()
                for s in events.spawned:
                    if s.attempt_id == small and not small_s:
                        small_s = time.perf_counter() - t
                    seen.add(s.attempt_id)
                backend.ack(events)
                time.sleep(0.005)
            all_s = time.perf_counter() - began
            after_disk, files = disk_bytes(backend.root, Path(layer))
            print(f"after: {ticked * 1000:.0f} ms on the tick for {args.replicas} starts (longest"
                  f" {max(starts) * 1000:.1f} ms); every replica running after {all_s:.1f} s; another user's"
                  f" attempt running {small_s * 1000:.0f} ms after its start; disk under the attempts"
                  f" and the shared copy {after_disk / 1e6:.2f} MB ({files} distinct files) for the job")  # fmt: skip
        finally:
            backend.shutdown()
        controller_phase(state / "cluster", data, args.replicas)
    finally:
        shutil.rmtree(state, ignore_errors=True)


if __name__ == "__main__":
    main()
