"""The one rule for a job's short identifiers (no control character), over the request as a
message and as the SDK's JSON document, and the list of fields it walks kept whole."""

from __future__ import annotations

import pytest

from iris.core.errors import InvalidArgument
from iris.core.printable import check_launch_request, check_printable, launch_identifiers
from iris.rpc import controller_pb2 as pb


@pytest.mark.parametrize(
    ("char", "named"),
    [
        ("\n", "newline (U+000A)"),
        ("\x1b", "ESC (U+001B)"),
        ("\0", "NUL (U+0000)"),
        ("\t", "tab (U+0009)"),
        ("\x7f", "DEL (U+007F)"),
        ("\x85", "U+0085"),
        ("\x9b", "U+009B"),
    ],
)
def test_check_printable_refuses_each_control_character_naming_it(char, named):
    with pytest.raises(InvalidArgument) as err:
        check_printable("--region", f"us{char}east", "constraints[0].values[0]")
    message = err.value.message
    assert message.startswith(f"--region {f'us{char}east'!r} ") and named in message
    assert "(field constraints[0].values[0])" in message and "remove it" in message


def test_check_printable_accepts_printable_text_of_any_script():
    for value in ("us-east5", "zürich", "東京-1", "a b", ""):
        check_printable("--region", value)


def _request(**fields) -> pb.LaunchJobRequest:
    return pb.LaunchJobRequest(**{"name": "j", "user": "alice", "command": ["true"], **fields})


def _document(**fields) -> dict:
    return {"name": "j", "user": "alice", "command": ["true"], **fields}


# (where a bad value sits, the path named, as a message, as the JSON document)
CASES = [
    ("name", _request(name="a\nb"), _document(name="a\nb")),
    ("user", _request(user="al\x1bice"), _document(user="al\x1bice")),
    ("priority", _request(priority="batch\n"), _document(priority="batch\n")),
    ("image", _request(image="busybox\x1b[2J"), _document(image="busybox\x1b[2J")),
    ("workdir", _request(workdir="/w\r"), _document(workdir="/w\r")),
    (
        "resources.device.variant",
        _request(resources=pb.Resources(device=pb.Device(kind="gpu", variant="h100\x00", count=1))),
        _document(resources={"device": {"kind": "gpu", "variant": "h100\x00", "count": 1}}),
    ),
    (
        "constraints[1].values[0]",
        _request(
            constraints=[
                pb.Constraint(key="zone", op="EQ", values=["a"]),
                pb.Constraint(key="region", op="EQ", values=["us\x85"]),
            ]
        ),
        _document(
            constraints=[
                {"key": "zone", "op": "EQ", "values": ["a"]},
                {"key": "region", "op": "EQ", "values": ["us\x85"]},
            ]
        ),
    ),
    (
        "constraints[0].key",
        _request(constraints=[pb.Constraint(key="reg\nion", op="EQ", values=["a"])]),
        _document(constraints=[{"key": "reg\nion", "op": "EQ", "values": ["a"]}]),
    ),
    ("env", _request(env={"A\x7f": "1"}), _document(env={"A\x7f": "1"})),
]


@pytest.mark.parametrize(("where", "message", "document"), CASES, ids=[c[0] for c in CASES])
def test_check_launch_request_names_the_field_as_message_and_as_document(where, message, document):
    for request in (message, document):
        with pytest.raises(InvalidArgument) as err:
            check_launch_request(request)
        assert f"(field {where})" in err.value.message


def test_free_text_may_hold_anything_and_a_plain_request_passes():
    for request in (
        _request(command=["printf", "a\nb\x1b"], env={"MSG": "line\nnext\x1b[1m"}),
        _document(command=["printf", "a\nb\x1b"], env={"MSG": "line\nnext\x1b[1m"}),
        _request(constraints=[pb.Constraint(key="region", op="EQ", values=["us-east5"])], image="local/busybox:1"),
    ):
        check_launch_request(request)


def _string_fields(descriptor, prefix: str = "") -> set[str]:
    """Every string (or string-keyed map) field of a message type, by path."""
    out: set[str] = set()
    for field in descriptor.fields:
        path = prefix + field.name
        entry = field.message_type
        if entry is not None and entry.GetOptions().map_entry:
            out.add(path)
        elif entry is not None:
            out |= _string_fields(entry, path + ".")
        elif field.type == field.TYPE_STRING:
            out.add(path)
    return out


def test_every_string_field_of_launch_job_is_walked_or_free_text():
    walked = set()
    full = _request(
        parent_job_id="/alice/p",
        priority="batch",
        existing_job_policy="keep",
        client_revision_date="2026-01-01",
        image="i",
        workdir="w",
        bundle_id="b",
        resources=pb.Resources(device=pb.Device(kind="gpu", variant="h100", topology="2x2")),
        constraints=[pb.Constraint(key="region", op="EQ", values=["a"])],
        env={"A": "1"},
        workdir_files={"f": b"x"},
        handoff=pb.HandoffRecord(requester_cluster="c", owner_principal="o", submitting_user="u", nonce="n"),
    )
    for where, _, _ in launch_identifiers(full):
        walked.add(where.replace("[0]", "") if where.startswith("constraints") else where)
    strings = _string_fields(pb.LaunchJobRequest.DESCRIPTOR)
    free = {"command"}  # repeated free text; env values and workdir file contents sit in maps walked by key
    assert strings - free <= walked, sorted(strings - free - walked)
