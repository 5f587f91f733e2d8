"""One log answer carries at most MAX_LOG_ANSWER_CHARS of text, whatever the lines' length: a job
printing long lines cannot make each reader's answer hundreds of megabytes, and a reader paging on
through next_seq (as `iris job logs` does) still gets every character, first or last."""

from __future__ import annotations

import time

from iris.controller.db.reads import MAX_LOG_ANSWER_CHARS
from iris.rpc import controller_pb2 as pb
from tests.controller.helpers import client, launch, wait_state

PRINTED = 3 * MAX_LOG_ANSWER_CHARS + 12_345  # one line without a newline, stored in 64 KiB pieces


def test_log_answers_are_bounded_in_size_and_page_on_to_the_end(module_controller):
    c = client(module_controller)
    job = launch(c, "wide", ["sh", "-c", f"head -c {PRINTED} /dev/zero | tr '\\0' a"])
    assert wait_state(c, job, timeout=60).job.state == "SUCCEEDED"
    first = c.fetch_logs(pb.FetchLogsRequest(job_id=job, task_index=-1))
    assert sum(len(ln.text) for ln in first.lines) <= MAX_LOG_ANSWER_CHARS
    assert not first.job_finished, "more lines remain, so the reader keeps reading"
    seen, after, answer, empty = 0, 0, first, 0
    while True:
        seen += sum(len(ln.text) for ln in answer.lines)
        after = answer.next_seq
        if answer.job_finished:
            break
        answer = c.fetch_logs(pb.FetchLogsRequest(job_id=job, task_index=-1, after_seq=after))
        # Empty and not finished only while the backend still holds the ended attempt (its exit
        # stored, its release a moment later): a reader asks again, and not for long.
        empty = 0 if answer.lines else empty + 1
        assert empty < 100, answer
        if empty:
            time.sleep(0.02)
    assert seen == PRINTED
    tail = c.fetch_logs(pb.FetchLogsRequest(job_id=job, task_index=-1, tail=1000))
    assert sum(len(ln.text) for ln in tail.lines) <= MAX_LOG_ANSWER_CHARS
    assert tail.lines[-1].seq == after, "a tail keeps the last lines"
    printed = module_controller.cli("job", "logs", job)
    assert printed.returncode == 0 and printed.stdout.count("a") == PRINTED, printed.stderr
