"""`iris job list` over pages of a thousand jobs and more, on a real controller filled through the
fast path (`iris.testing.fill`): the table and the JSON document hold every job fetched, and each
job the listing sends is the job `describe` sends, less the fields a listing leaves out."""

from __future__ import annotations

import json

import pytest

from iris.cli.main import main
from iris.client import IrisClient
from iris.testing.fill import Copy, copy_jobs
from tests.conftest import ControllerFactory, wait_until

ONE_SLOT = [{"id": "cpu", "kind": "local", "workers": 1, "capacity": {"cpu": 1, "memory": "1G", "disk": "1G"}}]
USERS = ("alice", "bob", "carol")
# Template job -> how many copies of it the database holds.
COPIES = {"/alice/ok": 1300, "/alice/bad": 700, "/alice/wide": 300}


@pytest.fixture(scope="module")
def filled(tmp_path_factory):
    """A controller with 2,300 copied jobs (succeeded, failed with an exit code, three tasks each)
    mixed in insertion order, then a running job, one waiting behind it and one nothing can hold."""
    factory = ControllerFactory(tmp_path_factory.mktemp("largepage"))
    try:
        ctl = factory("large", backends=ONE_SLOT)
        with IrisClient(ctl.url) as sdk:
            sdk.submit("true", name="ok", user="alice", cpu=1)
            sdk.submit(["sh", "-c", "echo no >&2; exit 3"], name="bad", user="alice", cpu=1)
            sdk.submit("true", name="wide", user="alice", cpu=0.25, replicas=3)
            for job in COPIES:
                sdk.wait(job, timeout=60)
        ctl.stop()
        # Copied in runs of 25 from each template in turn, so that every page mixes them.
        for start in range(0, max(COPIES.values()), 25):
            for template, count in COPIES.items():
                copies = [
                    Copy(f"/{USERS[n % 3]}/{template.rsplit('/', 1)[1]}-{n:05d}", USERS[n % 3], n * 1000)
                    for n in range(start, min(start + 25, count))
                ]
                copy_jobs(ctl.state_dir / "controller.db", template, copies, template_user="alice")
        ctl.start()
        with IrisClient(ctl.url) as sdk:
            sdk.submit(["sleep", "600"], name="busy", user="bob", cpu=1)
            wait_until(lambda: sdk.status("/bob/busy").state == "RUNNING", timeout=60, message="a job to run")
            sdk.submit("true", name="waiting", user="carol", cpu=1)
            sdk.submit("true", name="huge", user="carol", cpu=100000)
            # Settled before any listing: the tick gives the waiting job its reason and ends the huge one.
            wait_until(lambda: sdk.status("/carol/huge").state == "UNSCHEDULABLE", timeout=60, message="huge ends")
            wait_until(lambda: sdk.status("/carol/waiting").pending_reason, timeout=60, message="a reason to wait")
        yield ctl
    finally:
        factory.cleanup()


def _run(capsys, monkeypatch, url: str, argv: list[str]) -> tuple[int, str, str]:
    monkeypatch.setenv("IRIS_CONTROLLER", url)
    capsys.readouterr()
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize(
    "argv",
    [
        ["job", "list"],
        ["-o", "json", "job", "list"],
        ["job", "list", "--limit", "2200", "--page-size", "1000"],
        ["job", "list", "--state", "failed,pending", "--page-size", "5000"],
        ["-o", "json", "job", "list", "--user", "bob", "--all"],
    ],
    ids=lambda argv: " ".join(argv),
)
def test_a_large_page_prints_every_job_it_fetched(filled, capsys, monkeypatch, argv):
    code, out, err = _run(capsys, monkeypatch, filled.url, argv)
    assert code == 0, err
    if "json" in argv:
        doc = json.loads(out)
        assert len(doc["jobs"]) == (doc["total"] if "--all" in argv else min(doc["total"], 1000))
        assert all(job["job_id"].startswith("/") for job in doc["jobs"])
    else:
        assert out.count("\n") > (700 if "failed,pending" in argv else 1000)


def test_each_listed_job_is_the_described_job_less_its_request(filled):
    with IrisClient(filled.url) as sdk:
        listed = sdk.list(limit=5000)
        assert len(listed) == sum(COPIES.values()) + len(COPIES) + 3
        states = {j.state for j in listed}
        assert {"SUCCEEDED", "FAILED", "RUNNING", "PENDING"} <= states, states
        assert any(j.has_exit_code and j.exit_code == 3 for j in listed)
        assert any(dict(j.task_counts) == {"SUCCEEDED": 3} and not j.has_exit_code for j in listed)
        for i, job in enumerate(listed):
            if i % 23 and "-" in job.job_id:
                continue  # a sample of the copies, and every job made through the API
            described = sdk.describe(job.job_id).job
            for field in ("command", "resources", "constraints", "last_sync_ms"):
                described.ClearField(field)
            assert job == described, job.job_id
