"""What a worker's calls may carry, checked by the controller itself (a caller need not be `iris
worker start`), and what `iris worker start -o json` prints once its worker has joined."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from iris.rpc.worker_text import MAX_ATTRIBUTE_VALUE_CHARS, MAX_ERROR_CHARS, MAX_ID_CHARS, clip_error
from tests.controller.helpers import client, error_code, launch, pb, wait_state
from tests.workers.conftest import operator_env


def _registration(**fields) -> pb.RegisterWorkerRequest:
    base = {"backend_id": "pool", "name": "w1", "boot_id": "b1", "capacity": pb.Resources(cpu=1, memory_bytes=1 << 30)}
    return pb.RegisterWorkerRequest(**{**base, **fields})


BAD_REGISTRATIONS = [
    ({"attributes": {"zone": "us-east5\n"}}, "value of attribute 'zone'", "newline (U+000A)"),
    ({"attributes": {"zo\x1bne": "a"}}, "attribute key", "ESC (U+001B)"),
    ({"attributes": {"": "a"}}, "attribute key (field attributes) is empty", ""),
    ({"attributes": {"zone": "z" * (MAX_ATTRIBUTE_VALUE_CHARS + 1)}}, "attributes[zone]", "at most 256"),
    ({"attributes": {f"k{i}": "v" for i in range(65)}}, "advertises 65 attributes", "at most 64"),
    ({"attributes": {"k" * 64: "v"}}, "attribute key (field attributes) is 64 characters", "at most 63"),
    ({"backend_id": "pool\x7f"}, "backend", "DEL (U+007F)"),
    ({"name": "w1\t"}, "worker name", "tab (U+0009)"),
    ({"boot_id": "b" * (MAX_ID_CHARS + 1)}, "boot id (field boot_id)", "at most 256"),
    ({"runtime": "process\r"}, "runtime", "carriage return"),
    ({"attempts": ["a\x85b"]}, "attempt id", "U+0085"),
    ({"isolation_warning": "uid 1000\x1b[0m"}, "isolation warning", "ESC (U+001B)"),
]


@pytest.mark.parametrize(
    ("fields", "names", "char"), BAD_REGISTRATIONS, ids=[str(i) for i in range(len(BAD_REGISTRATIONS))]
)
def test_workers_registration_with_bad_text_is_refused_naming_the_field_and_joins_nothing(pool, fields, names, char):
    c = client(pool)
    code, message = error_code(lambda: c.register_worker(_registration(**fields)))
    assert code == "invalid_argument" and names in message and char in message, message
    assert list(c.list_workers(pb.ListWorkersRequest()).workers) == []


def test_workers_poll_reports_with_bad_text_are_refused_and_a_good_worker_runs_on(pool, worker_factory):
    worker_factory(pool, "a")
    c = client(pool)
    session = c.register_worker(_registration(name="raw")).session

    def poll(**fields):
        return c.worker_poll(pb.WorkerPollRequest(backend_id="pool", session=session, **fields))

    bad = [
        ({"logs": [pb.WorkerLogBatch(attempt_id="x", stream="stdin", data=b"hi\n")]}, "stream 'stdin'"),
        ({"logs": [pb.WorkerLogBatch(attempt_id="x\n", stream="stdout")]}, "logs[0].attempt_id"),
        ({"exits": [pb.WorkerAttemptExit(attempt_id="x", error="boom\x1b[31m")]}, "exits[0].error"),
        ({"exits": [pb.WorkerAttemptExit(attempt_id="x", error="e" * (MAX_ERROR_CHARS + 1))]}, "at most 4096"),
        ({"exits": [pb.WorkerAttemptExit(attempt_id="a" * (MAX_ID_CHARS + 1))]}, "exits[0].attempt_id"),
    ]
    for fields, words in bad:
        code, message = error_code(lambda: poll(**fields))
        assert code == "invalid_argument" and words in message, message
    code, message = error_code(lambda: c.worker_poll(pb.WorkerPollRequest(backend_id="pool", session=session + "\0")))
    assert code == "invalid_argument", message
    code, message = error_code(
        lambda: c.fetch_bundle(
            pb.FetchBundleRequest(backend_id="pool", session=session, attempt_id="x\x00", content_id="c")
        )
    )
    assert code == "invalid_argument", message
    # An error with line breaks and tabs is free text and passes; the daemon's own worker serves on.
    assert not poll(exits=[pb.WorkerAttemptExit(attempt_id="gone", error="line 1\n\tline 2")]).reregister
    job = launch(c, "fine", ["sh", "-c", "echo ok"])
    assert wait_state(c, job).job.state == "SUCCEEDED"


def test_workers_daemon_clips_an_error_to_what_the_controller_takes():
    clipped = clip_error("bad\x1b[0m\n\tnext" + "x" * MAX_ERROR_CHARS)
    assert clipped.startswith("bad?[0m\n\tnext") and len(clipped) == MAX_ERROR_CHARS


def test_worker_start_json_prints_one_line_describing_the_joined_worker(pool, tmp_path):
    work_dir = tmp_path / "w"
    cmd = [sys.executable, "-m", "iris.cli.main", "worker", "start", "--controller", pool.url, "--backend", "pool"]
    cmd += ["--name", "jw", "--work-dir", str(work_dir), "--cpu", "2", "--memory", "4G", "--attr", "zone=z1"]
    proc = subprocess.Popen(
        [*cmd, "-o", "json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
        env=operator_env(pool),
    )
    try:
        assert proc.stdout is not None
        doc = json.loads(proc.stdout.readline())
        assert doc["worker_id"] == "jw" and doc["backend_id"] == "pool" and doc["controller"] == pool.url
        assert (
            doc["attributes"] == {"device-type": "cpu", "zone": "z1"}
            and doc["runtime"] == "process"
            and doc["pid"] == proc.pid
        )
        assert doc["capacity"]["cpu"] == 2 and int(doc["capacity"]["memory_bytes"]) == 4 << 30
        assert doc["work_dir"] == str(work_dir) and doc["grace_period_s"] == 2.0
        listed = client(pool).list_workers(pb.ListWorkersRequest()).workers
        assert [(w.worker_id, w.alive) for w in listed] == [("jw", True)]
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert proc.stdout.read() == ""  # one document, nothing else on stdout
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    refused = subprocess.run(
        [*cmd[:-2], "--attr", "zone=" + "z" * 300, "-o", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        env=operator_env(pool),
    )
    assert refused.returncode == 3, refused.stderr
    assert json.loads(refused.stdout)["error"]["code"] == "invalid_argument" and "at most 256" in refused.stderr
