"""Decides whether a value typed for a job command can be used: sizes, `-e` variables, env files, job names.

These checks are about how a person types values on a command line (a size without a unit, `-e KEY
VALUE` beside `-e KEY=VALUE`, a short job name), so they live with the CLI, not in iris.core. Each
failure is a `BadValue`; `iris.cli.checks` turns it into the command's usage error, which names the flag.
"""

from __future__ import annotations

from iris.core.errors import IrisError

JOB_STATES = ("PENDING", "RUNNING", "SUCCEEDED", "FAILED", "KILLED", "UNSCHEDULABLE")
_ENV_KEY = r"^[A-Za-z_][A-Za-z0-9_]*\Z"  # compiled on first use: `job list` reads states here and no env


class BadValue(Exception):
    """A value that cannot be used; `flag` names the option it was given to ('' when none)."""

    def __init__(self, message: str, flag: str = ""):
        super().__init__(message)
        self.message = message
        self.flag = flag


def job_states_text(value: str) -> str:
    """--state: one job state, or several joined by commas (`pending,running`), in any case."""
    states: list[str] = []
    for part in value.split(","):
        state = part.strip().upper()
        if state not in JOB_STATES:
            from iris.core.suggest import closest

            close = closest(state, JOB_STATES)
            hint = f"did you mean {close}? " if close else ""
            raise BadValue(
                f"{part.strip()!r} is not a job state; {hint}states: {', '.join(JOB_STATES)}"
                " (several may be joined with commas, e.g. PENDING,RUNNING)"
            )
        if state not in states:
            states.append(state)
    return ",".join(states)


def size_text(value: str) -> str:
    """--memory/--disk: a positive size with a unit (a bare `512` would mean 512 bytes)."""
    from iris.core.units import parse_size

    text = value.strip()
    try:
        size = parse_size(text)
    except IrisError as exc:
        raise BadValue(exc.message) from None
    if size <= 0:
        raise BadValue(f"{text!r} is zero; ask for more than nothing, e.g. 512M or 4G")
    import re

    if re.fullmatch(r"[0-9.]+", text):
        raise BadValue(f"{text!r} has no unit, so it would mean {text} bytes; write {text}M or {text}G")
    return text


def positive_duration(_ctx, param, value: str) -> float:
    """A parameter callback: `value` as seconds, refused in the flag's words unless it is positive."""
    from iris.cli import commands as cmd
    from iris.core.units import parse_duration

    try:
        seconds = parse_duration(value)
    except IrisError as exc:
        raise cmd.BadParameter(exc.message, param=param) from None
    if seconds <= 0:
        raise cmd.BadParameter(f"{value!r} is not a positive duration; use e.g. 30m, 8h, 2d", param=param)
    return seconds


def env_pairs(values: tuple[str, ...] | list[str], env_file: str | None) -> dict[str, str]:
    """The job's env from `--env-file` (KEY=VALUE lines, # comments) then each -e KEY=VALUE."""
    env: dict[str, str] = {}
    if env_file:
        try:
            with open(env_file) as f:
                lines = f.read().splitlines()
        except OSError as exc:
            raise BadValue(f"cannot read {env_file}: {exc.strerror}", "--env-file") from None
        for number, line in enumerate(lines, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            key, sep, value = line.removeprefix("export ").partition("=")
            if not sep:
                raise BadValue(f"{env_file} line {number} ({line!r}) is not KEY=VALUE", "--env-file")
            env[_env_key(key.strip(), "--env-file")] = value.strip().strip("'\"") if value else ""
    for item in values:
        key, _, value = item.partition("=")
        env[_env_key(key, "-e")] = value
    return env


def _env_key(key: str, flag: str) -> str:
    import re

    if not re.match(_ENV_KEY, key):
        raise BadValue(
            f"{key!r} is not an environment variable name (letters, digits and _, not starting with a digit)", flag
        )
    return key


def join_env_args(args: list[str], takes_value: frozenset[str] | set[str] = frozenset()) -> list[str]:
    """Rewrites `-e KEY VALUE` as `-e KEY=VALUE` among the options, so both spellings work.

    The options end at `--` or at the first word that is neither an option nor the value of one
    in `takes_value` (`--cpu 2`): from there on every word is the job's command, which may have an
    `-e` of its own (`grep -e PATTERN`). `-e KEY` with nothing after it, or followed by another
    option, is refused with both spellings.
    """
    out: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--" or not arg.startswith("-") or arg == "-":
            out.extend(args[i:])
            break
        if arg in takes_value and arg not in ("-e", "--env"):
            out.extend(args[i : i + 2])
            i += 2
            continue
        if arg in ("-e", "--env"):
            if i + 1 >= len(args) or args[i + 1] == "--":
                raise BadValue(f"{arg} needs a variable: {arg} KEY=VALUE or {arg} KEY VALUE")
            key = args[i + 1]
            if "=" in key:
                out += [arg, key]
                i += 2
                continue
            if i + 2 >= len(args) or args[i + 2] == "--" or (args[i + 2].startswith("-") and len(args[i + 2]) > 1):
                raise BadValue(
                    f"{arg} {key} has no value; write {arg} {key}=VALUE or {arg} {key} VALUE"
                    f" (an empty value: {arg} {key}=)"
                )
            out += [arg, f"{key}={args[i + 2]}"]
            i += 3
            continue
        out.append(arg)
        i += 1
    return out


def resolve_job(obj, name: str) -> str:
    """A job id as given (`/alice/train`), or a short name resolved as --job-name does: under the
    token's user, else $USER (`train` -> `/alice/train`). Raises InvalidArgument for what is no job id."""
    from iris.core.names import JobName

    name = name.strip()
    if name.startswith("/"):
        return str(JobName.parse(name))  # a malformed id is a usage error, not a job that "does not exist"
    from iris.client.launch import default_user
    from iris.client.tokens import token_subject

    client = obj.client()
    return str(JobName.parse(f"/{token_subject(client.token) or default_user()}/{name}"))
