"""The request floor (`iris.rpc.bounds.check_message`): its quick walk refuses exactly what the
naming walk names, so skipping the paths on a sound request lets nothing hostile through."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iris.core.errors import InvalidArgument
from iris.rpc import controller_pb2 as pb
from iris.rpc.bounds import MAX_ITEMS, MAX_STRING_CHARS, _hostile, _name_hostile, check_message

_TEXT = st.sampled_from(["", "a", "x\0y", "n" * (MAX_STRING_CHARS + 1), "ok/job"])
_FLOAT = st.sampled_from([0.0, 1.5, float("inf"), float("-inf"), float("nan"), 1e300])


@st.composite
def requests(draw) -> pb.LaunchJobRequest:
    req = pb.LaunchJobRequest(
        name=draw(_TEXT),
        user=draw(st.sampled_from(["alice", "a\0"])),
        command=draw(st.lists(_TEXT, max_size=3)),
        timeout_s=draw(_FLOAT),
        resources=pb.Resources(cpu=draw(_FLOAT), device=pb.Device(kind=draw(_TEXT))),
    )
    for key, value in draw(st.dictionaries(_TEXT, _TEXT, max_size=3)).items():
        req.env[key] = value
    for values in draw(st.lists(st.lists(_TEXT, max_size=2), max_size=2)):
        req.constraints.add(key="region", op="IN", values=values)
    return req


@settings(max_examples=300, deadline=None)
@given(requests())
def test_check_message_quick_walk_refuses_exactly_what_the_naming_walk_names(req):
    try:
        _name_hostile(req)
        named = False
    except InvalidArgument:
        named = True
    assert _hostile(req) is named
    if named:
        with pytest.raises(InvalidArgument):
            check_message(req)
    else:
        check_message(req)


@pytest.mark.parametrize(
    ("req", "path"),
    [
        (pb.LaunchJobRequest(command=["true", "a\0"]), "LaunchJobRequest.command[1]"),
        (pb.LaunchJobRequest(env={"K": "v\0"}), "LaunchJobRequest.env['K']"),
        (pb.LaunchJobRequest(env={"K\0": "v"}), "LaunchJobRequest.env key"),
        (pb.LaunchJobRequest(resources=pb.Resources(cpu=float("nan"))), "LaunchJobRequest.resources.cpu"),
        (pb.LaunchJobRequest(command=["x"] * (MAX_ITEMS + 1)), "LaunchJobRequest.command has"),
        (
            pb.LaunchJobRequest(constraints=[pb.Constraint(key="zone", values=["a", "b\0"])]),
            "LaunchJobRequest.constraints[0].values[1]",
        ),
    ],
)
def test_check_message_hostile_field_is_refused_by_its_path(req, path):
    with pytest.raises(InvalidArgument) as caught:
        check_message(req)
    assert path in caught.value.message


def test_check_message_sound_request_passes():
    req = pb.LaunchJobRequest(
        name="train", user="alice", command=["python", "-c", "pass"], env={"A": "1"}, resources=pb.Resources(cpu=2)
    )
    check_message(req)
