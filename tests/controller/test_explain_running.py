"""`iris job explain` of a job that runs some replicas while the rest wait says why those wait."""

from __future__ import annotations

from tests.conftest import wait_until
from tests.controller.helpers import client, pb, status


def test_explain_running_job_with_waiting_replicas_says_why_they_wait(controller_factory):
    ctl = controller_factory(
        "partial", backends=[{"id": "cpu", "kind": "local", "workers": 1, "capacity": {"cpu": 4, "memory": "8G"}}]
    )
    c = client(ctl)
    two_cpus = pb.Resources(cpu=2, memory_bytes=1024**3)
    job = c.launch_job(
        pb.LaunchJobRequest(name="wide", user="alice", command=["sleep", "300"], resources=two_cpus, replicas=3)
    ).job_id
    wait_until(lambda: [t.state for t in status(c, job).tasks].count("RUNNING") == 2, message="two replicas running")
    assert status(c, job).job.state == "RUNNING"
    explained = c.explain_job(pb.ExplainJobRequest(job_id=job))
    assert explained.summary.startswith("job is RUNNING; 1 of its 3 tasks wait: "), explained.summary
    assert "Waiting for 2 cpu on one worker; at most 0 cpu free" in explained.summary, explained.summary
    assert any("at most 0 cpu free" in r for g in explained.groups for r in g.reasons), explained
    assert [g.verdict for g in explained.groups] == ["blocked"]
    cli = ctl.cli("job", "explain", job)
    assert cli.returncode == 0 and "1 of its 3 tasks wait" in cli.stdout and "backend cpu" in cli.stdout, cli.stdout
    c.terminate_job(pb.TerminateJobRequest(job_id=job))
