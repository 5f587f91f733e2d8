"""`iris job …`: run, list, describe, logs, stop and explain jobs, all through IrisClient."""

from __future__ import annotations

import os
import time

import click

from iris.cli.main import EXIT_FAILED, EXIT_OK, EXIT_REJECTED, CliContext, output_option
from iris.core.errors import IrisError, Unauthenticated, Unavailable


def _checked(parse):
    """A click callback that validates a value with a core parser, so the error names the flag."""

    def callback(_ctx: click.Context, param: click.Parameter, value):
        if value is None or value == ():
            return value
        try:
            for item in value if isinstance(value, tuple) else (value,):
                parse(item)
        except IrisError as exc:
            raise click.BadParameter(exc.message, param=param) from None
        return value

    return callback


def _core(name: str):
    """A core parser imported on first use (keeps `iris --help` light)."""

    def parse(value):
        import importlib

        module, _, attr = name.rpartition(".")
        return getattr(importlib.import_module(module), attr)(value)

    return parse


_SIZE = _checked(_core("iris.core.units.parse_size"))
_DURATION = _checked(_core("iris.core.units.parse_duration"))
_GPU = _checked(_core("iris.core.resources.parse_gpu"))
_TPU = _checked(_core("iris.core.resources.parse_tpu"))
_CONSTRAINT = _checked(_core("iris.core.constraints.parse_constraint_text"))

# LaunchJobResponse fields: the name `job run -o json` prints (the proto's) and the Connect JSON name.
_LAUNCHED_FIELDS = (
    ("job_id", "jobId"),
    ("state", "state"),
    ("disposition", "disposition"),
    ("peer_id", "peerId"),
    ("message", "message"),
)
# Final job state -> exit code of `iris job run`.
STATE_EXIT_CODES = {"SUCCEEDED": EXIT_OK, "FAILED": EXIT_FAILED, "KILLED": EXIT_FAILED, "UNSCHEDULABLE": EXIT_REJECTED}


@click.group()
def job() -> None:
    """Submit, list, watch and stop jobs."""


@job.command(
    "run",
    context_settings={"allow_interspersed_args": False},
    short_help="Submit a job, stream its logs, exit with its outcome.",
)
@click.option("--cpu", type=float, help="Cores per task (fractional allowed; default 1).")
@click.option("--memory", metavar="SIZE", callback=_SIZE, help="Memory per task, e.g. 8G, 512M (default 1G).")
@click.option("--disk", metavar="SIZE", callback=_SIZE, help="Disk per task, e.g. 10G.")
@click.option("--gpu", metavar="SPEC", callback=_GPU, help="GPUs per task: H100x8, 8 (any variant) or H100 (one).")
@click.option("--tpu", metavar="SLICE", callback=_TPU, help="A TPU slice, e.g. v5p-8.")
@click.option("--replicas", type=click.IntRange(min=1), default=1, show_default=True, help="Number of tasks.")
@click.option(
    "--priority", type=click.Choice(["production", "interactive", "batch"]), help="Band (default interactive)."
)
@click.option("--region", help="Run in this region; `any` opts out of the parent job's region.")
@click.option("--zone", help="Run in this zone.")
@click.option(
    "--constraint",
    "constraints",
    multiple=True,
    metavar="EXPR",
    callback=_CONSTRAINT,
    help="A placement constraint: key=value, key!=value, key>=N, 'key in a,b', 'key exists'. Repeatable.",
)
@click.option("--target-cluster", metavar="PEER", help="Hand the job to this federation peer.")
@click.option("--coschedule", is_flag=True, help="Start all replicas together or not at all.")
@click.option(
    "--image", metavar="IMAGE", help="Run each task in this container image (workers started with --runtime docker)."
)
@click.option(
    "-e", "--env", "env", nargs=2, multiple=True, metavar="KEY VALUE", help="Set an env variable. Repeatable."
)
@click.option("--job-name", metavar="NAME", help="Short name (/<user>/<NAME>) or full id; generated when omitted.")
@click.option("--user", help="The submitting user (default: the token's user, else $USER).")
@click.option(
    "--max-retries",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Retries of a task whose attempt fails.",
)
@click.option(
    "--max-retries-preemption",
    type=click.IntRange(min=0),
    help="Retries after preemption or a lost worker (default 100).",
)
@click.option(
    "--timeout", metavar="DURATION", callback=_DURATION, help="Kill the job after this long running, e.g. 30m."
)
@click.option(
    "--scheduling-timeout", metavar="DURATION", callback=_DURATION, help="Give up if not placed within this long."
)
@click.option(
    "--existing",
    type=click.Choice(["error", "keep", "replace"]),
    default="error",
    show_default=True,
    help="What to do when a job of this name exists.",
)
@click.option(
    "--workdir",
    metavar="DIR",
    type=click.Path(exists=True, file_okay=False),
    help="Ship this folder as the job's workspace instead of the current one.",
)
@click.option("--no-workspace", is_flag=True, help="Ship no files; tasks start in an empty folder.")
@click.option("--no-wait", is_flag=True, help="Print the job id and return at once.")
@click.option("-t", "--timestamps", is_flag=True, help="Prefix each log line with its time.")
@output_option
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.pass_obj
def run(
    obj: CliContext,
    command: tuple[str, ...],
    env: tuple[tuple[str, str], ...],
    job_name: str | None,
    existing: str,
    workdir: str | None,
    no_workspace: bool,
    no_wait: bool,
    timestamps: bool,
    **options: object,
) -> int:
    """Submits COMMAND as a job, prints its id, streams its logs and exits with its outcome.

    Put the command after `--`: `iris job run --cpu 2 -- python train.py --lr 3e-4`. A single
    argument containing spaces runs under `sh -c`. The current folder travels with the job (minus
    what .gitignore and .irisignore list) and each task runs in a copy of it; a tree the cluster
    already holds is not sent again. Exit code: 0 succeeded, 1 failed or killed, 2 rejected or
    unschedulable, 3 usage or connection error.
    """
    if workdir and no_workspace:
        raise click.UsageError("--workdir and --no-workspace contradict each other; give one")
    client = obj.client()
    started = time.monotonic()
    # Everything checkable here (sizes, devices, constraints, names) fails before any request: exit 3.
    # The request and its answer travel as Connect JSON, so this path never imports protobuf.
    folder = None if no_workspace else (workdir or os.getcwd())
    request = client.prepare_json(
        list(command), name=job_name, env=dict(env), existing_job_policy=existing, workdir=folder, **options
    )
    bundle = client.bundle(request.get("bundle_id") or "")
    try:
        reply = client.launch_json(request)
    except (Unavailable, Unauthenticated):
        raise
    except IrisError as exc:
        # The controller refused the job (duplicate, stale client, bad constraint, …).
        return _fail(obj, exc, EXIT_REJECTED)
    launched: dict = {field: str(reply.get(json_name, "")) for field, json_name in _LAUNCHED_FIELDS}
    job_id = launched["job_id"]
    if bundle is not None:
        uploaded = int(reply.get("uploadedBytes", 0))
        launched["workspace"] = {
            "folder": bundle.root,
            "bundle_id": bundle.content_id,
            "files": bundle.files,
            "bytes": bundle.size,
            "uploaded_bytes": uploaded,
        }
    if not obj.json:
        click.echo(job_id)
        if bundle is not None:
            click.echo(_workspace_line(bundle, uploaded), err=True)
        if launched["disposition"] == "existing":
            click.echo(f"job {job_id} already exists ({launched['state']}); following it", err=True)
        elif launched["message"]:
            click.echo(launched["message"], err=True)
    if no_wait:
        if obj.json:
            obj.emit(launched)
        return EXIT_OK
    replicas = int(options.get("replicas") or 1)  # type: ignore[call-overload]
    return _follow_to_end(obj, job_id, launched, timestamps, replicas, started)


def _workspace_line(bundle, uploaded: int) -> str:
    from iris.client.bundle import human_size

    sent = f"sent {human_size(uploaded)}" if uploaded else "already on the cluster, nothing sent"
    return f"workspace {bundle.root}: {bundle.files} file(s), {human_size(bundle.size)} ({sent})"


def _follow_to_end(
    obj: CliContext, job_id: str, launched: dict, timestamps: bool, replicas: int, started: float
) -> int:
    from iris.cli.output import message_to_dict, write_log_line

    client = obj.client()
    lines = []
    try:
        for line in client.follow(job_id):
            if obj.json:
                lines.append(line)
            else:
                write_log_line(line, show_task=replicas > 1, timestamps=timestamps)
        status = client.wait(job_id)
    except KeyboardInterrupt:
        click.echo(f"\ndetached from {job_id}; it keeps running (stop it with `iris job stop {job_id}`)", err=True)
        return 130
    code = STATE_EXIT_CODES.get(status.state, EXIT_FAILED)
    if obj.json:
        obj.emit(
            {
                **launched,
                "state": status.state,
                "exit_code": status.exit_code if status.has_exit_code else None,
                "error": status.error,
                "status": message_to_dict(status),
                "logs": [message_to_dict(line) for line in lines],
            }
        )
        return code
    elapsed = time.monotonic() - started
    detail = status.error or (f"exit code {status.exit_code}" if status.has_exit_code else "")
    click.echo(f"{job_id} {status.state}" + (f" ({detail})" if detail else "") + f" after {elapsed:.2f}s", err=True)
    return code


def _fail(obj: CliContext, exc: IrisError, code: int) -> int:
    if obj.json:
        obj.emit({"error": {"code": exc.code, "message": exc.message}})
    click.echo(f"error: {exc.message}", err=True)
    return code


@job.command("list")
@click.option("--state", help="Only jobs in this state (PENDING, RUNNING, SUCCEEDED, FAILED, KILLED, UNSCHEDULABLE).")
@click.option("--prefix", help="Only jobs whose id starts with this, e.g. /alice/.")
@click.option("--user", help="Only this user's jobs.")
@click.option("--limit", type=click.IntRange(min=0), default=0, help="At most this many (0: the server's default).")
@output_option
@click.pass_obj
def list_jobs(obj: CliContext, state: str | None, prefix: str | None, user: str | None, limit: int) -> None:
    """Lists jobs: JOB, STATE, CLUSTER, TASKS, AGE and why each pending job waits."""
    from iris.cli.output import jobs_table, message_to_dict

    jobs = obj.client().list(state=state, prefix=prefix, user=user, limit=limit)
    if obj.json:
        obj.emit({"jobs": [message_to_dict(j) for j in jobs]})
    elif jobs:
        click.echo(jobs_table(jobs))
    else:
        click.echo(
            "no jobs" + (f" in state {state.upper()}" if state else "") + (f" under {prefix}" if prefix else ""),
            err=True,
        )


@job.command("describe")
@click.argument("job_id", metavar="JOB")
@output_option
@click.pass_obj
def describe(obj: CliContext, job_id: str) -> None:
    """Shows a job, its tasks and their attempts: where they ran, exit codes, times, pending reason."""
    from iris.cli.output import describe_job, message_to_dict

    resp = obj.client().describe(job_id)
    if obj.json:
        obj.emit(message_to_dict(resp))
    else:
        click.echo(describe_job(resp))


@job.command("logs")
@click.argument("job_id", metavar="JOB")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines until the job ends.")
@click.option("--tail", type=click.IntRange(min=0), default=0, help="Only the last N lines (then follow, with -f).")
@click.option("--task", type=click.IntRange(min=0), help="Only this task's lines.")
@click.option("-t", "--timestamps", is_flag=True, help="Prefix each line with its time.")
@output_option
@click.pass_obj
def logs(obj: CliContext, job_id: str, follow: bool, tail: int, task: int | None, timestamps: bool) -> int:
    """Prints a job's logs (stdout to stdout, stderr to stderr); -f follows until the job ends."""
    from iris.cli.output import message_to_dict, write_log_line

    client = obj.client()
    show_task = task is None and client.status(job_id).replicas > 1
    if obj.json:
        # One document: with -f it is printed once the job has ended.
        lines = (
            list(client.follow(job_id, task=task, tail=tail)) if follow else client.logs(job_id, task=task, tail=tail)
        )
        obj.emit({"job_id": job_id, "lines": [message_to_dict(line) for line in lines]})
        return EXIT_OK
    try:
        source = client.follow(job_id, task=task, tail=tail) if follow else client.logs(job_id, task=task, tail=tail)
        for line in source:
            write_log_line(line, show_task=show_task, timestamps=timestamps)
    except KeyboardInterrupt:
        return 130
    return EXIT_OK


@job.command("stop")
@click.argument("job_ids", metavar="JOB...", nargs=-1, required=True)
@click.option("--reason", default="", help="Recorded as the reason the job was stopped.")
@output_option
@click.pass_obj
def stop(obj: CliContext, job_ids: tuple[str, ...], reason: str) -> int:
    """Stops jobs and every job below them."""
    client = obj.client()
    stopped: dict[str, list[str]] = {}
    errors: dict[str, dict[str, str]] = {}
    for job_id in job_ids:
        try:
            resp = client.cancel(job_id, reason=reason or "stopped with iris job stop")
        except Unavailable:
            raise
        except IrisError as exc:
            errors[job_id] = {"code": exc.code, "message": exc.message}
            if not obj.json:
                click.echo(f"error: {exc.message}", err=True)
            continue
        stopped[job_id] = list(resp.terminated)
        if not obj.json:
            children = [j for j in resp.terminated if j != job_id]
            more = f" and {len(children)} job(s) below it" if children else ""
            click.echo(f"stopped {job_id}{more}")
    if obj.json:
        obj.emit({"stopped": stopped, "errors": errors})
    return EXIT_FAILED if errors else EXIT_OK


@job.command("explain")
@click.argument("job_id", metavar="JOB")
@output_option
@click.pass_obj
def explain(obj: CliContext, job_id: str) -> None:
    """Says, per backend and group of identical workers, whether and why a job fits."""
    from iris.cli.output import explain_text, message_to_dict

    resp = obj.client().explain(job_id)
    if obj.json:
        obj.emit(message_to_dict(resp))
    else:
        click.echo(explain_text(resp))
