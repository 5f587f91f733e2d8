"""The `iris` command group: its global options, and subcommands imported only when named.

Kept apart from `iris.cli.main` so that the entry point can pause the garbage collector before
click and this tree are imported (see `main`).
"""

from __future__ import annotations

import importlib

import click

from iris.cli.main import CliContext, end_startup

_SUBCOMMANDS = {
    "cluster": ("iris.cli.cluster", "cluster", "Start, stop and inspect a cluster's controller."),
    "demo": ("iris.cli.demo", "demo", "Run a throw-away three-cluster federation with a few real jobs."),
    "endpoint": ("iris.cli.endpoint", "endpoint", "List serving endpoints and mint URLs that reach them."),
    "job": ("iris.cli.job", "job", "Submit, list, watch and stop jobs."),
    "query": ("iris.cli.query", "query", "Run a read-only SQL query against the controller's database."),
    "rpc": ("iris.cli.rpc", "rpc", "Call any API method with a JSON body."),
    "token": ("iris.cli.token", "token", "Mint, revoke and forget bearer tokens for a cluster's users."),
    "worker": ("iris.cli.worker", "worker", "Turn this host into capacity for a cluster, and list workers."),
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


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--controller", metavar="URL", help="Controller URL (default: $IRIS_CONTROLLER, else http://127.0.0.1:10000)."
)
@click.option(
    "--cluster",
    metavar="NAME",
    help="A cluster from ~/.iris/clusters.yaml (`iris cluster list`); default: the one `iris cluster use` set.",
)
@click.option("--config", "config_path", metavar="FILE", help="A cluster YAML; its public URL is the controller.")
@click.option(
    "--token",
    metavar="TOKEN",
    help="Bearer token for the controller (default: $IRIS_TOKEN, else the one saved for its URL).",
)
@click.option(
    "-o",
    "--output",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="table for people, json (one document per command) for scripts; also accepted after a subcommand.",
)
@click.version_option(package_name="iris", prog_name="iris")
@click.pass_context
def cli(
    ctx: click.Context,
    controller: str | None,
    cluster: str | None,
    config_path: str | None,
    token: str | None,
    output: str,
) -> None:
    """Iris: run jobs on an ML cluster, or on many clusters through one."""
    end_startup()
    ctx.obj = CliContext(controller=controller, config_path=config_path, output=output, token=token, cluster=cluster)
