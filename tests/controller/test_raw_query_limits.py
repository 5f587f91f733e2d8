"""A raw query cannot take the controller down: time, size and function limits, its own pool, and
the rest of the API answering while endless queries run."""

from __future__ import annotations

import threading
import time

import httpx

from iris.rpc import controller_pb2 as pb
from tests.conftest import wait_until
from tests.controller.helpers import client, error_code, launch, user_token, wait_state

ENDLESS = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT max(x) FROM r"


def _query(c, sql: str, limit: int = 0):
    return c.execute_raw_query(pb.ExecuteRawQueryRequest(sql=sql, limit=limit))


def test_endless_query_is_stopped_at_the_time_limit_while_other_calls_answer(controller_factory):
    ctl = controller_factory(controller={"tick_interval": "1s", "query_timeout": "2s"})
    c = client(ctl)
    outcome: dict = {}

    def run():
        started = time.monotonic()
        outcome["error"] = error_code(lambda: _query(c, ENDLESS))
        outcome["took"] = time.monotonic() - started

    thread = threading.Thread(target=run)
    thread.start()
    # While the query runs, ordinary calls are answered and a job runs to completion.
    job = launch(c, "beside", ["true"])
    assert wait_state(c, job).job.state == "SUCCEEDED"
    thread.join(timeout=30)
    assert not thread.is_alive()
    code, message = outcome["error"]
    assert code == "invalid_argument" and "longer than 2s" in message, message
    assert outcome["took"] < 15


def test_dangerous_functions_and_huge_values_are_refused(controller):
    c = client(controller)
    for sql, fragment in (
        ("SELECT zeroblob(1000000000)", "function"),
        ("SELECT length(randomblob(1000000000))", "function"),
        ("SELECT load_extension('/tmp/x.so')", "function"),
        ("SELECT readfile('/etc/passwd')", "function"),
        ("SELECT replace(printf('%900000c', 'x'), ' ', 'ab')", "larger than"),
        ("SELECT group_concat(printf('%900000c', x)) FROM (SELECT 1 AS x UNION ALL SELECT 2)", "larger than"),
    ):
        code, message = error_code(lambda: _query(c, sql))
        assert code == "invalid_argument" and fragment in message, (sql, message)
    capped = _query(c, "SELECT printf('%.*c', 1000000000, 'x')").rows[0].values[0].string_value
    assert len(capped) <= 1024**2
    ok = _query(c, "SELECT upper('a'), count(*), json_extract('{\"a\": 2}', '$.a') FROM jobs")
    assert [v.string_value or v.number_value for v in ok.rows[0].values] == ["A", 0, 2]


def test_raw_query_number_past_a_double_is_a_client_error(controller):
    c = client(controller)
    for sql in ("SELECT 1e999", "SELECT -1e999 AS low", "SELECT 1, 2e308 FROM jobs UNION ALL SELECT 1, 2e308"):
        code, message = error_code(lambda: _query(c, sql))
        assert code == "invalid_argument" and "beyond the range of a double" in message, (sql, message)
    # Over JSON too, as curl sends it: the same client error, never an internal one.
    answer = httpx.post(
        f"{controller.url}/iris.v1.ControllerService/ExecuteRawQuery",
        json={"sql": "SELECT 1e999 AS big"},
        headers={"authorization": f"Bearer {user_token(controller, 'alice')}"},
    )
    assert answer.status_code == 400 and "'big'" in answer.json()["message"], answer.text
    largest = _query(c, "SELECT 1.7976931348623157e308, 9223372036854775807").rows[0].values
    assert largest[0].number_value == 1.7976931348623157e308 and largest[1].number_value == 2.0**63


def test_rows_are_limited_and_marked_truncated(controller):
    c = client(controller)
    many = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r WHERE x < 50000) SELECT x FROM r"
    resp = _query(c, many)
    assert len(resp.rows) == 10_000 and resp.truncated
    resp = _query(c, many, limit=7)
    assert len(resp.rows) == 7 and resp.truncated


def test_six_concurrent_endless_queries_do_not_block_launching_jobs(controller_factory):
    ctl = controller_factory(controller={"tick_interval": "1s", "query_timeout": "20s"})
    c = client(ctl)
    results: list = []
    threads = [
        threading.Thread(target=lambda: results.append(error_code(lambda: _query(c, ENDLESS)))) for _ in range(6)
    ]
    for t in threads:
        t.start()
    # Two run on the query pool; the others are refused at once as busy, never queued on the API.
    job = launch(c, "canary", ["echo", "ok"])
    assert wait_state(c, job).job.state == "SUCCEEDED"
    assert c.get_cluster_info(pb.GetClusterInfoRequest()).name == ctl.name
    ctl.stop()  # shutdown never waits for the running queries
    assert ctl.proc.returncode == 0
    for t in threads:
        t.join(timeout=30)
    codes = sorted(code for code, _ in results)
    assert codes.count("unavailable") >= 4, results


def test_one_user_runs_one_query_at_a_time_so_others_still_get_theirs(controller_factory):
    ctl = controller_factory(controller={"tick_interval": "1s", "query_timeout": "5s"})
    alice, bob = client(ctl, user_token(ctl, "alice")), client(ctl, user_token(ctl, "bob"))
    results: list = []
    threads = [
        threading.Thread(target=lambda: results.append(error_code(lambda: _query(alice, ENDLESS)))) for _ in range(2)
    ]
    for t in threads:
        t.start()
    wait_until(lambda: results, message="one of alice's two queries answered")
    assert _query(bob, "SELECT 1").rows  # the other slot stays open to another user
    for t in threads:
        t.join(timeout=30)
    codes = sorted(code for code, _ in results)
    assert codes == ["invalid_argument", "unavailable"], results  # one ran to its time limit
    assert any("alice already has a raw query running" in message for _, message in results), results
    assert _query(alice, "SELECT 1").rows  # and then she may run another
