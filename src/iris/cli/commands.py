"""The `iris` command table and its one parser: commands declared with decorators, read by `argparse`.

Each group and command is declared where it is implemented (`@group`, `@Group.command`, `@option`,
`@argument`), and the top-level table (`iris.cli.app`) names the module of each subcommand group,
imported only when that group is named on the command line: `iris job run` imports `iris.cli.job`
and no other command's module. A command line is read level by level: the group's options up to
the first word that is not one, that word as the subcommand, and the rest handed down; a command's
options and arguments are read by an `argparse` parser built for that command alone, when it runs.

Why argparse and not click. Measured on the project's 2-core machine (wall time, the least of 20
fresh processes each, `python -c "import X"` less a bare `python -c pass` of 12.4 ms): `argparse`
10.5 ms, `click` 35.9 ms. `iris job run --no-wait` has a budget of three times a bare start, and
click alone would spend most of it before any command module is imported; lazily loaded click
groups cannot save that, as click itself is what costs. So the command table is this
module, a few hundred lines over argparse, and it reproduces click's conventions that scripts and
the tests rely on: its usage errors in click's words (`No such option '--bogus'.`, `Invalid value for
'--cpu': …`, `Missing argument 'JOB'.`), `-h/--help` with the same text, options after a command's
arguments, and `job run`'s options only before its COMMAND.

Exit codes stay with `iris.cli.main`: every usage error here is a `UsageError`, which it prints as
one line and turns into exit 3.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # typing's own constant costs `import typing` on every command
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

HELP_OPTIONS = ("-h", "--help")
_WIDTH = 80  # help text is wrapped to two columns less than this (or than the terminal, if narrower)


# ---------------------------------------------------------------------------------------------
# Errors


class UsageError(Exception):
    """A command line that cannot run: printed as one line (with a pointer to --help), exit 3."""

    def __init__(self, message: str, ctx: Context | None = None):
        super().__init__(message)
        self.message = message
        self.ctx = ctx

    def format_message(self) -> str:
        return self.message


class BadParameter(UsageError):
    """A value an option or argument refuses: `Invalid value for '--cpu': …`."""

    def __init__(self, message: str, ctx: Context | None = None, param: Param | None = None, param_hint=None):
        super().__init__(message, ctx)
        self.param = param
        self.param_hint = param_hint

    def format_message(self) -> str:
        hint = self.param_hint
        if hint is None and self.param is not None:
            hint = self.param.error_hint()
        elif hint is not None and not isinstance(hint, str):
            hint = " / ".join(repr(h) for h in hint)
        return f"Invalid value for {hint}: {self.message}" if hint else f"Invalid value: {self.message}"


class NoArgsIsHelp(UsageError):
    """A group named without a command: its help is the message (printed to stderr, exit 3)."""


class Abort(Exception):
    """The user declined a confirmation: treated as Ctrl-C."""


class HelpShown(Exception):  # noqa: N818 - an outcome, not a failure
    """--help or --version printed what was asked: the command exits 0."""


# ---------------------------------------------------------------------------------------------
# Value types


class ParamType:
    name = "text"

    def metavar(self) -> str:
        return self.name.upper()

    def convert(self, value: str, param: Param, ctx: Context) -> object:
        return value

    def describe(self) -> str:
        """What the help adds beside the default (a range)."""
        return ""


class _Text(ParamType):
    pass


class _Float(ParamType):
    name = "float"

    def convert(self, value, param, ctx):
        try:
            return float(value)
        except ValueError:
            raise BadParameter(f"{value!r} is not a valid float.", ctx, param) from None


class _Int(ParamType):
    name = "integer"

    def convert(self, value, param, ctx):
        try:
            return int(value)
        except ValueError:
            raise BadParameter(f"{value!r} is not a valid integer.", ctx, param) from None


class _Range(ParamType):
    def __init__(self, number: type, min=None, max=None, min_open: bool = False):  # noqa: A002
        self.number, self.min, self.max, self.min_open = number, min, max, min_open
        self.name = "integer range" if number is int else "float range"

    def convert(self, value, param, ctx):
        try:
            number = self.number(value)
        except ValueError:
            raise BadParameter(f"{value!r} is not a valid {self.name}.", ctx, param) from None
        low = self.min is not None and (number <= self.min if self.min_open else number < self.min)
        if low or (self.max is not None and number > self.max):
            raise BadParameter(f"{number} is not in the range {self.describe()}.", ctx, param)
        return number

    def describe(self) -> str:
        lower = f"{self.min}{'<' if self.min_open else '<='}" if self.min is not None else ""
        upper = f"<={self.max}" if self.max is not None else ""
        if lower and not upper:
            return f"x{'>' if self.min_open else '>='}{self.min}"
        return f"{lower}x{upper}"


def IntRange(min=None, max=None) -> ParamType:  # noqa: N802, A002 - named as the type it is
    return _Range(int, min, max)


def FloatRange(min=None, max=None, min_open: bool = False) -> ParamType:  # noqa: N802, A002
    return _Range(float, min, max, min_open)


class Choice(ParamType):
    def __init__(self, choices: Sequence[str]):
        self.choices = list(choices)

    def metavar(self) -> str:
        return "[" + "|".join(self.choices) + "]"

    def convert(self, value, param, ctx):
        if value in self.choices:
            return value
        options = ", ".join(repr(c) for c in self.choices)
        raise BadParameter(f"{value!r} is not one of {options}.", ctx, param)


class Path(ParamType):
    name = "path"

    def __init__(self, exists: bool = False, file_okay: bool = True, dir_okay: bool = True):
        self.exists, self.file_okay, self.dir_okay = exists, file_okay, dir_okay
        if not file_okay:
            self.name = "directory"

    def convert(self, value, param, ctx):
        kind = self.name.title()
        if not os.path.exists(value):
            if self.exists:
                raise BadParameter(f"{kind} {value!r} does not exist.", ctx, param)
            return value
        if not self.file_okay and not os.path.isdir(value):
            raise BadParameter(f"{kind} {value!r} is a file.", ctx, param)
        if not self.dir_okay and os.path.isdir(value):
            raise BadParameter(f"{kind} {value!r} is a directory.", ctx, param)
        if not os.access(value, os.R_OK):
            raise BadParameter(f"{kind} {value!r} is not readable.", ctx, param)
        return value


_TYPES: dict[object, ParamType] = {None: _Text(), str: _Text(), float: _Float(), int: _Int()}


# ---------------------------------------------------------------------------------------------
# Parameters


class Param:
    """An option or argument of a command; `callback(ctx, param, value)` may check or change its value."""

    def __init__(self, name: str, type=None, default=None, callback=None, required=False, expose_value=True):  # noqa: A002
        self.name = name
        self.type: ParamType = _TYPES.get(type, type) if not isinstance(type, ParamType) else type
        self.default = default
        self.callback = callback
        self.required = required
        self.expose_value = expose_value
        self.is_eager = False
        self.multiple = False
        self.opts: list[str] = []

    def error_hint(self) -> str:
        raise NotImplementedError

    def process(self, ctx: Context, given: object) -> object:
        """The value the command gets: converted, checked, given to the callback."""
        if given is _UNSET:
            if self.required:
                raise self.missing(ctx)
            value = self.default
            if self.multiple:
                value = tuple(value or ())
        elif self.multiple:
            value = tuple(self.type.convert(v, self, ctx) for v in given)  # type: ignore[attr-defined]
        else:
            value = self.type.convert(given, self, ctx)  # type: ignore[arg-type]
        if self.callback is not None:
            value = self.callback(ctx, self, value)
        return value

    def missing(self, ctx: Context) -> UsageError:
        raise NotImplementedError


class Option(Param):
    def __init__(
        self,
        decls: Sequence[str],
        *,
        is_flag: bool = False,
        multiple: bool = False,
        type=None,  # noqa: A002
        default=None,
        show_default: bool = False,
        metavar: str | None = None,
        callback=None,
        help: str = "",  # noqa: A002
        required: bool = False,
        expose_value: bool = True,
        is_eager: bool = False,
    ):
        opts, name, secondary = [], None, []
        for decl in decls:
            if "/" in decl and decl.startswith("-"):
                first, _, second = decl.partition("/")
                opts.append(first)
                secondary.append(second)
            elif decl.startswith("-"):
                opts.append(decl)
            else:
                name = decl
        if name is None:
            longs = [o for o in opts if o.startswith("--")]
            name = (longs or opts)[0].lstrip("-").replace("-", "_")
        self.secondary = secondary
        self.is_flag = is_flag or bool(secondary)
        if self.is_flag and default is None:
            default = False
        super().__init__(name, type, default, callback, required, expose_value)
        self.opts = opts
        self.multiple = multiple
        self.show_default = show_default
        self.metavar_text = metavar
        self.help = help
        self.is_eager = is_eager

    def error_hint(self) -> str:
        return " / ".join(f"'{o}'" for o in self.opts)

    def missing(self, ctx: Context) -> UsageError:
        return UsageError(f"Missing option {self.error_hint()}.", ctx)

    def process(self, ctx: Context, given: object) -> object:
        if self.is_flag:
            value = self.default if given is _UNSET else given
            return self.callback(ctx, self, value) if self.callback is not None else value
        return super().process(ctx, given)

    def help_row(self) -> tuple[str, str]:
        names = ", ".join(self.opts)
        if self.secondary:
            names = " / ".join(["/".join([o, s]) for o, s in zip(self.opts, self.secondary)])
        if not self.is_flag:
            names += " " + (self.metavar_text or self.type.metavar())
        extra = []
        if self.show_default and self.default is not None:
            shown = self.default
            if self.secondary:
                shown = (self.opts if self.default else self.secondary)[0].lstrip("-")
            extra.append(f"default: {shown}")
        if self.type.describe():
            extra.append(self.type.describe())
        if self.required:
            extra.append("required")
        text = self.help + (f"  [{'; '.join(extra)}]" if extra else "")
        return names, text


class Argument(Param):
    def __init__(
        self,
        name: str,
        *,
        metavar: str | None = None,
        nargs: int = 1,
        required=None,
        type=None,  # noqa: A002
        default=None,
        callback=None,
    ):
        if required is None:
            required = nargs == 1
        super().__init__(name, None if type is UNPROCESSED else type, default, callback, required)
        self.nargs = nargs
        self.multiple = nargs == -1
        shown = metavar or (name.upper() + ("..." if nargs == -1 else ""))
        self.metavar_text = shown if required or metavar else f"[{shown}]"

    def error_hint(self) -> str:
        return f"'{self.metavar_text}'"

    def missing(self, ctx: Context) -> UsageError:
        return UsageError(f"Missing argument {self.error_hint()}.", ctx)

    def process(self, ctx: Context, given: object) -> object:
        if self.multiple and given == []:
            given = _UNSET
        return super().process(ctx, given)


UNPROCESSED = object()  # an argument whose words are taken as they are
_UNSET = object()


def option(*decls: str, **kwargs) -> Callable:
    """Declares an option of the command below it (the order of the decorators is the order of --help)."""
    return _adding(Option(decls, **kwargs))


def argument(name: str, **kwargs) -> Callable:
    return _adding(Argument(name, **kwargs))


def _adding(param: Param) -> Callable:
    def decorate(fn):
        if isinstance(fn, Command):
            fn.params.insert(0, param)
        else:
            fn.__dict__.setdefault("__cli_params__", []).insert(0, param)
        return fn

    return decorate


def pass_obj(fn: Callable) -> Callable:
    """The command's function gets the context's object (an `iris.cli.main.CliContext`) first."""
    fn.__cli_pass__ = "obj"  # type: ignore[attr-defined]
    return fn


def pass_context(fn: Callable) -> Callable:
    fn.__cli_pass__ = "ctx"  # type: ignore[attr-defined]
    return fn


# ---------------------------------------------------------------------------------------------
# Commands and groups


class Context:
    """One level of a command line being run: the command, its name as typed, and the shared object."""

    def __init__(self, command: Command, info_name: str, parent: Context | None = None):
        self.command = command
        self.info_name = info_name
        self.parent = parent
        self.obj: Any = parent.obj if parent is not None else None
        # Called once the words are read, just before a command (not a group) runs.
        self.on_run: Callable[[], None] | None = parent.on_run if parent is not None else None

    @property
    def command_path(self) -> str:
        return f"{self.parent.command_path} {self.info_name}" if self.parent is not None else self.info_name

    def ensure_object(self, cls: type) -> Any:
        if self.obj is None:
            self.obj = cls()
        return self.obj


class Command:
    """A command: its parameters, the function it runs, and the help it shows."""

    def __init__(
        self,
        name: str,
        callback: Callable | None = None,
        params: list[Param] | None = None,
        help: str | None = None,  # noqa: A002
        short_help: str | None = None,
        interspersed: bool = True,
        prepare: Callable[[Command, list[str]], list[str]] | None = None,
    ):
        self.name = name
        self.callback = callback
        self.params = list(params or ())
        if callback is not None and not params:
            self.params = list(callback.__dict__.get("__cli_params__", ()))
        self.help = _clean(help if help is not None else (callback.__doc__ if callback is not None else "") or "")
        self.short_help = short_help
        self.interspersed = interspersed
        self.prepare = prepare  # rewrites the words before they are read (job run's `-e KEY VALUE`)
        self.takes_help = True

    def summary(self) -> str:
        """The line `--help` of the group shows for this command."""
        if self.short_help:
            return self.short_help
        first = " ".join(self.help.split("\n\n")[0].split())
        return first.split(". ")[0] + "." if ". " in first else first

    def options(self) -> list[Option]:
        return [p for p in self.params if isinstance(p, Option)]

    def value_options(self) -> set[str]:
        """The option words that take a value (the next word, unless given as --opt=value)."""
        return {o for p in self.options() if not p.is_flag for o in p.opts}

    def usage(self, ctx: Context) -> str:
        pieces = [p.metavar_text for p in self.params if isinstance(p, Argument)]
        return f"Usage: {ctx.command_path} [OPTIONS]" + "".join(f" {p}" for p in pieces)

    def format_help(self, ctx: Context) -> str:
        parts = [self.usage(ctx)]
        if self.help:
            parts.append(_indent_paragraphs(self.help))
        rows = [p.help_row() for p in self.options()]
        rows += _extra_help_rows(self, ctx)
        rows.append((", ".join(HELP_OPTIONS), "Show this message and exit."))
        parts.append("Options:\n" + _definition_list(rows))
        parts.extend(self._more_help(ctx))
        return "\n\n".join(parts) + "\n"

    def _more_help(self, ctx: Context) -> list[str]:
        return []

    def parse(self, ctx: Context, args: list[str]) -> tuple[dict[str, object], list[str]]:
        """Reads this level's words: the values given (by parameter name) and, for a group, the words
        from its subcommand on."""
        if self.prepare is not None:
            args = self.prepare(self, args)
        if not self.interspersed or isinstance(self, Group):
            end, rest = _end_of_options(args, self.value_options())
            head = args[:end]
        else:
            head, rest = args, []
        head = _attach_values(head, self.value_options())
        parser = _parser(self, ctx)
        if self.interspersed and not isinstance(self, Group):
            spaces, extra = parser.parse_known_intermixed_args(head)
        else:
            spaces, extra = parser.parse_known_args(head)
        given = vars(spaces)
        unknown = [w for w in extra if w.startswith("-") and w != "-"]
        if unknown:
            raise UsageError(_no_such_option(unknown[0], self), ctx)
        if extra:
            raise UsageError(f"Got unexpected extra argument{'s' if len(extra) > 1 else ''} ({' '.join(extra)})", ctx)
        if given.pop("__help", False):
            sys.stdout.write(self.format_help(ctx))
            raise HelpShown()
        if given.pop("__version", False):
            from importlib.metadata import version

            sys.stdout.write(f"iris, version {version('iris')}\n")
            raise HelpShown()
        words = list(given.pop("__args", None) or ())
        if not self.interspersed and not isinstance(self, Group):
            words = rest[1:] if rest[:1] == ["--"] else rest
            rest = []
        arguments = [p for p in self.params if isinstance(p, Argument)]
        for param in arguments:
            if param.multiple:
                given[param.name], words = words, []
            elif words:
                given[param.name] = words.pop(0)
        if words:
            plural = "s" if len(words) > 1 else ""
            raise UsageError(f"Got unexpected extra argument{plural} ({' '.join(words)})", ctx)
        return given, rest

    def values(self, ctx: Context, given: dict[str, object]) -> dict[str, object]:
        """Each parameter's value, in click's order: eager ones first, then as declared."""
        out: dict[str, object] = {}
        for param in sorted(self.params, key=lambda p: not p.is_eager):
            value = param.process(ctx, given.get(param.name, _UNSET))
            if param.expose_value:
                out[param.name] = value
        return out

    def invoke(self, ctx: Context, args: list[str]) -> object:
        try:
            given, _ = self.parse(ctx, args)
            kwargs = self.values(ctx, given)
            if ctx.on_run is not None:
                ctx.on_run()
            return self._call(ctx, kwargs)
        except UsageError as exc:
            if exc.ctx is None:  # raised by a check or the command itself: its --help is this one's
                exc.ctx = ctx
            raise

    def _call(self, ctx: Context, kwargs: dict[str, object]) -> object:
        if self.callback is None:
            return None
        passing = getattr(self.callback, "__cli_pass__", None)
        if passing == "obj":
            return self.callback(ctx.obj, **kwargs)
        if passing == "ctx":
            return self.callback(ctx, **kwargs)
        return self.callback(**kwargs)


class Group(Command):
    """A command whose first word is one of its subcommands (declared here, or found by `get_command`)."""

    def __init__(self, name: str, callback: Callable | None = None, **kwargs):
        super().__init__(name, callback, **kwargs)
        self.commands: dict[str, Command] = {}
        self.version = False

    def command(self, name: str | None = None, cls: type[Command] | None = None, **kwargs) -> Callable:
        def decorate(fn: Callable) -> Command:
            made = (cls or Command)(name or fn.__name__.replace("_", "-"), fn, **kwargs)
            self.commands[made.name] = made
            return made

        return decorate

    def group(self, name: str | None = None, cls: type[Group] | None = None, **kwargs) -> Callable:
        def decorate(fn: Callable) -> Group:
            made = (cls or Group)(name or fn.__name__.replace("_", "-"), fn, **kwargs)
            self.commands[made.name] = made
            return made

        return decorate

    def list_commands(self) -> list[str]:
        return sorted(self.commands)

    def get_command(self, name: str) -> Command | None:
        return self.commands.get(name)

    def command_summaries(self) -> list[tuple[str, str]]:
        rows = []
        for name in self.list_commands():
            command = self.get_command(name)
            if command is not None:
                rows.append((name, command.summary()))
        return rows

    def usage(self, ctx: Context) -> str:
        return f"Usage: {ctx.command_path} [OPTIONS] COMMAND [ARGS]..."

    def _more_help(self, ctx: Context) -> list[str]:
        rows = self.command_summaries()
        if not rows:
            return []
        width = max(len(n) for n, _ in rows)
        lines = []
        for name, text in rows:
            room = _width() - 6 - width
            if len(text) > room:
                text = text[: room - 2].rsplit(" ", 1)[0] + "..."
            lines.append(f"  {name.ljust(width)}  {text}")
        return ["Commands:\n" + "\n".join(lines)]

    def invoke(self, ctx: Context, args: list[str]) -> object:
        if not args:
            raise NoArgsIsHelp(self.format_help(ctx).rstrip("\n"), ctx)
        try:
            given, rest = self.parse(ctx, args)
            kwargs = self.values(ctx, given)
            self._call(ctx, kwargs)
        except UsageError as exc:
            if exc.ctx is None:
                exc.ctx = ctx
            raise
        if not rest:
            raise UsageError("Missing command.", ctx)
        name, rest = rest[0], rest[1:]
        command = self.get_command(name)
        if command is None:
            raise UsageError(_no_such_command(name, self), ctx)
        return command.invoke(Context(command, name, ctx), rest)


def group(name: str | None = None, cls: type[Group] | None = None, **kwargs) -> Callable:
    def decorate(fn: Callable) -> Group:
        return (cls or Group)(name or fn.__name__.replace("_", "-"), fn, **kwargs)

    return decorate


def command(name: str | None = None, cls: type[Command] | None = None, **kwargs) -> Callable:
    def decorate(fn: Callable) -> Command:
        return (cls or Command)(name or fn.__name__.replace("_", "-"), fn, **kwargs)

    return decorate


# ---------------------------------------------------------------------------------------------
# Reading the words


def _end_of_options(args: list[str], takes_value: set[str]) -> tuple[int, list[str]]:
    """Where this level's options end (the first word that is not one, or `--`), and the words from there."""
    at = 0
    while at < len(args):
        word = args[at]
        if word == "--" or not word.startswith("-") or word == "-":
            break
        at += 2 if word in takes_value else 1
    at = min(at, len(args))
    return at, args[at:]


def _attach_values(args: list[str], takes_value: set[str]) -> list[str]:
    """The words with each option's value attached to it (`--user=-alice`), so that a value starting
    with a dash is read as the value it is, as the option's next word, not as another option."""
    out: list[str] = []
    at = 0
    while at < len(args):
        word = args[at]
        if word == "--":
            out.extend(args[at:])
            break
        if word in takes_value and at + 1 < len(args):
            value = args[at + 1]
            out.append(f"{word}={value}" if word.startswith("--") else (word + value if value else word))
            if not value and not word.startswith("--"):
                out.append(value)
            at += 2
            continue
        out.append(word)
        at += 1
    return out


def _parser(command: Command, ctx: Context):
    import argparse

    class Parser(argparse.ArgumentParser):
        def error(self, message: str):
            raise UsageError(_argparse_message(message), ctx)

    def formatter(prog: str) -> argparse.HelpFormatter:
        # argparse makes one to check each option it is given; without a width it imports `shutil`
        # (and `bz2`, `lzma` under it) to ask the terminal, a few ms of every command. Help is ours.
        return argparse.HelpFormatter(prog, width=_WIDTH)

    parser = Parser(prog=ctx.command_path, add_help=False, allow_abbrev=False, formatter_class=formatter)
    parser.add_argument(*HELP_OPTIONS, dest="__help", action="store_true")
    if isinstance(command, Group) and command.version:
        parser.add_argument("--version", dest="__version", action="store_true")
    for param in command.options():
        if param.is_flag:
            parser.add_argument(*param.opts, dest=param.name, action="store_true", default=argparse.SUPPRESS)
            if param.secondary:
                parser.add_argument(*param.secondary, dest=param.name, action="store_false", default=argparse.SUPPRESS)
        else:
            action = "append" if param.multiple else "store"
            parser.add_argument(*param.opts, dest=param.name, action=action, default=argparse.SUPPRESS)
    if command.interspersed and not isinstance(command, Group) and any(isinstance(p, Argument) for p in command.params):
        parser.add_argument("__args", nargs="*")
    return parser


def _argparse_message(message: str) -> str:
    """argparse's wording of an error, in click's (which scripts and people have seen so far)."""
    if message.endswith(": expected one argument") and message.startswith("argument "):
        names = message[len("argument ") : -len(": expected one argument")].split("/")
        return f"Option '{names[-1]}' requires an argument."
    return message[:1].upper() + message[1:] + ("" if message.endswith(".") else ".")


def _no_such_option(word: str, command: Command) -> str:
    import difflib

    name = word.partition("=")[0]
    known = sorted({o for p in command.options() for o in p.opts + p.secondary} | set(HELP_OPTIONS))
    close = difflib.get_close_matches(name, known)
    message = f"No such option '{name}'."
    if len(close) == 1:
        message += f" Did you mean '{close[0]}'?"
    elif close:
        message += " (Did you mean one of: " + ", ".join(f"'{c}'" for c in sorted(close)) + "?)"
    return message


def _no_such_command(name: str, group: Group) -> str:
    import difflib

    close = difflib.get_close_matches(name, group.list_commands())
    message = f"No such command '{name}'."
    if len(close) == 1:
        message += f" Did you mean '{close[0]}'?"
    elif close:
        message += " (Possible commands: " + ", ".join(f"'{c}'" for c in close) + ")"
    return message


# ---------------------------------------------------------------------------------------------
# Help text


def _clean(doc: str) -> str:
    """A docstring without its indentation (as `inspect.cleandoc`, without importing inspect)."""
    lines = doc.expandtabs().split("\n")
    indents = [len(line) - len(line.lstrip()) for line in lines[1:] if line.strip()]
    margin = min(indents) if indents else 0
    cleaned = [lines[0].strip()] + [line[margin:].rstrip() for line in lines[1:]]
    return "\n".join(cleaned).strip("\n")


def _width() -> int:
    try:
        return max(40, min(_WIDTH, os.get_terminal_size().columns)) - 2
    except OSError:
        return _WIDTH - 2


def _indent_paragraphs(text: str) -> str:
    import textwrap

    width = _width()
    return "\n\n".join(
        textwrap.fill(" ".join(p.split()), width, initial_indent="  ", subsequent_indent="  ")
        for p in text.split("\n\n")
    )


def _definition_list(rows: list[tuple[str, str]]) -> str:
    import textwrap

    width = _width()
    first = min(max(len(n) for n, _ in rows), 30)
    lines = []
    for name, text in rows:
        room = max(width - first - 4, 20)
        wrapped = textwrap.wrap(text, room) or [""]
        if len(name) > first:
            lines.append(f"  {name}")
            lines.extend(" " * (first + 4) + w for w in wrapped)
        else:
            lines.append(f"  {name.ljust(first)}  {wrapped[0]}")
            lines.extend(" " * (first + 4) + w for w in wrapped[1:])
    return "\n".join(lines)


def _extra_help_rows(command: Command, ctx: Context) -> list[tuple[str, str]]:
    if isinstance(command, Group) and command.version:
        return [("--version", "Show the version and exit.")]
    return []


# ---------------------------------------------------------------------------------------------
# Talking to the person at the terminal


def echo(text: object = "", err: bool = False, nl: bool = True) -> None:
    """Prints `text` to stdout (or stderr) at once."""
    stream = sys.stderr if err else sys.stdout
    stream.write(f"{text}{chr(10) if nl else ''}")
    stream.flush()


def confirm(text: str, abort: bool = False, err: bool = False) -> bool:
    """Asks a yes/no question (no by default); with `abort`, a no raises `Abort`."""
    echo(f"{text} [y/N]: ", err=err, nl=False)
    answer = sys.stdin.readline().strip().lower()
    yes = answer in ("y", "yes")
    if abort and not yes:
        raise Abort()
    return yes


def clear() -> None:
    """Clears the terminal (nothing when stdout is not one)."""
    if sys.stdout.isatty():
        sys.stdout.write("\033[2J\033[1;1H")
        sys.stdout.flush()
