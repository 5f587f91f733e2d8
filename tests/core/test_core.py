"""Unit tests of the core vocabulary: sizes, durations, names, resources, constraints, config."""

from __future__ import annotations

import re

import pytest

from iris.core.bands import Band
from iris.core.config import load_config, parse_config
from iris.core.constraints import (
    Op,
    inherit_constraints,
    make_constraint,
    matches,
    parse_constraint_text,
)
from iris.core.errors import InvalidArgument
from iris.core.names import AttemptName, JobName, TaskName, in_job_tree, parse_id
from iris.core.resources import build_resources, parse_gpu, parse_tpu
from iris.core.states import JobState, RetryBudget, TaskState, decide_retry, derive_job_state
from iris.core.units import parse_duration, parse_size


def test_sizes_accept_units_and_reject_garbage():
    assert parse_size("8G") == 8 * 1024**3
    assert parse_size("512M") == 512 * 1024**2
    assert parse_size(100) == 100
    with pytest.raises(InvalidArgument, match="8X"):
        parse_size("8X")


def test_durations_accept_seconds_and_units():
    assert parse_duration(30) == 30
    assert parse_duration("30s") == 30
    assert parse_duration("5m") == 300
    with pytest.raises(InvalidArgument):
        parse_duration("soon")


def test_job_names_nest_and_validate():
    root = JobName.root("alice", "train")
    child = root.child("eval")
    assert str(child) == "/alice/train/eval" and child.parent == root and child.depth == 1
    assert JobName.parse("/alice/train/eval") == child
    task = TaskName.parse("/alice/train/3")
    assert task == TaskName(root, 3) and task.job_id == "/alice/train" and str(task) == "/alice/train/3"
    attempt = AttemptName.parse("/alice/train/eval/3:12")
    assert (attempt.job_id, attempt.index, attempt.attempt) == ("/alice/train/eval", 3, 12)
    assert str(attempt) == "/alice/train/eval/3:12" and TaskName(child, 3).attempt(12) == attempt
    for bad_task in ("/alice/train", "/alice/train/x", "3", "/alice/bad name/3"):
        with pytest.raises(InvalidArgument):
            TaskName.parse(bad_task)
    for bad_attempt in ("/alice/train/3", "/alice/train:1", "/alice/train/x:1", "/alice/train/3:"):
        with pytest.raises(InvalidArgument):
            AttemptName.parse(bad_attempt)
    assert parse_id("/alice/train/eval") == child and parse_id("/alice/train/3") == task
    assert parse_id("/alice/train/eval/3:12") == attempt and attempt.with_job(root) == TaskName(root, 3).attempt(12)
    with pytest.raises(InvalidArgument):
        parse_id("/alice/train/3:x")
    assert in_job_tree("/alice/train/eval", "/alice/train") and in_job_tree("/alice/train", "/alice/train")
    assert not in_job_tree("/alice/training", "/alice/train") and not in_job_tree("/alice/train", "\0")
    for bad in ("alice/train", "/alice", "/alice/bad name", "/alice/123", "/alice/train\n", "/alice\n/train"):
        with pytest.raises(InvalidArgument):
            JobName.parse(bad)


def test_names_principals_and_keys_never_end_in_a_newline():
    from iris.controller.api.endpoints import NAME_PATTERN
    from iris.controller.api.job_spec import check_env
    from iris.core.names import validate_component, validate_principal

    for check in (lambda v: validate_component("user", v), validate_principal):
        assert check("alice") == "alice"
        with pytest.raises(InvalidArgument):
            check("alice\n")
    assert validate_principal("alice.b+ml@example.org")
    assert NAME_PATTERN.match("svc") and not NAME_PATTERN.match("svc\n")
    with pytest.raises(InvalidArgument):
        check_env({"KEY\n": "v"})


def test_gpu_and_tpu_requests_parse_every_documented_form():
    assert (parse_gpu("H100x8").variant, parse_gpu("H100x8").count) == ("h100", 8)
    assert (parse_gpu("8").variant, parse_gpu("8").count) == ("", 8)
    assert (parse_gpu("H100").variant, parse_gpu("H100").count) == ("h100", 1)
    tpu = parse_tpu("v5p-8")
    assert (tpu.kind, tpu.variant, tpu.count, tpu.topology) == ("tpu", "v5p", 8, "v5p-8")
    with pytest.raises(InvalidArgument):
        build_resources(gpu="H100x8", tpu="v5p-8")
    with pytest.raises(InvalidArgument):
        parse_gpu("H100x0")


def test_build_resources_refuses_no_cores_and_more_than_a_task_may_ask_for():
    assert build_resources(cpu=0.1).cpu == 0.1 and build_resources(memory="1024T").memory == 2**50
    for kwargs, says in (
        ({"cpu": 0}, "asks for no cores"),
        ({"cpu": 1e6}, "at most 100000 cores"),
        ({"memory": "1025T"}, "memory 1025T is more than a task may ask for (at most 1024T)"),
        ({"disk": 2**51}, "disk 2048T"),
    ):
        with pytest.raises(InvalidArgument, match=re.escape(says)):
            build_resources(**kwargs)


def test_constraints_validate_keys_ops_and_compare_lowercased():
    c = make_constraint("Region", "eq", ["US-East5"])
    assert matches(c, {"region": "us-east5"}) and not matches(c, {"region": "us-west1"})
    assert not matches(c, {})  # a missing key fails
    assert matches(parse_constraint_text("gpu-count>=4"), {"gpu-count": "8"})
    assert matches(parse_constraint_text("zone in a,b"), {"zone": "B"})
    assert matches(make_constraint("zone", Op.NOT_EXISTS), {})
    with pytest.raises(InvalidArgument, match="colour"):
        make_constraint("colour", "EQ", ["red"])
    with pytest.raises(InvalidArgument, match="not allowed"):
        make_constraint("region", "GT", ["a"])
    with pytest.raises(InvalidArgument, match="ROUGHLY"):
        make_constraint("region", "ROUGHLY", ["a"])


def test_child_inherits_region_unless_it_names_its_own_or_opts_out():
    parent = (make_constraint("region", "EQ", ["us-east5"]), make_constraint("device-type", "EQ", ["gpu"]))
    assert inherit_constraints(parent, ()) == (parent[0],)
    own = (make_constraint("region", "EQ", ["eu-west4"]),)
    assert inherit_constraints(parent, own) == own
    assert inherit_constraints(parent, (make_constraint("region", "EQ", ["any"]),)) == ()


def test_job_state_derivation_follows_the_documented_precedence():
    S = TaskState
    assert derive_job_state([S.SUCCEEDED, S.SUCCEEDED]) is JobState.SUCCEEDED
    assert derive_job_state([S.FAILED, S.RUNNING]) is JobState.FAILED
    assert derive_job_state([S.UNSCHEDULABLE, S.PENDING]) is JobState.UNSCHEDULABLE
    assert derive_job_state([S.KILLED, S.SUCCEEDED]) is JobState.KILLED
    assert derive_job_state([S.RUNNING, S.PENDING]) is JobState.RUNNING
    assert derive_job_state([S.PENDING]) is JobState.PENDING


def test_retry_budgets_count_failures_and_preemptions_separately():
    budget = RetryBudget(max_retries_failure=1, max_retries_preemption=1)
    assert decide_retry(TaskState.FAILED, budget, 0, 0).retried
    assert not decide_retry(TaskState.FAILED, budget, 1, 0).retried
    assert decide_retry(TaskState.PREEMPTED, budget, 5, 0).retried
    assert decide_retry(TaskState.WORKER_FAILED, budget, 0, 1).task_state is TaskState.WORKER_FAILED


def test_bands_order_and_parse():
    assert Band.PRODUCTION.outranks(Band.INTERACTIVE) and not Band.BATCH.outranks(Band.BATCH)
    assert Band.parse(None) is Band.INTERACTIVE
    with pytest.raises(InvalidArgument, match="urgent"):
        Band.parse("urgent")


def test_config_file_naming_a_key_twice_is_refused_naming_the_key_and_its_line(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("name: a\nbackends:\n  - {id: cpu, workers: 1}\nname: b\n")
    with pytest.raises(InvalidArgument, match="line 4: 'name' is given twice in the same block; keep one"):
        load_config(path)
    path.write_text("backends:\n  - {id: cpu, workers: 1, workers: 2}\nname: a\n")
    with pytest.raises(InvalidArgument, match="line 2: 'workers' is given twice"):
        load_config(path)
    # A merge key and an override of what it brought in are not a repeat.
    path.write_text("name: a\nbackends:\n  - &cpu {id: cpu, workers: 1}\n  - {<<: *cpu, id: cpu2}\n")
    assert [b.id for b in load_config(path).backends] == ["cpu", "cpu2"]


def test_config_errors_name_the_bad_key():
    base = {"name": "c", "backends": [{"id": "cpu"}]}
    assert parse_config(base).backends[0].workers == 1
    cases = [
        ({**base, "colour": 1}, "colour: is not a known key"),
        ({**base, "backends": [{"id": "cpu", "capacity": {"memory": "8X"}}]}, "backends.0.capacity.memory"),
        ({**base, "controller": {"tick_interval": "soon"}}, "controller.tick_interval"),
        ({**base, "listen": "nowhere"}, "listen"),
        ({**base, "backends": [{"id": "a"}, {"id": "a"}]}, "unique"),
        ({**base, "backends": [{"id": "g", "devices": {"count": 8}}]}, "exactly one of gpu or tpu"),
        ({**base, "peers": {"x": {"address": "ftp://x"}}}, "peers.x.address"),
        # A '.' in a cluster name would let two requesters' received job ids collide on a peer.
        ({**base, "peers": {"a.b": {"address": "http://x:1"}}}, "peers: 'a.b' is not a cluster name"),
        ({**base, "auth": {"federation_peers": {"marin.x": "k"}}}, "auth.federation_peers: 'marin.x' is not a"),
        ({**base, "name": "lab.one"}, "name: 'lab.one' is not a cluster name"),
    ]
    for data, fragment in cases:
        with pytest.raises(InvalidArgument) as err:
            parse_config(data)
        assert fragment in err.value.message, err.value.message
    cfg = parse_config({**base, "controller": {"tick_interval": "250ms", "federation_sync_interval": 3}})
    assert cfg.controller.tick_interval == 0.25 and cfg.controller.federation_sync_interval == 3


def test_job_placed_but_not_started_anywhere_is_still_pending():
    S = TaskState
    assert derive_job_state([S.ASSIGNED, S.PENDING]) is JobState.PENDING  # e.g. waiting in Slurm's queue
    assert derive_job_state([S.ASSIGNED, S.RUNNING]) is JobState.RUNNING
