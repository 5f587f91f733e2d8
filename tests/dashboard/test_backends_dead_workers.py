"""The Backends page's cpu meter of a workers pool counts live workers only: a dead worker's cores
are no capacity (nothing is placed there), so the page says how many dead workers it leaves out."""

from __future__ import annotations

import signal

import pytest

from tests.conftest import wait_until
from tests.controller.helpers import client, pb
from tests.dashboard.conftest import BROWSER_IS_OPERATOR
from tests.workers.conftest import GRACE, WorkerFactory, workers_backends

expect = pytest.importorskip("playwright.sync_api", reason="dashboard browser tests need the playwright package").expect

WAIT_MS = 20_000


@pytest.fixture
def workers(tmp_path):
    factory = WorkerFactory(tmp_path)
    try:
        yield factory
    finally:
        factory.cleanup()


def test_backends_page_leaves_a_dead_workers_cpu_out_of_the_meter(controller_factory, workers, new_page):
    ctl = controller_factory(
        "pool",
        backends=workers_backends(),
        controller={"tick_interval": "1s", "worker_grace_period": GRACE},
        auth=BROWSER_IS_OPERATOR,
    )
    c = client(ctl)
    workers(ctl, "live")
    workers(ctl, "silent", "--cpu", "3").signal(signal.SIGSTOP)
    wait_until(
        lambda: (
            {w.worker_id: w.alive for w in c.list_workers(pb.ListWorkersRequest()).workers}
            == {"live": True, "silent": False}
        ),
        message="the silent worker to be declared dead",
    )
    page = new_page()
    page.goto(f"{ctl.url}/#/backends")
    card = page.locator('article[data-backend="pool"]')
    expect(card.locator('.meter[data-token="cpu"] .meter-free')).to_have_text("2 free / 2 total", timeout=WAIT_MS)
    expect(card.locator(".dead-workers")).to_have_text("1 dead worker (cpu 3) not counted")
    expect(card.locator('tr[data-worker="silent"]')).to_contain_text("no")
    assert page.js_errors == []
