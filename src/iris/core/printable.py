"""Decides which text a job's short identifiers may hold: names, labels, constraint keys and values,
devices, image, env names. No control character (C0, DEL or C1: newline, ESC, NUL, …) in any of them.

These values are shown to other users: in tables, in `describe`, in the reasons the scheduler
writes. The display escapes control characters, but a value that holds one is still a different
value from the one it looks like (`us-east5` and `us-east5\\n` route differently), and every other
reader of the database or the API (a script, a dashboard, a peer) would have to escape it again.
So such a value is refused where it enters: by the SDK before a request is sent, in the flag's
own words, and by the controller on receipt, naming the field, since any client may call the API.
Both walk one list of fields (`launch_identifiers`), over the request as a protobuf message or as
the JSON document the SDK builds with the same field names. Free text (the command, env values,
workspace files) may hold anything and is not walked.

A request is first searched as one joined string: the common case, nothing to refuse, costs a
single regular-expression scan; only a refused request is walked field by field to name the field.
"""

from __future__ import annotations

import re

from iris.core.errors import InvalidArgument

TYPE_CHECKING = False  # typing's own constant costs `import typing` on the CLI's submit path
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
_NAMES = {"\0": "NUL", "\t": "tab", "\n": "newline", "\r": "carriage return", "\x1b": "ESC", "\x7f": "DEL"}
# LaunchJobRequest's top-level short identifiers: (field, what a person calls it).
_FIELDS = (
    ("name", "job name"),
    ("user", "user"),
    ("parent_job_id", "parent job id"),
    ("priority", "priority"),
    ("existing_job_policy", "existing-job policy"),
    ("client_revision_date", "client revision date"),
    ("image", "image"),
    ("workdir", "workdir"),
    ("bundle_id", "bundle id"),
)
_DEVICE_FIELDS = ("kind", "variant", "topology")
_HANDOFF_FIELDS = ("requester_cluster", "owner_principal", "submitting_user", "nonce")


def describe(char: str) -> str:
    """A control character in words: `newline (U+000A)`, `U+0085`."""
    code = f"U+{ord(char):04X}"
    return f"{_NAMES[char]} ({code})" if char in _NAMES else code


def check_printable(what: str, value: str, where: str = "") -> None:
    """Refuses `value` when it holds a control character, naming `what` (and the field `where`) and the character."""
    found = CONTROL.search(value)
    if found is None:
        return
    shown = repr(value[:80]) + ("…" if len(value) > 80 else "")
    field = f" (field {where})" if where else ""
    raise InvalidArgument(
        f"{what} {shown}{field} holds a control character, {describe(found.group())}: names, labels and"
        " constraint values must be printable text; remove it"
    )


def _get(obj: Any, name: str) -> Any:
    """A field of a JSON document (proto field names; an absent one is empty)."""
    return obj.get(name) or ""


def launch_identifiers(request: Any) -> Iterator[tuple[str, str, str]]:
    """(field path, what a person calls it, value) for every short identifier of a LaunchJobRequest,
    given as its message or as its JSON document."""
    get = _get if isinstance(request, dict) else getattr
    for name, what in _FIELDS:
        yield name, what, get(request, name)
    resources = get(request, "resources")
    device = get(resources, "device") if resources else None
    if device:
        for name in _DEVICE_FIELDS:
            yield f"resources.device.{name}", f"device {name}", get(device, name)
    for i, c in enumerate(get(request, "constraints") or ()):
        key = get(c, "key")
        yield f"constraints[{i}].key", "constraint key", key
        yield f"constraints[{i}].op", f"operator of constraint {key!r}", get(c, "op")
        for j, value in enumerate(get(c, "values") or ()):
            yield f"constraints[{i}].values[{j}]", f"value of constraint {key!r}", value
    for key in get(request, "env") or ():
        yield "env", "environment variable name", key
    for key in get(request, "workdir_files") or ():
        yield "workdir_files", "workdir file name", key
    handoff = get(request, "handoff") if isinstance(request, dict) or request.HasField("handoff") else None
    if handoff:
        for name in _HANDOFF_FIELDS:
            yield f"handoff.{name}", f"handoff {name.replace('_', ' ')}", get(handoff, name)


def check_launch_request(request: Any) -> None:
    """Refuses a LaunchJobRequest (message or JSON document) whose short identifiers hold a control
    character, naming the first such field and the character."""
    fields = list(launch_identifiers(request))
    if CONTROL.search("".join(value for _, _, value in fields)) is None:
        return
    for where, what, value in fields:
        check_printable(what, value, where)
