"""A request body is bounded in values before a message is decoded from it: a small gzip body that
expands into millions of values, as JSON or as binary protobuf, or far past its own size, is
refused before it is decoded, and nothing is written; a large or compressed body is decoded off the
event loop and its string fields are measured before protobuf's parser scans them."""

from __future__ import annotations

import gzip
import json
import re

import pytest
from connectrpc.errors import ConnectError
from google.protobuf import json_format

from iris.rpc import controller_pb2 as pb
from iris.rpc.request_codecs import MAX_DEPTH, MAX_VALUES, BoundedJSONCodec, BoundedProtoCodec
from tests.controller.helpers import client, job_count, operator_http, operator_socket, wait_state

CODEC = BoundedJSONCodec()  # JSON unless named otherwise


def _post(ctl, body: bytes, compress: bool, kind: str = "json") -> tuple[int, dict]:
    """A LaunchJob of `body`, as the operator."""
    headers = {"content-type": kind if "/" in kind else f"application/{kind}"}
    if compress:
        body, headers["content-encoding"] = gzip.compress(body), "gzip"
    with operator_http(ctl, timeout=60) as http:
        answer = http.post("/iris.v1.ControllerService/LaunchJob", content=body, headers=headers)
    return answer.status_code, answer.json()


def test_json_bodies_with_millions_of_values_are_refused_before_parsing(module_controller):
    c = client(module_controller)
    before = job_count(c)
    flood = json.dumps({"name": "flood", "user": "mallory", "command": ["a"] * 2_000_000}).encode()
    status, answer = _post(module_controller, flood, compress=False)
    assert status == 400 and answer["code"] == "invalid_argument", answer
    assert "commas" in answer["message"], answer
    # The same body gzipped (a thousand times smaller) is refused before it is even unpacked whole.
    status, answer = _post(module_controller, flood, compress=True)
    assert status == 429 and answer["code"] == "resource_exhausted", answer
    assert "unpacks to more than" in answer["message"] and "uncompressed" in answer["message"], answer
    # Many arrays, each within the per-list bound: refused by the total.
    wide = json.dumps(
        {"name": "wide", "user": "mallory", "constraints": [{"key": "zone", "values": ["z"] * 5000}] * 40}
    ).encode()
    status, answer = _post(module_controller, wide, compress=True)
    assert status == 400 and f"more than {MAX_VALUES} values" in answer["message"], answer
    binary = pb.LaunchJobRequest(name="flood", user="mallory", command=["a"] * 2_000_000).SerializeToString()
    status, answer = _post(module_controller, binary, compress=True, kind="proto")
    assert status == 400 and f"more than {MAX_VALUES} values" in answer["message"], answer
    assert job_count(c) == before
    fine = json.dumps({"name": "fine", "user": "mallory", "command": ["true"], "env": {"A": "1"}}).encode()
    status, answer = _post(module_controller, fine, compress=True)
    assert status == 200, answer
    assert wait_state(c, answer["jobId"]).job.state == "SUCCEEDED"


def test_codec_reads_a_request_as_protobufs_parser_does():
    doc = {
        "name": "j",
        "user": "u",
        "command": ["sh", "-c", "echo a,b"],
        "env": {"K": "v"},
        "resources": {"cpu": 2.5, "memoryBytes": "1073741824", "device": {"kind": "gpu", "count": 8}},
        "constraints": [{"key": "zone", "op": "IN", "values": ["a", "b"]}],
        "workdirFiles": {"f.txt": "aGk="},
        "unknownField": 1,
    }
    raw = json.dumps(doc).encode()
    expected = json_format.Parse(raw, pb.LaunchJobRequest(), ignore_unknown_fields=True)
    assert CODEC.decode(raw, pb.LaunchJobRequest) == expected
    assert CODEC.decode(CODEC.encode(expected), pb.LaunchJobRequest) == expected


def _nested(levels: int) -> dict:
    return {"device": _nested(levels - 1)} if levels else {}


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"command": ["a"] * 10_001}, "an array with 10001 entries"),
        ({"env": {f"K{i}": "" for i in range(10_001)}}, "an object with 10001 entries"),
        ({"command": ["a"] * 9_000, "constraints": [{"values": ["b"] * 9_000}] * 11}, "more than"),
        ({"name": "[" * 10, "command": ["x"], "resources": _nested(MAX_DEPTH)}, "nests deeper"),
    ],
)
def test_codec_refuses_documents_past_its_bounds(body, says):
    with pytest.raises(ConnectError) as refused:
        CODEC.decode(json.dumps(body).encode(), pb.LaunchJobRequest)
    assert says in refused.value.message


def test_binary_codec_decodes_large_bodies_within_bounds_and_refuses_others():
    proto = BoundedProtoCodec()
    big = pb.LaunchJobRequest(
        name="j",
        command=["x"] * 4096,
        env={f"K{i}": "v" * 300 for i in range(1000)},
        constraints=[pb.Constraint(key="zone", op="IN", values=["z"] * 256)] * 64,
        workspace_bundle=b"\0" * 300_000,
    )
    assert proto.decode(proto.encode(big), pb.LaunchJobRequest) == big
    nested = pb.HandOffJobsRequest(jobs=[pb.LaunchJobRequest(command=["a"] * 9000)] * 20)
    with pytest.raises(ConnectError) as refused:
        proto.decode(nested.SerializeToString(), pb.HandOffJobsRequest)
    assert f"more than {MAX_VALUES} values" in refused.value.message
    with pytest.raises(ConnectError) as refused:
        proto.decode(b"\xff" * 300_000, pb.LaunchJobRequest)
    assert "unmarshal message" in refused.value.message


def test_codec_refuses_a_body_that_is_not_json_clearly():
    with pytest.raises(ConnectError) as refused:
        CODEC.decode(b'{"name": ' + b"[" * 100_000, pb.LaunchJobRequest)
    assert "not JSON" in refused.value.message


def test_gzip_body_unpacking_far_past_its_size_is_refused_and_large_bodies_still_launch(module_controller):
    c = client(module_controller)
    before = job_count(c)
    # 20 MB of one string, 20 KB gzipped: once unpacked and parsed on the event loop, for seconds.
    bomb = json.dumps({"name": "a" * 20_000_000, "user": "mallory", "command": ["true"]}).encode()
    status, answer = _post(module_controller, bomb, compress=True)
    assert status == 429 and answer["code"] == "resource_exhausted", answer
    assert "unpacks to more than" in answer["message"], answer
    for kind in ("application/connect+json", "application/grpc-web+proto", "text/plain"):
        status, answer = _post(module_controller, b"{}", compress=False, kind=kind)
        assert status == 415 and "application/json" in answer["message"], (kind, answer)
    assert job_count(c) == before
    # A body past the small-body size, plain and gzipped, is decoded (off the loop) and runs.
    files = {f"f{i}.txt": b"x" * 1000 for i in range(300)}
    for compress in (False, True):
        request = pb.LaunchJobRequest(
            name=f"large-{compress}", user="alice", command=["sh", "-c", "cat f7.txt | wc -c"], workdir_files=files
        )
        status, answer = _post(module_controller, json_format.MessageToJson(request).encode(), compress)
        assert status == 200, answer
        assert wait_state(c, answer["jobId"]).job.state == "SUCCEEDED"


def test_codec_refuses_a_long_string_field_but_not_long_bytes():
    with pytest.raises(ConnectError) as refused:
        CODEC.decode(json.dumps({"name": "n" * 70_000}).encode(), pb.LaunchJobRequest)
    assert "70000 characters long" in refused.value.message
    for body in ({"command": ["c"] * 3 + ["c" * 70_000]}, {"env": {"K": "v" * 70_000}}, {"env": {"k" * 70_000: ""}}):
        with pytest.raises(ConnectError):
            CODEC.decode(json.dumps(body).encode(), pb.LaunchJobRequest)
    bundle = "QUFB" * 100_000  # 400 KB of base64 in a bytes field is a workspace, not a string
    decoded = CODEC.decode(json.dumps({"name": "n", "workspaceBundle": bundle}).encode(), pb.LaunchJobRequest)
    assert decoded.workspace_bundle == b"AAA" * 100_000


def _pipelined(ctl, requests: list[bytes]) -> list[bytes]:
    """Sends `requests` (whole HTTP requests, the last closing the connection) in one write on one
    connection of the operator's; each answer's status line."""
    with operator_socket(ctl, timeout=60) as sock:
        sock.sendall(b"".join(requests))
        answers = b""
        while chunk := sock.recv(65536):
            answers += chunk
    return re.findall(rb"HTTP/1\.1 \d{3} [^\r]*", answers)


def _launch(body: bytes, *headers: str) -> bytes:
    head = ["POST /iris.v1.ControllerService/LaunchJob HTTP/1.1", "host: localhost", *headers]
    head += ["content-type: application/proto", f"content-length: {len(body)}"]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


@pytest.mark.parametrize("second", [(), ("connect-timeout-ms: 60000",)], ids=["direct", "connect"])
def test_a_pipelined_request_is_decoded_from_its_own_body(module_controller, second):
    """A large body decoded off the event loop for a request refused before the message was taken
    (here: a protocol version not served) is not taken by the next request on the connection."""
    c = client(module_controller)
    large = pb.LaunchJobRequest(
        name=f"first-{len(second)}", user="alice", command=["true"], env={"PAD": "x" * 60_000, "PAD2": "y" * 10_000}
    )
    own = pb.LaunchJobRequest(name=f"second-{len(second)}", user="alice", command=["true"])
    statuses = _pipelined(
        module_controller,
        [
            _launch(large.SerializeToString(), "connect-protocol-version: 2"),
            _launch(own.SerializeToString(), "connect-protocol-version: 1", "connection: close", *second),
        ],
    )
    assert statuses == [b"HTTP/1.1 400 Bad Request", b"HTTP/1.1 200 OK"]
    assert wait_state(c, f"/alice/{own.name}").job.job_id == f"/alice/{own.name}"
    with pytest.raises(ConnectError):
        c.get_job_status(pb.GetJobStatusRequest(job_id=f"/alice/{large.name}"))
