"""The job page in a real browser says what a person reads it for: why a running job's waiting
replicas wait, which process runs each attempt, times as the CLI prints them, and that a finished
job printed nothing (rather than an empty box that reads as still loading)."""

from __future__ import annotations

import re
from urllib.parse import quote

import pytest

from tests.conftest import wait_until
from tests.controller.helpers import client, launch, pb, status, user_token, wait_state
from tests.dashboard.conftest import BROWSER_IS_OPERATOR
from tests.dashboard.test_dashboard_browser import open_as

expect = pytest.importorskip("playwright.sync_api", reason="dashboard browser tests need the playwright package").expect

WAIT_MS = 20_000
ISO = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")


def test_job_page_explains_waiting_replicas_names_processes_and_marks_no_output(controller_factory, new_page):
    ctl = controller_factory(
        "page",
        backends=[{"id": "cpu", "kind": "local", "workers": 1, "capacity": {"cpu": 4, "memory": "8G"}}],
        auth=BROWSER_IS_OPERATOR,
    )
    c = client(ctl)
    quiet = launch(c, "quiet", ["true"])
    assert wait_state(c, quiet).job.state == "SUCCEEDED"
    wide = c.launch_job(
        pb.LaunchJobRequest(
            name="wide",
            user="alice",
            command=["sleep", "300"],
            resources=pb.Resources(cpu=2, memory_bytes=1024**3),
            replicas=3,
        )
    ).job_id
    wait_until(lambda: [t.state for t in status(c, wide).tasks].count("RUNNING") == 2, message="two replicas running")
    admin = user_token(ctl, "root", role="admin")

    page = new_page()
    open_as(page, ctl, admin, f"/job/{quote(wide, safe='')}")
    explain = page.locator("#job-explain")
    expect(explain).to_contain_text("Why some of its tasks wait", timeout=WAIT_MS)
    expect(page.locator("#explain-summary")).to_contain_text("1 of its 3 tasks wait")
    expect(explain.locator("table")).to_contain_text("blocked")
    pids = {a.pid for t in status(c, wide).tasks for a in t.attempts if a.pid}
    cells = page.locator("#tasks-table tr.attempt td.process")
    expect(cells.first).to_contain_text("pid ", timeout=WAIT_MS)
    shown = {int(text.removeprefix("pid ")) for text in cells.all_inner_texts() if text}
    assert shown == pids and len(pids) == 2
    submitted = page.locator("#job-summary dd").nth(
        [t.strip() for t in page.locator("#job-summary dt").all_inner_texts()].index("Submitted")
    )
    assert ISO.fullmatch(submitted.inner_text().strip()), submitted.inner_text()

    page.goto(f"{ctl.url}/#/job/{quote(quiet, safe='')}")
    expect(page.locator("#no-output")).to_have_text("no output: the job printed nothing", timeout=WAIT_MS)
    assert page.js_errors == []
    c.terminate_job(pb.TerminateJobRequest(job_id=wide))
