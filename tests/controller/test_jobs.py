"""End-to-end behaviour of one cluster: real controller process, real subprocesses, real SQLite."""

from __future__ import annotations

import time

from iris.rpc import controller_pb2 as pb
from tests.conftest import wait_until
from tests.controller.helpers import client, error_code, launch, logs, pid_alive, status, wait_state


def test_job_success_records_exit_code_and_both_log_streams(controller):
    c = client(controller)
    job = launch(c, "hello", ["sh", "-c", "echo out-line; echo err-line >&2"])
    assert job == "/alice/hello"
    final = wait_state(c, job)
    assert final.job.state == "SUCCEEDED"
    assert final.job.has_exit_code and final.job.exit_code == 0
    lines = c.fetch_logs(pb.FetchLogsRequest(job_id=job, task_index=-1)).lines
    assert {(ln.stream, ln.text) for ln in lines} == {("stdout", "out-line"), ("stderr", "err-line")}
    assert all(ln.ts_ms > 0 for ln in lines)


def test_job_failure_is_retried_within_the_failure_budget(controller):
    c = client(controller)
    job = launch(c, "flaky", ["sh", "-c", "echo attempt $IRIS_ATTEMPT; exit 7"], max_retries_failure=2)
    final = wait_state(c, job)
    assert final.job.state == "FAILED"
    task = final.tasks[0]
    assert [a.state for a in task.attempts] == ["FAILED", "FAILED", "FAILED"]
    assert task.failure_count == 3 and task.exit_code == 7
    assert logs(c, job) == ["attempt 0", "attempt 1", "attempt 2"]
    assert "exit code 7" in final.job.error


def test_replicas_run_as_separate_tasks_with_their_index(controller):
    c = client(controller)
    job = launch(c, "rep", ["sh", "-c", "echo index=$IRIS_TASK_INDEX of $IRIS_NUM_TASKS"], replicas=3)
    final = wait_state(c, job)
    assert final.job.state == "SUCCEEDED"
    assert [t.task_id for t in final.tasks] == [f"{job}/0", f"{job}/1", f"{job}/2"]
    assert sorted(logs(c, job)) == ["index=0 of 3", "index=1 of 3", "index=2 of 3"]


def test_stop_kills_the_process_group_and_marks_the_job_killed(controller):
    c = client(controller)
    job = launch(c, "sleeper", ["sh", "-c", "sleep 300 & sleep 300; wait"])
    running = wait_state(c, job, {"RUNNING"})
    wait_until(lambda: status(c, job).tasks[0].attempts[0].pid, message="pid recorded")
    pid = status(c, job).tasks[0].attempts[0].pid
    assert pid_alive(pid)
    resp = c.terminate_job(pb.TerminateJobRequest(job_id=job))
    assert resp.terminated == [job] and resp.state == "KILLED"
    wait_until(lambda: not pid_alive(pid), timeout=15, message="process gone")
    assert running.job.state == "RUNNING"
    assert status(c, job).job.state == "KILLED"


def test_timeout_fails_an_attempt_that_runs_too_long(controller):
    c = client(controller)
    job = launch(c, "slow", ["sleep", "60"], timeout_s=1.0)
    final = wait_state(c, job, timeout=20)
    assert final.job.state == "FAILED"
    assert "timed out" in final.tasks[0].error


def test_child_job_nests_inherits_env_and_region_and_dies_with_its_parent(controller_factory):
    ctl = controller_factory(
        "kids",
        backends=[
            {
                "id": "cpu",
                "kind": "local",
                "workers": 2,
                "capacity": {"cpu": 4, "memory": "8G"},
                "attributes": {"region": "us-east5"},
            }
        ],
    )
    c = client(ctl)
    parent = launch(
        c,
        "parent",
        ["sleep", "300"],
        env={"SHARED": "from-parent"},
        constraints=[pb.Constraint(key="region", op="EQ", values=["us-east5"])],
    )
    wait_state(c, parent, {"RUNNING"})
    child_id = c.launch_job(
        pb.LaunchJobRequest(name="child", parent_job_id=parent, command=["sh", "-c", "echo $SHARED; sleep 300"])
    ).job_id
    assert child_id == "/alice/parent/child"
    child = status(c, child_id)
    assert [(k.key, k.op, list(k.values)) for k in child.job.constraints] == [("region", "EQ", ["us-east5"])]
    free = c.launch_job(
        pb.LaunchJobRequest(
            name="free",
            parent_job_id=parent,
            command=["sh", "-c", "echo $SHARED; sleep 300"],
            constraints=[pb.Constraint(key="region", op="EQ", values=["any"])],
        )
    ).job_id
    assert list(status(c, free).job.constraints) == []  # `--region any` opts out and is dropped
    wait_state(c, free, {"RUNNING"})
    wait_until(lambda: logs(c, free) == ["from-parent"], message="child output")
    wait_until(lambda: logs(c, child_id) == ["from-parent"], message="child output")
    stopped = c.terminate_job(pb.TerminateJobRequest(job_id=parent)).terminated
    assert set(stopped) == {parent, child_id, free}
    assert status(c, free).job.state == "KILLED" and status(c, child_id).job.state == "KILLED"


def test_impossible_resources_fail_unschedulable_with_a_reason(controller):
    c = client(controller)
    job = launch(c, "huge", ["true"], resources=pb.Resources(cpu=64))
    final = wait_state(c, job, timeout=15)
    assert final.job.state == "UNSCHEDULABLE"
    assert "cpu" in final.job.error


def test_gpu_tasks_get_distinct_visible_devices(controller_factory):
    ctl = controller_factory(
        "gpu",
        backends=[
            {
                "id": "h100",
                "kind": "local",
                "workers": 1,
                "capacity": {"cpu": 8, "memory": "16G"},
                "devices": {"gpu": "h100", "count": 4},
            }
        ],
    )
    c = client(ctl)
    job = launch(
        c,
        "g",
        ["sh", "-c", "echo $CUDA_VISIBLE_DEVICES; sleep 1"],
        replicas=2,
        resources=pb.Resources(device=pb.Device(kind="gpu", variant="h100", count=2)),
    )
    assert wait_state(c, job).job.state == "SUCCEEDED"
    assert sorted(logs(c, job)) == ["0,1", "2,3"]
    backends = c.list_backends(pb.ListBackendsRequest()).backends
    avail = backends[0].availability
    assert backends[0].attributes["device-variant"] == "h100"
    assert avail.total_amounts["h100"] == 4 and avail.observation_epoch_ms > 0


def test_submit_wakes_the_tick_so_a_short_job_finishes_well_before_the_tick_interval(controller_factory):
    ctl = controller_factory("slowtick", controller={"tick_interval": "30s"})
    c = client(ctl)
    t0 = time.monotonic()
    job = launch(c, "quick", ["true"])
    assert wait_state(c, job, timeout=10).job.state == "SUCCEEDED"
    assert time.monotonic() - t0 < 10  # with a 30 s tick, only the wake-ups can have finished it


def test_list_jobs_filters_by_state_and_prefix_and_gives_pending_reasons(controller):
    c = client(controller)
    a = launch(c, "a-one", ["true"])
    b = launch(c, "b-two", ["sleep", "300"], resources=pb.Resources(cpu=4), replicas=3)
    wait_state(c, a)
    wait_until(lambda: status(c, b).job.task_counts.get("RUNNING") == 2, message="two replicas running")
    jobs = c.list_jobs(pb.ListJobsRequest(prefix="/alice/b")).jobs
    assert [j.job_id for j in jobs] == [b]
    assert jobs[0].state == "RUNNING" and jobs[0].task_counts["PENDING"] == 1
    done = c.list_jobs(pb.ListJobsRequest(state="SUCCEEDED")).jobs
    assert [j.job_id for j in done] == [a]
    pending_one = launch(c, "c-three", ["true"], resources=pb.Resources(cpu=4))
    reason = wait_until(lambda: status(c, pending_one).job.pending_reason, message="a pending reason")
    assert reason
    c.terminate_job(pb.TerminateJobRequest(job_id=b))


def test_workspace_files_and_bundle_are_unpacked_where_the_job_runs(controller):
    import io
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("pkg/data.txt", "from-bundle")
    c = client(controller)
    job = launch(
        c,
        "ws",
        ["sh", "-c", "cat pkg/data.txt; echo; cat notes/extra.txt"],
        workspace_bundle=buf.getvalue(),
        workdir_files={"notes/extra.txt": b"from-file"},
    )
    assert wait_state(c, job).job.state == "SUCCEEDED"
    assert logs(c, job) == ["from-bundle", "from-file"]


def test_workspace_paths_escaping_the_folder_are_refused(controller):
    c = client(controller)
    code, message = error_code(lambda: launch(c, "evil", ["true"], workdir_files={"../../etc/x": b"x"}))
    assert code == "invalid_argument" and "inside the workspace" in message
