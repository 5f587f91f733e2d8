"""Decides how long a connection to the controller may hold a file descriptor without sending a
request, and how many connections it may hold at once.

Each open connection is a file descriptor of the controller's process, and the same descriptors
open its database, its attempts' output pipes and their log files. uvicorn closes a connection idle
between requests only until the next byte arrives, and never one that sends a partial request head
or stops halfway through a body: anyone who can reach the port (no token needed) could open
connections that send a byte now and then until the process ran out of descriptors, and then no
call was answered and no attempt could start. So:

- a request's head must be whole within `read_timeout` of the connection's start (or of its last
  answer), however it trickles in;
- its body may not pause for longer than `read_timeout` between two parts (a pause the controller
  itself asked for, while it is behind on reading, does not count);
- at most `max_connections` connections are open at once; one more is answered 503 and closed at
  once, so the descriptors the controller needs for its own work are never taken.

Long polls (a follow of a job's logs, a wait for a job's end) are not idle: their request is read
whole and their answer is under way, so none of this cuts them.
"""

from __future__ import annotations

import json
import resource
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

# Descriptors kept for the controller's own files, pipes and outgoing connections when the limit
# on connections follows the process's descriptor limit.
_SHARE_FOR_CONNECTIONS = 0.5


def connection_limit(configured: int) -> int:
    """The most connections at once: `configured`, or (0) half the process's descriptor limit."""
    if configured > 0:
        return configured
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 65536
    return max(16, int(soft * _SHARE_FOR_CONNECTIONS))


def _busy_answer(limit: int) -> bytes:
    body = json.dumps(
        {
            "code": "unavailable",
            "message": f"the controller holds its most connections at once ({limit}); try again shortly",
        }
    ).encode()
    head = (
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body


def guarded(
    protocol_class: type[HttpToolsProtocol], read_timeout: float, max_connections: int
) -> type[HttpToolsProtocol]:
    """A subclass of uvicorn's `protocol_class` (its httptools protocol) holding connections to the
    rules of the module docstring."""
    limit = connection_limit(max_connections)
    busy = _busy_answer(limit)

    class Guarded(protocol_class):  # type: ignore[valid-type,misc]
        def connection_made(self, transport) -> None:
            self._read_deadline = None
            super().connection_made(transport)
            if len(self.connections) > limit:
                transport.write(busy)
                transport.close()
                return
            self._await_reading()

        def connection_lost(self, exc) -> None:
            self._stop_waiting()
            super().connection_lost(exc)

        def on_headers_complete(self) -> None:
            self._await_reading()  # from now on, for the body's next part
            super().on_headers_complete()

        def on_body(self, body: bytes) -> None:
            self._await_reading()
            super().on_body(body)

        def on_message_complete(self) -> None:
            self._stop_waiting()
            super().on_message_complete()

        def handle_websocket_upgrade(self) -> None:
            self._stop_waiting()  # the websocket protocol takes the connection over, with its own pings
            super().handle_websocket_upgrade()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._await_reading()  # the next request's head

        def _await_reading(self) -> None:
            self._stop_waiting()
            self._read_deadline = self.loop.call_later(read_timeout, self._read_timed_out)

        def _stop_waiting(self) -> None:
            if self._read_deadline is not None:
                self._read_deadline.cancel()
                self._read_deadline = None

        def _read_timed_out(self) -> None:
            self._read_deadline = None
            if self.transport.is_closing():
                return
            if self.flow.read_paused:
                self._await_reading()  # the controller is behind on reading, not the caller on sending
                return
            if self.cycle is not None and not self.cycle.response_complete and not self.cycle.more_body:
                return  # the request is read whole and its answer is under way (a long poll)
            self.transport.close()

    return Guarded
