"""Turns messages decoded by `iris.rpc.wire` into the documents `message_to_dict` prints, and into
objects the CLI's formatters read as they read a message.

The lean paths of `iris job list` and `iris job describe` import neither protobuf nor click, yet
must print byte for byte what the click commands print from messages. `-o json` prints
`message_to_dict` of a message: every field (those at their default too, except unset messages),
in the order protobuf's JSON printer uses (the fields the message holds, by number, then the rest,
by number), int64 as numbers where a double holds them exactly (as strings otherwise); `message_doc` builds that document. The table and `describe` pages
come from `iris.cli.output`'s formatters, which read attributes; `view` gives a decoded message
those attributes (a field absent on the wire reads as its default, as on a message), so one
formatter serves both paths.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing's own constant costs `import typing` on the lean paths
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

_DEFAULTS: dict[str, object] = {"str": "", "int32": 0, "int64": 0, "uint32": 0, "float": 0.0, "bool": False}


class Unprintable(Exception):
    """A value `message_to_dict` prints in a way this module does not (NaN or an infinity, as a string)."""


def message_doc(decoded: dict[str, Any], fields: tuple) -> dict[str, Any]:
    """What `message_to_dict` prints for the message `decoded` (as `iris.rpc.wire.decode` returns it)."""
    held: dict[str, Any] = {}
    unset: dict[str, Any] = {}
    get = decoded.get
    for name, code, default, nested in _plan(fields):
        value = get(name)
        if code == _SCALAR:
            if value:
                held[name] = value
            else:
                unset[name] = default
            continue
        if code == _MESSAGE:
            if value is not None:
                held[name] = message_doc(value, nested)
            continue  # an unset message is left out
        if code == _MESSAGES:
            value = [message_doc(item, nested) for item in value] if value else []
        elif code == _COLLECTION:
            value = value or default.copy()
        elif code == _MAP:
            value = dict(sorted(value.items())) if value else {}  # by key, as `message_to_dict` prints it
        elif value is None:
            value = default
        elif code == _INT64:
            if float(value) != value:
                value = str(value)  # past what a double holds exactly, protobuf's printer quotes it
        else:  # a double
            from math import copysign, isfinite  # here: a listing's jobs hold none, and its table needs no math

            if not isfinite(value):
                raise Unprintable(f"{name} is {value}")
            if value == 0.0 and copysign(1.0, value) < 0:
                held[name] = value  # -0.0 is not the default: protobuf holds it
                continue
        (held if value else unset)[name] = value
    held.update(unset)
    return held


# How `message_doc` treats a field, by its kind: a scalar printed as it is (or its default), an
# int64 (quoted past 2**53), a double (checked), a repeated string, a map (printed by key), a message, or a
# repeated message. A table's plan is worked out once.
_SCALAR, _INT64, _FLOAT, _COLLECTION, _MAP, _MESSAGE, _MESSAGES = range(7)
_PLANS: dict[int, tuple] = {}


def _plan(fields: tuple) -> tuple:
    plan = _PLANS.get(id(fields))
    if plan is None:
        steps: list[tuple[str, int, Any, Any]] = []
        for _, name, kind in fields:
            if kind.__class__ is tuple:
                steps.append((name, _MESSAGE, None, kind))
            elif kind.__class__ is list:
                steps.append((name, _MESSAGES, None, kind[0]))
            elif kind == "strs":
                steps.append((name, _COLLECTION, [], None))
            elif kind == "map":
                steps.append((name, _MAP, None, None))
            elif kind == "int64" or kind == "float":
                steps.append((name, _INT64 if kind == "int64" else _FLOAT, _DEFAULTS[kind], None))
            else:
                steps.append((name, _SCALAR, _DEFAULTS[kind], None))
        plan = _PLANS[id(fields)] = tuple(steps)
    return plan


def view(decoded: dict[str, Any], fields: tuple) -> Any:
    """The message `decoded` with an attribute per field, as the formatters read a message."""
    obj: Any = object.__new__(_view_class(fields))
    obj.__dict__ = decoded  # shared, not copied: a page of a thousand jobs is read once
    return obj


def views(decoded: Iterable[dict[str, Any]], fields: tuple) -> list[Any]:
    """`view` of each message of `decoded`, all of table `fields` (a page's jobs: its class looked up once)."""
    cls = _view_class(fields)
    new = object.__new__
    out: list[Any] = []
    for item in decoded:
        obj: Any = new(cls)
        obj.__dict__ = item
        out.append(obj)
    return out


_CLASSES: dict[int, type] = {}


def _view_class(fields: tuple) -> type:
    """A class per table: a field absent from a message's dict reads as the class's default, and
    a message field (a dict in the decoded message) reads as a view of its own."""
    cls = _CLASSES.get(id(fields))
    if cls is not None:
        return cls
    attrs: dict[str, object] = {}
    for _, name, kind in fields:
        if kind.__class__ is tuple or kind.__class__ is list:
            attrs[name] = _message_property(name, kind)
        else:
            attrs[name] = {"strs": (), "map": {}}.get(kind, _DEFAULTS.get(kind))
    cls = _CLASSES[id(fields)] = type("MessageView", (), attrs)
    return cls


def _message_property(name: str, kind: tuple | list) -> property:
    """A message field read as a view (an unset one as the message's defaults), or a repeated one as a list of views."""
    if isinstance(kind, list):
        item_fields = kind[0]

        def repeated(self: Any) -> list[Any]:
            return views(self.__dict__.get(name, ()), item_fields)

        return property(repeated)

    def single(self: Any) -> Any:
        return view(self.__dict__.get(name) or {}, kind)

    return property(single)
