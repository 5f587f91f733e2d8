"""The Slurm backend on a real Slurm (munged, slurmctld, slurmd started for this module), driven
through a real Iris controller process: one Slurm job per attempt, its state, logs, limits,
cancels, pending reasons, restart and federation.

Slurm is started once per module (its scheduler pass takes about a second per job, so the tests
share one). Where Slurm cannot start here, every test is skipped with the reason.
"""

from __future__ import annotations

import logging
import os
import pwd
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest
from connectrpc.errors import ConnectError

from iris.backends.protocol import LaunchSpec
from iris.backends.slurm.backend import SlurmBackend
from iris.controller.auth import load_or_create_signing_key, public_key_pem
from iris.controller.state.tick import DIE_BEFORE_STOP_ENV
from iris.core.config import SlurmBackendConfig
from iris.core.resources import Resources
from iris.federation.ids import received_job_id
from iris.rpc import controller_pb2 as pb
from iris.testing.slurm import SlurmCluster, SlurmError, unavailable_reason
from tests.conftest import ControllerFactory, wait_until
from tests.controller.helpers import client, error_code, logs, status, user_token, wait_state

SERVE = str(Path(__file__).with_name("serve_task.py"))
FAST = {"tick_interval": "1s", "federation_heartbeat_interval": "0.5s", "federation_sync_interval": "0.5s"}


@pytest.fixture(scope="module")
def slurm():
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    base = Path(tempfile.mkdtemp(prefix="iris-slurm-test-"))
    cluster = SlurmCluster(base, gpus=4, max_time="60")
    try:
        cluster.start()
    except (SlurmError, OSError, subprocess.SubprocessError) as exc:
        shutil.rmtree(base, ignore_errors=True)
        pytest.skip(f"Slurm could not start here: {exc}")
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)


def slurm_backend(cluster: SlurmCluster, backend_id: str = "slurm") -> dict:
    return {
        "id": backend_id,
        "kind": "slurm",
        "partition": cluster.partition,
        "slurm_conf": str(cluster.conf),
        "poll_interval": "0.3s",
    }


@pytest.fixture(scope="module")
def ctl(slurm, tmp_path_factory):
    factory = ControllerFactory(tmp_path_factory.mktemp("slurm-ctl"))
    try:
        yield factory("on-slurm", backends=[slurm_backend(slurm)])
    finally:
        factory.cleanup()


def job(name: str, script: str, cpu: float = 1, gpus: int = 0, variant: str = "", **kw) -> pb.LaunchJobRequest:
    device = pb.Device(kind="gpu", variant=variant, count=gpus) if gpus else pb.Device(kind="cpu")
    return pb.LaunchJobRequest(
        name=name, user="alice", command=["sh", "-c", script], resources=pb.Resources(cpu=cpu, device=device), **kw
    )


def slurm_job_of(slurm: SlurmCluster, attempt_id: str) -> list[str]:
    """`id|state` of every Slurm job named after the attempt."""
    out = slurm._run(["squeue", "-h", "-t", "all", f"--name={attempt_id}", "-o", "%i|%T"]) or ""
    return out.split()


def test_slurm_job_succeeds_with_its_logs_and_one_slurm_job_named_by_the_attempt(ctl, slurm):
    c = client(ctl)
    request = job(
        "hello",
        "echo hello from $SLURM_JOB_PARTITION $(cat cfg.txt); echo oops >&2",
        workdir_files={"cfg.txt": b"with-files"},
    )
    job_id = c.launch_job(request).job_id
    final = wait_state(c, job_id)
    assert final.job.state == "SUCCEEDED"
    attempt = final.tasks[0].attempts[0]
    # Iris reports success as soon as the job's wrapper records it; Slurm completes it just after.
    wait_until(lambda: slurm_job_of(slurm, attempt.attempt_id) == [f"{attempt.pid}|COMPLETED"], message="one Slurm job")
    wait_until(
        lambda: sorted(logs(c, job_id)) == ["hello from debug with-files", "oops"], message="both streams stored"
    )


def test_slurm_failing_job_reports_its_exit_code(ctl):
    c = client(ctl)
    final = wait_state(c, c.launch_job(job("fails", "exit 7")).job_id)
    assert final.job.state == "FAILED"
    assert final.tasks[0].exit_code == 7 and "exit code 7" in final.job.error


def test_slurm_gpu_job_gets_its_devices_from_slurm(ctl):
    c = client(ctl)
    job_id = c.launch_job(job("gpus", "echo gpus=$CUDA_VISIBLE_DEVICES", gpus=2, variant="fake")).job_id
    assert wait_state(c, job_id).job.state == "SUCCEEDED"
    lines = logs(c, job_id)
    assert len(lines) == 1 and lines[0].startswith("gpus=")
    assert len(lines[0].removeprefix("gpus=").split(",")) == 2


def test_slurm_job_command_gets_sigint_and_sigquit_as_any_process_does(ctl):
    """The wrapper leaves the command's signal dispositions as the job's own: a command started with
    SIGINT ignored (as sh starts a background command) could never be interrupted by it, and a Python
    job would not even install its KeyboardInterrupt handler (`scancel --signal=INT`)."""
    c = client(ctl)
    job_id = c.launch_job(job("signals", "grep SigIgn /proc/self/status")).job_id
    assert wait_state(c, job_id).job.state == "SUCCEEDED"
    lines = logs(c, job_id)
    assert len(lines) == 1 and lines[0].startswith("SigIgn:"), lines
    ignored = int(lines[0].split()[1], 16)
    assert not ignored & (1 << (signal.SIGINT - 1) | 1 << (signal.SIGQUIT - 1)), lines


def test_slurm_job_over_its_time_limit_is_reported_timed_out_and_cancelled(ctl, slurm):
    c = client(ctl)
    job_id = c.launch_job(job("slow", "sleep 120", timeout_s=2)).job_id
    final = wait_state(c, job_id, timeout=60)
    assert final.job.state == "FAILED" and "timed out" in final.job.error
    slurm_id = final.tasks[0].attempts[0].pid
    wait_until(lambda: slurm.state(slurm_id) == "" and not slurm.job_pids(slurm_id), message="Slurm job gone")


def test_iris_job_stop_cancels_the_slurm_job_and_its_processes(ctl, slurm):
    c = client(ctl)
    job_id = c.launch_job(job("stopme", "sleep 300")).job_id
    running = wait_state(c, job_id, states={"RUNNING"})
    slurm_id = running.tasks[0].attempts[0].pid
    wait_until(lambda: slurm.job_pids(slurm_id), message="the job's processes to start")
    t0 = time.perf_counter()
    result = ctl.cli("job", "stop", "--wait", job_id)
    print(f"iris job stop --wait on a running Slurm job: {time.perf_counter() - t0:.2f}s")
    assert result.returncode == 0, result.stderr
    assert f"{job_id} KILLED" in result.stdout
    assert wait_state(c, job_id).job.state == "KILLED"
    wait_until(lambda: slurm.state(slurm_id) == "" and not slurm.job_pids(slurm_id), message="processes gone")


def test_command_a_cancel_reached_only_through_its_wrapper_is_still_ended_by_the_stop(ctl, slurm):
    """Slurm's SIGTERM can reach the job's shell and miss the command it has just started (with
    proctrack/linuxproc, one forked as the cancel lands): the shell must not die and orphan it
    outside the job's process tree, where no later signal of Slurm's finds it."""
    c = client(ctl)
    job_id = c.launch_job(job("term-race", "sleep 300")).job_id
    slurm_id = wait_state(c, job_id, states={"RUNNING"}).tasks[0].attempts[0].pid

    def wrapper() -> int | None:
        for pid in slurm.job_pids(slurm_id):
            if "slurm_script" in Path(f"/proc/{pid}/cmdline").read_text():
                return pid
        return None

    shell = wait_until(lambda: len(slurm.job_pids(slurm_id)) >= 2 and wrapper(), timeout=60, message="the job to run")
    os.kill(shell, signal.SIGTERM)  # the signal that reached the shell only
    result = ctl.cli("job", "stop", job_id)
    assert result.returncode == 0, result.stderr
    wait_until(lambda: gone(slurm, slurm_id), timeout=60, message="every process of the job to end")
    final = wait_state(c, job_id)
    assert final.job.state == "KILLED" and [a.state for a in final.tasks[0].attempts] == ["KILLED"]


def test_slurm_job_slurm_can_never_host_is_unschedulable_with_slurms_reason(ctl):
    c = client(ctl)
    # The partition's MaxTime is 60 minutes; Iris's own view has no such limit, Slurm's does.
    final = wait_state(c, c.launch_job(job("too-long", "true", timeout_s=7200)).job_id)
    assert final.job.state == "UNSCHEDULABLE"
    assert "Slurm can never run it in partition debug: Partition" in final.job.error  # Slurm's own reason


def test_slurm_waiting_job_shows_slurms_pending_reason(ctl, slurm):
    c = client(ctl)
    hog = slurm.sbatch("sleep 300", "--cpus-per-task=2")  # another Slurm user holds both CPUs
    try:
        wait_until(lambda: slurm.state(hog) == "RUNNING", message="the other user's job to run")
        job_id = c.launch_job(job("waits", "echo finally")).job_id
        waiting = wait_until(
            lambda: (
                (s := status(c, job_id)).job.pending_reason.endswith("(the resources it asks for are in use)") and s
            ),
            message="Slurm's pending reason",
        )
        assert waiting.job.state == "PENDING"
        assert waiting.job.pending_reason.startswith("Waiting in Slurm partition debug: Resources")
    finally:
        slurm.scancel(hog)
    assert wait_state(c, job_id).job.state == "SUCCEEDED"
    assert logs(c, job_id) == ["finally"]


def test_sigkilled_controller_readopts_its_slurm_jobs_which_finish_once(ctl, slurm, tmp_path):
    c = client(ctl)
    ids = [
        c.launch_job(job(f"survivor-{i}", f"sleep 3; echo ran >> {tmp_path}/ran-{i}; echo done {i}")).job_id
        for i in range(2)
    ]
    attempts = [wait_state(c, j, states={"RUNNING"}).tasks[0].attempts[0] for j in ids]
    ctl.kill()
    # As if the controller had died between sbatch and committing the Slurm job id.
    with sqlite3.connect(ctl.state_dir / "controller.db") as db:
        db.execute("UPDATE attempts SET pid = NULL WHERE attempt_id = ?", (attempts[1].attempt_id,))
    ctl.start()
    c = client(ctl)
    for i, job_id in enumerate(ids):
        final = wait_state(c, job_id, timeout=60)
        assert final.job.state == "SUCCEEDED"
        assert [a.attempt_id for a in final.tasks[0].attempts] == [attempts[i].attempt_id]
        assert (tmp_path / f"ran-{i}").read_text() == "ran\n"
        wait_until(
            lambda a=attempts[i]: slurm_job_of(slurm, a.attempt_id) == [f"{a.pid}|COMPLETED"],
            message="one Slurm job per attempt, none submitted twice",
        )
        wait_until(lambda j=job_id, i=i: logs(c, j) == [f"done {i}"], message="logs after re-adoption")


def gone(slurm: SlurmCluster, slurm_id: int) -> bool:
    return slurm.state(slurm_id) in ("", "CANCELLED") and not slurm.job_pids(slurm_id)


def losing_scancel(folder: Path) -> tuple[str, Path]:
    """A PATH whose `scancel` loses the first cancel asked of it (exits 0 having done nothing, as
    Slurm does with a cancel that lands while a batch step is still starting) and hands every
    later one to Slurm's own `scancel`; and the file the lost call's arguments are written to."""
    real = shutil.which("scancel")
    assert real, "Slurm's scancel"
    bin_dir, lost = folder / "bin", folder / "lost"
    bin_dir.mkdir()
    shim = bin_dir / "scancel"
    shim.write_text(
        f'#!/bin/sh\nif mkdir "{lost}" 2>/dev/null; then echo "$@" > "{lost}/args"; exit 0; fi\nexec "{real}" "$@"\n'
    )
    shim.chmod(0o755)
    return f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", lost / "args"


def test_stopped_slurm_job_whose_cancel_slurm_lost_is_cancelled_again(slurm, controller_factory, tmp_path):
    path, lost = losing_scancel(tmp_path)
    ctl = controller_factory("lossy", backends=[slurm_backend(slurm)], start=False)
    ctl.env = {**os.environ, "PATH": path}
    ctl.start()
    c = client(ctl)
    job_id = c.launch_job(job("lost-cancel", "sleep 300")).job_id
    slurm_id = wait_state(c, job_id, states={"RUNNING"}).tasks[0].attempts[0].pid
    wait_until(lambda: len(slurm.job_pids(slurm_id)) >= 2, timeout=60, message="the wrapper and `sleep` to start")
    t0 = time.perf_counter()
    result = ctl.cli("job", "stop", "--wait", job_id)
    assert result.returncode == 0, result.stderr
    assert lost.read_text().split() == [str(slurm_id)], "the stop's first cancel was the one lost"
    wait_until(lambda: gone(slurm, slurm_id), timeout=60, message="the Slurm job to be cancelled again")
    print(f"a Slurm job whose first cancel was lost ended {time.perf_counter() - t0:.2f}s after iris job stop")
    final = status(c, job_id)
    assert final.job.state == "KILLED" and [a.state for a in final.tasks[0].attempts] == ["KILLED"]
    marks = ctl.state_dir / "slurm" / ".live" / "slurm"
    wait_until(lambda: not any(marks.iterdir()), message="the attempt's end reported by the backend and stored")


def test_stop_committed_before_a_controller_crash_cancels_the_slurm_job_after_the_restart(slurm, controller_factory):
    ctl = controller_factory("crashy", backends=[slurm_backend(slurm)], start=False)
    ctl.env = {**os.environ, DIE_BEFORE_STOP_ENV: "1"}
    ctl.start()
    c = client(ctl)
    job_id = c.launch_job(job("doomed", "echo up; sleep 300")).job_id
    slurm_id = wait_state(c, job_id, states={"RUNNING"}).tasks[0].attempts[0].pid
    wait_until(lambda: slurm.job_pids(slurm_id) and logs(c, job_id) == ["up"], message="the Slurm job to run")
    with pytest.raises(ConnectError):  # the controller dies while the call waits for the tick
        c.terminate_job(pb.TerminateJobRequest(job_id=job_id))
    assert ctl.proc is not None and ctl.proc.wait(timeout=30) is not None
    with sqlite3.connect(f"file:{ctl.state_dir / 'controller.db'}?mode=ro", uri=True) as db:
        (state,) = db.execute("SELECT state FROM attempts WHERE job_id = ?", (job_id,)).fetchone()
    assert state == "KILLED", "the stop was committed before the crash"
    assert slurm.state(slurm_id) == "RUNNING", "the crash came before the Slurm job was cancelled"

    ctl.env = None
    ctl.start()
    c = client(ctl)
    wait_until(lambda: gone(slurm, slurm_id), timeout=60, message="the stopped Slurm job to be cancelled")
    final = status(c, job_id)
    assert final.job.state == "KILLED" and [a.state for a in final.tasks[0].attempts] == ["KILLED"]
    # What the job printed up to its end is stored, Slurm's own line about the cancel included.
    wait_until(
        lambda: (lines := logs(c, job_id))[0] == "up" and any("CANCELLED" in line for line in lines[1:]),
        message="the job's last lines",
    )
    marks = ctl.state_dir / "slurm" / ".live" / "slurm"
    wait_until(lambda: not any(marks.iterdir()), message="the attempt's marker to go once its end is stored")


def test_slurm_job_of_an_attempt_the_database_no_longer_holds_is_cancelled_on_adopt(slurm, tmp_path):
    config = SlurmBackendConfig.model_validate(slurm_backend(slurm))
    first = SlurmBackend(config, "orphans", tmp_path)
    spec = LaunchSpec("/alice/gone/0:0", "/alice/gone", 0, 0, "slurm", ("sleep", "300"), {}, Resources(cpu=1))
    slurm_id = first.start(spec).pid
    # Its processes, not only squeue's RUNNING: Slurm 22.05 with proctrack/linuxproc loses a cancel
    # that lands while the batch step is still starting (the job then sits COMPLETING while `sleep`
    # runs on), which is Slurm's race, not the one this test is about.
    wait_until(lambda: len(slurm.job_pids(slurm_id)) >= 2, timeout=60, message="the wrapper and `sleep` to start")
    first._closing.set()  # the controller dies: its backend stops polling and cancels nothing

    second = SlurmBackend(config, "orphans", tmp_path)
    try:
        assert second.leftovers() == {spec.attempt_id}
        second.adopt([])  # the database holds nothing of it
        # scancel returns before Slurm has ended the job; on a loaded host slurmd takes its time.
        wait_until(lambda: gone(slurm, slurm_id), timeout=60, message="the leftover Slurm job to be cancelled")
        wait_until(lambda: second.leftovers() == frozenset(), message="its marker to go once Slurm has ended it")
        assert second.running() == frozenset()
    finally:
        second.shutdown()
        slurm.scancel(slurm_id)


def test_leftover_slurm_job_whose_cancel_slurm_lost_is_cancelled_again(slurm, tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="iris.slurm")
    path, lost = losing_scancel(tmp_path)
    config = SlurmBackendConfig.model_validate(slurm_backend(slurm))
    first = SlurmBackend(config, "orphans", tmp_path / "state")
    spec = LaunchSpec("/alice/stray/0:0", "/alice/stray", 0, 0, "slurm", ("sleep", "300"), {}, Resources(cpu=1))
    slurm_id = first.start(spec).pid
    wait_until(lambda: len(slurm.job_pids(slurm_id)) >= 2, timeout=60, message="the wrapper and `sleep` to start")
    first._closing.set()  # the controller dies: its backend stops polling and cancels nothing

    monkeypatch.setenv("PATH", path)  # the next controller's first scancel is lost
    second = SlurmBackend(config, "orphans", tmp_path / "state")
    try:
        assert second.leftovers() == {spec.attempt_id}
        second.adopt([])  # the database holds nothing of it
        assert lost.read_text().split() == [str(slurm_id)]
        wait_until(lambda: gone(slurm, slurm_id), timeout=60, message="the leftover Slurm job to be cancelled again")
        wait_until(lambda: second.leftovers() == frozenset(), message="its marker to go once Slurm has ended it")
        resent = [r.getMessage() for r in caplog.records if "again" in r.getMessage()]
        assert resent and f"Slurm job {slurm_id} of attempt {spec.attempt_id} again" in resent[0]
    finally:
        second.shutdown()
        slurm.scancel(slurm_id)


def test_slurm_job_id_a_leftover_marker_names_that_now_names_another_job_is_not_cancelled(slurm, tmp_path):
    """A marker outlives its Slurm job (a controller down for long, a Slurm whose ids started over):
    the id it records may name another job by then, which is not this attempt's to cancel."""
    config = SlurmBackendConfig.model_validate(slurm_backend(slurm))
    other = slurm.sbatch("sleep 300", "--job-name=not-iris")  # its output goes to the cluster's folder
    try:
        SlurmBackend(config, "orphans", tmp_path).marks.put("/alice/long-gone/0:0", other)
        second = SlurmBackend(config, "orphans", tmp_path)
        try:
            assert second.leftovers() == {"/alice/long-gone/0:0"}
            second.adopt([])  # the database holds nothing of it
            wait_until(lambda: second.leftovers() == frozenset(), message="the marker to go: its job is not in Slurm")
        finally:
            second.shutdown()
        assert slurm.state(other) in ("PENDING", "RUNNING")
    finally:
        slurm.scancel(other)


def test_cpu_parent_hands_a_gpu_job_to_a_peer_whose_backend_is_slurm(slurm, controller_factory):
    parent = controller_factory(
        "marin",
        start=False,
        controller=FAST,
        backends=[{"id": "cpu", "kind": "local", "workers": 2, "capacity": {"cpu": 4, "memory": "8G"}}],
    )
    key = public_key_pem(load_or_create_signing_key(None, parent.state_dir))
    peer = controller_factory(
        "cw-slurm", backends=[slurm_backend(slurm, "gpu")], controller=FAST, auth={"federation_peers": {"marin": key}}
    )
    parent.rewrite(peers={"cw-slurm": {"address": peer.url}})
    parent.start()
    c = client(parent, user_token(parent, "alice"))

    def advertised():
        peers = c.list_peers(pb.ListPeersRequest()).peers
        return peers and peers[0].reachable and peers[0].backends and peers[0].backends[0]

    backend = wait_until(advertised, message="the Slurm peer to advertise its backend")
    assert backend.kind == "slurm"
    assert backend.attributes["device-variant"] == "fake"
    assert backend.availability.total_amounts["fake"] == 4
    sent = c.launch_job(job("train", "echo on $IRIS_CLUSTER gpus=$CUDA_VISIBLE_DEVICES", gpus=1, variant="fake"))
    assert sent.disposition == "queued"
    final = wait_state(c, sent.job_id, timeout=60)
    assert final.job.state == "SUCCEEDED" and final.job.cluster == "cw-slurm"
    on_peer = status(client(peer), received_job_id(parent.name, sent.job_id))
    assert on_peer.tasks[0].backend_id == "gpu"
    wait_until(lambda: logs(c, sent.job_id) == ["on cw-slurm gpus=0"], message="logs relayed to the parent")


def test_slurm_task_serves_its_endpoint_from_the_node_slurm_runs_it_on(ctl):
    """The task registers with no host as soon as it starts; the controller learns its node from
    Slurm (here NodeAddr 127.0.0.1, the controller's own host) and relays to it, and to nothing else."""
    alice = client(ctl, user_token(ctl, "alice"))
    request = pb.LaunchJobRequest(
        name="serve", user="alice", command=[sys.executable, SERVE], resources=pb.Resources(cpu=1)
    )
    job_id = alice.launch_job(request).job_id
    try:

        def live() -> dict[str, pb.Endpoint]:
            eps = client(ctl).list_endpoints(pb.ListEndpointsRequest(job_id=job_id)).endpoints
            return {e.name: e for e in eps}

        eps = wait_until(lambda: len(live()) == 2 and live(), timeout=90, message="both endpoints registered")
        assert eps["web"].address.startswith("127.0.0.1:")
        port = int(eps["web"].address.rsplit(":", 1)[1])
        url = alice.mint_endpoint_url(pb.MintEndpointUrlRequest(job_id=job_id, name="web", ttl_s=600)).url
        with httpx.Client(timeout=30) as http:
            assert http.get(url + "hello").json()["path"] == "/hello"

        attempt = status(alice, job_id).tasks[0].attempts[-1].attempt_id
        foreign = pb.RegisterEndpointRequest(job_id=job_id, attempt_id=attempt, name="evil", host="10.1.2.3", port=port)
        with pytest.raises(ConnectError) as refused:
            alice.register_endpoint(foreign)
        assert "is not on the host this attempt runs on" in refused.value.message
        assert set(live()) == {"web", "ws"}
    finally:
        client(ctl).terminate_job(pb.TerminateJobRequest(job_id=job_id))


@pytest.fixture(scope="module")
def as_users(slurm, tmp_path_factory):
    """A root controller on the same Slurm whose users' jobs run under their own uids: alice's as the
    host's `nobody` account; bob has no account of his own (only a uid of auth.task_uids.range). Its
    staging folder is one every uid can pass through (pytest's own folders are closed to them)."""
    staging = Path(tempfile.mkdtemp(prefix="iris-slurm-staging-"))
    staging.chmod(0o711)
    factory = ControllerFactory(tmp_path_factory.mktemp("slurm-users"))
    try:
        yield factory(
            "on-slurm-as-users",
            backends=[{**slurm_backend(slurm), "staging_dir": str(staging)}],
            auth={"task_uids": {"enabled": True}, "task_accounts": {"alice": "nobody"}},
        )
    finally:
        factory.cleanup()
        shutil.rmtree(staging, ignore_errors=True)


def test_slurm_job_runs_as_its_users_account_and_cannot_read_the_signing_key(as_users):
    alice = client(as_users, user_token(as_users, "alice"))
    key = as_users.state_dir / "signing_key.pem"
    assert key.exists()
    script = f"id -u; cat {key} >/dev/null 2>&1 && echo key-read || echo key-refused"
    final = wait_state(alice, alice.launch_job(job("who", script)).job_id, timeout=60)
    assert final.job.state == "SUCCEEDED", logs(alice, final.job.job_id)
    assert logs(alice, final.job.job_id) == [str(pwd.getpwnam("nobody").pw_uid), "key-refused"]


def test_slurm_job_env_cannot_change_what_the_controller_runs(as_users, slurm, tmp_path):
    alice = client(as_users, user_token(as_users, "alice"))
    # A folder of the job's own with its own `sbatch`, `squeue` and `scancel`, first on its PATH.
    planted = Path(tempfile.mkdtemp(prefix="iris-planted-"))
    try:
        planted.chmod(0o755)
        marker = planted / "ran-as"
        for tool in ("sbatch", "squeue", "scancel", "sinfo"):
            fake = planted / tool
            fake.write_text(f"#!/bin/sh\nid -u >> {marker}\nexit 0\n")
            fake.chmod(0o755)
        env = {"PATH": f"{planted}:/usr/bin:/bin"}
        final = wait_state(alice, alice.launch_job(job("planted", "echo ran", env=env)).job_id, timeout=60)
        assert final.job.state == "SUCCEEDED" and logs(alice, final.job.job_id) == ["ran"]
        assert final.tasks[0].attempts[0].pid > 0 and slurm_job_of(slurm, final.tasks[0].attempts[0].attempt_id)
        assert not marker.exists(), "the controller ran the job's own Slurm tools"
    finally:
        shutil.rmtree(planted, ignore_errors=True)
    # Slurm's own variables are refused at submit, naming the variable, and nothing is written.
    before = alice.list_jobs(pb.ListJobsRequest()).total
    for name, value in (("SBATCH_GPUS", "2"), ("SLURM_CONF", str(tmp_path / "slurm.conf"))):
        code, message = error_code(lambda: alice.launch_job(job("tuned", "true", env={name: value})))
        assert code == "invalid_argument" and f"environment variable {name} is not accepted" in message
    assert alice.list_jobs(pb.ListJobsRequest()).total == before


def test_slurm_job_of_a_user_without_an_account_is_unschedulable_naming_task_accounts(as_users):
    bob = client(as_users, user_token(as_users, "bob"))
    request = job("nobody-here", "id -u")
    request.user = "bob"
    final = wait_state(bob, bob.launch_job(request).job_id, timeout=60)
    assert final.job.state == "UNSCHEDULABLE", final.job
    assert "auth.task_accounts" in final.job.error and "bob" in final.job.error, final.job.error
