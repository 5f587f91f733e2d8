"""The dashboard in a real browser: Chromium, driven by Playwright, against real controllers.

Every page is loaded, checked for what a person comes to it for, and left as a screenshot in the
artifacts folder. Waits are Playwright's deadline polls (`expect`), never fixed sleeps.
"""

from __future__ import annotations

from urllib.parse import quote

import pytest

from iris.rpc import controller_pb2 as pb
from tests.conftest import wait_until
from tests.controller.helpers import client, status, user_token
from tests.dashboard.conftest import SEEDED_JOBS

expect = pytest.importorskip("playwright.sync_api", reason="dashboard browser tests need the playwright package").expect

WAIT_MS = 20_000


def job_path(job_id: str) -> str:
    return f"/job/{quote(job_id, safe='')}"


def sign_in(page, token: str) -> None:
    expect(page.locator("#who")).not_to_be_empty(timeout=WAIT_MS)  # the page has asked who it is
    if not page.locator("#sign-in-dialog").is_visible():  # a cluster that trusts no address asks at once
        page.click("#sign-in")
    page.fill("#token-input", token)
    page.click("#sign-in-submit")
    expect(page.locator("#sign-in-dialog")).not_to_be_visible()


def open_as(page, ctl, token: str, fragment: str = "") -> None:
    """Opens the dashboard, signs in with `token`, then goes to `#fragment` within the same session."""
    page.goto(ctl.url + "/")
    sign_in(page, token)
    if fragment:
        page.goto(f"{ctl.url}/#{fragment}")


def shot(page, artifacts, name: str) -> None:
    page.screenshot(path=str(artifacts / f"{name}.png"), full_page=True)


def rows(page):
    return page.locator("#jobs-rows tr")


def test_jobs_page_shows_states_reasons_and_filters(site, new_page, artifacts):
    page = new_page()
    open_as(page, site.marin, site.tokens["ops"])
    expect(page.locator("#who")).to_have_text("ops (dashboard)")
    waiting = page.locator(f'#jobs-rows tr[data-job="{site.jobs["waiting"]}"]')
    expect(waiting).to_contain_text("PENDING", timeout=WAIT_MS)
    expect(waiting.locator("td.reason")).to_contain_text("h100")
    expect(page.locator(f'#jobs-rows tr[data-job="{site.jobs["failed"]}"]')).to_contain_text("FAILED")
    expect(page.locator(f'#jobs-rows tr[data-job="{site.jobs["done"]}"]')).to_contain_text("1 SUCCEEDED")
    expect(page.locator(f'#jobs-rows tr[data-job="{site.jobs["away"]}"]')).to_contain_text("cw-a100")
    expect(page.locator('#state-counts a[data-state="PENDING"]')).to_have_text("1 PENDING")
    shot(page, artifacts, "jobs")

    page.select_option("#filter-state", "PENDING")
    expect(rows(page)).to_have_count(1, timeout=WAIT_MS)
    expect(rows(page).first).to_have_attribute("data-job", site.jobs["waiting"])
    assert "state=PENDING" in page.url and "eyJ" not in page.url

    page.click("text=Clear")
    # Clear renders the page anew: typing before that would go into the form it replaces.
    expect(page.locator("#filter-state")).to_have_value("", timeout=WAIT_MS)
    page.fill("#filter-user", "bob")
    page.press("#filter-user", "Enter")
    expect(rows(page)).to_have_count(1, timeout=WAIT_MS)
    expect(rows(page).first).to_have_attribute("data-job", site.jobs["bobs"])

    page.click("text=Clear")
    expect(page.locator("#filter-user")).to_have_value("", timeout=WAIT_MS)
    page.select_option("#filter-cluster", "cw-a100")
    expect(rows(page)).to_have_count(1, timeout=WAIT_MS)
    expect(rows(page).first).to_have_attribute("data-job", site.jobs["away"])

    page.click("text=Clear")
    expect(page.locator("#filter-cluster")).to_have_value("", timeout=WAIT_MS)
    page.fill("#filter-prefix", "/alice/gpu-")
    page.press("#filter-prefix", "Enter")
    expect(rows(page)).to_have_count(2, timeout=WAIT_MS)
    shot(page, artifacts, "jobs-filtered")
    assert page.js_errors == []


def test_job_page_follows_a_running_jobs_log_without_reload(site, new_page, artifacts):
    page = new_page()
    open_as(page, site.marin, site.tokens["ops"], "/jobs?prefix=/alice/trainer")
    page.click(f'#jobs-rows a:text-is("{site.jobs["follow"]}")')
    expect(page.locator("#job-summary")).to_contain_text("RUNNING", timeout=WAIT_MS)
    expect(page.locator("#log-lines")).to_contain_text("started", timeout=WAIT_MS)
    page.evaluate("window.__sameDocument = true")
    site.go_file.touch()
    expect(page.locator("#log-lines")).to_contain_text("the-late-line", timeout=WAIT_MS)
    assert page.evaluate("window.__sameDocument") is True  # the line arrived without a reload

    page.fill("#log-search", "late")
    expect(page.locator("#log-lines .line:visible")).to_have_count(1)
    expect(page.locator("#log-matches")).to_have_text("1 matching line(s)")
    page.fill("#log-search", "")
    page.click("#log-end")
    expect(page.locator("#tasks-table")).to_contain_text("cpu")
    child = page.locator(f'#job-children a:text-is("{site.jobs["child"]}")')
    expect(child).to_be_visible()
    shot(page, artifacts, "job-running-logs")

    child.click()
    expect(page.locator("#job-parent")).to_contain_text(site.jobs["follow"], timeout=WAIT_MS)
    shot(page, artifacts, "job-child")
    assert page.js_errors == []


def test_pending_job_page_explains_why_it_waits(site, new_page, artifacts):
    page = new_page()
    open_as(page, site.marin, site.tokens["ops"], job_path(site.jobs["waiting"]))
    expect(page.locator("#explain-summary")).to_contain_text("h100", timeout=WAIT_MS)
    expect(page.locator("#job-explain table")).to_contain_text("blocked")
    expect(page.locator("#job-summary")).to_contain_text("Pending reason")
    shot(page, artifacts, "job-pending-explain")


def test_federated_job_page_shows_its_handle(site, new_page, artifacts):
    page = new_page()
    open_as(page, site.marin, site.tokens["ops"], job_path(site.jobs["away"]))
    expect(page.locator("#handle-peer")).to_have_text("cw-a100", timeout=WAIT_MS)
    expect(page.locator("#handle-state")).to_have_text("HANDED_OFF")
    expect(page.locator("#handle-owner")).to_have_text("alice")
    expect(page.locator("#handle-sync")).to_contain_text("ago")
    expect(page.locator("#handle-stale")).to_have_text("no")
    expect(page.locator("#tasks-table")).to_contain_text("peer cw-a100")
    shot(page, artifacts, "job-federated")


def test_backends_page_shows_free_total_meters_and_what_each_band_holds(site, new_page, artifacts):
    page = new_page()
    open_as(page, site.marin, site.tokens["ops"], "/backends")
    h100 = page.locator('article[data-backend="h100"]')
    expect(h100.locator('.meter[data-token="h100"] .meter-free')).to_have_text("0 free / 8 total", timeout=WAIT_MS)
    expect(h100.locator(".meter-label")).to_contain_text("held: batch 8")
    expect(h100.locator('tr[data-worker="h100-0"]')).to_contain_text("8 / 8 h100")
    expect(page.locator('article[data-backend="cpu"] .meter[data-token="cpu"]')).to_contain_text("total")
    shot(page, artifacts, "backends")


def test_peers_page_shows_the_peer_its_capacity_and_the_jobs_it_runs(site, new_page, artifacts):
    page = new_page()
    open_as(page, site.marin, site.tokens["ops"], "/peers")
    peer = page.locator('article[data-peer="cw-a100"]')
    expect(peer.locator(".reach")).to_have_text("reachable", timeout=WAIT_MS)
    expect(peer).to_contain_text("last contact")
    backend = peer.locator('.peer-backends tr[data-backend="a100"]')
    expect(backend).to_contain_text("region=us-west1")
    expect(backend.locator('.meter[data-token="a100"] .meter-free')).to_have_text("8 free / 8 total")
    expect(peer.locator(f'.peer-jobs tr[data-job="{site.jobs["away"]}"]')).to_contain_text("RUNNING")
    gone = page.locator('article[data-peer="cw-gone"]')
    expect(gone.locator(".reach")).to_have_text("unreachable")
    expect(gone.locator(".error")).to_contain_text("last error")
    shot(page, artifacts, "peers")


def test_peers_page_of_a_peer_shows_the_cluster_that_hands_it_jobs(site, new_page, artifacts):
    page = new_page()
    open_as(page, site.peer, user_token(site.peer, "ops", role="dashboard"), "/peers")
    marin = page.locator('#inbound-peers tr[data-inbound="marin"]')
    expect(marin).to_contain_text("yes (auth.federation_peers)", timeout=WAIT_MS)
    expect(marin).to_contain_text("ago")  # its syncs reach the peer
    expect(marin.locator("td").nth(3)).to_have_text("1")  # the pinned job it runs there
    expect(page.locator("#no-peers")).to_be_visible()  # and the peer hands jobs to no one
    shot(page, artifacts, "peers-inbound")


def test_only_the_owner_is_offered_stop_and_a_dashboard_token_is_refused(site, new_page, artifacts):
    victim = site.jobs["victim"]
    viewer = new_page()
    open_as(viewer, site.marin, site.tokens["ops"], job_path(victim))
    expect(viewer.locator("#stop-not-offered")).to_contain_text("read-only", timeout=WAIT_MS)
    expect(viewer.locator("#stop-job")).to_have_count(0)
    # The server refuses the dashboard role whatever the page offers: call the API as the page would.
    refused = viewer.evaluate(
        """async (jobId) => {
            const r = await fetch('/iris.v1.ControllerService/TerminateJob', {method: 'POST',
              headers: {'content-type': 'application/json',
                        authorization: 'Bearer ' + sessionStorage.getItem('iris.token')},
              body: JSON.stringify({jobId})});
            return {status: r.status, body: await r.json()};
        }""",
        victim,
    )
    assert refused["status"] == 403 and refused["body"]["code"] == "permission_denied"
    assert "read-only" in refused["body"]["message"]
    shot(viewer, artifacts, "job-read-only")

    other = new_page()
    open_as(other, site.marin, site.tokens["bob"], job_path(victim))
    expect(other.locator("#stop-not-offered")).to_contain_text("only alice", timeout=WAIT_MS)

    owner = new_page()
    open_as(owner, site.marin, site.tokens["alice"], job_path(victim))
    owner.click("#stop-job", timeout=WAIT_MS)
    expect(owner.locator("#confirm-dialog")).to_be_visible()
    expect(owner.locator("#confirm-title")).to_contain_text(victim)
    shot(owner, artifacts, "job-stop-confirm")
    owner.click("#confirm-ok")
    expect(owner.locator("#stop-result")).to_contain_text("KILLED", timeout=WAIT_MS)
    assert status(client(site.marin, site.tokens["admin"]), victim).job.state == "KILLED"
    shot(owner, artifacts, "job-stopped")


def test_signing_in_refreshes_the_view_shown_in_place(site, new_page):
    """The jobs view drawn before a sign-in is refreshed as the new caller, not built anew: built anew,
    its rows would be drawn a second time, a moment later."""
    page = new_page()
    page.goto(site.marin.url + "/")
    wait_until(lambda: int(page.get_attribute("#jobs-table", "data-refreshes") or 0) >= 1, message="the first draw")
    page.evaluate("document.getElementById('jobs-table').dataset.drawnBefore = 'yes'")
    sign_in(page, site.tokens["ops"])
    expect(page.locator("#who")).to_have_text("ops (dashboard)", timeout=WAIT_MS)
    refreshed = wait_until(lambda: int(page.get_attribute("#jobs-table", "data-refreshes")) >= 2 and page)
    expect(refreshed.locator("#jobs-table")).to_have_attribute("data-drawn-before", "yes")


def test_a_cluster_with_auth_asks_for_a_token_once_per_browser_session(site, new_page, artifacts):
    page = new_page()
    page.goto(site.locked.url + "/")
    expect(page.locator("#sign-in-dialog")).to_be_visible(timeout=WAIT_MS)
    expect(page.locator("#sign-in-why")).to_contain_text("token")
    shot(page, artifacts, "sign-in")
    page.fill("#token-input", "not-a-token")
    page.click("#sign-in-submit")
    expect(page.locator("#sign-in-error")).to_contain_text("refused")
    page.fill("#token-input", site.tokens["locked-ops"])
    page.click("#sign-in-submit")
    expect(page.locator("#jobs-summary")).to_have_text(f"1–50 of {SEEDED_JOBS} jobs", timeout=WAIT_MS)
    assert site.tokens["locked-ops"] not in page.url

    page.reload()
    expect(page.locator("#who")).to_have_text("ops (dashboard)", timeout=WAIT_MS)
    expect(page.locator("#sign-in-dialog")).not_to_be_visible()
    again = new_page()  # a new browser session signs in again
    again.goto(site.locked.url + "/")
    expect(again.locator("#sign-in-dialog")).to_be_visible(timeout=WAIT_MS)


def test_jobs_page_pages_on_the_server_and_refreshes_keeping_filter_and_scroll(site, new_page, artifacts):
    page = new_page()
    page.set_viewport_size({"width": 1400, "height": 600})
    page.goto(site.locked.url + "/")
    sign_in(page, site.tokens["locked-ops"])
    expect(page.locator("#jobs-summary")).to_have_text(f"1–50 of {SEEDED_JOBS} jobs", timeout=WAIT_MS)
    expect(rows(page).first).to_have_attribute("data-job", f"/carol/seed-{SEEDED_JOBS - 1:05d}")
    page.click("#page-next")
    expect(page.locator("#jobs-summary")).to_have_text(f"51–100 of {SEEDED_JOBS} jobs")
    page.click("#page-next")
    expect(page.locator("#jobs-summary")).to_have_text(f"101–{SEEDED_JOBS} of {SEEDED_JOBS} jobs")
    expect(page.locator("#page-next")).to_be_disabled()
    page.click("#page-prev")
    page.click("#page-prev")
    expect(page.locator("#jobs-summary")).to_have_text(f"1–50 of {SEEDED_JOBS} jobs")
    expect(rows(page).first).to_have_attribute("data-job", f"/carol/seed-{SEEDED_JOBS - 1:05d}")

    page.fill("#filter-user", "bob")
    page.press("#filter-user", "Enter")
    expect(page.locator("#jobs-summary")).to_have_text(f"1–40 of {SEEDED_JOBS // 3} jobs")
    page.mouse.wheel(0, 600)
    scrolled = wait_until(lambda: page.evaluate("window.scrollY") > 100 and page.evaluate("window.scrollY"))
    seen = int(page.get_attribute("#jobs-table", "data-refreshes"))
    # (Playwright's wait_for_function evaluates a string, which the page's CSP forbids; poll from here.)
    wait_until(lambda: int(page.get_attribute("#jobs-table", "data-refreshes")) >= seen + 2, message="two refreshes")
    assert page.evaluate("window.scrollY") == scrolled
    assert page.input_value("#filter-user") == "bob"
    assert {r.get_attribute("data-job").split("/")[1] for r in rows(page).all()} == {"bob"}
    shot(page, artifacts, "jobs-paged-filtered")


@pytest.mark.parametrize("path", ["/", "/static/app.js", "/static/app.css"])
def test_dashboard_assets_are_served_with_a_strict_content_policy(site, path):
    import urllib.request

    with urllib.request.urlopen(site.marin.url + path) as resp:
        assert resp.status == 200
        assert "default-src 'self'" in resp.headers["content-security-policy"]


def test_jobs_page_lists_what_list_jobs_answers(site, new_page):
    """The page is a view of the API: the rows it shows are the first page ListJobs gives the same caller."""
    page = new_page()
    open_as(page, site.marin, site.tokens["ops"])
    api = client(site.marin, site.tokens["ops"]).list_jobs(pb.ListJobsRequest(limit=50))
    expect(page.locator("#jobs-summary")).to_have_text(f"1–{len(api.jobs)} of {api.total} jobs", timeout=WAIT_MS)
    want = [j.job_id for j in api.jobs]

    def rows_shown() -> list:
        return page.eval_on_selector_all("#jobs-rows tr", "trs => trs.map(tr => tr.dataset.job)")

    # The view signed in may replace the one drawn before it (the same jobs, its rows a moment later).
    wait_until(lambda: rows_shown() == want, timeout=WAIT_MS / 1000, message="the rows ListJobs answers")
