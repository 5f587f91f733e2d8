"""LaunchJob as the SDK sends it, served without the Connect application's per-request machinery.

A submit from the SDK or the CLI is one POST of a small `application/proto` body, uncompressed,
with no deadline and no answer compression asked for. connectrpc serves it as it serves any call
in any of its protocols: it copies the headers into its own multi-valued mapping, negotiates the
protocol, codec and compressions, opens a deadline scope, runs its interceptor hooks, reads the body
through an async generator and answers through wrappers that track the response's state; with 4
clients submitting, that was about a quarter of the event loop's CPU per job (its thread spent
0.60 ms per job with it, 0.45 without). This path reads such a request's body, decodes it with
the API's own codec (`BoundedProtoCodec`, as connectrpc would), calls the same decorated service
method (`handler.rpc`: identity, authorization, bounds, error mapping) with a context holding what
that reads, and answers in one message with the same status, headers and body connectrpc answers
with. A client that goes away while its call is being handled
cancels the handler, as connectrpc's watch for a disconnect does.

Anything else takes the Connect application unchanged: another method, JSON, a compressed or large
body (decoded off the event loop by `request_bodies`), `connect-timeout-ms`, `accept-encoding`, a
protocol version other than 1, a header that is not UTF-8, or a body of no declared length.
"""

from __future__ import annotations

import asyncio
from typing import Any

# connectrpc's own decoding (malformed data becomes its invalid_argument) and error document, so an
# answer from here is the one it would give, byte for byte.
from connectrpc._protocol import ConnectWireError
from connectrpc._shared import decode_message
from connectrpc.code import Code
from connectrpc.errors import ConnectError

from iris.controller.http.request_bodies import SMALL_BODY
from iris.rpc import controller_pb2 as pb
from iris.rpc.request_codecs import BoundedProtoCodec

_CODEC = BoundedProtoCodec()
_ANSWER_HEAD = [
    (b"content-type", b"application/proto"),
    (b"content-encoding", b"identity"),
    (b"vary", b"Accept-Encoding"),
]


class _Context:
    """What `handler.rpc` reads of a call's `RequestContext` (and the headers it adds to the answer)."""

    __slots__ = ("request_headers", "client_address", "response_headers")

    def __init__(self, request_headers: dict[str, str], client_address: str | None) -> None:
        self.request_headers = request_headers
        self.client_address = client_address
        self.response_headers: dict[str, str] = {}


def headers_of(scope) -> dict[str, str] | None:
    """A LaunchJob request's headers, each name's first value (what connectrpc's mapping gives),
    when this path serves it (see the module docstring); None when the Connect application does."""
    if scope["method"] != "POST":
        return None
    headers: dict[str, str] = {}
    try:
        for name, value in scope["headers"]:
            key = name.decode().lower()
            if key not in headers:
                headers[key] = value.decode()
    except UnicodeDecodeError:
        return None
    size = headers.get("content-length", "")
    if (
        headers.get("content-type") != "application/proto"
        or headers.get("content-encoding", "identity") not in ("", "identity")
        or headers.get("accept-encoding")
        or headers.get("connect-timeout-ms")
        or headers.get("connect-protocol-version", "1") != "1"
        or not (size.isascii() and size.isdigit() and int(size) <= SMALL_BODY)
    ):
        return None
    return headers


async def _answer_error(send, exc: Exception, ctx: _Context | None) -> None:
    wire = ConnectWireError.from_exception(exc)
    body = wire.to_json_bytes()
    headers = [(b"content-type", b"application/json")]
    if ctx is not None:
        headers.extend((key.encode(), value.encode()) for key, value in ctx.response_headers.items())
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": wire.to_http_status().code, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _body(receive) -> bytes | None:
    """The request's whole body; None when the caller went away before sending all of it."""
    parts: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        parts.append(message.get("body", b""))
        if not message.get("more_body", False):
            return parts[0] if len(parts) == 1 else b"".join(parts)


async def serve(service: Any, headers: dict[str, str], scope, receive, send) -> None:
    """Answers one LaunchJob request that `headers_of` admitted, through `service.launch_job`."""
    peer = scope.get("client")
    ctx = _Context(headers, f"{peer[0]}:{peer[1]}" if peer else None)
    task = asyncio.current_task()
    assert task is not None  # noqa: S101 # an ASGI request runs in its own task
    gone = False

    async def watch() -> None:
        # Once the body is read, receive() returns only when the caller disconnects.
        nonlocal gone
        try:
            while (await receive())["type"] != "http.disconnect":
                pass
        except Exception:  # noqa: BLE001 # the watch must not outlive or replace the call's outcome
            return
        gone = True
        task.cancel()

    try:
        body = await _body(receive)
        if body is None:
            return  # the caller went away before its body was whole: there is no one to answer
        request = decode_message(_CODEC, body, pb.LaunchJobRequest)
        watcher = asyncio.get_running_loop().create_task(watch())
        try:
            response = await service.launch_job(request, ctx)
        finally:
            watcher.cancel()
        answer = _CODEC.encode(response)
    except asyncio.CancelledError:
        if gone:
            task.uncancel()
            return  # the caller is gone: an answer would go nowhere (uvicorn drops it)
        try:
            await _answer_error(send, ConnectError(Code.CANCELED, "Request was cancelled"), ctx)
        except Exception:  # noqa: BLE001, S110 # best effort, as connectrpc's: the cancellation matters more
            pass
        raise
    except ConnectError as exc:
        await _answer_error(send, exc, ctx)
        return
    except Exception as exc:
        await _answer_error(send, exc, ctx)
        raise
    head = _ANSWER_HEAD + [(key.encode(), value.encode()) for key, value in ctx.response_headers.items()]
    head.append((b"content-length", str(len(answer)).encode()))
    await send({"type": "http.response.start", "status": 200, "headers": head})
    await send({"type": "http.response.body", "body": answer})
