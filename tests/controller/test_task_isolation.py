"""Tasks on the local backend cannot reach the controller's secrets or each other: a real controller
running as root, real tasks under the uids of their users, each trying what an attacker would."""

from __future__ import annotations

import io
import json
import os
import shutil
import tempfile
import zipfile
from pathlib import Path

import psutil
import pytest

import iris
from iris.backends.local.attempts_root import closed_to_others
from iris.backends.staging import content_id
from iris.rpc import controller_pb2 as pb
from tests.conftest import wait_until
from tests.controller.helpers import client, error_code, launch, logs, status, user_token, wait_state

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="tasks get uids of their own only under a root controller")


@pytest.fixture
def controller(controller_factory):
    """A controller whose tasks run under uids of their users' own (the default for a root one), each
    user's tasks holding at most 64 processes at once."""
    return controller_factory(auth={"task_uids": {"enabled": True, "range": "200000-299999", "max_processes": 64}})


# Runs as alice's task: tries the key, the database, the state directory, every other process's
# environment, and the controller without its token; prints one JSON report.
PROBE = r"""
import json, os, sys, urllib.request, urllib.error
state = sys.argv[1]
report = {"uid": os.getuid()}
def attempt(name, fn):
    try:
        fn()
        report[name] = "read"
    except OSError as exc:
        report[name] = type(exc).__name__
attempt("key", lambda: open(os.path.join(state, "signing_key.pem")).read())
attempt("db", lambda: open(os.path.join(state, "controller.db"), "rb").read(1))
attempt("listing", lambda: os.listdir(state))
leaks = []
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            if b"bob-secret" in open(f"/proc/{pid}/environ", "rb").read():
                leaks.append(pid)
        except OSError:
            pass
report["leaks"] = leaks
def call(method, body, token=None):
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = "Bearer " + token
    request = urllib.request.Request(os.environ["IRIS_CONTROLLER"] + "/iris.v1.ControllerService/" + method,
                                     data=json.dumps(body).encode(), headers=headers)
    try:
        urllib.request.urlopen(request, timeout=10)
        return 200
    except urllib.error.HTTPError as exc:
        return exc.code
token = os.environ["IRIS_TOKEN"]
report["tokenless"] = call("ListJobs", {})
report["read_other"] = call("GetJobStatus", {"jobId": "/bob/holder"}, token)
report["stop_other"] = call("TerminateJob", {"jobId": "/bob/holder"}, token)
report["root_launch"] = call("LaunchJob", {"name": "/alice/escape", "command": ["true"]}, token)
report["child_launch"] = call("LaunchJob", {"parentJobId": os.environ["IRIS_JOB_ID"], "name": "kid",
                                            "command": ["true"]}, token)
print(json.dumps(report))
"""


def test_task_cannot_read_the_key_the_database_or_another_users_task_environment(controller):
    alice = client(controller, user_token(controller, "alice"))
    bob = client(controller, user_token(controller, "bob"))
    secret = launch(bob, "holder", ["sleep", "60"], user="bob", env={"BOB_TOKEN": "bob-secret"})

    def started_pid():
        attempts = [a for t in status(bob, secret).tasks for a in t.attempts]
        return attempts[0].pid if attempts else 0

    bob_pid = wait_until(started_pid, message="bob's task to start")

    # The system's Python: this host's own may sit in root's closed home, which a task uid cannot enter.
    probe = launch(alice, "probe", ["/usr/bin/python3", "-c", PROBE, str(controller.state_dir)])
    assert wait_state(alice, probe).job.state == "SUCCEEDED", logs(alice, probe)
    report = json.loads(logs(alice, probe)[-1])

    assert report["uid"] not in (0, os.getuid())
    assert report["key"] == "PermissionError"
    assert report["db"] == "PermissionError"
    assert report["listing"] == "PermissionError"
    assert report["leaks"] == []  # bob's task environment is not readable by alice's task
    assert report["tokenless"] == 401  # no local_admin for a task, even from loopback
    # Its own token reaches only its own job's tree: children yes, anyone else's job or a new root no.
    assert (report["read_other"], report["stop_other"], report["root_launch"]) == (403, 403, 403)
    assert report["child_launch"] == 200
    assert status(alice, "/alice/probe/kid").job.user == "alice"
    code, _ = error_code(lambda: status(alice, "/alice/escape"))
    assert code == "not_found"

    # bob's task runs under a uid of its own, different from alice's, and its secret is really there,
    # in its command only: the wrapper, which stays root, never holds the job's environment.
    wrapper = psutil.Process(bob_pid)
    assert wrapper.uids().real == 0 and "BOB_TOKEN" not in wrapper.environ()
    (command,) = wrapper.children()
    assert command.uids().real not in (0, report["uid"])
    with open(f"/proc/{command.pid}/environ", "rb") as f:  # the test (root) can read it: the probe could not
        assert b"bob-secret" in f.read()
    assert status(bob, secret).job.state == "RUNNING"
    assert bob.terminate_job(pb.TerminateJobRequest(job_id=secret)).state == "KILLED"


def test_task_token_reaches_only_its_own_job_and_ends_with_its_attempt(controller):
    alice = client(controller, user_token(controller, "alice"))
    other = launch(alice, "other", ["sleep", "60"])
    job = launch(alice, "leaky", ["sh", "-c", 'echo "$IRIS_TOKEN"'])
    assert wait_state(alice, job).job.state == "SUCCEEDED"
    token = logs(alice, job)[0]

    code, message = error_code(lambda: client(controller, token).list_jobs(pb.ListJobsRequest()))
    assert code == "unauthenticated" and "has ended" in message
    assert status(alice, other).job.state in ("PENDING", "RUNNING")
    alice.terminate_job(pb.TerminateJobRequest(job_id=other))


def test_task_under_its_own_uid_can_import_the_sdk_with_the_python3_on_its_path(controller_factory):
    """The controller's interpreter may sit in a folder closed to the task's uid; whichever `python3`
    the task finds, it can still import the SDK it submits children with."""
    package_root = Path(iris.__file__).resolve().parent.parent
    closed = [p for p in (package_root, *package_root.parents) if not os.stat(p).st_mode & 0o001]
    ctl = controller_factory(auth={"task_uids": {"enabled": True}}, start=False)
    open_copy = None
    if closed:
        # A checkout in a folder closed to other users (a fresh clone under `mktemp -d`): the
        # controller runs Iris from a copy where a task uid can read it, as an installed one is.
        open_copy = Path(tempfile.mkdtemp(prefix="iris-sdk-"))
        open_copy.chmod(0o755)
        shutil.copytree(package_root / "iris", open_copy / "iris", ignore=shutil.ignore_patterns("__pycache__"))
        ctl.env = {**os.environ, "PYTHONPATH": str(open_copy)}
    try:
        ctl.start()
        alice = client(ctl, user_token(ctl, "alice"))
        job = launch(alice, "sdk", ["sh", "-c", "id -u; python3 -c 'import iris.client; print(\"sdk ok\")'"])
        assert wait_state(alice, job).job.state == "SUCCEEDED", logs(alice, job)
        uid_line, last = logs(alice, job)[0], logs(alice, job)[-1]
        assert int(uid_line) not in (0, os.getuid())
        assert last == "sdk ok"
    finally:
        ctl.stop()
        if open_copy is not None:
            shutil.rmtree(open_copy, ignore_errors=True)


def test_task_under_its_own_uid_runs_a_script_of_its_workspace_below_a_closed_folder(controller):
    """`python3 train.py` opens its script by absolute path: every folder above the task's working
    folder must be passable by the task's uid, even with the state directory in a 0700 home."""
    closed = closed_to_others(controller.state_dir)
    assert closed is not None, "pytest's temporary folders are 0700: the state directory sits below one"
    alice = client(controller, user_token(controller, "alice"))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("train.py", "import os\nprint('trained in', os.getcwd())\n")
    data = buf.getvalue()
    job = launch(alice, "train", ["/usr/bin/python3", "train.py"], workspace_bundle=data, bundle_id=content_id(data))
    assert wait_state(alice, job).job.state == "SUCCEEDED", logs(alice, job)
    assert logs(alice, job)[-1].startswith("trained in ")
    # The controller still finds its attempts under the state directory's name for them.
    assert (controller.state_dir / "attempts").resolve() == Path(logs(alice, job)[-1].split()[-1]).parents[1]


def test_task_under_its_own_uid_skips_path_folders_closed_to_it(controller_factory, tmp_path):
    """A `python3` shim in a folder closed to the task (root's pyenv) must not hide a python3 it can run."""
    closed = tmp_path / "closed-bin"
    closed.mkdir(mode=0o700)
    shim = closed / "python3"
    shim.write_text("#!/bin/sh\necho shim\n")
    shim.chmod(0o700)
    ctl = controller_factory(auth={"task_uids": {"enabled": True}}, start=False)
    ctl.env = {**os.environ, "PATH": f"{closed}:/usr/local/bin:/usr/bin:/bin"}
    ctl.start()
    alice = client(ctl, user_token(ctl, "alice"))
    job = launch(alice, "which", ["python3", "-c", "print(6 * 7)"])
    assert wait_state(alice, job).job.state == "SUCCEEDED", logs(alice, job)
    assert logs(alice, job)[-1] == "42"


def test_task_forking_without_end_stops_at_its_users_process_limit_and_others_run(controller):
    alice = client(controller, user_token(controller, "alice"))
    bob = client(controller, user_token(controller, "bob"))
    # dash ends at the first fork the kernel refuses; without a limit all 200 sleeps start.
    forker = launch(
        alice, "forker", ["sh", "-c", "i=0; while [ $i -lt 200 ]; do sleep 60 & i=$((i+1)); done; echo all"]
    )
    ended = wait_state(alice, forker, timeout=60)
    said = logs(alice, forker)
    assert ended.job.state == "FAILED" and "all" not in said, said
    assert any("fork" in line.lower() for line in said), said
    other = launch(bob, "other", ["sh", "-c", "sleep 0.1 & wait; echo fine"], user="bob")
    assert wait_state(bob, other).job.state == "SUCCEEDED" and logs(bob, other) == ["fine"]
