"""`-o json` prints a map's entries by key on both paths: protobuf keeps a decoded map in an order
that changes from one process to the next (and so does a controller's answer), so without it the same
job printed different documents run after run."""

from __future__ import annotations

import json
import subprocess
import sys

from iris.cli.lean_docs import message_doc
from iris.cli.output import dump_json, message_to_dict
from iris.rpc import controller_pb2 as pb
from iris.rpc import wire

STATES = ["SUCCEEDED", "PENDING", "RUNNING", "FAILED", "KILLED", "WORKER_FAILED", "PREEMPTED", "BUILDING"]


def _page() -> bytes:
    page = pb.ListJobsResponse(total=2)
    for n in range(2):
        job = page.jobs.add(job_id=f"/alice/j{n}", state="JOB_STATE_RUNNING")
        for count, state in enumerate(STATES, 1):
            job.task_counts[state] = count
    return page.SerializeToString()


def test_both_paths_print_a_jobs_task_counts_by_key():
    data = _page()
    click_doc = message_to_dict(pb.ListJobsResponse.FromString(data))
    lean_doc = message_doc(wire.decode(data, wire.LIST_JOBS_RESPONSE), wire.LIST_JOBS_RESPONSE)
    for doc in (click_doc, lean_doc):
        for job in doc["jobs"]:
            assert list(job["task_counts"]) == sorted(STATES)
            assert job["task_counts"]["FAILED"] == 4
    assert dump_json(click_doc) == dump_json(lean_doc)
    status = message_to_dict(pb.GetJobStatusResponse(job=pb.ListJobsResponse.FromString(data).jobs[0]))
    assert list(status["job"]["task_counts"]) == sorted(STATES)


def test_the_same_answer_prints_the_same_document_in_every_process():
    program = (
        "import sys; from iris.cli.output import dump_json, message_to_dict; from iris.rpc import controller_pb2 as pb;"
        " print(dump_json(message_to_dict(pb.ListJobsResponse.FromString(sys.stdin.buffer.read()))))"
    )
    data = _page()
    printed = {
        subprocess.run([sys.executable, "-c", program], input=data, capture_output=True, check=True).stdout
        for _ in range(4)
    }
    assert len(printed) == 1
    assert list(json.loads(printed.pop())["jobs"][1]["task_counts"]) == sorted(STATES)


def test_well_known_types_print_as_protobuf_prints_them():
    """A raw query's rows are ListValues (of Values, which may hold a Struct): protobuf prints them as
    plain JSON lists and objects, which the ordering of maps leaves as they are."""
    resp = pb.ExecuteRawQueryResponse(columns=["a", "b"])
    row = resp.rows.add()
    row.values.add().string_value = "x"
    row.values.add().struct_value.update({"z": 1, "fields": [1, 2], "a": {"b": 2}})
    doc = message_to_dict(pb.ExecuteRawQueryResponse.FromString(resp.SerializeToString()))
    assert doc["rows"] == [["x", {"z": 1.0, "fields": [1.0, 2.0], "a": {"b": 2.0}}]]
