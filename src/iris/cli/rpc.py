"""`iris rpc controller <method> [--json BODY]`: any ControllerService method, request and answer in JSON.

The subcommands are read from the generated service descriptor, so a method added to the proto is
callable (and listed in `--help`) without touching the CLI.
"""

from __future__ import annotations

import re
import sys
from typing import TYPE_CHECKING

from iris.cli import commands as cmd
from iris.cli.main import CliContext

if TYPE_CHECKING:
    from google.protobuf.descriptor import MethodDescriptor


def kebab(method: str) -> str:
    """`ListPeers` → `list-peers`."""
    return re.sub(r"(?<!^)(?=[A-Z])", "-", method).lower()


def service_methods() -> dict[str, MethodDescriptor]:
    """kebab-case name → MethodDescriptor, for every ControllerService method."""
    from iris.rpc import controller_pb2 as pb

    service = pb.DESCRIPTOR.services_by_name["ControllerService"]
    return {kebab(m.name): m for m in service.methods}


def read_body(body: str | None) -> str:
    """The --json value: inline JSON, `@FILE`, or `-` for stdin; empty means `{}`."""
    if body is None or body.strip() == "":
        return "{}"
    if body == "-":
        return sys.stdin.read()
    if body.startswith("@"):
        try:
            with open(body[1:]) as f:
                return f.read()
        except OSError as exc:
            raise cmd.BadParameter(f"cannot read {body[1:]}: {exc.strerror}", param_hint="--json") from None
    return body


def call_method(obj: CliContext, method_name: str, body: str | None) -> None:
    import json

    from google.protobuf import json_format

    from iris.cli.output import dump_json, message_to_dict
    from iris.rpc import controller_pb2 as pb

    method = service_methods()[method_name]
    request = getattr(pb, method.input_type.name)()
    try:
        doc = json.loads(read_body(body))
    except ValueError as exc:
        raise cmd.BadParameter(f"not a valid {method.input_type.name}: not JSON ({exc})", param_hint="--json") from None
    if not isinstance(doc, dict):
        raise cmd.BadParameter(
            f"not a valid {method.input_type.name}: the body must be a JSON object ({{...}}), not {type(doc).__name__}:"
            " e.g. --json '{\"limit\": 20}', or leave --json out for an empty request",
            param_hint="--json",
        )
    try:
        json_format.ParseDict(doc, request)
    except json_format.ParseError as exc:
        raise cmd.BadParameter(f"not a valid {method.input_type.name}: {exc}", param_hint="--json") from None
    response = obj.client().call(method.name, request)
    cmd.echo(dump_json(message_to_dict(response)))


class ServiceGroup(cmd.Group):
    """One subcommand per method of the service, built from its descriptor on demand."""

    def list_commands(self) -> list[str]:
        return sorted(service_methods())

    def get_command(self, name: str) -> cmd.Command | None:
        methods = service_methods()
        if name not in methods:
            return None
        descriptor = methods[name]

        @cmd.pass_obj
        def callback(obj: CliContext, json_body: str | None) -> None:
            call_method(obj, name, json_body)

        return cmd.Command(
            name,
            callback=callback,
            params=[
                cmd.Option(
                    ["--json", "json_body"],
                    metavar="BODY",
                    help=f"The {descriptor.input_type.name} as JSON, @FILE, or - for stdin (default {{}}).",
                )
            ],
            help=f"Calls {descriptor.name}({descriptor.input_type.name}) and prints its {descriptor.output_type.name} as JSON.",
            short_help=f"{descriptor.name}({descriptor.input_type.name})",
        )


@cmd.group()
def rpc() -> None:
    """Call any API method with a JSON body, e.g. `iris rpc controller list-peers`."""


@rpc.group("controller", cls=ServiceGroup)
def controller() -> None:
    """ControllerService methods (kebab-case); the answer is printed as JSON."""
