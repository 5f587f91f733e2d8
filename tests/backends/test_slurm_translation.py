"""The Slurm backend's translation both ways, without a Slurm: sbatch arguments from a request,
squeue and sinfo rows parsed, and Slurm states judged as Iris outcomes."""

from __future__ import annotations

from dataclasses import replace

import pytest

from iris.backends.protocol import LaunchSpec
from iris.backends.slurm.commands import SlurmJob, parse_sinfo, parse_squeue, sbatch_argv
from iris.backends.slurm.states import judge
from iris.core.config import SlurmBackendConfig, parse_config
from iris.core.errors import InvalidArgument
from iris.core.resources import Device, Resources
from iris.core.states import TaskState

CONFIG = SlurmBackendConfig(
    id="s", kind="slurm", partition="gpu", account="proj", qos="high", sbatch_args=["--constraint=a100"]
)


def spec(resources: Resources, timeout_s: float = 0.0) -> LaunchSpec:
    return LaunchSpec(
        "/alice/train/0:1", "/alice/train", 0, 1, "s-a100", ("python", "t.py"), {}, resources, "", timeout_s=timeout_s
    )


def test_sbatch_argv_carries_the_request_and_the_partition_settings():
    argv = sbatch_argv(
        CONFIG,
        "marin",
        spec(Resources(cpu=2.5, memory=3 * 1024**3 + 1, device=Device("gpu", "a100", 4)), timeout_s=90),
        "/s/iris-attempt.sh",
        "/s/a",
        "/w",
        ["python", "t.py"],
        7,
    )
    assert argv[:3] == ["sbatch", "--parsable", "--job-name=/alice/train/0:1"]
    for flag in (
        "--partition=gpu",
        "--account=proj",
        "--qos=high",
        "--cpus-per-task=3",
        "--mem=3073M",
        "--gres=gpu:a100:4",
        "--time=3",
        "--chdir=/w",
        "--output=/s/a/stdout",
        "--error=/s/a/stderr",
        "--constraint=a100",
        "--export=NIL",  # sbatch's own environment is not the job's
        "--export-file=7",  # the job's env, read from that descriptor, never on the command line
    ):
        assert flag in argv
    assert not any(a.startswith(("--uid", "--gid")) for a in argv)  # the controller's own uid
    assert argv[-4:] == ["/s/iris-attempt.sh", "/s/a", "python", "t.py"]


def test_sbatch_argv_for_any_gpu_variant_and_no_limits():
    argv = sbatch_argv(
        SlurmBackendConfig(id="s", kind="slurm", partition="p"),
        "c",
        spec(Resources(cpu=0.1, memory=0, device=Device("gpu", "", 2))),
        "x",
        "f",
        "w",
        ["true"],
        3,
    )
    assert "--gres=gpu:2" in argv and "--cpus-per-task=1" in argv
    assert not any(a.startswith(("--mem", "--time", "--account", "--qos")) for a in argv)


def test_sbatch_argv_submits_as_the_attempts_uid_and_gid():
    as_task = replace(spec(Resources(cpu=1)), uid=200123, gid=300)
    argv = sbatch_argv(SlurmBackendConfig(id="s", kind="slurm", partition="p"), "c", as_task, "x", "f", "w", ["id"], 3)
    assert "--uid=200123" in argv and "--gid=300" in argv
    assert argv.index("--uid=200123") < argv.index("x")  # an option of sbatch's, not of the job's command


def test_squeue_rows_parse_with_names_holding_separators():
    rows = parse_squeue("12|RUNNING|None|0|node7|/a/b/0:1|\n13|FAILED|NonZeroExitCode|768||/x|y/0:0|\ngarbage\n")
    assert rows == [
        SlurmJob(12, "/a/b/0:1", "RUNNING", "None", 0, "node7"),
        SlurmJob(13, "/x|y/0:0", "FAILED", "NonZeroExitCode", 768),
    ]


def test_sinfo_rows_give_capacity_and_gpus_in_use_by_type():
    (node,) = parse_sinfo("n1|1/1/0/2|4000|500|gpu:a100:4(S:0),gpu:v100:2|gpu:a100:1(IDX:0),gpu:v100:0|mixed|\n")
    assert (node.cpus, node.cpus_allocated, node.memory_mb) == (2, 1, 4000)
    assert node.gpus == {"a100": 4, "v100": 2} and node.gpus_used == {"a100": 1, "v100": 0}
    assert node.usable
    down = parse_sinfo("n2|0/0/2/2|4000|0|(null)|gpu:0|down*|\n")[0]
    assert not down.usable and down.gpus == {}
    (named,) = parse_sinfo("h3|0/2/0/2|4000|0|(null)|gpu:0|idle|node3|10.0.0.3|\n")
    assert (named.name, named.node_name, named.address) == ("h3", "node3", "10.0.0.3")


def row(state: str, reason: str = "None", status: int = 0) -> SlurmJob:
    return SlurmJob(5, "/a/j/0:0", state, reason, status)


def test_waiting_jobs_show_slurms_reason_and_hopeless_ones_are_unschedulable():
    assert judge(row("PENDING", "Priority"), "gpu", None, False).reason == (
        "Waiting in Slurm partition gpu: Priority (jobs of higher priority are ahead of it)"
    )
    never = judge(row("PENDING", "PartitionTimeLimit"), "gpu", None, False)
    assert never.phase == "unschedulable" and never.outcome is TaskState.UNSCHEDULABLE
    assert "PartitionTimeLimit" in never.reason


def test_ends_slurm_imposed_are_retried_and_exits_keep_their_code_and_signal():
    assert judge(row("RUNNING"), "p", None, False).phase == "running"
    assert judge(row("COMPLETED"), "p", 0, False).exit_code == 0
    failed = judge(row("FAILED", status=3 << 8), "p", None, False)
    assert (failed.exit_code, failed.outcome, failed.reason) == (3, TaskState.FAILED, "exit code 3")
    killed = judge(row("FAILED", status=9), "p", None, False)
    assert killed.exit_code == 137 and "signal 9" in killed.reason
    for state in ("TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL"):
        assert judge(row(state), "p", None, False).outcome is TaskState.WORKER_FAILED
    assert judge(row("PREEMPTED"), "p", None, False).outcome is TaskState.PREEMPTED
    assert judge(row("CANCELLED"), "p", None, False).outcome is TaskState.WORKER_FAILED  # not asked for by Iris
    asked = judge(row("CANCELLED", status=15), "p", None, True)
    assert asked.outcome is None and asked.exit_code == 143
    assert judge(row("FAILED", status=1 << 8), "p", 4, False).exit_code == 4  # the wrapper's record wins


def test_slurm_config_names_a_mistyped_key_and_resolves_paths_against_the_file(tmp_path):
    with pytest.raises(InvalidArgument, match=r"backends\.0\.partiton: is not a known key"):
        parse_config({"name": "c", "backends": [{"id": "s", "kind": "slurm", "partition": "p", "partiton": "q"}]})
    config = parse_config(
        {"name": "c", "backends": [{"id": "s", "kind": "slurm", "partition": "p", "slurm_conf": "etc/slurm.conf"}]},
        base_dir=tmp_path,
    )
    assert config.backends[0].slurm_conf == str(tmp_path / "etc" / "slurm.conf")
    assert config.backends[0].poll_interval == 1.0
