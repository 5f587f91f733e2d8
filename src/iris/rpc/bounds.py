"""What any API request may carry, checked before a handler runs: every string free of NUL bytes
and at most `MAX_STRING_CHARS` long, every list and map at most `MAX_ITEMS` long, every floating
point number finite.

One generic walk over the message's set fields covers every RPC, present and future, so a hostile
value (a NUL byte that a process table cannot hold, `Infinity` cores, a list of two million states)
is refused with the path of the offending field before it can reach the database or the tick.
Per-field limits that depend on meaning (how many cores, how many replicas) live with the code
that knows the meaning (`iris.controller.api.job_spec`); this walk is the floor under all of them.
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
    """Walks every set field of `msg` (recursively) and refuses the first hostile value.

    A first walk only asks whether anything is hostile, naming nothing: every API call pays for it,
    and building each field's path as it goes cost more than the checks (about 30 µs of the event
    loop for a small LaunchJob). Only a request it refuses is walked again to name the field."""
    if _hostile(msg):
        _name_hostile(msg, where)
        raise InvalidArgument(f"{where or type(msg).__name__} holds a value out of bounds")  # never reached


def _hostile(msg: Message) -> bool:
    """Whether any set field of `msg` (recursively) breaks a bound; the same rules as `_name_hostile`."""
    for field, value in msg.ListFields():
        if field.is_repeated:
            if len(value) > MAX_ITEMS:
                return True
            entry = field.message_type
            if entry is not None and isinstance(value, Mapping):  # a map (see `_name_hostile`)
                text_keys = entry.fields_by_name["key"].type == _STRING
                value_field = entry.fields_by_name["value"]
                for key in value:
                    if text_keys and _bad_text(key):
                        return True
                    if _bad_value(value_field, value[key]):
                        return True
            else:
                for item in value:
                    if _bad_value(field, item):
                        return True
        elif _bad_value(field, value):
            return True
    return False


def _bad_text(value: str) -> bool:
    return len(value) > MAX_STRING_CHARS or "\0" in value


def _bad_value(field: FieldDescriptor, value) -> bool:
    kind = field.type
    if kind == _STRING:
        return _bad_text(value)
    if kind in _FLOATS:
        return not math.isfinite(value)
    if kind == _MESSAGE:
        return _hostile(value)
    return False


def _name_hostile(msg: Message, where: str = "") -> None:
    """Walks every set field of `msg` (recursively) and raises for the first hostile value, naming it."""
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
        _name_hostile(value, path)
