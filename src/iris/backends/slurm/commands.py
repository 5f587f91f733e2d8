"""What the Slurm backend says to Slurm and how it reads the answers: `sbatch` arguments built from
an attempt's request, and the parsing of `squeue` and `sinfo` output into frozen records.

Everything here but `SlurmCommands.run` is pure, so the translation both ways is unit-tested
without a Slurm. The backend talks to Slurm through its command-line tools rather than slurmrestd:
the tools are on every Slurm login node and speak to whatever Slurm version runs there, while
slurmrestd is an optional daemon (often not deployed), refuses to run as root, needs its own auth
setup (JWT or a local socket per user), and changes its OpenAPI version with every Slurm release;
the Python bindings (pyslurm) are built against one exact Slurm version. The tools' cost is a
process per call, which is why the backend makes one `squeue` call per poll for all its attempts.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from iris.backends.privileged import fixed_env, program
from iris.backends.protocol import LaunchSpec
from iris.core.config import SlurmBackendConfig

MB = 1024**2
SQUEUE_FIELDS = "JobID:|,State:|,Reason:|,exit_code:|,NodeList:|,Name:|"
SINFO_FIELDS = "NodeHost:|,CPUsState:|,Memory:|,AllocMem:|,Gres:|,GresUsed:|,StateLong:|,NodeList:|,NodeAddr:|"
# sbatch failures that say Slurm (not the job) is at fault right now: worth retrying.
_TRANSIENT = re.compile(
    r"timed out|unable to contact|temporarily unavailable|try again|connection refused|"
    r"slurm_persist_conn|Socket timed out|Zero Bytes were transmitted|communication",
    re.IGNORECASE,
)
_GRES = re.compile(r"gpu(?::([A-Za-z0-9_.-]+))?:(\d+)")


class SlurmCommandError(Exception):
    def __init__(self, message: str, transient: bool):
        super().__init__(message)
        self.transient = transient


@dataclass(frozen=True, slots=True)
class SlurmJob:
    """One row of `squeue`: a Slurm job's id, name (the attempt id), state and why it waits."""

    job_id: int
    name: str
    state: str  # PENDING, RUNNING, COMPLETED, FAILED, TIMEOUT, …
    reason: str  # None, Resources, Priority, PartitionConfig, …
    exit_status: int  # the raw wait status: exit code << 8, or the signal number
    nodes: str = ""  # the node it runs on (Slurm's NodeList), once it has started


@dataclass(frozen=True, slots=True)
class SlurmNode:
    """One row of `sinfo -N` for the partition."""

    name: str
    cpus: int
    cpus_allocated: int
    memory_mb: int
    memory_allocated_mb: int
    gpus: Mapping[str, int]  # GRES type ("" when untyped) -> count
    gpus_used: Mapping[str, int]
    state: str
    node_name: str = ""  # the node's name, as squeue's NodeList names it
    address: str = ""  # where Slurm reaches the node (NodeAddr)

    @property
    def usable(self) -> bool:
        """Up and accepting work: not down, drained, failing or not responding (`*`)."""
        s = self.state.lower()
        return not ("*" in s or any(w in s for w in ("down", "drain", "fail", "maint", "unknown", "reserved")))


def decode_exit(status: int) -> tuple[int, int]:
    """(exit code, signal) from Slurm's raw wait status (`squeue -O exit_code`)."""
    return (status >> 8) & 0xFF, status & 0x7F


def shell_exit_code(status: int) -> int:
    """The exit code a shell would show: 128 + signal when a signal ended the job."""
    code, sig = decode_exit(status)
    return 128 + sig if sig else code


def parse_squeue(text: str) -> list[SlurmJob]:
    jobs = []
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) < 6 or not parts[0].strip().isdigit():
            continue
        # The name is last and may itself hold "|": everything after the fixed fields.
        name = "|".join(parts[5:-1]) if len(parts) > 6 else parts[5]
        status = parts[3].strip()
        jobs.append(
            SlurmJob(
                int(parts[0]),
                name.strip(),
                parts[1].strip(),
                parts[2].strip(),
                int(status) if status.lstrip("-").isdigit() else 0,
                parts[4].strip(),
            )
        )
    return jobs


def _gres_counts(text: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for item in re.split(r",(?![^()]*\))", text):
        m = _GRES.match(item.strip())
        if m:
            counts[(m.group(1) or "").lower()] = counts.get((m.group(1) or "").lower(), 0) + int(m.group(2))
    return counts


def parse_sinfo(text: str) -> list[SlurmNode]:
    nodes = []
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) < 7:
            continue
        cpu_state = parts[1].split("/")  # allocated/idle/other/total
        try:
            alloc, total = int(cpu_state[0]), int(cpu_state[3])
            memory, mem_alloc = int(parts[2].strip() or 0), int(parts[3].strip() or 0)
        except (ValueError, IndexError):
            continue
        nodes.append(
            SlurmNode(
                parts[0].strip(),
                total,
                alloc,
                memory,
                mem_alloc,
                _gres_counts(parts[4]),
                _gres_counts(parts[5]),
                parts[6].strip(),
                parts[7].strip() if len(parts) > 7 else "",
                parts[8].strip() if len(parts) > 8 else "",
            )
        )
    return nodes


def sbatch_argv(
    config: SlurmBackendConfig,
    cluster: str,
    spec: LaunchSpec,
    script: str,
    folder: str,
    workdir: str,
    argv: Sequence[str],
    env_fd: int,
) -> list[str]:
    """The `sbatch` command line for one attempt: one batch job named by the attempt id, run as the
    attempt's uid where it has one, with exactly the environment sbatch reads from `env_fd` (NUL-
    separated, see `privileged.nul_separated`) besides what Slurm sets itself: sbatch's own
    environment is not the job's, and the job's values never appear on a command line."""
    r = spec.resources
    args = [
        "sbatch",
        "--parsable",
        f"--job-name={spec.attempt_id}",
        f"--comment=iris cluster={cluster}",
        f"--partition={config.partition}",
        "--nodes=1",
        "--ntasks=1",
        f"--cpus-per-task={max(1, math.ceil(r.cpu))}",
        f"--chdir={workdir}",
        f"--output={folder}/stdout",
        f"--error={folder}/stderr",
        "--export=NIL",
        f"--export-file={env_fd}",
    ]
    if spec.uid is not None:
        # As root, sbatch submits the job as this user; Slurm runs it under that uid and gid.
        args += [f"--uid={spec.uid}", f"--gid={spec.uid if spec.gid is None else spec.gid}"]
    if config.account:
        args.append(f"--account={config.account}")
    if config.qos:
        args.append(f"--qos={config.qos}")
    if r.memory > 0:
        args.append(f"--mem={math.ceil(r.memory / MB)}M")
    if r.device.kind == "gpu" and r.device.count > 0:
        variant = r.device.variant.lower()
        args.append(f"--gres=gpu:{variant}:{r.device.count}" if variant else f"--gres=gpu:{r.device.count}")
    if spec.timeout_s > 0:
        # Iris ends the attempt at its timeout itself (and reports it as timed out); Slurm's limit,
        # a minute later, is the backstop for when no controller is watching.
        args.append(f"--time={math.ceil(spec.timeout_s / 60) + 1}")
    args += list(config.sbatch_args)
    return [*args, script, folder, *argv]


class SlurmCommands:
    """Runs Slurm's tools as the controller: by absolute path, with a fixed environment (the
    configured SLURM_CONF, or the controller's own), and a timeout.

    Each tool is looked up once, on the controller's PATH, which its operator set; nothing a job
    sends can change which program runs or what it reads from its environment."""

    TOOLS = ("sbatch", "squeue", "scancel", "sinfo")

    def __init__(self, config: SlurmBackendConfig):
        self.timeout = config.command_timeout
        conf = config.slurm_conf or os.environ.get("SLURM_CONF", "")
        self.conf_env = {"SLURM_CONF": conf} if conf else {}
        self.env = fixed_env(**self.conf_env)
        self.programs = {name: program(name) for name in self.TOOLS}

    def run(self, argv: Sequence[str], timeout: float | None = None, pass_fds: Sequence[int] = ()) -> str:
        """stdout of a successful command; SlurmCommandError (saying whether it is worth retrying).
        `argv[0]` names one of TOOLS; `pass_fds` are file descriptors the command inherits."""
        command = [self.programs.get(argv[0], argv[0]), *argv[1:]]
        try:
            res = subprocess.run(
                command,
                env=self.env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=timeout or self.timeout,
                pass_fds=tuple(pass_fds),
            )
        except subprocess.TimeoutExpired:
            raise SlurmCommandError(f"{argv[0]} did not answer within {timeout or self.timeout:g}s", True) from None
        except OSError as exc:
            raise SlurmCommandError(
                f"cannot run {command[0]}: {exc.strerror or exc} (is Slurm installed?)", True
            ) from None
        if res.returncode != 0:
            message = res.stderr.strip() or f"{argv[0]} exited with code {res.returncode}"
            raise SlurmCommandError(message, bool(_TRANSIENT.search(message)))
        return res.stdout

    def squeue(self, job_ids: Sequence[int] = (), names: Sequence[str] = ()) -> list[SlurmJob]:
        """One call for every job asked about, finished ones included (while Slurm remembers them)."""
        argv = ["squeue", "--noheader", "--states=all", f"--Format={SQUEUE_FIELDS}"]
        if job_ids:
            argv.append("--jobs=" + ",".join(map(str, job_ids)))
        if names:
            argv.append("--name=" + ",".join(names))
        try:
            return parse_squeue(self.run(argv))
        except SlurmCommandError as exc:
            if job_ids and "invalid job id" in str(exc).lower():
                return []  # Slurm knows none of the ids asked about (it has forgotten them all)
            raise

    def sinfo(self, partition: str) -> list[SlurmNode]:
        return parse_sinfo(
            self.run(["sinfo", "--noheader", "--Node", f"--partition={partition}", f"--Format={SINFO_FIELDS}"])
        )

    def scancel(self, job_ids: Sequence[int] = (), names: Sequence[str] = ()) -> None:
        if job_ids:
            self.run(["scancel", *map(str, job_ids)])
        for name in names:
            self.run(["scancel", f"--name={name}"])
