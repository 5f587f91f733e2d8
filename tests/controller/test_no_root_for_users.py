"""Nothing a user sends reaches a process with the controller's privileges: a real root controller
running each user's tasks under their own uid, and jobs that try what an attacker would (a loader
hook in their environment, an image that is an option of `docker run`)."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

import psutil
import pytest

from iris.backends.staging import content_id
from iris.rpc import controller_pb2 as pb
from tests.conftest import wait_until
from tests.controller.helpers import client, error_code, job_count, launch, logs, status, user_token, wait_state

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="tasks get uids of their own only under a root controller")

# Loaded by every process that starts with it in LD_PRELOAD: records who that process runs as.
RECORDER = r"""
#include <stdio.h>
#include <unistd.h>
__attribute__((constructor)) static void record(void) {
    FILE *f = fopen(UID_LOG, "a");
    if (f) { fprintf(f, "%d %d\n", (int)getuid(), (int)geteuid()); fclose(f); }
}
"""


@pytest.fixture
def shared_dir():
    """A folder every uid may write (the task's uid records itself there), removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="iris-no-root-"))
    folder.chmod(0o777)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def recorder_library(folder: Path) -> tuple[bytes, Path]:
    """A shared library (compiled here with gcc) that appends "uid euid" to a log when loaded; and that log."""
    if shutil.which("gcc") is None:
        pytest.fail("gcc is needed to build the library that records its uid (apt-get install gcc)")
    source, library, log = folder / "recorder.c", folder / "recorder.so", folder / "uids.log"
    source.write_text(RECORDER)
    log.touch(mode=0o666)
    log.chmod(0o666)
    subprocess.run(
        ["gcc", "-shared", "-fPIC", f'-DUID_LOG="{log}"', "-o", str(library), str(source)],
        check=True,
        capture_output=True,
    )
    return library.read_bytes(), log


def test_loader_hook_in_a_job_env_runs_only_as_the_task_and_no_value_reaches_a_command_line(
    controller_factory, shared_dir
):
    ctl = controller_factory(auth={"task_uids": {"enabled": True}})
    alice = client(ctl, user_token(ctl, "alice"))
    library, log = recorder_library(shared_dir)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("hook.so", library)
    bundle = buf.getvalue()
    secret = "s3cret-value-that-is-never-shown"
    job = launch(
        alice,
        "hooked",
        ["sh", "-c", "id -u; echo ready; sleep 60"],
        env={"LD_PRELOAD": "./hook.so", "BASH_ENV": "./hook.so", "ENV": "./hook.so", "ALICE_SECRET": secret},
        workspace_bundle=bundle,
        bundle_id=content_id(bundle),
    )
    wait_until(lambda: logs(alice, job)[-1:] == ["ready"], message="the hooked task to run")
    task_uid = int(logs(alice, job)[0])
    assert task_uid not in (0, os.getuid())

    # The library ran in the task's processes (the env is the task's own), and never as root.
    recorded = log.read_text().split()
    assert recorded and set(recorded) == {str(task_uid)}, recorded

    # No process shows the job's values on its command line (any user may read those); the wrapper,
    # which stays root, does not even hold them in its environment.
    wrapper = psutil.Process(status(alice, job).tasks[0].attempts[0].pid)
    assert wrapper.uids().real == 0 and "ALICE_SECRET" not in wrapper.environ()
    for proc in psutil.process_iter(["cmdline"]):
        assert secret not in " ".join(proc.info["cmdline"] or []), proc
    (command,) = wrapper.children()
    assert command.environ()["ALICE_SECRET"] == secret and command.uids().real == task_uid

    assert alice.terminate_job(pb.TerminateJobRequest(job_id=job)).state == "KILLED"
    assert set(log.read_text().split()) == {str(task_uid)}


def test_job_env_value_reaches_the_task_byte_for_byte(controller_factory):
    """Handed over as a script the task's shell sources, a value keeps its quotes, newlines and `$`."""
    ctl = controller_factory(auth={"task_uids": {"enabled": True}})
    alice = client(ctl, user_token(ctl, "alice"))
    value = 'it\'s "quoted"\n$HOME `id` \\ end'
    job = launch(
        alice, "value", ["/usr/bin/python3", "-c", "import os; print(repr(os.environ['V']))"], env={"V": value}
    )
    assert wait_state(alice, job).job.state == "SUCCEEDED", logs(alice, job)
    assert logs(alice, job) == [repr(value)]


def test_image_that_is_a_docker_option_is_refused_at_submit_and_writes_nothing(controller_factory):
    ctl = controller_factory(
        auth={"task_uids": {"enabled": True}},
        backends=[{"id": "cpu", "kind": "local"}, {"id": "pool", "kind": "workers"}],
    )
    alice = client(ctl, user_token(ctl, "alice"))
    before = job_count(alice)
    for image in ("--volume=/:/host", "-v/:/host", "busybox --privileged"):
        code, message = error_code(lambda: launch(alice, "boxed", ["cat", "/host/etc/shadow"], image=image))
        assert code == "invalid_argument" and f"image {image!r} is not an image name" in message, message
    assert job_count(alice) == before
