"""The `iris` command: global options, lazy subcommands, and the mapping of errors to exit codes.

Exit codes are part of the interface (scripts branch on them): 0 the job succeeded (or the command
did what it was asked), 1 the job failed or the request was refused, 2 the job was rejected or is
unschedulable, 3 a usage or connection error. Click's own usage errors (exit 2 by default) are
moved to 3 so that 2 always means "the cluster said no".

Subcommand modules are imported only when named, and none of them imports the server (pydantic,
SQLAlchemy, uvicorn) at module level: `iris job run --no-wait` pays for click, the protobuf
messages and one HTTP call, and nothing else.
"""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass, field
from typing import Any

import click

from iris.core.errors import InvalidArgument, IrisError, Unauthenticated, Unavailable

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_REJECTED = 2
EXIT_USAGE = 3
_USAGE_ERRORS = (InvalidArgument, Unavailable, Unauthenticated)

_SUBCOMMANDS = {
    "cluster": ("iris.cli.cluster", "cluster", "Start, stop and inspect a cluster's controller."),
    "demo": ("iris.cli.demo", "demo", "Run a throw-away three-cluster federation with a few real jobs."),
    "job": ("iris.cli.job", "job", "Submit, list, watch and stop jobs."),
    "query": ("iris.cli.query", "query", "Run a read-only SQL query against the controller's database."),
    "rpc": ("iris.cli.rpc", "rpc", "Call any API method with a JSON body."),
    "token": ("iris.cli.token", "token", "Mint bearer tokens for a cluster's users."),
}


class LazyGroup(click.Group):
    """A group whose subcommands live in modules imported only when the subcommand is used."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(_SUBCOMMANDS))

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in _SUBCOMMANDS:
            module, attr, _ = _SUBCOMMANDS[name]
            return getattr(importlib.import_module(module), attr)
        return super().get_command(ctx, name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Help text from the table above, so `iris --help` does not import every subcommand.
        rows = [(name, _SUBCOMMANDS[name][2]) for name in sorted(_SUBCOMMANDS)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@dataclass
class CliContext:
    """What every subcommand needs: where the controller is and how to print."""

    controller: str | None
    config_path: str | None
    output: str
    token: str | None = None
    _client: Any = field(default=None, repr=False)

    @property
    def json(self) -> bool:
        return self.output == "json"

    def controller_url(self) -> str | None:
        """--controller, else the URL of --config's cluster, else IRIS_CONTROLLER (None: the SDK default)."""
        if self.controller:
            return self.controller
        if self.config_path:
            from iris.core.config import load_config

            return load_config(self.config_path).url
        return os.environ.get("IRIS_CONTROLLER") or None

    def client(self):  # -> IrisClient (imported lazily)
        if self._client is None:
            self._client = self.client_for(self.controller_url())
        return self._client

    def client_for(self, url: str | None):  # -> IrisClient
        """A client of `url` (None: the SDK default) sending --token, else $IRIS_TOKEN, else the stored token."""
        from iris.client.client import IrisClient, default_url
        from iris.client.tokens import token_for

        url = url or default_url()
        return IrisClient(url, token=token_for(url, self.token))

    def emit(self, doc: Any) -> None:
        """Prints the one JSON document of a command run with -o json."""
        from iris.cli.output import dump_json

        click.echo(dump_json(doc))


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--controller", metavar="URL", help="Controller URL (default: $IRIS_CONTROLLER, else http://127.0.0.1:10000).")
@click.option("--config", "config_path", metavar="FILE", help="A cluster YAML; its public URL is the controller.")
@click.option("--token", metavar="TOKEN", help="Bearer token for the controller (default: $IRIS_TOKEN, else the one saved for its URL).")
@click.option("-o", "--output", type=click.Choice(["table", "json"]), default="table", show_default=True,
              help="table for people, json (one document per command) for scripts; also accepted after a subcommand.")
@click.version_option(package_name="iris", prog_name="iris")
@click.pass_context
def cli(ctx: click.Context, controller: str | None, config_path: str | None, token: str | None, output: str) -> None:
    """Iris: run jobs on an ML cluster, or on many clusters through one."""
    ctx.obj = CliContext(controller=controller, config_path=config_path, output=output, token=token)


def output_option(fn):
    """`-o/--output` after a subcommand (`iris job list -o json`), overriding the global one."""

    def set_output(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
        if value is not None:
            ctx.find_object(CliContext).output = value

    return click.option(
        "-o", "--output", type=click.Choice(["table", "json"]), default=None, expose_value=False,
        callback=set_output, is_eager=True, help="table or json (overrides the global -o).",
    )(fn)


def exit_code_for(error: IrisError) -> int:
    return EXIT_USAGE if isinstance(error, _USAGE_ERRORS) else EXIT_FAILED


def _report(error_code: str, message: str, json_mode: bool) -> None:
    if json_mode:
        from iris.cli.output import dump_json

        click.echo(dump_json({"error": {"code": error_code, "message": message}}))
    click.echo(f"error: {message}", err=True)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: runs the CLI and exits with its documented code."""
    args = sys.argv[1:] if argv is None else list(argv)
    json_mode = _wants_json(args)
    try:
        rv = cli.main(args=args, prog_name="iris", standalone_mode=False)
    except click.UsageError as exc:
        hint = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx is not None else ""
        _report("invalid_argument", exc.format_message() + hint, json_mode)
        sys.exit(EXIT_USAGE)
    except click.ClickException as exc:
        _report("invalid_argument", exc.format_message(), json_mode)
        sys.exit(EXIT_USAGE)
    except IrisError as exc:
        _report(exc.code, exc.message, json_mode)
        sys.exit(exit_code_for(exc))
    except (click.Abort, KeyboardInterrupt):
        click.echo("interrupted", err=True)
        sys.exit(130)
    except BrokenPipeError:
        # The reader went away (`iris job logs … | head`): not an error.
        sys.stdout = None  # type: ignore[assignment]
        os._exit(EXIT_OK)
    except Exception as exc:  # a bug, not a user error: say so in one line, traceback on request
        if os.environ.get("IRIS_DEBUG"):
            raise
        _report("internal", f"internal error: {type(exc).__name__}: {exc} (set IRIS_DEBUG=1 for the traceback)", json_mode)
        sys.exit(EXIT_FAILED)
    sys.exit(rv if isinstance(rv, int) else EXIT_OK)


def _wants_json(args: list[str]) -> bool:
    """Whether `-o json` appears among the options (errors must then print JSON too)."""
    for i, arg in enumerate(args):
        if arg == "--":
            return False
        if arg in ("-o", "--output") and i + 1 < len(args) and args[i + 1] == "json":
            return True
        if arg in ("-ojson", "--output=json"):
            return True
    return False


if __name__ == "__main__":
    main()
