"""`iris job …`: run, list, describe, logs, stop and explain jobs, all through IrisClient."""

from __future__ import annotations

import os
import time

from iris.cli import commands as cmd
from iris.cli.checks import checked, env_pair_words, env_pairs, job_state, not_blank, size_with_unit
from iris.cli.main import EXIT_OK, CliContext, output_option
from iris.cli.pages import MAX_PAGE
from iris.cli.submit import PendingWatcher, launch_and_report
from iris.cli.values import resolve_job
from iris.core.errors import InvalidArgument


def _core(name: str, *first: object):
    """A core check imported on first use (keeps `iris --help` light), called with `first` then the value."""

    def parse(value):
        import importlib

        module, _, attr = name.rpartition(".")
        return getattr(importlib.import_module(module), attr)(*first, value)

    return parse


def _then(first, second):
    """A parameter callback running `first`, then `second` on what it returned."""
    return lambda ctx, param, value: second(ctx, param, first(ctx, param, value))


_CPU = checked(_core("iris.core.resources.check_cpu"))
_MEMORY = _then(size_with_unit, checked(_core("iris.core.resources.task_bytes", "memory")))
_DISK = _then(size_with_unit, checked(_core("iris.core.resources.task_bytes", "disk")))
_GPU = checked(_core("iris.core.resources.task_gpu"))
_TPU = checked(_core("iris.core.resources.task_tpu"))
_REPLICAS = checked(_core("iris.client.launch.check_replicas"))
_RETRIES = checked(_core("iris.client.launch.check_retries", "max retries"))
_PREEMPTION_RETRIES = checked(_core("iris.client.launch.check_retries", "max preemption retries"))
_DURATION = checked(_core("iris.core.units.parse_duration"))
_TIMEOUT = _then(_DURATION, checked(_core("iris.client.launch.job_seconds", "timeout")))
_SCHEDULING_TIMEOUT = _then(_DURATION, checked(_core("iris.client.launch.job_seconds", "scheduling timeout")))
_CONSTRAINT = checked(_core("iris.core.constraints.parse_constraint_text"))
_JOB_NAME = _then(not_blank, checked(_core("iris.client.launch.check_job_name")))
_USER = checked(_core("iris.core.names.validate_component", "user"))


raw_option = cmd.option(
    "--raw",
    is_flag=True,
    help="Print the job's output exactly as it wrote it, escape sequences included. By default every control"
    " character but tab is shown as an escape (\\x1b), to a terminal or a pipe alike, so no job can"
    " retitle or redraw the terminal that reads it; -o json always holds the exact text.",
)


@cmd.group()
def job() -> None:
    """Submit, list, watch and stop jobs."""


@job.command(
    "run",
    prepare=env_pair_words,
    interspersed=False,
    short_help="Submit a job, stream its logs, exit with its outcome.",
)
@cmd.option("--cpu", type=float, callback=_CPU, help="Cores per task (fractional allowed; default 1).")
@cmd.option("--memory", metavar="SIZE", callback=_MEMORY, help="Memory per task, e.g. 8G, 512M (default 1G).")
@cmd.option("--disk", metavar="SIZE", callback=_DISK, help="Disk per task, e.g. 10G.")
@cmd.option("--gpu", metavar="SPEC", callback=_GPU, help="GPUs per task: H100x8, 8 (any variant) or H100 (one).")
@cmd.option("--tpu", metavar="SLICE", callback=_TPU, help="A TPU slice, e.g. v5p-8.")
@cmd.option(
    "--replicas", type=cmd.IntRange(min=1), callback=_REPLICAS, default=1, show_default=True, help="Number of tasks."
)
@cmd.option("--priority", type=cmd.Choice(["production", "interactive", "batch"]), help="Band (default interactive).")
@cmd.option("--region", help="Run in this region; `any` opts out of the parent job's region.")
@cmd.option("--zone", help="Run in this zone.")
@cmd.option(
    "--constraint",
    "constraints",
    multiple=True,
    metavar="EXPR",
    callback=_CONSTRAINT,
    help="A placement constraint: key=value, key!=value, key>=N, 'key in a,b', 'key exists'. Repeatable.",
)
@cmd.option("--target-cluster", metavar="PEER", help="Hand the job to this federation peer.")
@cmd.option("--coschedule", is_flag=True, help="Start all replicas together or not at all.")
@cmd.option(
    "--image",
    metavar="IMAGE",
    callback=not_blank,
    help="Run each task in this container image (workers started with --runtime docker).",
)
@cmd.option(
    "-e",
    "--env",
    "env",
    multiple=True,
    metavar="KEY=VALUE",
    help="Set an env variable: -e KEY=VALUE or -e KEY VALUE. Repeatable.",
)
@cmd.option("--env-file", metavar="FILE", help="Env variables from a file of KEY=VALUE lines (# comments).")
@cmd.option(
    "--job-name",
    metavar="NAME",
    callback=_JOB_NAME,
    help="Short name (/<user>/<NAME>) or full id; generated when omitted.",
)
@cmd.option("--user", callback=_USER, help="The submitting user (default: the token's user, else $USER).")
@cmd.option(
    "--max-retries",
    type=cmd.IntRange(min=0),
    callback=_RETRIES,
    default=0,
    show_default=True,
    help="Retries of a task whose attempt fails.",
)
@cmd.option(
    "--max-retries-preemption",
    type=cmd.IntRange(min=0),
    callback=_PREEMPTION_RETRIES,
    help="Retries after preemption or a lost worker (default 100).",
)
@cmd.option(
    "--timeout",
    metavar="DURATION",
    callback=_TIMEOUT,
    help="Its wall-clock limit, e.g. 30m: the job is stopped after this long running, and the scheduler"
    " plans with it (a limited job may start early on capacity held for a bigger one). 0 (the default):"
    " the cluster's default for its band (controller.time_limits), else none.",
)
@cmd.option(
    "--scheduling-timeout",
    metavar="DURATION",
    callback=_SCHEDULING_TIMEOUT,
    help="Give up if not placed within this long; 0 (the default): wait as long as it takes.",
)
@cmd.option(
    "--existing",
    type=cmd.Choice(["error", "keep", "replace"]),
    default="error",
    show_default=True,
    help="What to do when a job of this name exists.",
)
@cmd.option(
    "--workdir",
    metavar="DIR",
    type=cmd.Path(exists=True, file_okay=False),
    help="Ship this folder as the job's workspace instead of the current one.",
)
@cmd.option("--no-workspace", is_flag=True, help="Ship no files; tasks start in an empty folder.")
@cmd.option(
    "--no-wait",
    is_flag=True,
    help="Print the job id and return at once: exit 0, or 2 when the cluster rejected the job at submit.",
)
@cmd.option(
    "--dry-run",
    is_flag=True,
    help="Submit nothing; say what a submit would meet now: the backend or federation peer it would go to"
    " and why, whether it would start now or wait (its expected start and reason), the running jobs it"
    " would preempt, and the band its owner's budget puts it in (-o json: the whole answer). Exit 0 when"
    " it could be submitted, 2 with the submit's error when the cluster would refuse it.",
)
@cmd.option("--cancel-on-interrupt", is_flag=True, help="Ctrl-C stops the job (by default it only detaches from it).")
@cmd.option("-t", "--timestamps", is_flag=True, help="Prefix each log line with its time.")
@raw_option
@output_option
@cmd.argument("command", nargs=-1, required=True, type=cmd.UNPROCESSED)
@cmd.pass_obj
def run(
    obj: CliContext,
    command: tuple[str, ...],
    env: tuple[str, ...],
    env_file: str | None,
    job_name: str | None,
    existing: str,
    workdir: str | None,
    no_workspace: bool,
    no_wait: bool,
    dry_run: bool,
    cancel_on_interrupt: bool,
    timestamps: bool,
    raw: bool,
    **options: object,
) -> int:
    """Submits COMMAND as a job, prints its id, streams its logs and exits with its outcome.

    Put the command after `--`: `iris job run --cpu 2 -- python train.py --lr 3e-4`. A single
    argument containing spaces runs under `sh -c`. The current folder travels with the job (minus
    what .gitignore and .irisignore list) and each task runs in a copy of it; a tree the cluster
    already holds is not sent again. While the job waits, its pending reason is printed when it
    changes (and every 30 s). Ctrl-C detaches (the job keeps running); with --cancel-on-interrupt it
    stops the job. Exit code: 0 succeeded, 1 failed or killed, 2 rejected or unschedulable, 3 usage
    or connection error.

    With --dry-run nothing is submitted or sent of the folder: the controller runs a submit's checks
    and the scheduler's own pass over its live state with the job added, and prints where the job
    would go, when it would start, what it would preempt and its band.
    """
    if workdir and no_workspace:
        raise cmd.UsageError("--workdir and --no-workspace contradict each other; give one")
    env_vars = env_pairs(env, env_file)
    client = obj.client()
    if options.get("target_cluster"):
        _check_peer(client, str(options["target_cluster"]))
    started = time.monotonic()
    # Everything checkable here (sizes, devices, constraints, names) fails before any request: exit 3.
    # The request and its answer travel as Connect JSON, so this path never imports protobuf.
    if dry_run:
        from iris.cli.dry_run import plan_and_report

        request = client.prepare_json(
            list(command), name=job_name, env=env_vars, existing_job_policy=existing, **options
        )
        return plan_and_report(obj, request)
    folder = None if no_workspace else (workdir or os.getcwd())
    request = client.prepare_json(
        list(command), name=job_name, env=env_vars, existing_job_policy=existing, workdir=folder, **options
    )
    return launch_and_report(
        obj,
        request,
        no_wait=no_wait,
        timestamps=timestamps,
        started=started,
        cancel_on_interrupt=cancel_on_interrupt,
        raw=raw,
    )


def _check_peer(client, peer: str) -> None:
    """--target-cluster must name one of the cluster's peers (asked before anything is submitted)."""
    from iris.core.printable import check_printable

    check_printable("--target-cluster", peer)  # before it is sent to be looked up
    peers = [p.peer_id for p in client.peers()]
    if peer in peers:
        return
    if not peers:
        raise cmd.BadParameter(
            f"this cluster has no federation peers, so no job can be handed to {peer!r};"
            " list peers under `peers:` in its config, or drop --target-cluster",
            param_hint="--target-cluster",
        )
    raise cmd.BadParameter(
        f"{peer!r} is not a peer of this cluster; its peers: {', '.join(sorted(peers))}",
        param_hint="--target-cluster",
    )


@job.command("list")
@cmd.option(
    "--state",
    callback=job_state,
    help="Only jobs in these states: PENDING, RUNNING, SUCCEEDED, FAILED, KILLED or UNSCHEDULABLE, or several joined by commas (PENDING,RUNNING).",
)
@cmd.option("--prefix", help="Only jobs whose id starts with this, e.g. /alice/.")
@cmd.option("--user", help="Only this user's jobs.")
@cmd.option(
    "--limit",
    type=cmd.IntRange(min=0),
    default=0,
    help="At most this many, newest first, fetched a page at a time (0: one page, the server's default of 1000).",
)
@cmd.option("--all", "everything", is_flag=True, help="Every matching job, fetched a page at a time.")
@cmd.option(
    "--page-size",
    type=cmd.IntRange(min=0, max=MAX_PAGE),
    default=0,
    help="Jobs per request while fetching (0: the server's default, 1000; it allows at most 5000).",
)
@cmd.option("-w", "--watch", is_flag=True, help="Redraw the list every 2 s until Ctrl-C.")
@output_option
@cmd.pass_obj
def list_jobs(
    obj: CliContext,
    state: str | None,
    prefix: str | None,
    user: str | None,
    limit: int,
    everything: bool,
    page_size: int,
    watch: bool,
) -> int | None:
    """Lists jobs, newest first: JOB, STATE, CLUSTER, TASKS, AGE and why each pending job waits.

    One page (1000 jobs) unless --limit or --all asks for more; when jobs are left out, stderr says
    how many. `-o json` prints {"jobs": [...], "total": N} (every job fetched, in one array).
    """
    from iris.cli.output import jobs_table, message_to_dict
    from iris.cli.pages import check_all_or_limit, collect, hint

    check_all_or_limit(everything, limit)
    if watch and obj.json:
        raise cmd.UsageError("--watch redraws a table; for scripts, call `iris -o json job list` repeatedly")
    client = obj.client()

    def fetch():  # every redraw of --watch fetches as a single listing does
        return collect(
            lambda token, size: client.job_page(state, prefix, user, size, page_token=token),
            "jobs",
            limit,
            everything,
            page_size,
        )

    if watch:
        from iris.cli.job_ops import watch_list

        return watch_list(lambda: fetch().rows)
    got = fetch()
    jobs = got.rows
    if obj.json:
        obj.emit({"jobs": [message_to_dict(j) for j in jobs], "total": got.total})
    elif jobs:
        cmd.echo(jobs_table(jobs))
    else:
        cmd.echo(
            "no jobs" + (f" in state {state.upper()}" if state else "") + (f" under {prefix}" if prefix else ""),
            err=True,
        )
    hint(got, "jobs")
    return None


@job.command("describe")
@cmd.argument("job_id", metavar="JOB")
@cmd.option("--all-tasks", is_flag=True, help="Every task of a job with more than one page (1000) of them.")
@output_option
@cmd.pass_obj
def describe(obj: CliContext, job_id: str, all_tasks: bool) -> None:
    """Shows a job (an id, or a short name as --job-name takes), its tasks and their latest attempts.

    A job with more than 1000 tasks shows the first 1000 (--all-tasks shows every one); each task
    shows its latest 20 attempts.
    """
    from iris.cli.output import describe_job, message_to_dict
    from iris.cli.pages import Collected, hint

    job_id = resolve_job(obj, job_id)
    resp = obj.client().describe(job_id, all_tasks=all_tasks)
    if obj.json:
        obj.emit(message_to_dict(resp))
    else:
        cmd.echo(describe_job(resp))
    hint(
        Collected(list(resp.tasks), resp.total_tasks, bool(resp.next_task_page_token)),
        "tasks",
        "--all-tasks for every one",
    )


@job.command("logs")
@cmd.argument("job_id", metavar="JOB")
@cmd.option("-f", "--follow", is_flag=True, help="Keep printing new lines until the job ends.")
@cmd.option(
    "--tail",
    type=cmd.IntRange(min=0),
    help="Only the last N lines (then follow, with -f); 0: none, so -f --tail 0 prints only new lines.",
)
@cmd.option("--task", type=cmd.IntRange(min=0), help="Only this task's lines.")
@cmd.option("-t", "--timestamps", is_flag=True, help="Prefix each line with its time.")
@raw_option
@output_option
@cmd.pass_obj
def logs(
    obj: CliContext, job_id: str, follow: bool, tail: int | None, task: int | None, timestamps: bool, raw: bool
) -> int:
    """Prints a job's logs (stdout to stdout, stderr to stderr); -f follows until the job ends.

    When a task ran more than once, a line marks where each attempt begins. With -f, a job still
    waiting has its pending reason printed to stderr when it changes (and every 30 s).
    """
    from iris.cli.output import AttemptMarks, message_to_dict, visible, write_log_line

    job_id = resolve_job(obj, job_id)
    client = obj.client()
    status = client.status(job_id)
    replicas = status.replicas
    if task is not None and task >= replicas:
        raise InvalidArgument(
            f"--task {task} names no task of {job_id}: it has {replicas} task(s), numbered 0 to {replicas - 1}"
        )
    show_task = task is None and replicas > 1
    source = _log_source(client, job_id, follow, tail, task)
    if obj.json:
        # One document: with -f it is printed once the job has ended, or with what came when Ctrl-C stops it.
        lines: list = []
        try:
            lines.extend(source)
        except KeyboardInterrupt:
            obj.emit({"job_id": job_id, "lines": [message_to_dict(line) for line in lines], "interrupted": True})
            return 130
        obj.emit({"job_id": job_id, "lines": [message_to_dict(line) for line in lines]})
        return EXIT_OK
    watcher = None
    if follow and status.state == "PENDING":  # no line comes until it starts: say what it waits for
        reason = status.pending_reason or "waiting to be scheduled"
        cmd.echo(f"pending: {reason}", err=True)
        watcher = PendingWatcher(client, job_id, reason)
    try:
        marks = AttemptMarks()
        for line in source:
            if watcher is not None:  # a line means it runs: no pending line may follow it
                watcher.stop()
            mark = marks.before(line)
            if mark is not None:
                cmd.echo(mark)
            write_log_line(line, show_task=show_task, timestamps=timestamps, raw=raw)
    except KeyboardInterrupt:
        return 130
    finally:
        if watcher is not None:
            watcher.stop()
    if follow:
        final = client.status(job_id)
        if final.state != "SUCCEEDED" and final.error:
            # why the lines stop here; the error may quote a stop reason, shown escaped as the output is
            cmd.echo(f"{job_id} ended {final.state}: {visible(final.error)}", err=True)
    return EXIT_OK


def _log_source(client, job_id: str, follow: bool, tail: int | None, task: int | None):
    """The lines `job logs` prints: all of them, the last `tail` (none for 0), then new ones with -f."""
    if tail == 0:
        return client.follow(job_id, task=task, after_seq=client.last_seq(job_id, task=task)) if follow else []
    if follow:
        return client.follow(job_id, task=task, tail=tail or 0)
    return client.logs(job_id, task=task, tail=tail or 0)


@job.command("explain")
@cmd.argument("job_id", metavar="JOB")
@output_option
@cmd.pass_obj
def explain(obj: CliContext, job_id: str) -> None:
    """Says, per backend and group of identical workers, whether and why a job fits."""
    from iris.cli.output import explain_document, explain_text

    job_id = resolve_job(obj, job_id)
    resp = obj.client().explain(job_id)
    if obj.json:
        obj.emit(explain_document(resp))
    else:
        cmd.echo(explain_text(resp))


from iris.cli import job_ops  # noqa: E402,F401  (registers stop, wait and history on the group)
