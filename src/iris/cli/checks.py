"""Decides, before any request, whether what a person typed for a job command makes sense.

Each check fails with the command table's usage error (exit 3) and a message that says how to write the value
instead, so a typo never reaches the controller, never writes anything there, and never surfaces
as a confusing answer from it. Checks that only the SDK's values need (sizes, devices, constraints)
live in iris.core; this module holds the ones about how a person types them on a command line:
a size without a unit, `-e KEY=VALUE` beside `-e KEY VALUE`, a misspelt state, a short job name.
"""

from __future__ import annotations

from iris.cli import commands as cmd
from iris.cli import values
from iris.core.errors import IrisError


def checked(parse):
    """A parameter callback that validates each value with a core parser, so the error names the flag."""

    def callback(_ctx: cmd.Context, param: cmd.Param, value):
        if value is None or value == ():
            return value
        try:
            for item in value if isinstance(value, tuple) else (value,):
                parse(item)
        except IrisError as exc:
            raise cmd.BadParameter(exc.message, param=param) from None
        return value

    return callback


def not_blank(_ctx: cmd.Context, param: cmd.Param, value: str | None) -> str | None:
    """An option given an empty value: refused, as leaving it out is how one asks for the default."""
    if value is not None and not value.strip():
        raise cmd.BadParameter("the value is empty; give one, or leave the option out for its default", param=param)
    return value


def size_with_unit(_ctx: cmd.Context, param: cmd.Param, value: str | None):
    """--memory/--disk: a positive size with a unit (a bare `512` would mean 512 bytes)."""
    if value is None:
        return None
    try:
        return values.size_text(value)
    except values.BadValue as exc:
        raise cmd.BadParameter(exc.message, param=param) from None


def env_pairs(items: tuple[str, ...], env_file: str | None) -> dict[str, str]:
    """The job's env from `--env-file` (KEY=VALUE lines, # comments) then each -e KEY=VALUE."""
    try:
        return values.env_pairs(items, env_file)
    except values.BadValue as exc:
        raise cmd.BadParameter(exc.message, param_hint=exc.flag) from None


def env_pair_words(command: cmd.Command, args: list[str]) -> list[str]:
    """A command's words with each `-e/--env KEY VALUE` joined into `KEY=VALUE` (see `values.join_env_args`)."""
    try:
        return values.join_env_args(list(args), command.value_options())
    except values.BadValue as exc:
        raise cmd.UsageError(exc.message) from None


def job_state(_ctx: cmd.Context, param: cmd.Param, value: str | None) -> str | None:
    """A job state, or several joined by commas, in any case; a near miss is answered with the state
    that was probably meant."""
    if value is None:
        return None
    try:
        return values.job_states_text(value)
    except values.BadValue as exc:
        raise cmd.BadParameter(exc.message, param=param) from None


def job_states(ctx: cmd.Context, param: cmd.Param, values: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(job_state(ctx, param, v) for v in values)  # type: ignore[misc]
