"""Bad input gets a clear error with the right Connect code and changes nothing."""

from __future__ import annotations

import pytest

from iris.client import IrisClient
from iris.core.errors import InvalidArgument
from iris.rpc import controller_pb2 as pb
from tests.controller.helpers import client, error_code, job_count, launch, wait_state


def test_bad_requests_are_refused_and_write_nothing(controller):
    c = client(controller)
    before = job_count(c)
    cases = [
        (
            pb.LaunchJobRequest(
                name="x",
                user="alice",
                command=["true"],
                constraints=[
                    pb.Constraint(key="cluster", op="EQ", values=["cw-h100"]),
                    pb.Constraint(key="backend", op="EQ", values=["cpu"]),
                ],
            ),
            "invalid_argument",
            "pins both cluster=cw-h100 and backend=cpu",
        ),
        (
            pb.LaunchJobRequest(
                name="x",
                user="alice",
                command=["true"],
                constraints=[pb.Constraint(key="colour", op="EQ", values=["red"])],
            ),
            "invalid_argument",
            "colour",
        ),
        (
            pb.LaunchJobRequest(
                name="x",
                user="alice",
                command=["true"],
                constraints=[pb.Constraint(key="region", op="ROUGHLY", values=["a"])],
            ),
            "invalid_argument",
            "ROUGHLY",
        ),
        (
            pb.LaunchJobRequest(
                name="x",
                user="alice",
                command=["true"],
                constraints=[pb.Constraint(key="region", op="GT", values=["a"])],
            ),
            "invalid_argument",
            "not allowed",
        ),
        (pb.LaunchJobRequest(name="x", user="alice", command=[]), "invalid_argument", "command"),
        (pb.LaunchJobRequest(name="bad name!", user="alice", command=["true"]), "invalid_argument", "not valid"),
        (pb.LaunchJobRequest(name="x", user="", command=["true"]), "invalid_argument", "user"),
        (pb.LaunchJobRequest(name="x", user="alice", command=["true"], replicas=-2), "invalid_argument", "replicas"),
        (pb.LaunchJobRequest(name="x", user="alice", command=["true"], priority="urgent"), "invalid_argument", "band"),
        (
            pb.LaunchJobRequest(name="x", user="alice", command=["true"], parent_job_id="/alice/nobody"),
            "invalid_argument",
            "parent",
        ),
        (
            pb.LaunchJobRequest(name="x", user="alice", command=["true"], client_revision_date="2020-01-01"),
            "failed_precondition",
            "upgrade",
        ),
        (
            pb.LaunchJobRequest(name="x", user="alice", command=["true"], existing_job_policy="merge"),
            "invalid_argument",
            "existing_job_policy",
        ),
    ]
    # Names a tool or Slurm reads as its own configuration, and names no shell can pass on.
    for name, fragment in (
        ("SBATCH_GPUS", "environment variable SBATCH_GPUS is not accepted: sbatch reads SBATCH_*"),
        ("SLURM_CONF", "environment variable SLURM_CONF is not accepted: Slurm sets SLURM_*"),
        ("DOCKER_HOST", "environment variable DOCKER_HOST is not accepted: DOCKER_* configure the Docker client"),
        ("spark.memory", "environment variable name 'spark.memory' is not valid"),
    ):
        req = pb.LaunchJobRequest(name="x", user="alice", command=["true"], env={"OK": "1", name: "2"})
        cases.append((req, "invalid_argument", fragment))
    # An image that a Docker client would read as its option is no image.
    req = pb.LaunchJobRequest(name="x", user="alice", command=["true"], image="--volume=/:/host")
    cases.append((req, "invalid_argument", "image '--volume=/:/host' is not an image name: it starts with '-'"))
    for req, code, fragment in cases:
        got_code, message = error_code(lambda: c.launch_job(req))
        assert got_code == code, (req, message)
        assert fragment in message, message
    assert job_count(c) == before


def test_control_characters_in_short_identifiers_are_refused_naming_the_field_and_write_nothing(controller):
    c = client(controller)
    region = [pb.Constraint(key="region", op="EQ", values=["us\x1b[31mred"])]
    gpu = pb.Resources(device=pb.Device(kind="gpu", variant="h100\n", count=1))
    cases = [
        (dict(constraints=region), "(field constraints[0].values[0])", "ESC (U+001B)"),
        (dict(resources=gpu), "(field resources.device.variant)", "newline (U+000A)"),
        (dict(image="busybox\x7f"), "(field image)", "DEL (U+007F)"),
        (dict(env={"A\x9b": "1"}), "(field env)", "U+009B"),
        (dict(priority="batch\r"), "(field priority)", "carriage return (U+000D)"),
        # A peer's handoff is checked by the same rule before anything of it is admitted.
        (
            dict(constraints=region, handoff=pb.HandoffRecord(requester_cluster="p", owner_principal="o", nonce="n")),
            "(field constraints[0].values[0])",
            "ESC (U+001B)",
        ),
    ]
    for fields, field, char in cases:
        code, message = error_code(lambda: launch(c, "ctl", ["true"], **fields))
        assert code == "invalid_argument" and field in message and char in message, message
    # The same refusal for a JSON body, the form `iris job run --no-wait` sends.
    doc = {
        "name": "ctl",
        "user": "alice",
        "command": ["true"],
        "constraints": [{"key": "zone", "op": "EQ", "values": ["a\nb"]}],
    }
    with IrisClient(controller.url) as sdk, pytest.raises(InvalidArgument, match=r"constraints\[0\]\.values\[0\]"):
        sdk.launch_json(doc)
    assert job_count(c) == 0
    # Free text may hold anything: the command and env values are the job's own.
    job = launch(c, "free", ["printf", "a\nb\x1b"], env={"MSG": "line\nnext\x1b[1m"})
    assert wait_state(c, job).job.state == "SUCCEEDED"


def test_duplicate_job_name_is_an_error_unless_keep_or_replace(controller):
    c = client(controller)
    launch(c, "dup", ["true"])
    code, message = error_code(lambda: launch(c, "dup", ["true"]))
    assert code == "already_exists" and "--existing" in message
    kept = c.launch_job(pb.LaunchJobRequest(name="dup", user="alice", command=["true"], existing_job_policy="keep"))
    assert kept.disposition == "existing"


def test_client_freshness_exempts_children_and_empty_dates(controller):
    c = client(controller)
    root = c.launch_job(
        pb.LaunchJobRequest(name="fresh", user="alice", command=["sleep", "30"], client_revision_date="")
    )
    child = c.launch_job(
        pb.LaunchJobRequest(name="kid", parent_job_id=root.job_id, command=["true"], client_revision_date="2020-01-01")
    )
    assert child.job_id == "/alice/fresh/kid"
    c.terminate_job(pb.TerminateJobRequest(job_id=root.job_id))


def test_query_refuses_writes_and_leaves_the_database_unchanged(controller):
    c = client(controller)
    launch(c, "keepme", ["true"])
    for sql in (
        "DELETE FROM jobs",
        "UPDATE jobs SET state='X'",
        "DROP TABLE jobs",
        "INSERT INTO bundles VALUES ('a',1,1)",
        "PRAGMA journal_mode=DELETE",
        "ATTACH DATABASE '/tmp/x.db' AS x",
    ):
        code, message = error_code(lambda: c.execute_raw_query(pb.ExecuteRawQueryRequest(sql=sql)))
        assert code == "invalid_argument" and "read-only" in message, (sql, message)
    rows = c.execute_raw_query(pb.ExecuteRawQueryRequest(sql="SELECT job_id FROM jobs")).rows
    assert [r.values[0].string_value for r in rows] == ["/alice/keepme"]


def test_unknown_job_is_not_found(controller):
    c = client(controller)
    for call in (
        lambda: c.get_job_status(pb.GetJobStatusRequest(job_id="/alice/ghost")),
        lambda: c.terminate_job(pb.TerminateJobRequest(job_id="/alice/ghost")),
        lambda: c.fetch_logs(pb.FetchLogsRequest(job_id="/alice/ghost")),
    ):
        code, message = error_code(call)
        assert code == "not_found" and "/alice/ghost" in message
