"""A status call may wait on the controller while the job stays in a named state, and a log call
until there is a line or the job has ended (long polls): each answers once that happened or its
wait is over, and the SDK's `wait` and `follow` are built on them."""

from __future__ import annotations

import asyncio
import threading
import time

from iris.client import IrisClient
from iris.controller.db.database import Database
from iris.controller.state.tick import ControlLoop
from iris.controller.state.waiting import PassSignal, wait_pass
from iris.rpc import controller_pb2 as pb
from tests.controller.helpers import client, error_code, wait_state


def test_status_waits_while_the_job_stays_in_the_state_and_answers_once_it_leaves(controller, tmp_path):
    go = tmp_path / "go"
    sdk = IrisClient(controller.url)
    try:
        job = sdk.submit(["sh", "-c", f"while [ ! -e {go} ]; do sleep 0.01; done"], name="held", user="alice")
        wait_state(client(controller), job, {"RUNNING"})
        # It cannot end before `go` exists: the answer comes when the wait is over, still running.
        asked = time.monotonic()
        assert sdk.status(job, wait_while="RUNNING", wait_s=0.3).state == "RUNNING"
        assert time.monotonic() - asked >= 0.3
        answers: list[str] = []
        waiter = threading.Thread(target=lambda: answers.append(sdk.status(job, wait_while="RUNNING", wait_s=60).state))
        waiter.start()
        go.touch()
        waiter.join(timeout=60)
        assert answers == ["SUCCEEDED"]
        assert sdk.wait(job, timeout=30).state == "SUCCEEDED"
    finally:
        sdk.close()


def test_fetch_logs_waits_for_a_line_or_the_end_and_follow_reads_every_line(controller, tmp_path):
    go = tmp_path / "go"
    sdk = IrisClient(controller.url)
    try:
        job = sdk.submit(
            ["sh", "-c", f"while [ ! -e {go} ]; do sleep 0.01; done; echo first; echo second"],
            name="talk",
            user="alice",
        )
        wait_state(client(controller), job, {"RUNNING"})
        asked = time.monotonic()
        quiet = sdk.fetch_logs(job, wait_s=0.3)  # nothing printed yet: the wait runs out
        assert not quiet.lines and not quiet.job_finished
        assert time.monotonic() - asked >= 0.3
        answers: list[pb.FetchLogsResponse] = []
        waiter = threading.Thread(target=lambda: answers.append(sdk.fetch_logs(job, wait_s=60)))
        waiter.start()
        go.touch()
        waiter.join(timeout=60)
        assert answers and (answers[0].lines or answers[0].job_finished)
        assert [line.text for line in sdk.follow(job)] == ["first", "second"]
    finally:
        sdk.close()


def test_status_wait_with_an_unknown_state_or_too_long_a_wait_is_refused(controller):
    c = client(controller)
    job = c.launch_job(pb.LaunchJobRequest(name="w", user="alice", command=["true"])).job_id
    code, message = error_code(
        lambda: c.get_job_status(pb.GetJobStatusRequest(job_id=job, wait_while_state="DONE", wait_ms=10))
    )
    assert code == "invalid_argument" and "'DONE' is not a job state" in message and "SUCCEEDED" in message
    code, message = error_code(
        lambda: c.get_job_status(pb.GetJobStatusRequest(job_id=job, wait_while_state="PENDING", wait_ms=60_001))
    )
    assert code == "invalid_argument" and "60000" in message
    code, message = error_code(lambda: c.fetch_logs(pb.FetchLogsRequest(job_id=job, task_index=-1, wait_ms=60_001)))
    assert code == "invalid_argument" and "60000" in message
    code, message = error_code(lambda: c.fetch_logs(pb.FetchLogsRequest(job_id=job, task_index=-1, wait_ms=-1)))
    assert code == "invalid_argument" and "negative" in message


def test_pass_signal_wakes_a_future_taken_before_the_pass_and_forgets_one_that_timed_out():
    signal = PassSignal()

    async def scenario() -> None:
        woken = signal.next_pass()
        threading.Thread(target=signal.notify).start()  # the tick's thread, not the loop's
        await wait_pass(signal, woken, 30)
        assert woken.done()
        late = signal.next_pass()
        await wait_pass(signal, late, 0.01)  # no pass comes: the wait ends and the waiter is dropped
        assert signal.waiting() == 0

    asyncio.run(scenario())


def test_a_call_waiting_for_a_pass_is_not_counted_as_an_api_call_in_flight(tmp_path):
    db = Database(tmp_path / "controller.db")
    loop = ControlLoop(db, {}, {})
    loop.api_calls = 1  # the server counts the waiting call itself

    async def scenario() -> None:
        waiter = asyncio.ensure_future(loop.wait_pass(loop.passes.next_pass(), 30))
        for _ in range(100):  # let the waiter start waiting
            if not loop.api_calls:
                break
            await asyncio.sleep(0)
        assert loop.api_calls == 0  # the tick does not rest for a call that only waits for it
        loop.passes.notify()
        await waiter
        assert loop.api_calls == 1

    try:
        asyncio.run(scenario())
    finally:
        db.close()
