"""A throw-away single-node Slurm, started and stopped by PID: what the Slurm backend's tests and
the benchmarks that compare Iris with Slurm on the same machine run against.

One module serves both so the recipe (and its gotchas) lives in one place. `SlurmCluster(base)`
writes a slurm.conf under `base` (one node `localhost` with 2 CPUs, so 2 one-CPU job slots;
optionally `gpus` fake GPUs of GRES type `gpu_type`, device files that are symlinks to /dev/null,
which Slurm accepts and hands out through CUDA_VISIBLE_DEVICES; `batch_sched_delay=0`; no
accounting; `JobCompType=jobcomp/filetxt` so each
finished job leaves one line in `base/jobcomp.txt`; daemons on free ports, bound to 127.0.0.1),
starts its own `munged` (own key and socket under `base`, running as the munge user), `slurmctld`
and `slurmd` in the foreground as children of this process, and stops them by PID. Before stopping
the daemons it cancels every job it knows of (slurmd does not kill running jobs when it stops), and
afterwards kills, by PID, any process still carrying this cluster's SLURM_CONF in its environment.
Nothing outside `base` is touched.

It needs `sbatch`, `slurmctld`, `slurmd`, `munged` and `mungekey` on PATH (Debian/Ubuntu:
`apt-get install -y slurm-wlm munge`) and root (the daemons run as root, munged as `munge`).

    .venv/bin/python -m iris.testing.slurm   # start one, run `sbatch --wrap true`, print timings, stop
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REQUIRED = ("sbatch", "scancel", "squeue", "scontrol", "slurmctld", "slurmd", "munged", "mungekey")
INSTALL_HINT = "apt-get install -y slurm-wlm munge   (Debian/Ubuntu; then run as root)"
_JOBID = re.compile(rb"JobId=(\d+)\b.*?JobState=(\S+)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _which(name: str) -> str | None:
    return shutil.which(name) or next(
        (str(p) for d in ("/usr/sbin", "/usr/bin", "/sbin") if (p := Path(d) / name).exists()), None
    )


def _tool(name: str) -> str:
    """The path of a Slurm or munge program (SlurmError when it is not installed)."""
    path = _which(name)
    if path is None:
        raise SlurmError(f"{name} not found; install Slurm with: {INSTALL_HINT}")
    return path


def unavailable_reason() -> str | None:
    """None when a Slurm can be started here; otherwise why not."""
    missing = [n for n in REQUIRED if _which(n) is None]
    if missing:
        return f"Slurm not found (missing {', '.join(missing)}); install it with: {INSTALL_HINT}"
    if os.geteuid() != 0:
        return "Slurm is installed but its daemons are started as root here; run as root to use it"
    try:
        pwd.getpwnam("munge")
    except KeyError:
        return "Slurm is installed but there is no `munge` user to run munged; reinstall the munge package"
    return None


class SlurmError(RuntimeError):
    pass


class SlurmCluster:
    def __init__(
        self,
        base: Path,
        cpus: int = 2,
        real_memory_mb: int = 4000,
        mem_per_cpu_mb: int = 500,
        gpus: int = 0,
        gpu_type: str = "fake",
        partition: str = "debug",
        max_time: str = "INFINITE",
    ):
        self.base = Path(base)
        self.gpus = gpus
        self.gpu_type = gpu_type
        self.partition = partition
        self.max_time = max_time  # the partition's MaxTime (minutes, or INFINITE)
        self.cpus = cpus
        self.real_memory_mb = real_memory_mb
        self.mem_per_cpu_mb = mem_per_cpu_mb
        self.conf = self.base / "slurm.conf"
        self.jobcomp = self.base / "jobcomp.txt"
        self.outdir = self.base / "out"
        self.munge_dir = self.base / "munge"
        self.socket = self.munge_dir / "munge.sock"
        self.procs: dict[str, subprocess.Popen] = {}
        self.submitted: set[int] = set()
        self._jobcomp_pos = 0
        self._finished: dict[int, str] = {}

    # -- lifecycle -------------------------------------------------------------------------------

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def start(self, timeout: float = 30.0) -> SlurmCluster:
        try:
            self._start(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, timeout: float) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        self.base.chmod(0o755)  # munged (user munge) must reach its socket folder
        for parent in self.base.resolve().parents:
            if not parent.stat().st_mode & 0o001:
                raise SlurmError(
                    f"{parent} is not searchable by other users, so munged cannot reach "
                    f"{self.munge_dir}; put the Slurm folder elsewhere (e.g. its own tempfile.mkdtemp)"
                )
        for d in ("state", "spool", "log", "out", "fakegpu"):
            (self.base / d).mkdir(exist_ok=True)
        self._start_munged(timeout)
        for i in range(self.gpus):
            link = self.base / "fakegpu" / f"nvidia{i}"
            if not link.is_symlink():
                link.symlink_to("/dev/null")
        self.conf.write_text(self._config())
        if self.gpus:
            (self.base / "gres.conf").write_text(
                "AutoDetect=off\n"
                f"NodeName=localhost Name=gpu Type={self.gpu_type} File={self.base}/fakegpu/nvidia[0-{self.gpus - 1}]\n"
            )
        log = open(self.base / "log" / "daemons.out", "ab")
        self.procs["slurmctld"] = subprocess.Popen(
            [_tool("slurmctld"), "-D", "-i", "-f", str(self.conf)],
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while not self._ping():
            self._check_alive("slurmctld")
            if time.monotonic() > deadline:
                raise SlurmError(f"slurmctld did not answer within {timeout:g}s; see {self.base}/log")
            time.sleep(0.1)
        self.procs["slurmd"] = subprocess.Popen(
            [_tool("slurmd"), "-D", "-N", "localhost", "-f", str(self.conf)],
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        log.close()
        while True:
            self._check_alive("slurmctld")
            self._check_alive("slurmd")
            out = self._run(["sinfo", "-h", "-o", "%T"], timeout=2, check=False)
            if out is not None and re.search(r"^(idle|mixed)", out, re.M):
                return
            if time.monotonic() > deadline:
                raise SlurmError(f"the Slurm node did not become idle within {timeout:g}s; see {self.base}/log")
            time.sleep(0.1)

    def _start_munged(self, timeout: float) -> None:
        self.munge_dir.mkdir(exist_ok=True)
        key = self.munge_dir / "munge.key"
        if not key.exists():
            subprocess.run([_tool("mungekey"), "-c", "-k", str(key)], check=True, capture_output=True)
        shutil.chown(self.munge_dir, "munge", "munge")
        shutil.chown(key, "munge", "munge")
        self.munge_dir.chmod(0o755)  # the socket folder must be reachable by every client
        key.chmod(0o400)
        self.procs["munged"] = subprocess.Popen(
            [
                _tool("munged"),
                "-F",
                f"--socket={self.socket}",
                f"--key-file={key}",
                f"--pid-file={self.munge_dir / 'munged.pid'}",
                f"--log-file={self.munge_dir / 'munged.log'}",
                f"--seed-file={self.munge_dir / 'munged.seed'}",
            ],
            user="munge",
            group="munge",
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=open(self.base / "log" / "munged.err", "ab"),
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while not self.socket.exists():
            self._check_alive("munged")
            if time.monotonic() > deadline:
                raise SlurmError("munged did not create its socket")
            time.sleep(0.02)

    def _config(self) -> str:
        b = self.base
        gres = f" Gres=gpu:{self.gpu_type}:{self.gpus}" if self.gpus else ""
        return f"""ClusterName=irisbench
SlurmctldHost=localhost
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={self.socket}
CredType=cred/munge
StateSaveLocation={b}/state
SlurmdSpoolDir={b}/spool
SlurmctldPidFile={b}/slurmctld.pid
SlurmdPidFile={b}/slurmd.pid
SlurmctldLogFile={b}/log/slurmctld.log
SlurmdLogFile={b}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU={self.mem_per_cpu_mb}
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
SchedulerParameters=batch_sched_delay=0
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc={self.jobcomp}
{"GresTypes=gpu" if self.gpus else ""}
NodeName=localhost NodeHostname=localhost NodeAddr=127.0.0.1 CPUs={self.cpus} Sockets=1 CoresPerSocket={self.cpus} ThreadsPerCore=1 RealMemory={self.real_memory_mb}{gres} State=UNKNOWN
PartitionName={self.partition} Nodes=localhost Default=YES MaxTime={self.max_time} State=UP
"""

    def _check_alive(self, name: str) -> None:
        proc = self.procs.get(name)
        if proc is not None and proc.poll() is not None:
            tail: list[str] = []
            for logs in (
                self.base / "log" / f"{name}.log",
                self.base / "log" / f"{name}.err",
                self.base / "log" / "daemons.out",
            ):
                if logs.exists() and logs.stat().st_size:
                    tail = logs.read_text(errors="replace").strip().splitlines()[-3:]
                    break
            raise SlurmError(f"{name} exited with code {proc.returncode}: {' | '.join(tail)}")

    def _ping(self) -> bool:
        out = self._run(["scontrol", "ping"], timeout=2, check=False)
        return out is not None and "UP" in out

    def stop(self) -> None:
        """Cancels this cluster's jobs, stops its daemons by PID, then ends any process left with its SLURM_CONF."""
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            try:
                self.cancel_all()
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline and not self.queue_empty():
                    time.sleep(0.1)
            except Exception:  # noqa: BLE001 - stopping must go on
                pass
        for name in ("slurmd", "slurmctld", "munged"):
            proc = self.procs.pop(name, None)
            if proc is None or proc.poll() is not None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for pid in self._leftovers():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

    def _leftovers(self) -> list[int]:
        """Processes (job steps, slurmstepd) that still carry this cluster's SLURM_CONF."""
        marker = f"SLURM_CONF={self.conf}".encode()
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    if marker in f.read().split(b"\0"):
                        found.append(int(entry))
            except OSError:
                continue
        return found

    def __enter__(self) -> SlurmCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- client side -----------------------------------------------------------------------------

    def _run(self, argv: list[str], timeout: float = 30, check: bool = True) -> str | None:
        try:
            res = subprocess.run(
                [_which(argv[0]) or argv[0], *argv[1:]], env=self.env, capture_output=True, text=True, timeout=timeout
            )
        except subprocess.TimeoutExpired:
            if check:
                raise SlurmError(f"{argv[0]} timed out after {timeout:g}s") from None
            return None
        if res.returncode != 0:
            if check:
                raise SlurmError(f"{' '.join(argv)} failed: {res.stderr.strip()}")
            return None
        return res.stdout

    def sbatch_argv(self, wrap: str, *extra: str) -> list[str]:
        return [_tool("sbatch"), "--parsable", f"--output={self.outdir}/%j.out", *extra, "--wrap", wrap]

    def sbatch(self, wrap: str, *extra: str) -> int:
        """Submits a batch job (one `sbatch` process); returns its id."""
        out = self._run(self.sbatch_argv(wrap, *extra)) or ""
        job_id = int(out.strip().split(";")[0])
        self.submitted.add(job_id)
        return job_id

    def scancel(self, *job_ids: int) -> None:
        if job_ids:
            self._run(["scancel", *map(str, job_ids)])

    def cancel_all(self) -> None:
        """Cancels every job this cluster has (it is ours alone)."""
        out = self._run(["squeue", "-h", "-o", "%i"], timeout=10, check=False) or ""
        ids = [int(x) for x in out.split() if x.isdigit()]
        for i in range(0, len(ids), 500):
            self._run(["scancel", *map(str, ids[i : i + 500])], timeout=30, check=False)

    def queue_empty(self) -> bool:
        out = self._run(["squeue", "-h", "-o", "%i"], timeout=5, check=False)
        return out is not None and not out.strip()

    def state(self, job_id: int) -> str:
        """The job's state as squeue shows it ('' once it has left the queue)."""
        out = self._run(["squeue", "-h", "-j", str(job_id), "-o", "%T"], check=False)
        return (out or "").strip()

    def finished(self) -> dict[int, str]:
        """Jobs that have finished, from the job-completion log: id -> final state (COMPLETED, CANCELLED, …)."""
        try:
            with open(self.jobcomp, "rb") as f:
                f.seek(self._jobcomp_pos)
                data = f.read()
        except FileNotFoundError:
            return self._finished
        cut = data.rfind(b"\n") + 1
        self._jobcomp_pos += cut
        for m in _JOBID.finditer(data[:cut]):
            self._finished[int(m.group(1))] = m.group(2).decode()
        return self._finished

    def job_pids(self, job_id: int) -> list[int]:
        """The job's own processes (the batch script and what it runs), not slurmstepd."""
        marker = f"SLURM_JOB_ID={job_id}".encode()
        conf = f"SLURM_CONF={self.conf}".encode()
        pids = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    env = f.read().split(b"\0")
                with open(f"/proc/{entry}/comm", "rb") as f:
                    comm = f.read().strip()
            except OSError:
                continue
            if marker in env and conf in env and not comm.startswith(b"slurmstepd"):
                pids.append(int(entry))
        return pids


def main() -> int:
    reason = unavailable_reason()
    if reason:
        print(reason)
        return 0
    base = Path(tempfile.mkdtemp(prefix="iris-slurm-"))
    cluster = SlurmCluster(base)
    try:
        t0 = time.perf_counter()
        cluster.start()
        print(f"started in {time.perf_counter() - t0:.2f}s ({base})")
        t0 = time.perf_counter()
        job = cluster.sbatch("true")
        submit = time.perf_counter() - t0
        deadline = time.monotonic() + 30
        while job not in cluster.finished() and time.monotonic() < deadline:
            time.sleep(0.005)
        print(
            f"sbatch {submit * 1000:.1f} ms; job {job} {cluster.finished().get(job, 'NOT FINISHED')} "
            f"{time.perf_counter() - t0:.2f}s after submit"
        )
    finally:
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
