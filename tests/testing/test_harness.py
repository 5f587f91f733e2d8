"""The harness the tests, the benchmarks and the demo share: it finds what it started and leaves
nothing running."""

from __future__ import annotations

import os
import subprocess

import pytest

from iris.client import IrisClient
from iris.testing import ClusterSet, leftovers, pid_alive, process_group, processes_under, wait_until


def test_processes_under_a_folder_are_found_and_gone_once_killed(tmp_path):
    proc = subprocess.Popen(["sleep", "60"], cwd=tmp_path, start_new_session=True)
    try:
        assert pid_alive(proc.pid)
        assert proc.pid in [p["pid"] for p in processes_under(tmp_path)]
        assert process_group(proc.pid) == [proc.pid]
    finally:
        proc.kill()
        proc.wait()
    assert not pid_alive(proc.pid)
    assert leftovers(tmp_path, [proc.pid], timeout=1) == []


def test_cluster_set_close_stops_a_crashed_controllers_attempts(tmp_path):
    with ClusterSet(tmp_path) as clusters:
        ctl = clusters.make("harness", settings={"tick_interval": "0.2s"}).start()
        client = IrisClient(ctl.url)
        job = client.submit(["sleep", "300"], name="sleeper", user="alice")

        def attempt_pid() -> int:
            tasks = client.describe(job).tasks
            return tasks[0].attempts[-1].pid if tasks and tasks[0].attempts else 0

        pid = wait_until(attempt_pid, 30, what="the attempt's pid")
        ctl.kill()  # a crash leaves the attempt running, by design
        assert pid_alive(pid)
    # The kill is delivered at once but the process ends a moment later: wait for it, bounded.
    wait_until(lambda: not pid_alive(pid), 10, what=f"attempt {pid} gone")
    assert leftovers(tmp_path, [pid], timeout=5) == []


def test_rewrite_changes_the_config_a_restart_runs(tmp_path):
    with ClusterSet(tmp_path) as clusters:
        ctl = clusters.make("rewrite")
        ctl.rewrite(defaults={"task_env": {"GREETING": "hi"}}, controller={"tick_interval": "0.5s"})
        text = ctl.config_path.read_text()
        assert "GREETING: hi" in text and "tick_interval: 0.5s" in text
        assert ctl.start().pid > 0


def test_start_is_not_fooled_by_another_controller_answering_on_its_port(tmp_path):
    with ClusterSet(tmp_path) as clusters:
        other = clusters.make("other").start()
        # As if a test beside this one had drawn this controller's port while it was stopped.
        late = clusters.make("late", port=other.port)
        with pytest.raises(RuntimeError, match=f"another server \\(pid {other.pid}\\) answers there"):
            late.start()
        assert late.proc is not None and late.proc.poll() is not None, "its own process could not serve"
        assert other.proc is not None and other.proc.poll() is None


@pytest.mark.skipif(os.geteuid() != 0, reason="tasks get uids of their own only under a root controller")
def test_cluster_set_removes_the_temp_folder_a_root_clusters_attempts_lived_in(tmp_path):
    with ClusterSet(tmp_path) as clusters:  # pytest's folders are 0700: the attempts go to the temp folder
        ctl = clusters.make("dev", extra={"auth": {"task_uids": {"enabled": True}}}).start()
        moved = (ctl.state_dir / "attempts").resolve()
        assert moved != ctl.state_dir / "attempts" and moved.is_dir()
    assert not moved.exists()
