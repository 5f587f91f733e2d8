"""The `iris` command table: its global options, and the module of each subcommand, imported only when named.

Kept apart from `iris.cli.main` so that the entry point can pause the garbage collector before
the command tree is imported (see `main`). How a command line is read: `iris.cli.commands`.
"""

from __future__ import annotations

from iris.cli import commands as cmd
from iris.cli.main import CliContext, end_startup

# name -> (module, attribute, the line `iris --help` shows)
SUBCOMMANDS = {
    "cluster": ("iris.cli.cluster", "cluster", "Start, stop and inspect a cluster's controller."),
    "demo": ("iris.cli.demo", "demo", "Run a throw-away three-cluster federation with a few real jobs."),
    "endpoint": ("iris.cli.endpoint", "endpoint", "List serving endpoints and mint URLs that reach them."),
    "job": ("iris.cli.job", "job", "Submit, list, watch and stop jobs."),
    "query": ("iris.cli.query", "query", "Run a read-only SQL query against the controller's database."),
    "rpc": ("iris.cli.rpc", "rpc", "Call any API method with a JSON body."),
    "token": ("iris.cli.token", "token", "Mint, revoke and forget bearer tokens for a cluster's users."),
    "worker": ("iris.cli.worker", "worker", "Turn this host into capacity for a cluster, and list workers."),
}


class LazyGroup(cmd.Group):
    """A group whose subcommands live in modules imported only when the subcommand is used."""

    def list_commands(self) -> list[str]:
        return sorted(set(super().list_commands()) | set(SUBCOMMANDS))

    def get_command(self, name: str) -> cmd.Command | None:
        if name in SUBCOMMANDS:
            module, attr, _ = SUBCOMMANDS[name]
            return getattr(__import__(module, fromlist=(attr,)), attr)  # not importlib: one import less
        return super().get_command(name)

    def command_summaries(self) -> list[tuple[str, str]]:
        # From the table above, so `iris --help` does not import every subcommand.
        return [(name, SUBCOMMANDS[name][2]) for name in sorted(SUBCOMMANDS)]


@cmd.group("iris", cls=LazyGroup)
@cmd.option(
    "--controller", metavar="URL", help="Controller URL (default: $IRIS_CONTROLLER, else http://127.0.0.1:10000)."
)
@cmd.option(
    "--cluster",
    metavar="NAME",
    help="A cluster from ~/.iris/clusters.yaml (`iris cluster list`); default: the one `iris cluster use` set.",
)
@cmd.option("--config", "config_path", metavar="FILE", help="A cluster YAML; its public URL is the controller.")
@cmd.option(
    "--token",
    metavar="TOKEN",
    help="Bearer token for the controller (default: $IRIS_TOKEN, else the one saved for its URL).",
)
@cmd.option(
    "--ca",
    metavar="FILE",
    help="PEM file of the CAs that may sign an https controller's certificate (default: $IRIS_CA, else the"
    " cluster's `ca:` in clusters.yaml, else the system's store).",
)
@cmd.option(
    "--client-cert",
    metavar="FILE",
    help="PEM client certificate for a controller that asks for one (default: $IRIS_CLIENT_CERT).",
)
@cmd.option(
    "--client-key",
    metavar="FILE",
    help="Its private key, when not in --client-cert's file (default: $IRIS_CLIENT_KEY).",
)
@cmd.option(
    "-o",
    "--output",
    type=cmd.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="table for people, json (one document per command) for scripts; also accepted after a subcommand.",
)
@cmd.pass_context
def cli(
    ctx: cmd.Context,
    controller: str | None,
    cluster: str | None,
    config_path: str | None,
    token: str | None,
    ca: str | None,
    client_cert: str | None,
    client_key: str | None,
    output: str,
) -> None:
    """Iris: run jobs on an ML cluster, or on many clusters through one."""
    ctx.on_run = end_startup
    ctx.obj = CliContext(
        controller=controller,
        config_path=config_path,
        output=output,
        token=token,
        cluster=cluster,
        ca=ca,
        client_cert=client_cert,
        client_key=client_key,
    )


cli.version = True  # `iris --version`
