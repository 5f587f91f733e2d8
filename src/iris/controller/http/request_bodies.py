"""Decides where an API request's body is unpacked and decoded: on the event loop when it is small
and plain, on a worker thread when it is large or compressed; and refuses bodies in the framings
the API does not speak.

connectrpc reads a unary request's body, gunzips it and decodes the message on the event loop,
the one thread that serves every call. A gzip body of 90 KB that unpacks to 90 MB held every other
call for seconds (5.6 s for a `ListJobs` measured beside three such bodies), and a plain body of
tens of megabytes for a large fraction of one. So before the Connect application sees a request
whose body is compressed, or larger than `SMALL_BODY`, this module reads the body, then unpacks it
(zlib gives the interpreter lock back while it inflates, and stops at the request limit however
much the body would unpack to) and decodes it with the API's own codec on a worker thread. The
decoded message, or the error that refused the body, is handed to the codec through
`iris.rpc.request_codecs.PREDECODED`, and the Connect application is given an empty body to read,
so it does nothing twice. A small plain body, the common call, takes the usual path and pays
nothing.

The API's methods are all unary and its clients send `application/json` or `application/proto`.
The envelope framings connectrpc would also accept (Connect streaming, gRPC-web) unpack each
message on the event loop too; a body in any other content type is refused as 415 here.
"""

from __future__ import annotations

import asyncio
import json
import zlib
from collections.abc import Callable
from typing import Any

from connectrpc.code import Code
from connectrpc.errors import ConnectError
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass

from iris.rpc import controller_pb2 as pb
from iris.rpc.request_codecs import PREDECODED, BoundedJSONCodec, BoundedProtoCodec

SMALL_BODY = 64 * 1024  # a plain body up to this size is decoded where connectrpc decodes it
# A gzip body may unpack to at most this many times its own size (or GZIP_FLOOR): decoding what it
# unpacks to (parsing JSON, copying bytes) holds the interpreter, so a few kilobytes must not buy
# the decoding of a hundred megabytes. Real bodies (JSON, a workspace already compressed) unpack
# to a few times their size.
GZIP_MAX_RATIO = 16
GZIP_FLOOR = 8 * 1024**2
_CODECS = {"application/json": BoundedJSONCodec(), "application/proto": BoundedProtoCodec()}
_SERVICE = pb.DESCRIPTOR.services_by_name["ControllerService"]
_SERVICE_PREFIX = f"/{_SERVICE.full_name}/"


def _header(scope, name: bytes) -> str:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return value.decode("latin-1")
    return ""


def _input_class(path: str) -> type[Message] | None:
    if not path.startswith(_SERVICE_PREFIX):
        return None
    method = _SERVICE.methods_by_name.get(path[len(_SERVICE_PREFIX) :])
    return None if method is None else GetMessageClass(method.input_type)


def unpack(data: bytes, encoding: str, limit: int) -> bytes:
    """The body as sent, gunzipped when `encoding` says gzip: at most `limit` bytes, and at most
    `GZIP_MAX_RATIO` times its size past `GZIP_FLOOR`."""
    if encoding in ("", "identity"):
        return data
    if encoding != "gzip":
        raise ConnectError(Code.UNIMPLEMENTED, f"content-encoding {encoding!r} is not supported; send gzip or none")
    cap = min(limit, max(GZIP_FLOOR, GZIP_MAX_RATIO * len(data)))
    inflater = zlib.decompressobj(wbits=31)
    try:
        out = inflater.decompress(data, cap + 1)
    except zlib.error as exc:
        raise ConnectError(Code.INVALID_ARGUMENT, f"the gzip body cannot be read: {exc}") from None
    if len(out) > cap:
        raise ConnectError(
            Code.RESOURCE_EXHAUSTED,
            f"the gzip body of {len(data)} bytes unpacks to more than {cap} bytes (at most {GZIP_MAX_RATIO} times"
            f" its size, or {GZIP_FLOOR}, and {limit} in all); send it uncompressed or send less",
        )
    if not inflater.eof:
        raise ConnectError(Code.INVALID_ARGUMENT, "the gzip body is cut short")
    return out


def _decode(data: bytes, encoding: str, limit: int, codec: Any, message_class: type[Message]) -> tuple[Any, int]:
    """The message (or the error refusing the body) and how many bytes the body unpacked to."""
    unpacked = 0
    try:
        body = unpack(data, encoding, limit)
        unpacked = len(body)
        return codec.decode(body, message_class), unpacked
    except ConnectError as exc:
        return exc, unpacked


async def answer_error(send, status: int, code: str, message: str, retry_after_s: int | None = None) -> None:
    """Answers a request with a Connect error (`code`, `message`) and HTTP `status` without reading
    its body; `retry_after_s` adds a `retry-after` header, which iris and the SDK wait out."""
    body = json.dumps({"code": code, "message": message}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if retry_after_s is not None:
        headers.append((b"retry-after", str(retry_after_s).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def prepare(scope, receive, send, limit: int, hold: Callable[[int], bool] | None = None):
    """The `receive` the Connect application should read the request with, having decoded a large
    or compressed body off the event loop; None when this module has answered the request (its
    content type is not served, or `hold`, asked whether the bytes a body unpacked to may be held
    until it is answered, said no: told to retry) or the caller went away while sending it."""
    if scope.get("method") != "POST":
        return receive
    content_type = _header(scope, b"content-type").partition(";")[0].strip().lower()
    codec = _CODECS.get(content_type)
    if codec is None:
        await answer_error(
            send,
            415,
            "invalid_argument",
            f"content type {content_type or 'none'!r} is not served here; send application/json"
            " or application/proto (Connect unary)",
        )
        return None
    encoding = _header(scope, b"content-encoding").strip().lower()
    declared = _header(scope, b"content-length")
    message_class = _input_class(scope["path"])
    if message_class is None or (encoding in ("", "identity") and declared.isdigit() and int(declared) <= SMALL_BODY):
        return receive
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None  # the caller went away before its body was whole
        parts.append(message.get("body", b""))
        size += len(parts[-1])
        if size > limit:
            PREDECODED.set(
                (
                    message_class,
                    ConnectError(Code.RESOURCE_EXHAUSTED, f"the request is larger than {limit} bytes; send less"),
                )
            )
            break
        if not message.get("more_body", False):
            data = b"".join(parts)
            parts.clear()
            decoded, unpacked = await asyncio.to_thread(_decode, data, encoding, limit, codec, message_class)
            if hold is not None and not isinstance(decoded, ConnectError) and not hold(unpacked):
                await answer_error(
                    send,
                    429,
                    "resource_exhausted",
                    f"the request's body unpacks to {unpacked} bytes, more than the controller may hold now"
                    " (the most it holds of large requests at once, or the most one client may); try again"
                    " in a moment (iris and the SDK retry by themselves)",
                    retry_after_s=1,
                )
                return None
            PREDECODED.set((message_class, decoded))
            break
    sent = False

    async def replay():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": b"", "more_body": False}
        return await receive()

    return replay
