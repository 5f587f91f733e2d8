"""Tasks on a worker daemon cannot reach each other or the daemon: a real root controller assigning
uids, a real root daemon running two users' tasks under them (as processes, and in containers),
each task trying what an attacker would; and a daemon that is not root says so."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest

from iris.backends.local.backend import kill_leftover_attempts
from iris.backends.privileged import SETPRIV
from tests.conftest import wait_until
from tests.controller.helpers import client, launch, logs, pb, user_token, wait_state

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="tasks get uids of their own only under a root daemon")

NOBODY = 65534  # a plain account every host has, to run a daemon that is not root


def assigned_uids(ctl) -> dict[str, int]:
    """The uid the controller recorded for each user (the `task_uids` table)."""
    db = sqlite3.connect(f"file:{ctl.state_dir / 'controller.db'}?mode=ro", uri=True)
    try:
        return dict(db.execute("SELECT user, uid FROM task_uids"))
    finally:
        db.close()


# Runs as alice's task on the daemon: tries bob's attempt folder, files and output, the daemon's
# environment, every process's environment and command line; prints one JSON report. The daemon's
# token comes in two halves, so that no command line holds it whole.
PROBE = r"""
import json, os, sys
daemon, head, tail, bob_folder = sys.argv[1:5]
token, secret = (head + tail).encode(), b"bob-" + b"secret"  # neither whole in this source either
report = {"uid": os.getuid()}
def attempt(name, fn):
    try:
        fn()
        report[name] = "read"
    except OSError as exc:
        report[name] = type(exc).__name__
attempt("daemon_environ", lambda: open(f"/proc/{daemon}/environ", "rb").read())
attempt("bob_work", lambda: os.listdir(os.path.join(bob_folder, "work")))
attempt("bob_file", lambda: open(os.path.join(bob_folder, "work", "secret.txt")).read())
attempt("bob_stdout", lambda: open(os.path.join(bob_folder, "stdout")).read())
attempt("attempts", lambda: os.listdir(os.path.dirname(bob_folder)))
leaks = []
for pid in os.listdir("/proc"):
    if pid.isdigit() and int(pid) != os.getpid():
        for what in ("environ", "cmdline"):
            try:
                data = open(f"/proc/{pid}/{what}", "rb").read()
            except OSError:
                continue
            if secret in data or token in data:
                leaks.append(f"{pid}/{what}")
report["leaks"] = leaks
print(json.dumps(report))
"""


def test_root_daemon_runs_each_users_task_under_its_uid_and_none_reads_another_or_the_daemon(uid_pool, worker_factory):
    token = user_token(uid_pool, "shared", role="worker")
    worker = worker_factory(uid_pool, "shared", env={"IRIS_TOKEN": token})
    alice = client(uid_pool, user_token(uid_pool, "alice"))
    bob = client(uid_pool, user_token(uid_pool, "bob"))
    script = "id -u; echo bob-file > secret.txt; echo started; exec sleep 60"
    holder = launch(bob, "holder", ["sh", "-c", script], user="bob", env={"BOB_SECRET": "bob-secret"})
    wait_until(lambda: "started" in logs(bob, holder), timeout=30, message="bob's task to start")
    (bob_folder,) = (worker.work_dir / "attempts").resolve().glob("bob_holder_*")

    probe = [
        "/usr/bin/python3", "-c", PROBE, str(worker.proc.pid), token[:20], token[20:], str(bob_folder),
    ]  # fmt: skip
    job = launch(alice, "probe", probe)
    assert wait_state(alice, job).job.state == "SUCCEEDED", logs(alice, job)
    report = json.loads(logs(alice, job)[-1])

    uids = assigned_uids(uid_pool)
    assert report["uid"] == uids["alice"] and int(logs(bob, holder)[0]) == uids["bob"]
    assert 0 not in (uids["alice"], uids["bob"]) and uids["alice"] != uids["bob"]
    assert report["daemon_environ"] == "PermissionError"  # its token is root's to read
    assert (report["bob_work"], report["bob_file"], report["bob_stdout"]) == ("PermissionError",) * 3
    assert report["attempts"] == "PermissionError"
    assert report["leaks"] == []  # neither bob's secret nor the daemon's token, in any process
    # Nor in any file of the daemon's a task could open: it writes its token nowhere.
    for root in (worker.work_dir, (worker.work_dir / "attempts").resolve()):
        for path in (p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
            assert token.encode() not in path.read_bytes(), path

    # The wrapper stays root with a fixed env; the job's env is in bob's command alone, under his uid.
    wrapper = psutil.Process(int((bob_folder / "pid").read_text()))
    assert wrapper.uids().real == 0 and "BOB_SECRET" not in wrapper.environ()
    (command,) = wrapper.children()
    assert command.uids().real == uids["bob"] and command.environ()["BOB_SECRET"] == "bob-secret"
    assert "IRIS_TOKEN" not in os.environ or command.environ()["IRIS_TOKEN"] != token
    # A root daemon isolates its users' tasks: nothing to warn of.
    shown = uid_pool.cli("worker", "list")
    assert shown.returncode == 0 and "WARNING" not in shown.stdout, shown.stdout + shown.stderr
    assert bob.terminate_job(pb.TerminateJobRequest(job_id=holder)).state == "KILLED"


def test_root_daemon_runs_a_container_as_the_users_uid_with_a_process_limit(uid_pool, worker_factory, dockerd):
    worker = worker_factory(uid_pool, "boxes", "--runtime", "docker", env={"DOCKER_HOST": dockerd.host})
    alice = client(uid_pool, user_token(uid_pool, "alice"))
    script = (
        "/bin/busybox id -u; /bin/busybox id -g; "
        "cat /sys/fs/cgroup/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids/pids.max; "
        'echo "[$ALICE_SECRET]"; echo > mine; echo ready; exec sleep 30'
    )
    req = pb.LaunchJobRequest(
        name="boxed", user="alice", command=["sh", "-c", script], image=dockerd.image,
        env={"ALICE_SECRET": "alice-secret"}, resources=pb.Resources(cpu=0.5, memory_bytes=64 << 20),
    )  # fmt: skip
    job = alice.launch_job(req).job_id
    wait_until(lambda: "ready" in logs(alice, job), timeout=60, message="the container to run")
    uid = assigned_uids(uid_pool)["alice"]
    assert logs(alice, job)[:4] == [str(uid), str(uid), "4096", "[alice-secret]"]
    # The job's env reaches the container only: the `docker run` client (root) holds none of it.
    (folder,) = (worker.work_dir / "attempts").resolve().glob("alice_boxed_*")
    docker_client = psutil.Process(int((folder / "pid").read_text()))
    assert not any("alice-secret" in part for part in docker_client.cmdline())
    assert "ALICE_SECRET" not in docker_client.environ()
    assert (folder / "work" / "mine").stat().st_uid == uid  # what it writes in its workspace is its own
    assert alice.terminate_job(pb.TerminateJobRequest(job_id=job)).state == "KILLED"
    wait_state(alice, job)


def test_daemon_not_started_as_root_says_its_users_tasks_are_not_isolated(uid_pool):
    """A real daemon under an ordinary uid (nobody) that keeps only the capability to read and
    search every file, so it runs this checkout's Python wherever that sits (root's closed home, a
    `mktemp -d` clone); it cannot switch uids, says so, and is listed with a warning."""
    home = Path(tempfile.mkdtemp(prefix="iris-plain-daemon-"))
    os.chown(home, NOBODY, NOBODY)
    log = home / "daemon.log"
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "IRIS_TOKEN": user_token(uid_pool, "plain", role="worker"),
    }
    argv = [SETPRIV, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    argv += ["--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search", sys.executable, "-m"]
    argv += ["iris.cli.main", "worker", "start", "--controller", uid_pool.url, "--backend", "pool"]
    argv += ["--name", "plain", "--work-dir", str(home / "work"), "--cpu", "1", "--memory", "1G"]
    with open(log, "ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=out, stdin=subprocess.DEVNULL, env=env, start_new_session=True)
    try:
        c = client(uid_pool)

        def listed():
            return [w for w in c.list_workers(pb.ListWorkersRequest()).workers if w.worker_id == "plain" and w.alive]

        (info,) = wait_until(listed, timeout=30, message=f"the daemon to join (log: {log})")
        assert f"uid {NOBODY}, not root" in info.isolation_warning
        assert "not isolated from each other" in info.isolation_warning
        assert "not isolated" in log.read_text()  # said at its start
        shown = uid_pool.cli("worker", "list")
        warning = next(line for line in shown.stdout.splitlines() if line.startswith("WARNING"))
        assert "worker plain" in warning and "not isolated" in warning
        doc = json.loads(uid_pool.cli("-o", "json", "worker", "list").stdout)
        assert "not isolated" in next(w for w in doc["workers"] if w["worker_id"] == "plain")["isolation_warning"]
        status_text = uid_pool.cli("cluster", "status").stdout
        assert any(line.startswith("WARNING worker plain") for line in status_text.splitlines()), status_text
        # Its tasks run as the daemon's own uid: the one the controller assigned alice it cannot switch to.
        job = launch(client(uid_pool, user_token(uid_pool, "alice")), "plain", ["/usr/bin/id", "-u"])
        assert wait_state(c, job).job.state == "SUCCEEDED" and logs(c, job) == [str(NOBODY)]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        kill_leftover_attempts(home / "work")
        shutil.rmtree(home, ignore_errors=True)


def test_status_shows_a_workers_isolation_warning():
    from iris.cli.output import worker_table

    plain = pb.WorkerInfo(worker_id="w", backend_id="pool", alive=True, isolation_warning="not isolated")
    assert worker_table([plain]).splitlines()[-1] == "WARNING worker w (pool): not isolated"
    assert "WARNING" not in worker_table([pb.WorkerInfo(worker_id="r", backend_id="pool", alive=True)])


def test_container_env_file_carries_values_verbatim_and_refuses_a_line_break():
    from iris.worker.docker import env_file
    from iris.worker.runtime import StartFailed

    assert env_file({"A": " spaced '$x' ", "B": "", "bad-name": "x"}) == b"A= spaced '$x' \nB=\n"
    with pytest.raises(StartFailed, match="value of KEY holds a line break"):
        env_file({"KEY": "-----BEGIN\nKEY-----"})
