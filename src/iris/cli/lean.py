"""Recognises the common forms of `iris job run`, `job list` and `job describe` and runs them without importing click.

`iris job run --no-wait -- CMD` is what scripts and sweeps call by the thousand, and it has a budget
of three times a bare `python -c pass`; click and its command tree alone cost two thirds of that.
So the console-script entry offers every command line here first. This module reads only the flags
it knows, in the spellings click accepts for them (`--flag VALUE`, `--flag=VALUE`, `-oVALUE`; the
last of a repeated flag wins), runs the very checks the click command runs (the core parsers,
`iris.cli.values`) and builds the request with the same SDK call, then hands it to the same
`iris.cli.submit.launch_and_report`.

Anything it does not recognise (help, a flag it does not know, a value its checks refuse, an error
raised before the request is sent) makes it step aside: `lean_command` returns None, or the command
returns None, and `iris.cli.main` runs the click command, which prints the one message and exit code
that input has always had. Nothing is sent before that point, so stepping aside is never a second
submission. Once the request is sent, output and errors come from code the click command shares.
"""

from __future__ import annotations

import os
import time

from iris.cli.main import CliContext, end_startup

TYPE_CHECKING = False  # typing's own constant costs `import typing` on the submit path
if TYPE_CHECKING:
    from collections.abc import Callable

_GLOBAL_VALUES = {
    "--controller": "controller",
    "--cluster": "cluster",
    "--token": "token",
    "-o": "output",
    "--output": "output",
}
_OUTPUTS = ("table", "json")
_RUN_VALUES = {
    "--cpu": "cpu",
    "--memory": "memory",
    "--disk": "disk",
    "--gpu": "gpu",
    "--tpu": "tpu",
    "--replicas": "replicas",
    "--priority": "priority",
    "--region": "region",
    "--zone": "zone",
    "--image": "image",
    "--env-file": "env_file",
    "--job-name": "job_name",
    "--user": "user",
    "--max-retries": "max_retries",
    "--max-retries-preemption": "max_retries_preemption",
    "--timeout": "timeout",
    "--scheduling-timeout": "scheduling_timeout",
    "--existing": "existing",
    "--workdir": "workdir",
    "-o": "output",
    "--output": "output",
}
_RUN_REPEATED = {"--constraint": "constraints", "-e": "env", "--env": "env"}
_RUN_FLAGS = {
    "--coschedule": "coschedule",
    "--no-workspace": "no_workspace",
    "--no-wait": "no_wait",
    "--cancel-on-interrupt": "cancel_on_interrupt",
    "-t": "timestamps",
    "--timestamps": "timestamps",
}
_LIST_VALUES = {
    "--state": "state",
    "--prefix": "prefix",
    "--user": "user",
    "--limit": "limit",
    "--page-size": "page_size",
    "-o": "output",
    "--output": "output",
}
_DESCRIBE_VALUES = {"-o": "output", "--output": "output"}
_TAKES_VALUE = frozenset(_RUN_VALUES) | frozenset(_RUN_REPEATED)
_PRIORITIES = ("production", "interactive", "batch")
_EXISTING = ("error", "keep", "replace")


class _StepAside(Exception):
    """The command line is not one this module runs; click takes it."""


def lean_command(args: list[str]) -> Callable[[], int | None] | None:
    """A runner for `args` when they are a form this module takes, else None (click runs them)."""
    try:
        given, at = _options(args, 0, _GLOBAL_VALUES, {}, {}, stop_at_dashes=False)
        if args[at : at + 2] == ["job", "describe"]:
            jobs: list[str] = []
            opts, _ = _options(args, at + 2, _DESCRIBE_VALUES, {}, {"--all-tasks": "all_tasks"}, positional=jobs)
            if len(jobs) != 1:
                return None  # click says what is missing or extra
            return lambda: _job_describe(given, opts, jobs[0])
        if args[at : at + 2] == ["job", "list"]:
            opts, end = _options(args, at + 2, _LIST_VALUES, {}, {"--all": "everything"}, stop_at_dashes=False)
            return None if end < len(args) else lambda: _job_list(given, opts)
        if args[at : at + 2] != ["job", "run"]:
            return None
        from iris.cli.values import BadValue, join_env_args

        try:
            rest = join_env_args(args[at + 2 :], _TAKES_VALUE)
        except BadValue:
            return None
        run, at = _options(rest, 0, _RUN_VALUES, _RUN_REPEATED, _RUN_FLAGS, stop_at_dashes=True)
    except _StepAside:
        return None
    command = rest[at:]
    if not command:
        return None
    return lambda: _job_run(given, run, command)


def _options(
    args: list[str],
    at: int,
    values: dict[str, str],
    repeated: dict[str, str],
    flags: dict[str, str],
    *,
    stop_at_dashes: bool = False,
    positional: list[str] | None = None,
) -> tuple[dict, int]:
    """Reads options from args[at:] up to the first argument that is not one; returns them and where that is.

    With `positional`, arguments that are not options are put there and reading goes on, as click
    reads a command that takes arguments among its options (all after `--` are arguments).
    """
    found: dict = {}
    while at < len(args):
        arg = args[at]
        if arg == "--":
            if positional is not None:
                positional.extend(args[at + 1 :])
                return found, len(args)
            if not stop_at_dashes:
                raise _StepAside()
            return found, at + 1
        if not arg.startswith("-") or arg == "-":
            if positional is None:
                return found, at
            positional.append(arg)
            at += 1
            continue
        name, sep, attached = arg.partition("=") if arg.startswith("--") else (arg[:2], "", arg[2:])
        if not sep and not attached and name in flags:
            found[flags[name]] = True
            at += 1
            continue
        key = values.get(name) or repeated.get(name)
        if key is None:
            raise _StepAside()
        if sep or attached:
            value, at = attached, at + 1
        elif at + 1 < len(args):
            value, at = args[at + 1], at + 2
        else:
            raise _StepAside()  # click says which value is missing
        if name in repeated:
            found.setdefault(key, []).append(value)
        else:
            found[key] = value
    return found, at


def _context(given: dict, sub: dict) -> CliContext | None:
    """The context the click group would build, or None for an -o value click refuses."""
    output = sub.get("output", given.get("output", "table"))
    if output not in _OUTPUTS or given.get("output", "table") not in _OUTPUTS:
        return None  # click refuses a bad global -o even when the subcommand's own -o is good
    return CliContext(
        controller=given.get("controller"),
        config_path=None,
        output=output,
        token=given.get("token"),
        cluster=given.get("cluster"),
    )


def _job_list(given: dict, opts: dict) -> int | None:
    """`iris job list` as the click command runs it, or None when click must take it instead."""
    obj = _context(given, opts)
    if obj is None:
        return None
    from iris.cli.lean_list import job_list

    return job_list(obj, opts)


def _job_describe(given: dict, opts: dict, job: str) -> int | None:
    """`iris job describe` as the click command runs it, or None when click must take it instead."""
    obj = _context(given, opts)
    if obj is None:
        return None
    from iris.cli.lean_describe import job_describe

    return job_describe(obj, job, bool(opts.get("all_tasks")))


def _job_run(given: dict, run: dict, command: list[str]) -> int | None:
    """`iris job run` as the click command runs it, or None when click must take it instead."""
    from iris.cli.submit import launch_and_report

    try:
        obj = _context(given, run)
        if obj is None:
            return None
        options = _job_options(run)
        workdir = run.get("workdir")
        if workdir is not None and not (os.path.isdir(workdir) and os.access(workdir, os.R_OK)):
            return None
        if workdir and run.get("no_workspace"):
            return None
        from iris.cli.values import env_pairs

        env_vars = env_pairs(run.get("env", []), run.get("env_file"))
        client = obj.client()
        started = time.monotonic()
        folder = None if run.get("no_workspace") else (workdir or os.getcwd())
        request = client.prepare_json(
            list(command),
            name=run.get("job_name"),
            env=env_vars,
            existing_job_policy=run.get("existing", "error"),
            workdir=folder,
            **options,
        )
    except Exception:  # whatever it is, the click command reports it as it always has
        return None
    end_startup()  # as the click group does: the job may be followed from here on, for as long as it runs
    return launch_and_report(
        obj,
        request,
        no_wait=bool(run.get("no_wait")),
        timestamps=bool(run.get("timestamps")),
        started=started,
        cancel_on_interrupt=bool(run.get("cancel_on_interrupt")),
    )


def _job_options(run: dict) -> dict:
    """The keyword options the click command passes to `prepare_json`, converted and checked as click does."""
    from iris.cli.values import size_text
    from iris.core.units import parse_duration

    if run.get("existing", "error") not in _EXISTING or run.get("priority", "production") not in _PRIORITIES:
        raise _StepAside()
    if any(key in run and not run[key].strip() for key in ("job_name", "image")):
        raise _StepAside()  # the click command refuses an empty value
    sizes = {key: size_text(run[key]) if key in run else None for key in ("memory", "disk")}
    if "gpu" in run:
        from iris.core.resources import parse_gpu

        parse_gpu(run["gpu"])
    if "tpu" in run:
        from iris.core.resources import parse_tpu

        parse_tpu(run["tpu"])
    for key in ("timeout", "scheduling_timeout"):
        if key in run:
            parse_duration(run[key])
    if "constraints" in run:
        from iris.core.constraints import parse_constraint_text

        for text in run["constraints"]:
            parse_constraint_text(text)
    options = {
        "cpu": float(run["cpu"]) if "cpu" in run else None,
        **sizes,
        "gpu": run.get("gpu"),
        "tpu": run.get("tpu"),
        "replicas": _whole(run.get("replicas", "1"), 1),
        "priority": run.get("priority"),
        "region": run.get("region"),
        "zone": run.get("zone"),
        "constraints": tuple(run.get("constraints", ())),
        "target_cluster": None,
        "coschedule": bool(run.get("coschedule")),
        "image": run.get("image"),
        "user": run.get("user"),
        "max_retries": _whole(run.get("max_retries", "0"), 0),
        "max_retries_preemption": _whole(run["max_retries_preemption"], 0) if "max_retries_preemption" in run else None,
        "timeout": run.get("timeout"),
        "scheduling_timeout": run.get("scheduling_timeout"),
    }
    return options


def _whole(text: str, least: int) -> int:
    """A whole number of at least `least`, as click's IntRange reads it."""
    number = int(text)
    if number < least:
        raise _StepAside()
    return number
