"""build_launch_request: what the CLI flags and SDK keywords become on the wire, and what is refused."""

from __future__ import annotations

import json

import pytest
from google.protobuf import json_format

import iris
from iris.client import launch
from iris.core.constraints import ANY_REGION, Constraint, Op
from iris.core.errors import InvalidArgument
from iris.rpc import controller_pb2 as pb

default_user = launch.default_user
normalize_command = launch.normalize_command


def build_launch_request(command, **options) -> pb.LaunchJobRequest:
    """The builder's document as the message the SDK makes of it (an unknown field or wrong type fails)."""
    return pb.LaunchJobRequest(**launch.build_launch_request(command, **options))


def constraints(req) -> list[tuple[str, str, tuple[str, ...], bool]]:
    return [(c.key, c.op, tuple(c.values), c.preferred) for c in req.constraints]


def test_build_launch_request_document_is_connect_json_and_the_message_arguments_alike():
    options = {
        "user": "alice",
        "memory": "2G",
        "gpu": "v100x2",
        "constraints": ["pool=a"],
        "env": {"A": "1"},
        "max_retries_preemption": 0,
        "timeout": "5m",
    }
    doc = launch.build_launch_request(["true"], **options)
    assert json.loads(json.dumps(doc)) == doc
    # What the controller's JSON codec makes of the document (strictly: no unknown fields) is the SDK's message.
    as_json = json_format.Parse(json.dumps(doc), pb.LaunchJobRequest())
    assert as_json == build_launch_request(["true"], **options)
    assert as_json.HasField("max_retries_preemption") and as_json.resources.memory_bytes == 2 * 1024**3


def test_build_launch_request_defaults_are_one_core_one_gig_interactive():
    req = build_launch_request(["python", "train.py"], user="alice")
    assert list(req.command) == ["python", "train.py"]
    assert req.user == "alice" and req.name == ""
    assert req.resources.cpu == 1.0 and req.resources.memory_bytes == 1024**3 and req.resources.disk_bytes == 0
    assert req.resources.device.kind == "cpu"
    assert req.replicas == 1 and req.priority == "interactive"
    assert req.existing_job_policy == "error"
    assert not req.HasField("max_retries_preemption")
    assert req.max_retries_failure == 0 and req.timeout_s == 0 and req.scheduling_timeout_s == 0
    assert req.client_revision_date == iris.REVISION_DATE


def test_build_launch_request_sizes_devices_and_durations_are_parsed():
    req = build_launch_request(
        "true",
        user="a",
        cpu=2.5,
        memory="8G",
        disk="10G",
        gpu="H100x8",
        timeout="5m",
        scheduling_timeout=30,
        max_retries=2,
        max_retries_preemption=0,
    )
    assert req.resources.cpu == 2.5
    assert req.resources.memory_bytes == 8 * 1024**3 and req.resources.disk_bytes == 10 * 1024**3
    d = req.resources.device
    assert (d.kind, d.variant, d.count) == ("gpu", "h100", 8)
    assert req.timeout_s == 300 and req.scheduling_timeout_s == 30
    assert req.max_retries_failure == 2
    assert req.HasField("max_retries_preemption") and req.max_retries_preemption == 0


def test_build_launch_request_tpu_slice_sets_topology():
    d = build_launch_request("true", user="a", tpu="v5p-8").resources.device
    assert (d.kind, d.variant, d.count, d.topology) == ("tpu", "v5p", 8, "v5p-8")


def test_build_launch_request_region_zone_target_and_text_constraints_become_constraints():
    req = build_launch_request(
        "true",
        user="a",
        region="us-east5",
        zone="us-east5-a",
        target_cluster="cw-h100",
        constraints=["gpu-count>=4", "preemptible=false"],
    )
    assert constraints(req) == [
        ("gpu-count", "GE", ("4",), False),
        ("preemptible", "EQ", ("false",), False),
        ("region", "EQ", ("us-east5",), False),
        ("zone", "EQ", ("us-east5-a",), False),
        ("cluster", "EQ", ("cw-h100",), False),
    ]


def test_build_launch_request_constraint_objects_are_taken_as_they_are():
    req = build_launch_request("true", user="a", constraints=[Constraint("pool", Op.IN, ("a", "b"), preferred=True)])
    assert constraints(req) == [("pool", "IN", ("a", "b"), True)]


def test_build_launch_request_region_any_is_sent_as_the_sentinel_for_the_server_to_drop():
    req = build_launch_request("true", parent="/alice/driver", region="any")
    assert constraints(req) == [("region", "EQ", (ANY_REGION,), False)]


def test_build_launch_request_child_names_its_parent_and_a_short_name():
    req = build_launch_request("true", name="step-1", parent="/alice/driver")
    assert req.parent_job_id == "/alice/driver" and req.name == "step-1"


def test_build_launch_request_full_id_name_is_kept():
    assert build_launch_request("true", name="/bob/train", user="bob").name == "/bob/train"


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"memory": "8X"}, "8X"),
        ({"gpu": "H100x0"}, "at least one"),
        ({"gpu": "H100", "tpu": "v5p-8"}, "not both"),
        ({"constraints": ["colour=blue"]}, "colour"),
        ({"constraints": ["region > 3"]}, "not allowed"),
        ({"priority": "urgent"}, "urgent"),
        ({"existing_job_policy": "merge"}, "merge"),
        ({"replicas": 0}, "replicas"),
        ({"timeout": "soon"}, "soon"),
        ({"name": "has space"}, "has space"),
        ({"name": "123"}, "task index"),
        ({"user": "bad/user"}, "bad/user"),
        ({"parent": "not-an-id"}, "must start with '/'"),
        ({"max_retries": -1}, "negative"),
        ({"env": {"A": 1}}, "not a string"),
        ({"region": "us\n"}, "--region 'us\\n' holds a control character, newline (U+000A)"),
        ({"gpu": "H100\x85"}, "--gpu 'H100\\x85' holds a control character, U+0085"),
        ({"constraints": ["zone=a\x1bb"]}, "--constraint 'zone=a\\x1bb' holds a control character, ESC"),
        ({"env": {"A\x7f": "1"}}, "--env name 'A\\x7f' holds a control character, DEL"),
        ({"constraints": [Constraint("pool", Op.EQ, ("a\tb",))]}, "(field constraints[0].values[0]) holds"),
    ],
)
def test_build_launch_request_bad_values_are_refused_with_a_message_naming_them(kwargs, fragment):
    kwargs.setdefault("user", "alice")
    with pytest.raises(InvalidArgument) as err:
        launch.build_launch_request("true", **kwargs)
    assert fragment in err.value.message


def test_normalize_command_shell_string_runs_under_sh_and_argv_is_kept():
    assert normalize_command("echo hi | wc -l") == ["/bin/sh", "-c", "echo hi | wc -l"]
    assert normalize_command(["echo hi && false"]) == ["/bin/sh", "-c", "echo hi && false"]
    assert normalize_command(["python", "train.py", "--lr", "3e-4"]) == ["python", "train.py", "--lr", "3e-4"]
    assert normalize_command("true") == ["true"]


def test_normalize_command_empty_is_refused():
    with pytest.raises(InvalidArgument, match="no command"):
        normalize_command([])
    with pytest.raises(InvalidArgument, match="no command"):
        normalize_command("  ")


def test_default_user_cleans_characters_a_job_id_cannot_hold(monkeypatch):
    monkeypatch.setenv("USER", "jane.doe@corp")
    assert default_user() == "jane.doe-corp"
    monkeypatch.delenv("USER")
    monkeypatch.delenv("USERNAME", raising=False)
    assert default_user() == "user"
