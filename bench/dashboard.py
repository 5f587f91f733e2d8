"""Dashboard: how long the Jobs page takes to load in a real browser with many jobs in the database.

A controller starts on a database seeded with N finished jobs (10,000 by default). For each of a
few loads, Chromium (Debian's, driven by Playwright) opens the Jobs page in a fresh browser context;
the time is from the start of navigation to the page showing its first 50 rows and the count of all
N (the page marks that moment with the Performance API). Beside it: the
ListJobs call the page makes, timed alone over Connect JSON, unfiltered and filtered by user.

Usage: python bench/dashboard.py [--jobs N] [--loads K] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from common import ROOT, Controller, dump_json, local_backend, log, print_table, revision

sys.path.insert(0, str(ROOT))  # the seeding helper and the browser flags live with the tests
from tests.dashboard.conftest import CHROMIUM_ARGS  # noqa: E402
from tests.dashboard.seed import seed_finished_jobs  # noqa: E402


def list_jobs_ms(url: str, body: dict, repeats: int = 20) -> float:
    times = []
    data = json.dumps(body).encode()
    for _ in range(repeats):
        req = urllib.request.Request(
            url + "/iris.v1.ControllerService/ListJobs", data=data, headers={"Content-Type": "application/json"}
        )
        t0 = time.perf_counter()
        with urllib.request.urlopen(req, timeout=10) as resp:
            resp.read()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def page_loads_ms(url: str, jobs: int, loads: int) -> list[float]:
    """Per load, milliseconds from the start of navigation to the first rows on screen, as the page
    itself marks it (`iris:jobs-rendered`): Playwright's own waits poll at coarse intervals, so a
    wall clock around them would measure the polling too."""
    from playwright.sync_api import expect, sync_playwright

    out = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        try:
            for _ in range(loads):
                context = browser.new_context(viewport={"width": 1400, "height": 900})
                page = context.new_page()
                page.goto(url + "/#/jobs")
                expect(page.locator("#jobs-summary")).to_have_text(f"1–50 of {jobs} jobs", timeout=30_000)
                out.append(page.evaluate("performance.getEntriesByName('iris:jobs-rendered')[0].startTime"))
                context.close()
        finally:
            browser.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--loads", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="iris-bench-dashboard-") as tmp:
        ctl = Controller("dash", Path(tmp), [local_backend("cpu", 2, 4)])
        log(f"seeding {args.jobs} finished jobs…", args.json)
        t0 = time.perf_counter()
        seed_finished_jobs(ctl.state_dir, args.jobs)
        seeded_s = time.perf_counter() - t0
        with ctl:
            loads = page_loads_ms(ctl.url, args.jobs, args.loads)
            api_all = list_jobs_ms(ctl.url, {"limit": 50})
            api_user = list_jobs_ms(ctl.url, {"limit": 50, "user": "bob"})
    result = {
        "revision": revision(),
        "jobs": args.jobs,
        "seed_s": seeded_s,
        "load_average": os.getloadavg(),
        "page_load_ms": {"median": statistics.median(loads), "max": max(loads), "all": loads},
        "list_jobs_ms": {"first_page": api_all, "filtered_by_user": api_user},
    }
    if args.json:
        dump_json(result)
        return
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"dashboard, {args.jobs:,} jobs in the database ({revision()}; load average {load} on {os.cpu_count()} CPUs)")
    print_table(
        ["measure", "median ms", "max ms"],
        [
            ["Jobs page load (Chromium, first 50 rows + total)", statistics.median(loads), max(loads)],
            ["ListJobs first page (Connect JSON)", api_all, None],
            ["ListJobs filtered by user", api_user, None],
        ],
    )


if __name__ == "__main__":
    main()
