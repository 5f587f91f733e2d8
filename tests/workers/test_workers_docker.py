"""`--runtime docker`: a job naming an image runs in a container with its limits, on the host network."""

from __future__ import annotations

import signal

from tests.conftest import wait_until
from tests.controller.helpers import client, logs, pb, wait_state
from tests.workers.conftest import _docker

MEMORY_LIMIT = "cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max"
HOG = "x=$(head -c 200000000 /dev/zero | tr '\\0' x); echo survived"


def _job(c, name: str, image: str, script: str, memory: int) -> str:
    req = pb.LaunchJobRequest(
        name=name, user="alice", command=["sh", "-c", script], image=image,
        resources=pb.Resources(cpu=0.5, memory_bytes=memory),
    )  # fmt: skip
    return c.launch_job(req).job_id


def test_workers_docker_limits_oom_and_stop(pool, worker_factory, dockerd):
    worker = worker_factory(pool, "boxes", "--runtime", "docker", env={"DOCKER_HOST": dockerd.host})
    c = client(pool)
    limited = _job(c, "limits", dockerd.image, MEMORY_LIMIT, 64 << 20)
    hog = _job(c, "hog", dockerd.image, HOG, 32 << 20)
    plain = c.launch_job(pb.LaunchJobRequest(name="plain", user="alice", command=["sh", "-c", "echo as a process"]))
    sleeper = _job(c, "sleeper", dockerd.image, "sleep 60", 32 << 20)

    assert wait_state(c, limited, timeout=60).job.state == "SUCCEEDED"
    assert logs(c, limited) == [str(64 << 20)]
    oom = wait_state(c, hog, timeout=60)
    assert oom.job.state == "FAILED"
    assert oom.tasks[0].exit_code == 137 and "OOM-killed" in oom.tasks[0].error
    assert "survived" not in logs(c, hog)
    assert wait_state(c, plain.job_id).job.state == "SUCCEEDED"

    labelled = ("ps", "-q", "--filter", "label=iris.worker=boxes")
    wait_until(lambda: _docker(dockerd.host, *labelled).stdout.strip(), timeout=60, message="the sleeper's container")
    assert pool.cli("job", "stop", sleeper).returncode == 0
    wait_until(
        lambda: not _docker(dockerd.host, "ps", "-aq", "--filter", "label=iris.worker=boxes").stdout.strip(),
        timeout=60,
        message="the stopped job's container to be gone",
    )
    assert wait_state(c, sleeper).job.state == "KILLED"
    worker.signal(signal.SIGTERM)


def test_workers_docker_job_runs_in_its_workspace_and_sees_no_gpus(pool, worker_factory, dockerd, tmp_path):
    from iris.client import IrisClient

    worker_factory(pool, "boxed", "--runtime", "docker", env={"DOCKER_HOST": dockerd.host})
    project = tmp_path / "project"
    project.mkdir()
    (project / "data.txt").write_text("from the workspace\n")
    script = 'cat data.txt; echo "[$CUDA_VISIBLE_DEVICES]"; pwd; echo written > out.txt && cat out.txt'
    with IrisClient(pool.url, token="") as sdk:
        job = sdk.submit(
            ["sh", "-c", script], name="ws", user="alice", cpu=0.5, image=dockerd.image, workdir=str(project)
        )
        assert sdk.wait(job, timeout=60).state == "SUCCEEDED", [line.text for line in sdk.logs(job)]
        lines = [line.text for line in sdk.logs(job) if line.stream == "stdout"]
    assert lines[0] == "from the workspace" and lines[1] == "[]" and lines[3] == "written"
    assert lines[2].endswith("/work")  # the attempt's own folder, at the same path inside the container
    assert not (project / "out.txt").exists()
