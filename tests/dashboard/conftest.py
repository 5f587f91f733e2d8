"""Fixtures for the dashboard tests: Debian's Chromium driven by Playwright, real controllers with jobs
in every state, and a folder for the screenshots each page leaves behind.

The browser is the system's own (`/usr/bin/chromium`, or `IRIS_CHROMIUM`); Playwright never downloads
one. Where it cannot start, every browser test is skipped with the reason, never passed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from iris.controller.auth import load_or_create_signing_key, public_key_pem
from iris.rpc import controller_pb2 as pb
from tests.conftest import ROOT, ControllerFactory, RunningController, free_port, wait_until
from tests.controller.helpers import client, status, user_token, wait_state
from tests.dashboard.seed import seed_finished_jobs

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
FAST = {"tick_interval": "1s", "federation_heartbeat_interval": "0.5s", "federation_sync_interval": "0.5s"}
SEEDED_JOBS = 120
# The setup starts three controllers and nine jobs beside the rest of the suite on two cores: its waits
# allow for a loaded machine (they end as soon as the state is reached).
SETUP_WAIT_S = 60


@pytest.fixture(scope="session")
def artifacts() -> Path:
    """Where screenshots go: $IRIS_ARTIFACTS/dashboard, else tests/artifacts/dashboard (git-ignored)."""
    base = Path(os.environ.get("IRIS_ARTIFACTS") or ROOT / "tests" / "artifacts")
    path = base / "dashboard"
    path.mkdir(parents=True, exist_ok=True)
    return path


# Module-scoped, not session: Playwright's sync API keeps an event loop running on the main thread
# while it is started, which would break every later test of the worker that calls asyncio.run().
@pytest.fixture(scope="module")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:
        pytest.skip(f"dashboard browser tests need the playwright package: {exc}")
    executable = os.environ.get("IRIS_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(executable).exists():
        pytest.skip(f"dashboard browser tests need Chromium at {executable} (apt-get install -y chromium)")
    manager = sync_playwright().start()
    try:
        chromium = manager.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
    except Exception as exc:  # any failure to start the browser is a reason to skip, said out loud
        manager.stop()
        pytest.skip(f"Chromium at {executable} did not start: {exc}")
    try:
        yield chromium
    finally:
        chromium.close()
        manager.stop()


@pytest.fixture
def new_page(browser):
    """A page in a fresh browser context (its own session storage), closed after the test."""
    contexts = []

    def make():
        context = browser.new_context(viewport={"width": 1400, "height": 900})
        contexts.append(context)
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.js_errors = errors
        return page

    try:
        yield make
    finally:
        for context in contexts:
            context.close()


@dataclass
class Site:
    """marin (cpu + one 8×h100 worker) federated with cw-a100, and the jobs the pages show."""

    marin: RunningController
    peer: RunningController
    locked: RunningController  # trusts no address: every caller signs in; holds many finished jobs
    tokens: dict[str, str]
    jobs: dict[str, str]
    go_file: Path  # creating it makes the followed job print its last line


def _sleeper(name: str, **fields) -> pb.LaunchJobRequest:
    return pb.LaunchJobRequest(name=name, user="alice", command=["sleep", "300"], **fields)


def _h100(name: str) -> pb.LaunchJobRequest:
    return _sleeper(
        name, priority="batch", resources=pb.Resources(device=pb.Device(kind="gpu", variant="h100", count=8))
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Site:
    base = tmp_path_factory.mktemp("dashboard")
    factory = ControllerFactory(base)
    try:
        try:
            site = _build_site(factory, base)
        except AssertionError as exc:  # a setup that times out says what the home controller logged
            log = base / "marin" / "controller.log"
            tail = log.read_text(errors="replace")[-4000:] if log.exists() else "(no log)"
            raise AssertionError(f"{exc}\n--- the end of marin's log ---\n{tail}") from None
        yield site
    finally:
        factory.cleanup()


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=1) as resp:
            return resp.status == 200
    except OSError:
        return False


def _start_locked(ctl: RunningController) -> None:
    """Starts a controller that trusts no address: the usual readiness probe (an API call) would be
    refused, so readiness is its /health answering."""
    ctl.log = ctl.state_dir.parent / f"{ctl.name}.log"
    with open(ctl.log, "ab") as out:
        ctl.proc = subprocess.Popen(
            [sys.executable, "-m", "iris.controller", str(ctl.config_path)],
            stdout=out,
            stderr=out,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    wait_until(lambda: ctl.proc.poll() is not None or _healthy(ctl.url), timeout=30, message=f"{ctl.name} to start")
    assert ctl.proc.poll() is None, f"controller {ctl.name} exited:\n{ctl.log.read_text()[-3000:]}"


# A browser cannot dial the controller's Unix socket: the pages act as local_admin only where the
# cluster opts loopback in (the single-user set-up auth.trusted_cidrs is for); "locked" does not.
BROWSER_IS_OPERATOR = {"trusted_cidrs": ["127.0.0.0/8", "::1/128"]}


def _build_site(factory: ControllerFactory, base: Path) -> Site:
    marin = factory(
        "marin",
        start=False,
        controller=FAST,
        auth=BROWSER_IS_OPERATOR,
        backends=[
            {"id": "cpu", "kind": "local", "workers": 2, "capacity": {"cpu": 4, "memory": "8G"}},
            {
                "id": "h100",
                "kind": "local",
                "workers": 1,
                "capacity": {"cpu": 8, "memory": "16G"},
                "devices": {"gpu": "h100", "count": 8},
            },
        ],
    )
    marin_key = public_key_pem(load_or_create_signing_key(None, marin.state_dir))
    peer = factory(
        "cw-a100",
        controller=FAST,
        auth={**BROWSER_IS_OPERATOR, "federation_peers": {"marin": marin_key}},
        backends=[
            {
                "id": "a100",
                "kind": "local",
                "workers": 1,
                "capacity": {"cpu": 8, "memory": "16G"},
                "devices": {"gpu": "a100", "count": 8},
                "attributes": {"region": "us-west1"},
            }
        ],
    )
    gone = f"http://127.0.0.1:{free_port()}"  # a peer that never answers
    marin.rewrite(peers={"cw-a100": {"address": peer.url}, "cw-gone": {"address": gone}})
    marin.start()
    tokens = {
        "alice": user_token(marin, "alice"),
        "bob": user_token(marin, "bob"),
        "ops": user_token(marin, "ops", role="dashboard"),
        "admin": user_token(marin, "root", role="admin"),
    }
    admin = client(marin, tokens["admin"])
    wait_until(
        lambda: any(p.reachable for p in admin.list_peers(pb.ListPeersRequest()).peers), message="the peer reachable"
    )

    alice, bob = client(marin, tokens["alice"]), client(marin, tokens["bob"])
    go_file = base / "go"
    follow_cmd = f"echo started; while [ ! -f {go_file} ]; do sleep 0.1; done; echo the-late-line; sleep 300"
    jobs = {
        "done": alice.launch_job(pb.LaunchJobRequest(name="hello", user="alice", command=["echo", "hello"])).job_id,
        "failed": alice.launch_job(
            pb.LaunchJobRequest(name="broken", user="alice", command=["sh", "-c", "echo oops >&2; exit 3"])
        ).job_id,
        "follow": alice.launch_job(
            pb.LaunchJobRequest(name="trainer", user="alice", command=["sh", "-c", follow_cmd])
        ).job_id,
        "hog": alice.launch_job(_h100("gpu-hog")).job_id,
        "victim": alice.launch_job(_sleeper("victim")).job_id,
        "bobs": bob.launch_job(pb.LaunchJobRequest(name="bobs-job", user="bob", command=["sleep", "300"])).job_id,
        "away": alice.launch_job(
            _sleeper("away", constraints=[pb.Constraint(key="cluster", op="EQ", values=["cw-a100"])])
        ).job_id,
    }
    wait_state(admin, jobs["hog"], {"RUNNING"}, timeout=SETUP_WAIT_S)
    jobs["waiting"] = alice.launch_job(_h100("gpu-waiting")).job_id
    jobs["child"] = alice.launch_job(
        pb.LaunchJobRequest(name="helper", parent_job_id=jobs["follow"], command=["sleep", "300"])
    ).job_id
    wait_state(admin, jobs["done"], timeout=SETUP_WAIT_S)
    wait_state(admin, jobs["failed"], timeout=SETUP_WAIT_S)
    for key in ("follow", "victim", "bobs", "child"):
        wait_state(admin, jobs[key], {"RUNNING"}, timeout=SETUP_WAIT_S)
    wait_until(lambda: status(admin, jobs["waiting"]).job.pending_reason, message="a pending reason")
    wait_until(
        lambda: (
            status(admin, jobs["away"]).job.handoff_state == "HANDED_OFF"
            and status(admin, jobs["away"]).job.state == "RUNNING"
        ),
        timeout=SETUP_WAIT_S,
        message="the pinned job running on the peer",
    )

    locked = factory("locked", start=False, auth={"trusted_cidrs": []})
    seed_finished_jobs(locked.state_dir, SEEDED_JOBS)
    _start_locked(locked)
    tokens["locked-ops"] = user_token(locked, "ops", role="dashboard")
    return Site(marin, peer, locked, tokens, jobs, go_file)
