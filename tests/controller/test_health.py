"""A wedged controller does not look healthy: /health and `iris cluster status` say why, and the
watchdog ends the process so it can be restarted from its database."""

from __future__ import annotations

import json
import sqlite3
import urllib.error
import urllib.request

from iris.controller.state.health import EXIT_WEDGED, Watchdog, assess
from tests.conftest import wait_until
from tests.controller.helpers import client, launch, wait_state


def _health(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url + "/health", timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_assess_names_a_dead_tick_a_stalled_tick_and_backend_problems():
    assert assess(True, 0.5, 100, 60).ok
    dead = assess(False, 0.5, 100, 60)
    assert not dead.ok and "died" in dead.problems[0]
    stalled = assess(True, 90, 100, 60)
    assert not stalled.ok and "90s" in stalled.problems[0]
    never = assess(True, None, 100, 60)
    assert not never.ok and "100s" in never.problems[0]
    backend = assess(True, 1, 100, 60, ("backend cpu: its logs-cpu thread has died",))
    assert backend.problems == ("backend cpu: its logs-cpu thread has died",) and backend.wedged
    assert dead.wedged and stalled.wedged
    full = assess(True, 1, 100, 60, (), ("the controller's disk is full",))
    assert not full.ok and not full.wedged  # waited out, not a reason to restart


def test_watchdog_exits_only_after_the_grace_period_of_ill_health():
    exits: list[int] = []
    full = assess(True, 1, 1, 60, (), ("disk full",))
    states = iter(
        [assess(False, 1, 1, 60)] * 2 + [assess(True, 1, 1, 60)] + [full] * 5 + [assess(False, 1, 1, 60)] * 100
    )
    dog = Watchdog(lambda: next(states), grace_s=0.02, interval_s=0.01, exit=exits.append)
    dog.start()
    wait_until(lambda: exits, timeout=10)
    dog.stop()
    assert exits == [EXIT_WEDGED]


def test_a_healthy_controller_says_so(controller):
    code, body = _health(controller.url)
    assert code == 200 and body["ok"] is True and body["problems"] == []
    assert body["last_tick_age_s"] is not None and body["last_tick_age_s"] < 30
    out = controller.cli("cluster", "status", "-o", "json", check=True)
    assert json.loads(out.stdout)["healthy"] is True


def test_a_stalled_tick_is_reported_unhealthy_then_the_controller_exits(controller_factory):
    ctl = controller_factory(
        controller={"tick_interval": "1s", "tick_stall_timeout": "2s", "watchdog_exit_after": "8s"}
    )
    c = client(ctl)
    job = launch(c, "chatty", ["sh", "-c", "while true; do echo tick; sleep 0.1; done"])
    wait_state(c, job, {"RUNNING"})
    # Another process holds the database's write lock: every pass of the tick blocks on it.
    lock = sqlite3.connect(ctl.state_dir / "controller.db", timeout=10, isolation_level=None)
    lock.execute("BEGIN IMMEDIATE")
    try:
        code, body = wait_until(lambda: (r := _health(ctl.url))[0] == 503 and r, timeout=20)
        assert body["ok"] is False and "has not completed a pass" in body["problems"][0]
        assert body["last_tick_age_s"] > 2
        status = ctl.cli("cluster", "status")
        assert status.returncode == 1 and "UNHEALTHY" in status.stdout and "not completed a pass" in status.stdout
        wait_until(lambda: ctl.proc.poll() is not None, timeout=30, message="the watchdog to end the controller")
        assert ctl.proc.returncode == EXIT_WEDGED
        assert "wedged" in ctl.log.read_text()
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    ctl.start()
    assert wait_state(client(ctl), job, {"RUNNING"}).job.state == "RUNNING"  # re-adopted, nothing lost
