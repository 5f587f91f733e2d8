"""How a `--runtime docker` worker runs attempts: a job naming an image runs in a container.

The container gets the attempt's cpu and memory as Docker limits (`--cpus`, `--memory`, with swap
capped at the same value so the limit is real), the job's workspace mounted at the attempt's own
working folder (the same path inside as outside), the worker's assigned GPUs through Docker's device
request (`--gpus device=UUID,…`, with `CUDA_VISIBLE_DEVICES`; empty for a task given none), and the
host's network (`--network host`: tasks reach the
controller and each other as processes do). Every container carries the labels `iris.worker` and
`iris.attempt`, which is how a restarted daemon finds and removes what its previous life left.
A job without an image runs as a process, exactly as on a process worker.

The container is run by an attached `docker run` client whose output goes straight to the attempt's
`stdout` and `stderr` files, the same files the process runtime writes, so log shipping from
acknowledged offsets is identical for both; its exit status is the container's. The Docker CLI is
used rather than an SDK because the attached client does this redirection itself (an SDK would
need a log-pumping thread per container); the daemon's socket comes from `DOCKER_HOST`.
Images are never pulled (`--pull never`): a missing image fails the attempt, naming the image.

Under a root daemon the container runs as the task's uid (`--user UID:GID --cap-drop ALL`), on a
workspace owned by that uid; every container gets `no-new-privileges` and a process limit. The
`docker` client itself runs as the daemon, so it gets a fixed environment and the job's env only as
an anonymous `--env-file` (see `iris.backends.privileged`): a job's `LD_PRELOAD` or `DOCKER_*` never
steers a root process, and no value shows on a command line.
"""

from __future__ import annotations

import os
import pwd
import stat
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path

from iris.backends.local.attempt_folder import AttemptFolder
from iris.backends.local.wrapper import output_file
from iris.backends.privileged import ENV_NAME, SETPRIV, SH, fixed_env, memfd, program
from iris.rpc import controller_pb2 as pb
from iris.worker.runtime import AttemptRun, ProcessRuntime, StartFailed
from iris.worker.settings import WorkerSettings

LABEL_WORKER = "iris.worker"
LABEL_ATTEMPT = "iris.attempt"
OOM_EXIT = 137
PIDS_LIMIT = 4096  # processes and threads one container may hold at once
# What of the daemon's own environment its `docker` client keeps: how it reaches the Docker daemon
# (the operator's settings), and HOME, where it finds its config.
DOCKER_SETTINGS = ("DOCKER_HOST", "DOCKER_CONTEXT", "DOCKER_CONFIG", "DOCKER_CERT_PATH", "DOCKER_TLS_VERIFY", "HOME")


def env_file(env: Mapping[str, str]) -> bytes:
    """`env` as the file `docker run --env-file` reads: one NAME=value line each, the value taken
    verbatim. A line break cannot be carried in it: StartFailed names the variable that holds one."""
    lines = []
    for name, value in env.items():
        if not ENV_NAME.match(name):
            continue  # no shell could export it either (names are checked at submit)
        if "\n" in value or "\r" in value:
            raise StartFailed(
                f"the value of {name} holds a line break, which a container's environment cannot be given"
                " here; encode it (base64) or pass it in a file of the job's workspace"
            )
        lines.append(f"{name}={value}\n")
    return "".join(lines).encode()


def container_name(attempt_id: str) -> str:
    from iris.backends.staging import safe_dirname

    return "iris-" + safe_dirname(attempt_id).lower()


def host_folder_for(workdir: str, uid: int, gid: int) -> str:
    """The physical path of the host folder `workdir` that a container under `uid` and `gid` may
    be given, or StartFailed.

    The daemon (root) mounts it, and inside the container no folder above it is closed any more:
    a folder below one the uid cannot pass (another account's 0700 home, root's) would give the
    task what only that closed folder protects. So the uid must enter it itself (`cd -P`, under
    `setpriv`, which also gives its physical path), and no folder on that path may be one the uid
    could swap for a link between this check and the mount (see `_swappable`)."""
    argv = [SETPRIV, f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--"]
    argv += [SH, "-c", 'cd -P -- "$1" && pwd -P', "sh", workdir]
    done = subprocess.run(argv, env=fixed_env(), capture_output=True, text=True, timeout=30, check=False)
    physical = done.stdout.strip()
    if done.returncode != 0 or not physical.startswith("/"):
        raise StartFailed(
            f"the job's workdir {workdir} is not a folder its uid {uid} may enter on this worker, so it is not"
            " mounted into its container"
        )
    path = Path(physical)
    groups = _groups_of(uid, gid)
    for parent, child in zip(path.parents, (path, *path.parents)):
        if _swappable(parent, child, uid, groups):
            raise StartFailed(
                f"the job's workdir {workdir} lies in {parent}, where its uid {uid} could replace it with a link"
                " before it is mounted, so it is not mounted into its container; name a folder outside one"
                " the job's tasks may write"
            )
    return physical


def _groups_of(uid: int, gid: int) -> frozenset[int]:
    """The groups a process of `uid` may hold: `gid`, and where `uid` is an account of this host
    (`auth.task_accounts`), its own groups, which its login sessions hold."""
    groups = {gid}
    try:
        account = pwd.getpwuid(uid)
        groups.update(os.getgrouplist(account.pw_name, account.pw_gid))
    except (KeyError, OSError):
        pass
    return frozenset(groups)


def _swappable(parent: Path, child: Path, uid: int, groups: frozenset[int]) -> bool:
    """Whether `uid` (in `groups`) may rename `child`, an entry of `parent`, or have it so (it
    owns `parent`, and may chmod it): write to `parent`, unless `parent` is sticky and the uid
    owns neither it nor `child`. Mode bits only: an ACL granting more is not seen."""
    st, entry = os.lstat(parent), os.lstat(child)
    if st.st_uid == uid:
        return True
    bits = stat.S_IWGRP if st.st_gid in groups else stat.S_IWOTH
    if not st.st_mode & bits:
        return False
    return not st.st_mode & stat.S_ISVTX or entry.st_uid == uid


class DockerRuntime(ProcessRuntime):
    name = "docker"

    def __init__(self, settings: WorkerSettings, on_exit: Callable[[], None] = lambda: None):
        super().__init__(settings.work_dir, settings.capacity.device, on_exit, settings.device_ids)
        self.worker = settings.name
        self.docker = program("docker")
        # The `docker` client runs as this daemon (root): it gets a fixed environment and the
        # operator's own Docker settings, nothing of a job's (see `iris.backends.privileged`).
        self.env = fixed_env(**{k: v for k, v in os.environ.items() if k in DOCKER_SETTINGS})
        if settings.docker_host:
            self.env["DOCKER_HOST"] = settings.docker_host

    def _docker(self, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
        return subprocess.run(
            [self.docker, *args], env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )

    def cleanup_leftovers(self) -> list[int]:
        killed = super().cleanup_leftovers()
        found = self._docker("ps", "-aq", "--filter", f"label={LABEL_WORKER}={self.worker}")
        ids = found.stdout.split()
        if ids:
            self._docker("rm", "-f", *ids)
        return killed + [0] * len(ids)

    def _launch(
        self,
        run: AttemptRun,
        launch: pb.AttemptLaunch,
        place: AttemptFolder,
        env: dict[str, str],
        layers: tuple[str, ...],
    ) -> None:
        if not launch.image:
            super()._launch(run, launch, place, env, layers)
            return
        name = container_name(launch.attempt_id)
        resources = launch.resources
        argv = [self.docker, "run", "--name", name, "--pull", "never", "--network", "host", "--init"]
        argv += ["--label", f"{LABEL_WORKER}={self.worker}", "--label", f"{LABEL_ATTEMPT}={launch.attempt_id}"]
        # No process of the container gains a privilege by exec (setuid files, file capabilities),
        # and it holds a bounded number of processes: a fork bomb stays inside it.
        argv += ["--security-opt", "no-new-privileges", "--pids-limit", str(PIDS_LIMIT)]
        if place.uid is not None:
            argv += ["--user", f"{place.uid}:{place.gid}", "--cap-drop", "ALL"]
        if resources.cpu > 0:
            argv += ["--cpus", f"{resources.cpu:g}"]
        if resources.memory_bytes > 0:
            argv += ["--memory", str(resources.memory_bytes), "--memory-swap", str(resources.memory_bytes)]
        # The job's workspace, as a process task gets it: its layers in the attempt's own folder
        # (owned by the task's uid), mounted at the same path and the container's working directory.
        # A container without a uid of its own runs as its image's user, root mostly, which could
        # write through a link into the cached layer: it gets copies.
        place.stage(layers, copies=place.uid is None)
        workdir = place.workdir
        if place.uid is not None and workdir != str(place.home):  # a folder of the host, not its own
            workdir = host_folder_for(workdir, place.uid, place.gid if place.gid is not None else place.uid)
        argv += ["--volume", f"{workdir}:{workdir}", "--workdir", workdir]
        # The job's env and Iris's, not this host's (`env` is what a process task would get).
        passed = {**dict(launch.env), "IRIS_ATTEMPT_ID": launch.attempt_id}
        if run.devices:
            # Docker's device request (the NVIDIA container runtime), by UUID where the GPUs were
            # found: the container sees those GPUs alone, numbered from 0 inside it.
            ids = [self.device_ids[i] if self.device_ids else str(i) for i in run.devices]
            argv += ["--gpus", f'"device={",".join(ids)}"']
            passed["CUDA_VISIBLE_DEVICES"] = ",".join(ids) if self.device_ids else ",".join(map(str, range(len(ids))))
        else:
            passed["CUDA_VISIBLE_DEVICES"] = ""
        # The job's env reaches the container alone, in an anonymous file the client reads: never
        # on its command line (every local account reads /proc/PID/cmdline) nor in the environment
        # of the `docker` client, a root process that a job's LD_PRELOAD or DOCKER_* would steer.
        script = memfd(env_file(passed))
        argv += ["--env-file", f"/proc/self/fd/{script}"]
        argv += ["--", launch.image, *launch.command]  # after `--`, the image is never read as an option
        try:
            with output_file(run.path("stdout")) as out, output_file(run.path("stderr")) as err:
                popen = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    env=self.env,
                    start_new_session=True,
                    close_fds=True,
                    pass_fds=(script,),
                )
        finally:
            os.close(script)
        (run.folder / "pid").write_text(f"{popen.pid}\n")
        run.pid, run.handle = popen.pid, popen
        run.container = name

    def _wait(self, run: AttemptRun) -> None:
        container = run.container
        if not container:
            super()._wait(run)
            return
        assert run.handle is not None
        code = run.handle.wait()
        if code < 0:
            code = 128 - code
        error = ""
        state = self._docker("inspect", "-f", "{{.State.OOMKilled}} {{.State.ExitCode}}", container)
        fields = state.stdout.split()
        if state.returncode == 0 and len(fields) == 2:
            if fields[0] == "true":
                error = "the container was OOM-killed: it used more memory than the job asked for (--memory)"
                code = OOM_EXIT
            elif fields[1].lstrip("-").isdigit():
                code = int(fields[1])
        elif state.returncode != 0 and "No such image" in (run.path("stderr").read_text(errors="replace")[-2000:]):
            error = "the job's image is not on this worker (images are never pulled: build or load it here)"
        self._docker("rm", "-f", container)
        self._finish(run, code, error)

    def _signal(self, run: AttemptRun, sig: int) -> None:
        container = run.container
        if not container:
            super()._signal(run, sig)
            return
        self._docker("kill", "--signal", str(int(sig)), container)


__all__ = ["DockerRuntime", "StartFailed"]
