"""The lean paths' protobuf reader and writer agree with the protobuf runtime, field for field.

`iris.rpc.wire` decodes answers and encodes requests without protobuf, and `iris.cli.lean_docs`
turns what it decodes into what `message_to_dict` prints; protobuf itself is the reference here.
"""

from __future__ import annotations

import pytest
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st

from iris.cli.lean_docs import Unprintable, message_doc, view
from iris.cli.output import describe_job, jobs_table, message_to_dict
from iris.rpc import controller_pb2 as pb
from iris.rpc import wire

TABLES = {
    "DEVICE": pb.Device,
    "RESOURCES": pb.Resources,
    "CONSTRAINT": pb.Constraint,
    "JOB_STATUS": pb.JobStatus,
    "ATTEMPT_STATUS": pb.AttemptStatus,
    "TASK_STATUS": pb.TaskStatus,
    "LIST_JOBS_REQUEST": pb.ListJobsRequest,
    "LIST_JOBS_RESPONSE": pb.ListJobsResponse,
    "GET_JOB_STATUS_REQUEST": pb.GetJobStatusRequest,
    "GET_JOB_STATUS_RESPONSE": pb.GetJobStatusResponse,
    "LIST_TASKS_REQUEST": pb.ListTasksRequest,
    "LIST_TASKS_RESPONSE": pb.ListTasksResponse,
}
_KINDS = {"string": "str", "int32": "int32", "uint32": "uint32", "int64": "int64", "bool": "bool", "double": "float"}


def _kind(field) -> object:
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        assert [f.type for f in field.message_type.fields] == [field.TYPE_STRING, field.TYPE_INT32]
        return "map"
    if field.message_type is not None:
        table = next(getattr(wire, name) for name, m in TABLES.items() if m.DESCRIPTOR is field.message_type)
        return [table] if field.is_repeated else table
    kind = _KINDS[{9: "string", 5: "int32", 13: "uint32", 3: "int64", 8: "bool", 1: "double"}[field.type]]
    if field.is_repeated:
        assert kind == "str"
        return "strs"
    return kind


@pytest.mark.parametrize("name", TABLES)
def test_wire_table_matches_the_generated_descriptor(name):
    fields = sorted(TABLES[name].DESCRIPTOR.fields, key=lambda f: f.number)
    assert getattr(wire, name) == tuple((f.number, f.name, _kind(f)) for f in fields)


def _job(**more) -> pb.JobStatus:
    job = pb.JobStatus(
        job_id="/alice/traenen",
        state="FAILED",
        user="alice",
        replicas=3,
        submitted_ms=1_764_400_000_123,
        started_ms=1_764_400_001_000,
        error="exit code 3: ünïcode",
        resources=pb.Resources(cpu=0.5, memory_bytes=2 << 30, device=pb.Device(kind="gpu", variant="h100", count=8)),
        command=["sh", "-c", "exit 3"],
        constraints=[
            pb.Constraint(key="region", op="IN", values=["a", "b"]),
            pb.Constraint(key="zone", op="EXISTS", preferred=True),
        ],
        exit_code=-9,
        has_exit_code=True,
        last_sync_ms=-1,
        **more,
    )
    job.task_counts["FAILED"] = 2
    job.task_counts["SUCCEEDED"] = 1
    return job


def test_wire_decoded_answer_prints_as_message_to_dict_prints_the_message():
    task = pb.TaskStatus(
        task_id="/alice/traenen/0",
        index=0,
        state="FAILED",
        attempt=2,
        attempts=[pb.AttemptStatus(attempt=1, state="FAILED", pid=42), pb.AttemptStatus(attempt=2, error="boom")],
    )
    for message, table in (
        (
            pb.ListJobsResponse(jobs=[_job(), pb.JobStatus(job_id="/a/b")], next_page_token="t", total=7),
            "LIST_JOBS_RESPONSE",
        ),
        (pb.ListJobsResponse(), "LIST_JOBS_RESPONSE"),
        (pb.GetJobStatusResponse(job=_job(), tasks=[task, pb.TaskStatus()], total_tasks=2), "GET_JOB_STATUS_RESPONSE"),
        (pb.GetJobStatusResponse(job=pb.JobStatus(resources=pb.Resources(cpu=-0.0))), "GET_JOB_STATUS_RESPONSE"),
        (pb.GetJobStatusResponse(next_task_page_token="more"), "GET_JOB_STATUS_RESPONSE"),
    ):
        decoded = wire.decode(message.SerializeToString(), getattr(wire, table))
        expected = message_to_dict(message)
        got = message_doc(decoded, getattr(wire, table))
        assert got == expected
        assert list(got) == list(expected)  # the same order, held fields first
        if table == "LIST_JOBS_RESPONSE" and got["jobs"]:
            assert [list(job) for job in got["jobs"]] == [list(job) for job in expected["jobs"]]
            views = [view(job, wire.JOB_STATUS) for job in decoded["jobs"]]
            assert jobs_table(views, now_ms=1_764_400_100_000) == jobs_table(message.jobs, now_ms=1_764_400_100_000)
        if table == "GET_JOB_STATUS_RESPONSE":
            resp = view(decoded, wire.GET_JOB_STATUS_RESPONSE)
            assert describe_job(resp, now_ms=1_764_400_100_000) == describe_job(message, now_ms=1_764_400_100_000)


def test_wire_skips_fields_it_does_not_know_as_protobuf_does():
    newer = pb.JobStatus(job_id="/a/b").SerializeToString() + bytes([0xF8, 0x07, 0x05])  # field 127, varint 5
    assert pb.JobStatus.FromString(newer).job_id == "/a/b"
    assert wire.decode(newer, wire.JOB_STATUS) == {"job_id": "/a/b"}


@pytest.mark.parametrize(
    "data",
    [
        pb.JobStatus(job_id="/a/b").SerializeToString()[:-1],  # cut short
        bytes([0x0A, 0x02, 0xFF, 0xFE]),  # job_id not UTF-8
        bytes([0x08, 0x01]),  # job_id (a string) sent as a varint
        bytes([0x0B]),  # a group: no message here has one
        pb.JobStatus(resources=pb.Resources(cpu=1)).SerializeToString() * 2,  # a message field twice
    ],
    ids=["truncated", "not utf-8", "wrong wire type", "group", "message twice"],
)
def test_wire_refuses_what_it_cannot_read_the_way_protobuf_would(data):
    with pytest.raises(wire.Unreadable):
        wire.decode(data, wire.JOB_STATUS)


@pytest.mark.parametrize(
    "data",
    [
        bytes([0x30]) + b"\xff" * 10 + b"\x01",  # replicas as a varint of eleven bytes
        b"\xff" * 10 + b"\x01",  # a field's key as a varint of eleven bytes
        bytes([0x0A]) + b"\xff" * 10 + b"\x01",  # a string's length as a varint of eleven bytes
        bytes([0xF8, 0x07]) + b"\xff" * 10 + b"\x01",  # a field this reader does not know, the same
        bytes([0xFA, 0x07]) + b"\xff" * 10 + b"\x01",  # an unknown field's length, the same
        bytes([0x30]) + b"\xff" * 200_000 + b"\x01",  # one that goes on and on: refused at its eleventh byte
    ],
    ids=["value", "key", "length", "unknown", "unknown length", "endless"],
)
def test_wire_refuses_a_varint_longer_than_ten_bytes_as_protobuf_does(data):
    with pytest.raises(DecodeError):
        pb.JobStatus.FromString(data)
    with pytest.raises(wire.Unreadable, match="ten bytes"):
        wire.decode(data, wire.JOB_STATUS)


@pytest.mark.parametrize("tenth", [0x01, 0x02, 0x7F])
def test_wire_reads_a_ten_byte_varint_as_protobuf_does(tenth):
    data = bytes([0x40]) + b"\x80" * 9 + bytes([tenth])  # submitted_ms: bits past the 64th are dropped
    assert wire.decode(data, wire.JOB_STATUS).get("submitted_ms", 0) == pb.JobStatus.FromString(data).submitted_ms


def test_wire_a_float_protobuf_prints_as_a_string_is_left_to_protobuf():
    data = pb.JobStatus(resources=pb.Resources(cpu=float("nan"))).SerializeToString()
    with pytest.raises(Unprintable):
        message_doc(wire.decode(data, wire.JOB_STATUS), wire.JOB_STATUS)


@pytest.mark.parametrize(
    "table, values",
    [
        (
            "LIST_JOBS_REQUEST",
            {"state": "PENDING", "prefix": "/ä/", "limit": 5000, "user": "", "page_token": "x" * 300},
        ),
        ("LIST_JOBS_REQUEST", {"state": None, "limit": 0}),
        ("GET_JOB_STATUS_REQUEST", {"job_id": "/alice/train", "include_tasks": True, "include_attempts": False}),
        ("LIST_TASKS_REQUEST", {"job_id": "/a/b", "include_attempts": True, "limit": -1, "page_token": "t"}),
    ],
)
def test_wire_encodes_a_request_as_protobuf_serializes_it(table, values):
    message = TABLES[table](**{k: v for k, v in values.items() if v is not None})
    assert wire.encode(getattr(wire, table), values) == message.SerializeToString()


def _varint(value: int) -> bytes:
    out = bytearray()
    value &= 0xFFFFFFFFFFFFFFFF
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_WIDE = [2**31, 2**32 + 5, 2**32 - 1, 2**40 + 2**31 + 7, -(2**31) - 1, 2**63 - 1, -1, 123]


@pytest.mark.parametrize("value", _WIDE)
@pytest.mark.parametrize(
    "message, table, number, read",
    [
        (pb.JobStatus, "JOB_STATUS", 6, lambda m: m.replicas),  # int32
        (pb.JobStatus, "JOB_STATUS", 20, lambda m: m.exit_code),  # int32
        (pb.AttemptStatus, "ATTEMPT_STATUS", 11, lambda m: m.pid),  # int32
        (pb.TaskStatus, "TASK_STATUS", 13, lambda m: m.failure_count),  # int32
        (pb.ListJobsResponse, "LIST_JOBS_RESPONSE", 3, lambda m: m.total),  # int32
        (pb.JobStatus, "JOB_STATUS", 8, lambda m: m.submitted_ms),  # int64
        (pb.Resources, "RESOURCES", 2, lambda m: m.memory_bytes),  # int64
    ],
    ids=["replicas", "exit_code", "pid", "failure_count", "total", "submitted_ms", "memory_bytes"],
)
def test_wire_reads_a_wide_varint_at_the_field_s_width_as_protobuf_does(value, message, table, number, read):
    data = _varint(number << 3) + _varint(value)
    expected = read(message.FromString(data))
    name = message.DESCRIPTOR.fields_by_number[number].name
    got = wire.decode(data, getattr(wire, table)).get(name, 0)
    assert got == expected
    assert message_doc(wire.decode(data, getattr(wire, table)), getattr(wire, table))[name] == message_to_dict(
        message.FromString(data)
    ).get(name, 0)


@pytest.mark.parametrize("value", _WIDE)
def test_wire_reads_a_wide_map_value_at_int32_as_protobuf_does(value):
    entry = bytes([0x0A, 0x01]) + b"X" + bytes([0x10]) + _varint(value)
    data = bytes([0x3A]) + _varint(len(entry)) + entry  # task_counts {"X": value}
    assert wire.decode(data, wire.JOB_STATUS)["task_counts"] == dict(pb.JobStatus.FromString(data).task_counts)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.dictionaries(st.sampled_from(["SUCCEEDED", "FAILED", "PENDING", "é"]), st.integers(-2, 2**31 - 1)),
            st.text(alphabet=st.sampled_from("ab/é日\n"), max_size=200),
        ),
        max_size=30,
    )
)
def test_wire_reads_a_page_whose_jobs_repeat_and_vary_their_task_counts_as_protobuf_does(jobs):
    message = pb.ListJobsResponse(
        jobs=[pb.JobStatus(job_id=f"/u/{i}", task_counts=counts, error=text) for i, (counts, text) in enumerate(jobs)]
    )
    decoded = wire.decode(message.SerializeToString(), wire.LIST_JOBS_RESPONSE)
    assert message_doc(decoded, wire.LIST_JOBS_RESPONSE) == message_to_dict(message)
