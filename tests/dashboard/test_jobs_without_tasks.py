"""A job with no task (refused at submit, queued for a peer, stopped before it was placed) still
says, in its TASKS cell, how many it asked for and that none exists, with the reason on hover."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from tests.conftest import free_port
from tests.controller.helpers import user_token
from tests.dashboard.conftest import BROWSER_IS_OPERATOR

expect = pytest.importorskip("playwright.sync_api", reason="dashboard browser tests need the playwright package").expect

WAIT_MS = 20_000
PLACED_LATER = "No task yet: a job's tasks are created when it is placed (here, or on a peer that takes it)"


def _run(ctl, token: str, name: str, *args: str) -> int:
    done = ctl.cli(
        "--token",
        token,
        "job",
        "run",
        "--no-wait",
        "--user",
        "alice",
        "--job-name",
        name,
        "--replicas",
        "3",
        *args,
        "--",
        "true",
    )
    assert done.returncode in (0, 2), done.stderr
    return done.returncode


def test_jobs_without_tasks_show_their_task_count_and_why_none_exists(controller_factory, new_page):
    # A peer that never answers: a job nothing can host is refused at submit, a pinned one waits for it.
    ctl = controller_factory(
        "home", peers={"gone": {"address": f"http://127.0.0.1:{free_port()}"}}, auth=BROWSER_IS_OPERATOR
    )
    alice = user_token(ctl, "alice")  # only an accountable user's job is handed to a peer
    assert _run(ctl, alice, "huge", "--cpu", "10000") == 2
    assert _run(ctl, alice, "queued", "--target-cluster", "gone") == 0
    assert _run(ctl, alice, "dropped", "--target-cluster", "gone") == 0
    assert ctl.cli("--token", alice, "job", "stop", "/alice/dropped").returncode == 0

    page = new_page()
    page.goto(ctl.url + "/")
    cells = {
        name: page.locator(f'#jobs-rows tr[data-job="/alice/{name}"] td.counts')
        for name in ("huge", "queued", "dropped")
    }
    expect(cells["huge"]).to_have_text("— none of 3 created", timeout=WAIT_MS)
    expect(cells["huge"].locator(".no-tasks")).to_have_attribute(
        "title", "No task was created: the job ended UNSCHEDULABLE before it was placed"
    )
    expect(cells["dropped"]).to_have_text("— none of 3 created")
    expect(cells["dropped"].locator(".no-tasks")).to_have_attribute(
        "title", "No task was created: the job ended KILLED before it was placed"
    )
    expect(cells["queued"]).to_have_text("— none of 3 created yet")
    expect(cells["queued"].locator(".no-tasks")).to_have_attribute("title", PLACED_LATER)

    page.goto(f"{ctl.url}/#/job/{quote('/alice/huge', safe='')}")
    expect(page.locator("#job-summary")).to_contain_text("3 replica(s): — none of 3 created", timeout=WAIT_MS)
    assert page.js_errors == []
