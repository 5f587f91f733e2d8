"""The CLI's formatting: tables, ages and durations, job rows, describe pages, log lines, query tables."""

from __future__ import annotations

import datetime
import json

import pytest
from google.protobuf import struct_pb2
from hypothesis import given, settings
from hypothesis import strategies as st

from iris.cli.output import (
    describe_job,
    dump_json,
    explain_document,
    explain_text,
    format_age,
    format_duration,
    format_log_line,
    format_resources,
    format_tasks,
    jobs_table,
    message_to_dict,
    query_rows,
    query_table,
    render_table,
)
from iris.core.bands import Band
from iris.rpc import controller_pb2 as pb

NOW = 1_764_400_000_000


def header_fields(text: str) -> dict[str, str]:
    """The `Key:  value` lines at the top of a describe page."""
    fields = {}
    for line in text.split("\n\n")[0].splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return fields


def test_render_table_aligns_columns_and_does_not_pad_the_last():
    text = render_table(("A", "LONGER", "C"), [("x", "y", "z"), ("wide-cell", "", "last")])
    assert text.splitlines() == [
        "A          LONGER  C",
        "x          y       z",
        "wide-cell          last",
    ]


def test_format_age_uses_the_largest_whole_unit():
    assert format_age(0, NOW) == "-"
    assert format_age(NOW - 5_000, NOW) == "5s"
    assert format_age(NOW - 125_000, NOW) == "2m"
    assert format_age(NOW - 3 * 3600_000, NOW) == "3h"
    assert format_age(NOW - 4 * 86400_000, NOW) == "4d"
    assert format_age(NOW + 5_000, NOW) == "0s"  # clock skew never shows a negative age


def test_format_duration_is_compact_at_every_scale():
    assert format_duration(0.034) == "0.03s"
    assert format_duration(2.5) == "2.5s"
    assert format_duration(45) == "45s"
    assert format_duration(192) == "3m12s"
    assert format_duration(7500) == "2h05m"
    assert format_duration(3 * 86400 + 4 * 3600) == "3d4h"


def test_format_tasks_counts_done_and_says_what_the_rest_do():
    job = pb.JobStatus(replicas=4, task_counts={"SUCCEEDED": 1, "RUNNING": 2, "PENDING": 1})
    assert format_tasks(job) == "1/4 (1 pending, 2 running)"
    assert format_tasks(pb.JobStatus(replicas=2, task_counts={"SUCCEEDED": 2})) == "2/2"
    assert format_tasks(pb.JobStatus(replicas=3)) == "0/3"


def test_format_resources_names_devices_the_way_the_flags_take_them():
    r = pb.Resources(
        cpu=2, memory_bytes=8 << 30, disk_bytes=10 << 30, device=pb.Device(kind="gpu", variant="h100", count=8)
    )
    assert format_resources(r) == "cpu=2 memory=8G disk=10G gpu=h100x8"
    tpu = pb.Resources(
        cpu=1, memory_bytes=1 << 30, device=pb.Device(kind="tpu", variant="v5p", count=8, topology="v5p-8")
    )
    assert format_resources(tpu) == "cpu=1 memory=1G tpu=v5p-8"


def test_jobs_table_has_the_documented_columns_and_a_reason_for_pending_jobs():
    jobs = [
        pb.JobStatus(
            job_id="/alice/wait",
            state="PENDING",
            cluster="marin",
            replicas=1,
            task_counts={"PENDING": 1},
            submitted_ms=NOW - 60_000,
            pending_reason="Queued for peer cw-h100 to report free capacity",
        ),
        pb.JobStatus(
            job_id="/alice/bad",
            state="FAILED",
            cluster="marin",
            replicas=1,
            task_counts={"FAILED": 1},
            submitted_ms=NOW - 5_000,
            error="task 0 failed: exit code 3",
        ),
        pb.JobStatus(job_id="/alice/new", state="PENDING", replicas=1, submitted_ms=NOW),
    ]
    lines = jobs_table(jobs, NOW).splitlines()
    assert lines[0].split() == ["JOB", "STATE", "CLUSTER", "TASKS", "AGE", "START", "REASON"]
    assert lines[1].split()[:5] == ["/alice/wait", "PENDING", "marin", "0/1", "(1"]
    assert lines[1].endswith("Queued for peer cw-h100 to report free capacity")
    assert lines[2].endswith("task 0 failed: exit code 3")
    assert lines[3].endswith("waiting for the scheduler")


def test_describe_job_shows_the_job_its_tasks_and_attempts():
    resp = pb.GetJobStatusResponse(
        job=pb.JobStatus(
            job_id="/alice/train",
            state="FAILED",
            user="alice",
            cluster="marin",
            priority="batch",
            replicas=1,
            command=["python", "train.py", "--name", "a b"],
            resources=pb.Resources(cpu=2, memory_bytes=4 << 30),
            constraints=[pb.Constraint(key="region", op="EQ", values=["us-east5"])],
            submitted_ms=NOW - 10_000,
            started_ms=NOW - 9_000,
            finished_ms=NOW - 4_000,
            error="task 0 failed: exit code 2",
            exit_code=2,
            has_exit_code=True,
            task_counts={"FAILED": 1},
        ),
        tasks=[
            pb.TaskStatus(
                task_id="/alice/train/0",
                index=0,
                state="FAILED",
                attempt=1,
                backend_id="cpu",
                worker_id="cpu-1",
                exit_code=2,
                has_exit_code=True,
                started_ms=NOW - 6_000,
                finished_ms=NOW - 4_000,
                attempts=[
                    pb.AttemptStatus(
                        attempt_id="/alice/train/0:0",
                        attempt=0,
                        state="FAILED",
                        backend_id="cpu",
                        worker_id="cpu-0",
                        exit_code=2,
                        has_exit_code=True,
                        pid=4242,
                        started_ms=NOW - 9_000,
                        finished_ms=NOW - 7_000,
                    ),
                    pb.AttemptStatus(
                        attempt_id="/alice/train/0:1",
                        attempt=1,
                        state="FAILED",
                        backend_id="cpu",
                        worker_id="cpu-1",
                        exit_code=2,
                        has_exit_code=True,
                        pid=4343,
                        started_ms=NOW - 6_000,
                        finished_ms=NOW - 4_000,
                    ),
                ],
            )
        ],
    )
    text = describe_job(resp, NOW)
    fields = header_fields(text)
    assert fields["Job"] == "/alice/train" and fields["State"] == "FAILED"
    assert fields["Command"] == "python train.py --name 'a b'"
    assert fields["Resources"] == "cpu=2 memory=4G"
    assert fields["Constraints"] == "region EQ us-east5"
    assert fields["Run time"] == "5s"
    assert fields["Exit code"] == "2" and fields["Error"] == "task 0 failed: exit code 2"
    assert "/alice/train/0:0  FAILED" in text and "4242" in text and "/alice/train/0:1" in text


def test_describe_job_of_a_pending_job_shows_its_reason():
    resp = pb.GetJobStatusResponse(
        job=pb.JobStatus(job_id="/a/b", state="PENDING", replicas=1, pending_reason="Waiting for 8 h100 on one worker")
    )
    assert header_fields(describe_job(resp, NOW))["Pending reason"] == "Waiting for 8 h100 on one worker"


def test_format_log_line_prefixes_task_time_and_controller_notes():
    line = pb.LogLine(task_index=2, stream="stdout", ts_ms=NOW + 123, text="hello")
    assert format_log_line(line, show_task=False, timestamps=False) == "hello"
    assert format_log_line(line, show_task=True, timestamps=False) == "[2] hello"
    assert format_log_line(line, show_task=False, timestamps=True).endswith(".123 hello")
    note = pb.LogLine(stream="iris", text="attempt 1 starting")
    assert format_log_line(note, show_task=False, timestamps=False) == "iris: attempt 1 starting"


def test_query_rows_and_table_render_sql_values():
    resp = pb.ExecuteRawQueryResponse(columns=["job_id", "n", "note"])
    row = resp.rows.add()
    row.extend(["/a/b", 3, None])
    assert query_rows(resp) == [["/a/b", 3, None]]
    assert query_table(resp).splitlines() == ["job_id  n  note", "/a/b    3  NULL"]
    assert isinstance(resp.rows[0], struct_pb2.ListValue)


def test_query_rows_give_whole_numbers_back_as_ints_for_json():
    resp = pb.ExecuteRawQueryResponse(columns=["n", "ms", "ratio", "big"])
    resp.rows.add().extend([19, 1796170211118, 1.5, 2.0**60])
    assert json.dumps(query_rows(resp)) == "[[19, 1796170211118, 1.5, 1.152921504606847e+18]]"


def test_explain_text_lists_each_group_with_its_reasons_once():
    resp = pb.ExplainJobResponse(
        job_id="/a/b",
        summary="fits nowhere",
        groups=[
            pb.ExplainGroup(
                backend_id="cpu", group="cpu=4 memory=8G", workers=2, verdict="blocked", reasons=["needs 16 cpu, has 4"]
            ),
        ],
        lines=["backend cpu:", "  cpu=4 memory=8G: needs 16 cpu, has 4"],
    )
    text = explain_text(resp)
    assert text.splitlines()[0] == "/a/b: fits nowhere"
    assert "cpu      cpu=4 memory=8G  2        blocked  needs 16 cpu, has 4" in text
    assert text.count("needs 16 cpu, has 4") == 1
    doc = explain_document(resp)
    assert "lines" not in doc and doc["groups"][0]["reasons"] == ["needs 16 cpu, has 4"]


def test_explain_of_a_job_without_groups_prints_its_lines():
    resp = pb.ExplainJobResponse(job_id="/a/b", summary="queued", lines=["backend h100: h100 0 free of 8"])
    assert explain_text(resp).splitlines() == ["/a/b: queued", "", "backend h100: h100 0 free of 8"]
    assert explain_document(resp)["lines"] == ["backend h100: h100 0 free of 8"]


def test_message_to_dict_uses_proto_names_and_prints_zero_values():
    doc = message_to_dict(pb.JobStatus(job_id="/a/b", exit_code=0, has_exit_code=True, submitted_ms=NOW))
    assert doc["job_id"] == "/a/b" and doc["exit_code"] == 0 and doc["has_exit_code"] is True
    assert doc["submitted_ms"] == NOW  # a number, not a quoted int64


_PLAIN = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(_PLAIN)
def test_dump_json_writes_what_json_dumps_writes(doc):
    assert dump_json(doc) == json.dumps(doc, indent=2, default=str)


@pytest.mark.parametrize(
    "doc",
    [
        {1: "int key", None: [("a", 2)]},
        {"when": datetime.date(2026, 1, 2), "flag": Band.BATCH},
        [b"bytes", (1, 2.5, float("-inf"))],
    ],
    ids=["keys not strings", "values not plain", "bytes and tuples"],
)
def test_dump_json_of_anything_else_writes_what_json_dumps_writes(doc):
    assert dump_json(doc) == json.dumps(doc, indent=2, default=str)


# Cells as a listing's rows hold them: names, states and reasons, with control characters, text
# that is not ASCII (some of it not printable either), trailing spaces, numbers and empty cells.
_CELL = st.one_of(
    st.none(),
    st.integers(-5, 10**6),
    st.text(alphabet=st.sampled_from("ab/-_ é日\t\n\x1b\x7f\x85\u00a0\u2028"), max_size=8),
)


def _table_as_specified(headers, rows) -> list[str]:
    """render_table's documented layout, worked out cell by cell: escaped cells, each column as
    wide as its widest cell, two spaces between columns, the last unpadded, trailing blanks cut."""
    from iris.cli.output import visible

    cells = [list(headers)] + [["" if c is None else visible(str(c)) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return [
        "  ".join(c if i == len(row) - 1 else c + " " * (widths[i] - len(c)) for i, c in enumerate(row)).rstrip()
        for row in cells
    ]


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 6).flatmap(lambda n: st.tuples(st.just(n), st.lists(st.lists(_CELL, min_size=n, max_size=n)))))
def test_render_table_lays_out_any_cells_as_specified(shape):
    n, rows = shape
    headers = [f"H{i}" for i in range(n)]
    assert render_table(headers, rows).split("\n") == _table_as_specified(headers, rows)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["PENDING", "RUNNING", "SUCCEEDED", "FAILED"]),
            st.dictionaries(st.sampled_from(["PENDING", "RUNNING", "SUCCEEDED", "FAILED"]), st.integers(0, 3)),
            st.integers(0, 3),
            st.integers(0, 10**9),
            st.text(alphabet=st.sampled_from("ab \n\x1b"), max_size=4),
        ),
        max_size=40,
    )
)
def test_jobs_table_has_a_row_per_job_from_the_row_formatters(jobs):
    messages = [
        pb.JobStatus(
            job_id=f"/u/j{i}",
            state=state,
            cluster="c" * (i % 3),
            task_counts=counts,
            replicas=replicas,
            submitted_ms=NOW - ago if ago % 5 else 0,
            pending_reason=text,
            error=text[::-1],
        )
        for i, (state, counts, replicas, ago, text) in enumerate(jobs)
    ]
    from iris.cli.output import expected_start, job_reason

    rows = [
        (
            j.job_id,
            j.state,
            j.cluster or "-",
            format_tasks(j),
            format_age(j.submitted_ms, NOW),
            expected_start(j, NOW),
            job_reason(j),
        )
        for j in messages
    ]
    headers = ("JOB", "STATE", "CLUSTER", "TASKS", "AGE", "START", "REASON")
    assert jobs_table(messages, NOW).split("\n") == _table_as_specified(headers, rows)


def test_jobs_table_start_column_says_when_a_pending_job_is_expected_to_start():
    soon = pb.JobStatus(job_id="/a/soon", state="PENDING", replicas=1, submitted_ms=NOW, start_latest_ms=NOW + 180_000)
    later = pb.JobStatus(
        job_id="/a/later", state="PENDING", replicas=1, submitted_ms=NOW, start_latest_ms=NOW + 7_200_000
    )
    unknown = pb.JobStatus(job_id="/a/unknown", state="PENDING", replicas=1, submitted_ms=NOW, start_basis="why")
    running = pb.JobStatus(job_id="/a/run", state="RUNNING", replicas=1, submitted_ms=NOW, start_latest_ms=NOW + 1)
    cells = {
        line.split()[0]: line.split()[5] for line in jobs_table([soon, later, unknown, running], NOW).splitlines()[1:]
    }
    assert cells["/a/soon"] == "in" and "in 3m00s" in jobs_table([soon], NOW)
    assert cells["/a/later"].startswith("~") and cells["/a/unknown"] == "unknown" and cells["/a/run"] == "-"
