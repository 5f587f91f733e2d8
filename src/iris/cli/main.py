"""The `iris` entry point: exit codes, the context subcommands share, and errors mapped to exit codes.

Exit codes are part of the interface (scripts branch on them): 0 the job succeeded (or the command
did what it was asked), 1 the job failed or the request was refused (another user's job, a name
already taken), 2 the job was rejected or is unschedulable, 3 a usage or connection error: a bad
flag or value, a job, endpoint or cluster name that names nothing, a controller that cannot be
reached. Click's own usage errors (exit 2 by default) are moved to 3 so that 2 always means "the
cluster said no", and an unknown job is 3 so that 1 from `iris job wait` or `iris job run` always
means a job that ran and failed.

Start-up is most of what a short command costs (`iris job run --no-wait` has a budget of three
times a bare `python -c pass`), so the command table (`iris.cli.app`, read by `iris.cli.commands`)
imports a subcommand's module only when it is named, and none of them imports the server
(pydantic, SQLAlchemy, uvicorn) at module level.
"""

from __future__ import annotations

import gc
import os
import sys
import threading

from iris.core.errors import InvalidArgument, IrisError, NotFound, Unauthenticated, Unavailable

TYPE_CHECKING = False  # typing's own constant costs `import typing` on every command
if TYPE_CHECKING:
    from types import ModuleType
else:
    ModuleType = type(sys)  # read off a module at hand: `types` would be one more import of every command

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_REJECTED = 2
EXIT_USAGE = 3
_USAGE_ERRORS = (InvalidArgument, NotFound, Unavailable, Unauthenticated)


class CliContext:
    """What every subcommand needs: where the controller is and how to print."""

    def __init__(
        self,
        controller: str | None,
        config_path: str | None,
        output: str,
        token: str | None = None,
        cluster: str | None = None,
        ca: str | None = None,
        client_cert: str | None = None,
        client_key: str | None = None,
    ):
        self.named = None  # the NamedCluster whose URL the commands use, for its errors
        if cluster:  # a named cluster supplies the URL and config that were not given explicitly
            from iris.client.clusters import load

            named = load().get(cluster)
            if not controller:
                controller, self.named = named.url, named
            config_path = config_path or named.config or None
        self.cluster = cluster
        self.controller = controller
        self.config_path = config_path
        self.output = output
        self.token = token
        self.ca, self.client_cert, self.client_key = ca, client_cert, client_key
        self._client = None  # an IrisClient, made on first use

    @property
    def json(self) -> bool:
        return self.output == "json"

    def controller_url(self) -> str | None:
        """--controller (or --cluster's URL), else the URL of --config's cluster, else IRIS_CONTROLLER,
        else the default named cluster (`iris cluster use`); None: the SDK default."""
        if self.controller:
            return self.controller
        if self.config_path:
            from iris.core.config import load_config

            return load_config(self.config_path).url
        if os.environ.get("IRIS_CONTROLLER"):
            return os.environ["IRIS_CONTROLLER"]
        from iris.client.clusters import default_cluster

        named = default_cluster()
        if named is None:
            return None
        self.named = named
        return named.url

    def client(self):  # -> IrisClient (imported lazily)
        if self._client is None:
            self._client = self.client_for(self.controller_url())
        return self._client

    def client_for(self, url: str | None):  # -> IrisClient
        """A client of `url` (None: the SDK default) sending --token, else $IRIS_TOKEN, else the stored token."""
        from iris.client.client import IrisClient, default_url

        if url is None:  # nothing chose a cluster: the default address, or a listed cluster if it is down
            from iris.client.clusters import unchosen_unreachable
            from iris.client.tokens import token_for

            url = default_url()
            return IrisClient(
                url, token=token_for(url, self.token), on_unreachable=unchosen_unreachable, tls=self.tls_for(url)
            )
        return IrisClient(url, tls=self.tls_for(url), **self._connection(url))

    def tls_for(self, url: str, entry=None):  # (str, NamedCluster | None) -> ClientTls (imported lazily)
        """How `url`'s certificate is checked, each part from the first that gives it: --ca,
        --client-cert and --client-key, else $IRIS_CA, $IRIS_CLIENT_CERT and $IRIS_CLIENT_KEY, else
        the named cluster's (`entry`, or the one chosen) `ca:`, `client_cert:` and `client_key:`,
        else (the CA) the certificate --config's controller serves; else the system's store, and no
        client certificate."""
        from iris.client.client import tls_from_env
        from iris.rpc.transport import ClientTls

        env = tls_from_env()
        named = entry or (self.named if self.named is not None and url == self.named.url else None)
        ca = self.ca or env.ca or (named.ca if named else "")
        if not ca and entry is None and self.config_path and url.startswith("https://"):
            from iris.core.config import load_config

            tls = load_config(self.config_path).tls
            ca = tls.certificate if tls else ""
        return ClientTls(
            ca,
            self.client_cert or env.certificate or (named.client_cert if named else ""),
            self.client_key or env.key or (named.client_key if named else ""),
        )

    def _connection(self, url: str) -> dict:
        """The token and the error for an unreachable controller that a client of `url` is given."""
        from iris.client.tokens import token_for

        named = self.named
        if named is None or url != named.url:
            return {"token": token_for(url, self.token)}
        from iris.client.clusters import unreachable_error

        # A named cluster that is down: say which, where, and how to start it or pick another.
        return {"token": token_for(url, self.token), "on_unreachable": lambda _u, why: unreachable_error(named, why)}

    def emit(self, doc: object) -> None:
        """Prints the one JSON document of a command run with -o json."""
        from iris.cli.output import dump_json

        echo(dump_json(doc))


def echo(text: str, err: bool = False) -> None:
    """Prints one line to stdout (or stderr) at once, as `cmd.echo` does, without importing cmd."""
    stream = sys.stderr if err else sys.stdout
    stream.write(text + "\n")
    stream.flush()


def output_option(fn):
    """`-o/--output` after a subcommand (`iris job list -o json`), overriding the global one."""
    from iris.cli import commands as cmd

    def set_output(ctx: cmd.Context, _param: cmd.Param, value: str | None) -> None:
        if value is not None:
            ctx.ensure_object(CliContext).output = value

    return cmd.option(
        "-o",
        "--output",
        type=cmd.Choice(["table", "json"]),
        default=None,
        expose_value=False,
        callback=set_output,
        is_eager=True,
        help="table or json (overrides the global -o).",
    )(fn)


def exit_code_for(error: IrisError) -> int:
    # `unimplemented`: the controller lacks the call (an older version, or not an Iris controller).
    return EXIT_USAGE if isinstance(error, _USAGE_ERRORS) or error.code == "unimplemented" else EXIT_FAILED


def _report(error_code: str, message: str, json_mode: bool) -> None:
    if json_mode:
        from iris.cli.output import dump_json

        echo(dump_json({"error": {"code": error_code, "message": message}}))
    echo(f"error: {message}", err=True)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: runs the CLI and exits with its documented code.

    Called without `argv` it is the program, and it spares the process two costs of the garbage
    collector that buy nothing here: collections while start-up imports the command
    tree (which allocates a few hundred thousand objects and frees almost none; `end_startup`
    turns the collector back on), and the walk over every object at interpreter shutdown.
    """
    program = argv is None
    if program:
        gc.disable()
        _defer("inspect")
        _defer("ssl")  # `http.client` imports it for https; a command that speaks plain http never reads it
    try:
        _run(sys.argv[1:] if argv is None else list(argv))
    finally:
        if program:
            gc.freeze()  # shutdown's collections skip frozen objects; the process is ending anyway


def end_startup() -> None:
    """Turns the collector back on if `main` paused it: the command may now run for hours."""
    if not gc.isenabled():
        gc.freeze()  # what start-up built lives as long as the process; later collections skip it
        gc.enable()


def _defer(name: str) -> None:
    """Puts a stand-in for module `name` in `sys.modules`, so that importing it costs nothing until
    something reads one of its attributes (see `_Deferred`)."""
    if name not in sys.modules:
        sys.modules[name] = _Deferred(name)


class _Deferred(ModuleType):
    """A module not imported yet: the first read of one of its attributes imports it for real.

    `dataclasses`, which the core types are built on, imports `inspect` at its top only to write a
    signature into the docstring of a class that has none: 6 ms of `iris job run --no-wait`, whose
    budget in all is about 30 (a bare `python -c pass` takes about 10). A stand-in answers that
    import instead; the real module replaces it in `sys.modules` on first use, and the stand-in
    passes every later read on to it. (`importlib.util.LazyLoader` does not serve here: the import
    statement reads the module's `__spec__`, and that read loads a lazy module at once.) `ssl` is
    deferred the same way: `http.client` imports it at its top, and loading it (OpenSSL's libraries)
    took about 3 ms of every command, which only an https controller needs.
    """

    def __getattr__(self, attr: str) -> object:
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)  # probes such as __file__ or __path__ do not load it
        with _DEFERRED_LOCK:
            real = self.__dict__.get("_real")
            if real is None:
                if sys.modules.get(self.__name__) is self:
                    del sys.modules[self.__name__]
                import importlib

                real = self.__dict__["_real"] = importlib.import_module(self.__name__)
        return getattr(real, attr)


_DEFERRED_LOCK = threading.Lock()


def _run(args: list[str]) -> None:
    json_mode = _wants_json(args)
    try:
        rv = run_command(args, json_mode)
    except IrisError as exc:
        message = exc.message
        if isinstance(exc, Unauthenticated):
            from iris.client.tokens import refused_token_note

            message += refused_token_note()
        _report(exc.code, message, json_mode)
        sys.exit(exit_code_for(exc))
    except KeyboardInterrupt:
        echo("interrupted", err=True)
        sys.exit(130)
    except BrokenPipeError:
        # The reader went away (`iris job logs … | head`): not an error.
        sys.stdout = None
        os._exit(EXIT_OK)
    except Exception as exc:  # a bug, not a user error: say so in one line, traceback on request
        if os.environ.get("IRIS_DEBUG"):
            raise
        _report(
            "internal", f"internal error: {type(exc).__name__}: {exc} (set IRIS_DEBUG=1 for the traceback)", json_mode
        )
        sys.exit(EXIT_FAILED)
    sys.exit(rv if isinstance(rv, int) else EXIT_OK)


def run_command(args: list[str], json_mode: bool) -> object:
    """Runs the arguments through the command table; its usage errors become exit code 3."""
    from iris.cli import commands as cmd
    from iris.cli.app import cli

    try:
        return cli.invoke(cmd.Context(cli, "iris"), args)
    except cmd.HelpShown:
        return EXIT_OK
    except cmd.NoArgsIsHelp as exc:  # `iris`, `iris job`: the help, not an "error: Usage: …"
        if json_mode:
            assert exc.ctx is not None  # noqa: S101 # raised by a group, with its context
            _report("invalid_argument", f"missing command; `{exc.ctx.command_path} --help` lists them", True)
        else:
            echo(exc.format_message(), err=True)
        sys.exit(EXIT_USAGE)
    except cmd.UsageError as exc:
        hint = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx is not None else ""
        _report("invalid_argument", exc.format_message() + hint, json_mode)
        sys.exit(EXIT_USAGE)
    except cmd.Abort:
        raise KeyboardInterrupt from None


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
