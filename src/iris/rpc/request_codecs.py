"""Decides whether an API request body holds few enough values to decode, before a message is built
from it: the codecs of the controller's API, in Connect's JSON and protobuf's binary encoding.

A small request is decoded on the API's event loop (a large or compressed one on a worker thread,
see `iris.controller.http.request_bodies`), and only the decoded message is checked against the
per-field bounds (`iris.rpc.bounds`). Before that check a hostile body cost the whole API its
turn: a 50 MB JSON body of ten million one-letter strings held every other call for 11 s in
protobuf's JSON parser (Python, about a microsecond per value), and a binary body of 25 million
one-letter strings took about a gigabyte of memory and seconds to decode; gzip carries either
across the wire in under a hundred kilobytes. So each body is counted first, in a way whose cost
is bounded whatever the body holds:

- JSON: its commas bound how many values its arrays and objects hold (`MAX_COMMAS`); then the C
  parser reads it and a walk checks `MAX_ITEMS` per array or object, `MAX_DEPTH` levels,
  `MAX_VALUES` in all and the length of every string field (protobuf's parser runs a regular
  expression over each string, holding the interpreter for 3 s over one of 90 MB) before
  protobuf's parser builds the message;
- binary: a body larger than `SCAN_FROM_BYTES` is walked field by field on the wire, following the
  message's descriptor into embedded messages, and refused at `MAX_VALUES` fields or `MAX_DEPTH`
  levels; a smaller body cannot hold enough to matter and is decoded at once (the submit path's
  common case pays nothing).

`MAX_VALUES` is far above any real request (a LaunchJob at every per-field limit holds about
27,000) and far below what stalls the loop. A body past a bound is refused as `invalid_argument`
naming the bound, before anything is decoded.
"""

from __future__ import annotations

import functools
import json
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

from connectrpc.code import Code
from connectrpc.errors import ConnectError
from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError, Message

from iris.rpc.bounds import MAX_ITEMS, MAX_STRING_CHARS

MAX_VALUES = 100_000
MAX_DEPTH = 32
# Commas may also sit inside strings: a request's free text (its command and env) holds at most
# about 512 KiB of them, so this bound refuses only bodies with far more values than MAX_VALUES.
MAX_COMMAS = 1_000_000
# A binary body this small holds at most about this many fields over two: decoded at once.
SCAN_FROM_BYTES = 256 * 1024

_M = TypeVar("_M", bound=Message)

# A request's message already decoded from its body off the event loop (or the error refusing the
# body), with the class it was decoded as: see `iris.controller.http.request_bodies`. Taken once.
PREDECODED: ContextVar[tuple[type[Message], Any] | None] = ContextVar("PREDECODED", default=None)


def _predecoded(message_class: type[_M]) -> _M | None:
    held = PREDECODED.get()
    if held is None or held[0] is not message_class:
        return None
    PREDECODED.set(None)
    if isinstance(held[1], ConnectError):
        raise held[1]
    return held[1]


_MESSAGE = FieldDescriptor.TYPE_MESSAGE
_LENGTH_TYPES = (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES)


def _refuse(message: str) -> ConnectError:
    return ConnectError(Code.INVALID_ARGUMENT, f"{message}; send a smaller request")


@functools.cache
def _fields(descriptor: Any) -> dict[str, FieldDescriptor]:
    """A message's fields by the names a JSON body may call them (JSON name or proto name)."""
    return {name: f for f in descriptor.fields for name in (f.json_name, f.name)}


_STRING = object()  # a string field's value


@dataclass(frozen=True, slots=True)
class _MapOf:
    value: Any  # the shape of each value of a map field


def _shape(field: FieldDescriptor | None) -> Any:
    """What a JSON value of `field` (each element, for a list) holds: a message descriptor to walk,
    `_STRING`, a `_MapOf`, or None where nothing more is checked (numbers, bytes, well-known types)."""
    if field is None:
        return None
    if field.type == FieldDescriptor.TYPE_STRING:
        return _STRING
    message = field.message_type if field.type == _MESSAGE else None
    if message is None or message.full_name.startswith("google.protobuf."):
        return None
    if message.GetOptions().map_entry:
        return _MapOf(_shape(message.fields_by_name["value"]))
    return message


def _too_long(text: Any) -> bool:
    return isinstance(text, str) and len(text) > MAX_STRING_CHARS


def check_document(doc: Any, descriptor: Any = None) -> None:
    """Refuses a parsed JSON document past the bounds of the module docstring, and (given the
    message's `descriptor`) one whose string field holds more than `MAX_STRING_CHARS`: protobuf's
    JSON parser scans each string with a regular expression, seconds for a long one, before
    `iris.rpc.bounds` could refuse it."""
    values = 0
    # (a value, its depth, what it holds: a message descriptor, _STRING, _MapOf(shape) or None)
    stack: list[tuple[Any, int, Any]] = [(doc, 1, descriptor)]
    while stack:
        node, depth, shape = stack.pop()
        values += 1
        if values > MAX_VALUES:
            raise _refuse(f"the request holds more than {MAX_VALUES} values")
        if shape is _STRING and _too_long(node):
            raise _refuse(
                f"a string of the request is {len(node)} characters long; at most {MAX_STRING_CHARS} are allowed"
            )
        if not isinstance(node, dict | list):
            continue
        if depth > MAX_DEPTH:
            raise _refuse(f"the request nests deeper than {MAX_DEPTH} levels")
        if len(node) > MAX_ITEMS:
            kind = "an object with" if isinstance(node, dict) else "an array with"
            raise _refuse(f"the request holds {kind} {len(node)} entries; at most {MAX_ITEMS} are allowed")
        if isinstance(node, list):
            stack.extend((child, depth + 1, shape) for child in node)
        elif isinstance(shape, _MapOf):
            if any(_too_long(key) for key in node):
                raise _refuse(f"a key of the request is longer than {MAX_STRING_CHARS} characters")
            stack.extend((child, depth + 1, shape.value) for child in node.values())
        elif shape is None or shape is _STRING:
            stack.extend((child, depth + 1, None) for child in node.values())
        else:
            fields = _fields(shape)
            stack.extend((child, depth + 1, _shape(fields.get(key))) for key, child in node.items())


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise DecodeError("truncated or overlong varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def count_fields(data: bytes, start: int, end: int, descriptor: Any, budget: int, depth: int = 1) -> int:
    """Counts the fields of the message encoded in `data[start:end]` and of the messages embedded
    in it, against `budget`; returns what is left of it. Raises once the budget or `MAX_DEPTH` is
    passed; a malformed body is left for the decoder to refuse (DecodeError)."""
    if depth > MAX_DEPTH:
        raise _refuse(f"the request nests deeper than {MAX_DEPTH} levels")
    by_number = descriptor.fields_by_number
    pos = start
    while pos < end:
        budget -= 1
        if budget < 0:
            raise _refuse(f"the request holds more than {MAX_VALUES} values")
        key, pos = _varint(data, pos)
        wire_type = key & 7
        if wire_type == 0:
            _, pos = _varint(data, pos)
        elif wire_type == 1:
            pos += 8
        elif wire_type == 5:
            pos += 4
        elif wire_type == 2:
            length, pos = _varint(data, pos)
            field = by_number.get(key >> 3)
            if field is not None and field.type == _MESSAGE and pos + length <= end:
                budget = count_fields(data, pos, pos + length, field.message_type, budget, depth + 1)
            elif field is not None and field.type != _MESSAGE and field.type not in _LENGTH_TYPES:
                budget -= length // 8  # a packed run of numbers: at least one per eight bytes
            pos += length
        else:
            raise DecodeError(f"wire type {wire_type} is not used by this API")
    return budget


class BoundedJSONCodec:
    """The Connect JSON codec of the controller's API (`name` "json"), with the checks above."""

    def name(self) -> str:
        return "json"

    def encode(self, message: Message) -> bytes:
        return json_format.MessageToJson(message).encode()

    def decode(self, data: bytes | bytearray, message_class: type[_M]) -> _M:
        if (message := _predecoded(message_class)) is not None:
            return message
        if data.count(b",") > MAX_COMMAS:
            raise _refuse(f"the request holds more than {MAX_COMMAS} commas")
        try:
            doc = json.loads(data)
        except (ValueError, RecursionError) as exc:
            raise ConnectError(Code.INVALID_ARGUMENT, f"the request is not JSON: {exc}") from None
        check_document(doc, message_class.DESCRIPTOR)
        message = message_class()
        try:
            json_format.ParseDict(doc, message, ignore_unknown_fields=True)
        except json_format.ParseError as exc:
            raise ConnectError(Code.INVALID_ARGUMENT, f"unmarshal message: {exc}") from None
        return message


class BoundedProtoCodec:
    """The binary codec of the controller's API (`name` "proto"), with the checks above."""

    def name(self) -> str:
        return "proto"

    def encode(self, message: Message) -> bytes:
        return message.SerializeToString()

    def decode(self, data: bytes | bytearray, message_class: type[_M]) -> _M:
        if (message := _predecoded(message_class)) is not None:
            return message
        try:
            if len(data) > SCAN_FROM_BYTES:
                count_fields(bytes(data), 0, len(data), message_class.DESCRIPTOR, MAX_VALUES)
            return message_class.FromString(bytes(data))
        except DecodeError as exc:
            raise ConnectError(Code.INVALID_ARGUMENT, f"unmarshal message: {exc}") from None
