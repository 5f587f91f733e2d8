"""What any API request may carry, checked before a handler runs: every string free of NUL bytes
and at most `MAX_STRING_CHARS` long, every list and map at most `MAX_ITEMS` long, every floating
point number finite.

One generic walk over the message's set fields covers every RPC, present and future, so a hostile
value (a NUL byte that a process table cannot hold, `Infinity` cores, a list of two million states)
is refused with the path of the offending field before it can reach the database or the tick.
Per-field limits that depend on meaning (how many cores, how many replicas) live with the code
that knows the meaning (`iris.controller.submit`); this walk is the floor under all of them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from iris.core.errors import InvalidArgument

MAX_STRING_CHARS = 64 * 1024
MAX_ITEMS = 10_000

_STRING = FieldDescriptor.TYPE_STRING
_MESSAGE = FieldDescriptor.TYPE_MESSAGE
_FLOATS = (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT)


def check_text(where: str, value: str, max_chars: int = MAX_STRING_CHARS) -> None:
    """Refuses a string with a NUL byte or longer than `max_chars`."""
    if len(value) > max_chars:
        raise InvalidArgument(f"{where} is {len(value)} characters long; at most {max_chars} are allowed")
    if "\0" in value:
        raise InvalidArgument(f"{where} contains a NUL byte; remove it (no command, name or value may hold one)")


def check_number(where: str, value: float, low: float, high: float) -> None:
    """Refuses a number that is not finite or lies outside [low, high]."""
    if not math.isfinite(value):
        raise InvalidArgument(f"{where} must be a finite number, got {value!r}")
    if not low <= value <= high:
        raise InvalidArgument(f"{where} must be between {low:g} and {high:g}, got {value:g}")


def check_message(msg: Message, where: str = "") -> None:
    """Walks every set field of `msg` (recursively) and refuses the first hostile value."""
    where = where or type(msg).__name__
    for field, value in msg.ListFields():
        path = f"{where}.{field.name}"
        if field.is_repeated:
            if len(value) > MAX_ITEMS:
                raise InvalidArgument(f"{path} has {len(value)} entries; at most {MAX_ITEMS} are allowed")
            # A map's container is a Mapping: told apart without the field's options, whose first
            # read loads the descriptor module (about 0.2 s, paid by a peer's first handoff).
            if isinstance(value, Mapping):
                _check_map(path, field, value)
            else:
                for i, item in enumerate(value):
                    _check_value(f"{path}[{i}]", field, item)
        else:
            _check_value(path, field, value)


def _check_map(path: str, field: FieldDescriptor, value) -> None:
    entry = field.message_type
    assert entry is not None  # a map field's entries are messages
    key_field = entry.fields_by_name["key"]
    value_field = entry.fields_by_name["value"]
    for key in value:
        if key_field.type == _STRING:
            check_text(f"{path} key {key[:40]!r}", key)
        _check_value(f"{path}[{key[:40]!r}]", value_field, value[key])


def _check_value(path: str, field: FieldDescriptor, value) -> None:
    if field.type == _STRING:
        check_text(path, value)
    elif field.type in _FLOATS:
        if not math.isfinite(value):
            raise InvalidArgument(f"{path} must be a finite number, got {value!r}")
    elif field.type == _MESSAGE:
        check_message(value, path)
