"""A job's workspace reaches a worker daemon on another host: fetched by content id through the
API, unpacked under the worker's own --work-dir, and removed with the attempt."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import zipfile
from pathlib import Path

from iris.backends.staging import content_id
from tests.conftest import wait_until
from tests.controller.helpers import client, error_code, launch, pb, status, wait_state


def _iris(ctl, cwd, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "iris.cli.main", "--controller", ctl.url, *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120, env=dict(os.environ))


def test_workers_job_run_ships_the_workspace_to_a_worker_and_removes_its_copy(pool, worker_factory, tmp_path):
    worker = worker_factory(pool, "far")
    project = tmp_path / "project"
    (project / "pkg").mkdir(parents=True)
    (project / "pkg" / "data.txt").write_text("payload from the workspace\n")
    (project / "driver.py").write_text(
        "import os\n"
        "print(open('pkg/data.txt').read().strip())\n"
        "print('cwd', os.getcwd())\n"
        "open('scratch.txt', 'w').write('left behind')\n"
    )
    result = _iris(pool, project, "job", "run", "--job-name", "shipped", "--", "python3", "driver.py")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "payload from the workspace" in result.stdout
    cwd = next(line.split(" ", 1)[1] for line in result.stdout.splitlines() if line.startswith("cwd "))
    # It ran in the worker's attempt folder, never in the controller's state or the project itself
    # (`attempts` may link to a folder its tasks' uids can reach, see `attempts_root`).
    assert Path(cwd).is_relative_to((worker.work_dir / "attempts").resolve()), cwd
    assert not (project / "scratch.txt").exists()
    # The bundle is cached by content id in the worker's --work-dir; the attempt's copy goes with it.
    assert list((worker.work_dir / "bundles").glob("*/driver.py"))
    wait_until(lambda: not os.path.exists(cwd), message="the attempt's folder on the worker to be removed")
    assert not list((worker.work_dir / "attempts").glob("*/work"))


def test_workers_fetch_bundle_only_for_an_attempt_assigned_to_the_caller(pool, worker_factory):
    worker = worker_factory(pool, "w1")
    c = client(pool)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("driver.py", "import time; time.sleep(60)\n")
    data = buf.getvalue()
    bundle_id = content_id(data)
    job = launch(c, "held", ["python3", "driver.py"], workspace_bundle=data, bundle_id=bundle_id)
    wait_until(worker.attempt_pids, message="the attempt to start on w1")
    attempt_id = status(c, job).tasks[0].attempts[-1].attempt_id
    # Another daemon joins; the job's attempt is not its own, so it gets nothing of the workspace.
    other = c.register_worker(
        pb.RegisterWorkerRequest(
            backend_id="pool", name="other", capacity=pb.Resources(cpu=1, memory_bytes=1 << 30), boot_id="b"
        )
    )
    ask = pb.FetchBundleRequest(backend_id="pool", session=other.session, attempt_id=attempt_id, content_id=bundle_id)
    code, message = error_code(lambda: c.fetch_bundle(ask))
    assert code == "permission_denied" and "not running on this worker" in message
    code, _ = error_code(lambda: c.fetch_bundle(pb.FetchBundleRequest(backend_id="pool", session="nope",
                                                                     attempt_id=attempt_id, content_id=bundle_id)))  # fmt: skip
    assert code == "permission_denied"
    c.terminate_job(pb.TerminateJobRequest(job_id=job))
    wait_state(c, job)


def test_workers_relative_work_dir_still_runs_attempts(pool, worker_factory):
    worker_factory(pool, "rel", relative=True)
    c = client(pool)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("hello.sh", "echo shipped\n")
    data = buf.getvalue()
    job = launch(c, "relative", ["sh", "hello.sh"], workspace_bundle=data, bundle_id=content_id(data))
    final = wait_state(c, job)
    assert final.job.state == "SUCCEEDED", final.tasks[0].attempts[-1].error
