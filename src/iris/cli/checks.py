"""Decides, before any request, whether what a person typed for a job command makes sense.

Each check fails with click's usage error (exit 3) and a message that says how to write the value
instead, so a typo never reaches the controller, never writes anything there, and never surfaces
as a confusing answer from it. Checks that only the SDK's values need (sizes, devices, constraints)
live in iris.core; this module holds the ones about how a person types them on a command line:
a size without a unit, `-e KEY=VALUE` beside `-e KEY VALUE`, a misspelt state, a short job name.
"""

from __future__ import annotations

import difflib
import re

import click

from iris.core.errors import IrisError

JOB_STATES = ("PENDING", "RUNNING", "SUCCEEDED", "FAILED", "KILLED", "UNSCHEDULABLE")
_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def checked(parse):
    """A click callback that validates each value with a core parser, so the error names the flag."""

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


def size_with_unit(_ctx: click.Context, param: click.Parameter, value: str | None):
    """--memory/--disk: a positive size with a unit (a bare `512` would mean 512 bytes)."""
    if value is None:
        return None
    from iris.core.units import parse_size

    text = value.strip()
    try:
        size = parse_size(text)
    except IrisError as exc:
        raise click.BadParameter(exc.message, param=param) from None
    if size <= 0:
        raise click.BadParameter(f"{text!r} is zero; ask for more than nothing, e.g. 512M or 4G", param=param)
    if re.fullmatch(r"[0-9.]+", text):
        raise click.BadParameter(
            f"{text!r} has no unit, so it would mean {text} bytes; write {text}M or {text}G", param=param
        )
    return text


def env_pairs(values: tuple[str, ...], env_file: str | None) -> dict[str, str]:
    """The job's env from `--env-file` (KEY=VALUE lines, # comments) then each -e KEY=VALUE."""
    env: dict[str, str] = {}
    if env_file:
        try:
            with open(env_file) as f:
                lines = f.read().splitlines()
        except OSError as exc:
            raise click.BadParameter(f"cannot read {env_file}: {exc.strerror}", param_hint="--env-file") from None
        for number, line in enumerate(lines, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            key, sep, value = line.removeprefix("export ").partition("=")
            if not sep:
                raise click.BadParameter(
                    f"{env_file} line {number} ({line!r}) is not KEY=VALUE", param_hint="--env-file"
                )
            env[_env_key(key.strip(), "--env-file")] = value.strip().strip("'\"") if value else ""
    for item in values:
        key, _, value = item.partition("=")
        env[_env_key(key, "-e")] = value
    return env


def _env_key(key: str, flag: str) -> str:
    if not _ENV_KEY.match(key):
        raise click.BadParameter(
            f"{key!r} is not an environment variable name (letters, digits and _, not starting with a digit)",
            param_hint=flag,
        )
    return key


def join_env_args(args: list[str]) -> list[str]:
    """Rewrites `-e KEY VALUE` as `-e KEY=VALUE` (options before `--` only), so both spellings work.

    `-e KEY` with nothing after it, or followed by another option, is refused with both spellings.
    """
    out: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            out.extend(args[i:])
            break
        if arg in ("-e", "--env"):
            if i + 1 >= len(args) or args[i + 1] == "--":
                raise click.UsageError(f"{arg} needs a variable: {arg} KEY=VALUE or {arg} KEY VALUE")
            key = args[i + 1]
            if "=" in key:
                out += [arg, key]
                i += 2
                continue
            if i + 2 >= len(args) or args[i + 2] == "--" or (args[i + 2].startswith("-") and len(args[i + 2]) > 1):
                raise click.UsageError(
                    f"{arg} {key} has no value; write {arg} {key}=VALUE or {arg} {key} VALUE"
                    f" (an empty value: {arg} {key}=)"
                )
            out += [arg, f"{key}={args[i + 2]}"]
            i += 3
            continue
        out.append(arg)
        i += 1
    return out


class EnvPairsCommand(click.Command):
    """A command whose `-e/--env` takes KEY=VALUE or KEY VALUE."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, join_env_args(list(args)))


def job_state(_ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A job state in any case; a near miss is answered with the state that was probably meant."""
    if value is None:
        return None
    upper = value.strip().upper()
    if upper in JOB_STATES:
        return upper
    close = difflib.get_close_matches(upper, JOB_STATES, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]}? " if close else ""
    raise click.BadParameter(f"{value!r} is not a job state; {hint}states: {', '.join(JOB_STATES)}", param=param)


def job_states(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(job_state(ctx, param, v) for v in values)  # type: ignore[misc]


def resolve_job(obj, name: str) -> str:
    """A job id as given (`/alice/train`), or a short name resolved as --job-name does: under the
    token's user, else $USER (`train` -> `/alice/train`)."""
    name = name.strip()
    if name.startswith("/"):
        return name
    from iris.client.launch import default_user
    from iris.client.tokens import token_subject

    client = obj.client()
    return f"/{token_subject(client.token) or default_user()}/{name}"
