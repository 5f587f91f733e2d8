"""A stopped job's log stream says it is finished only once its killed processes' last lines are stored."""

from __future__ import annotations

from iris.rpc import controller_pb2 as pb
from tests.conftest import wait_until
from tests.controller.helpers import client, launch, logs


def test_log_reader_of_a_stopped_job_gets_the_lines_printed_while_it_was_being_killed(controller):
    c = client(controller)
    # On SIGTERM the task prints one more line a second later, long after its job is KILLED in the database.
    script = "trap 'sleep 1; echo stopping; exit 0' TERM; echo started; sleep 30 & wait"
    job = launch(c, "late", ["sh", "-c", script])
    wait_until(lambda: "started" in logs(c, job), message="the task to start")
    c.terminate_job(pb.TerminateJobRequest(job_id=job))
    seen: list[str] = []
    after = 0

    def read_until_finished() -> bool:
        nonlocal after
        resp = c.fetch_logs(pb.FetchLogsRequest(job_id=job, task_index=-1, after_seq=after))
        seen.extend(ln.text for ln in resp.lines)
        after = resp.next_seq
        return resp.job_finished

    wait_until(read_until_finished, timeout=30, message="the log stream to finish")
    # The shell may report its killed sleep ("Terminated", on stderr, read apart from stdout) on either side.
    assert [ln for ln in seen if ln != "Terminated"] == ["started", "stopping"], seen
