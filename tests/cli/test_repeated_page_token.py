"""A controller whose pages never end (it sends a next-page token it sent before) gets a clear
error from `iris job list --all` and `iris job describe --all-tasks`, never
an endless loop."""

from __future__ import annotations

import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from iris.rpc import controller_pb2 as pb
from tests.conftest import ROOT

JOB = pb.JobStatus(job_id="/alice/loop", state="RUNNING", user="alice", replicas=2)
TASK = pb.TaskStatus(task_id="/alice/loop/0", job_id="/alice/loop", state="RUNNING")
ANSWERS = {
    "ListJobs": pb.ListJobsResponse(jobs=[JOB], next_page_token="again", total=10**6),
    "GetJobStatus": pb.GetJobStatusResponse(job=JOB, tasks=[TASK], next_task_page_token="again", total_tasks=10**6),
    "ListTasks": pb.ListTasksResponse(tasks=[TASK], next_page_token="again", total=10**6),
    # Asked first by a client of a loopback URL, for the controller's socket: this one serves none.
    "GetClusterInfo": pb.GetClusterInfoResponse(name="loop"),
}


class _Looping(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 (the name http.server calls)
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        answer = ANSWERS[self.path.rsplit("/", 1)[-1]]
        if self.headers.get("Content-Type") == "application/json":
            from google.protobuf.json_format import MessageToJson

            body = MessageToJson(answer).encode()
        else:
            body = answer.SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", self.headers.get("Content-Type", "application/proto"))
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def looping_controller():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Looping)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("argv", [["job", "list", "--all"], ["job", "describe", "/alice/loop", "--all-tasks"]])
def test_a_page_token_sent_twice_is_a_clear_error(looping_controller, argv, tmp_path):
    code = "import sys; from iris.cli.main import main; main(sys.argv[1:])"
    env = {"IRIS_CONTROLLER": looping_controller, "HOME": str(tmp_path), "USER": "alice", "PATH": "/usr/bin:/bin"}
    # The deadline only stops a loop that would never end; an answer comes in well under a second.
    done = subprocess.run(
        [sys.executable, "-c", code, *argv], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0
    assert "a second time" in done.stderr and "Traceback" not in done.stderr
    assert "again" in done.stderr
