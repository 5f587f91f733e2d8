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
- its head (URL and headers) may be at most `MAX_HEAD_BYTES` long; a longer one is answered 431;
- at most `MAX_PIPELINED` requests may wait behind the one being answered; past it the connection
  is closed;
- its body may not pause for longer than `read_timeout` between two parts (a pause the controller
  itself asked for, while it is behind on reading, does not count);
- at most `max_connections` connections are open at once, so the descriptors the controller needs
  for its own work are never taken; and no one client may keep the others out. When the table is
  full, a new connection from a client holding fewer connections than the client holding the
  most takes the place of one of the latter's connections that is not being answered (the oldest
  that is sending a request or idles between two; failing that, one waiting in a long poll of
  `GetJobStatus` or `FetchLogs`, reads that change nothing); otherwise it is answered 503 and
  closed. A
  client that fills the table while no one else needs it is thus cut back to an equal share as
  soon as others come, however slowly it keeps its connections busy.

A client is what the kernel says, never what a request says: an IPv4 address, an IPv6 /64 (one
host's usual allotment), on the Unix socket the caller's uid (read once per connection with
`SO_PEERCRED` and kept on its `Peer`), and loopback TCP as one client, as any local process may
dial from any 127.x.y.z. Tasks that run under uids of their own (a root controller) are thus each
user's own client on the socket; tasks that share the controller's uid share the operator's share.

Over TLS (`tls:` in the config) a connection reaches this guard once its handshake is done; the
handshake itself is bounded by the same read timeout (the server's `handshake_timeout`, see
`iris.controller.process`), so a caller that connects and never shakes hands holds its
descriptor no longer than one that sends nothing.

Long polls (a follow of a job's logs, a wait for a job's end) are not idle: their request is read
whole and their answer is under way, so the read timeout never cuts them; only a full table does,
and only those of the client holding the most connections.
"""

from __future__ import annotations

import ipaddress
import json
import resource
from collections.abc import Hashable
from typing import TYPE_CHECKING

from iris.controller.auth.authenticator import parse_address
from iris.controller.auth.callers import Peer

if TYPE_CHECKING:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

# The longest request head (URL and headers) read: the HTTP parser keeps a head in memory whole,
# and without a bound one connection sending headers for the read timeout took 200 MB.
MAX_HEAD_BYTES = 64 * 1024
# Requests one connection may send ahead of the answers (HTTP/1.1 pipelining) before it is closed:
# each waiting one is parsed and held, and 20,000 sent at once held every other call for seconds.
# Iris's clients and browsers never pipeline.
MAX_PIPELINED = 16
# Descriptors kept for the controller's own files, pipes and outgoing connections when the limit
# on connections follows the process's descriptor limit.
_SHARE_FOR_CONNECTIONS = 0.5
# The reads that may wait up to a minute for news: a full table's last connections to displace.
_LONG_POLLS = frozenset(f"/iris.v1.ControllerService/{m}" for m in ("GetJobStatus", "FetchLogs"))


def connection_limit(configured: int) -> int:
    """The most connections at once: `configured`, or (0) half the process's descriptor limit."""
    if configured > 0:
        return configured
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 65536
    return max(16, int(soft * _SHARE_FOR_CONNECTIONS))


def _refusal(status: str, code: str, message: str) -> bytes:
    """A whole HTTP answer refusing a request with a Connect error body, closing the connection."""
    body = json.dumps({"code": code, "message": message}).encode()
    head = (
        f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body


def client_of(host: str, peer=None) -> Hashable:
    """The client a connection from (`host`, `port`) counts against (see the module docstring);
    on the Unix socket the uid the kernel named is kept on `peer` (the connection's `Peer`)."""
    uid = getattr(peer, "uid", None)
    if uid is not None:
        return ("uid", uid)
    address = parse_address(host)
    if address is None:
        return host
    if address.is_loopback:
        return "loopback"
    if isinstance(address, ipaddress.IPv6Address):
        return ipaddress.ip_network(f"{address}/64", strict=False)
    return address


def caller_of(scope) -> Hashable:
    """The client an ASGI request's connection counts against (`client_of`); None when unknown."""
    peer = scope.get("client")
    if not peer:
        return None
    return client_of(peer[0], peer if isinstance(peer, Peer) else None)


def guarded(
    protocol_class: type[HttpToolsProtocol], read_timeout: float, max_connections: int
) -> type[HttpToolsProtocol]:
    """A subclass of uvicorn's `protocol_class` (its httptools protocol) holding connections to the
    rules of the module docstring."""
    limit = connection_limit(max_connections)
    busy = _refusal(
        "503 Service Unavailable",
        "unavailable",
        f"the controller holds its most connections at once ({limit}); try again shortly",
    )
    head_too_large = _refusal(
        "431 Request Header Fields Too Large",
        "invalid_argument",
        f"the request's head (its URL and headers) is longer than {MAX_HEAD_BYTES} bytes",
    )
    # Each client's open connections, oldest first.
    by_client: dict[Hashable, dict[Guarded, None]] = {}

    class Guarded(protocol_class):  # type: ignore[valid-type,misc]
        def connection_made(self, transport) -> None:
            self._read_deadline = None
            self._head_size = 0
            self._head_too_large = False
            self._too_deep = False
            super().connection_made(transport)
            if self.client is None:
                self._client: Hashable = None
            else:
                self._client = client_of(self.client[0], self.client)
            by_client.setdefault(self._client, {})[self] = None
            if len(self.connections) > limit:
                victim = self._displaced()
                if victim is None:
                    transport.write(busy)
                    transport.close()
                    return
                victim.transport.close()
            self._await_reading()

        def on_message_begin(self) -> None:
            self._head_size = 0
            super().on_message_begin()

        def on_url(self, url: bytes) -> None:
            self._count_head(len(url))
            super().on_url(url)

        def on_header(self, name: bytes, value: bytes) -> None:
            self._count_head(len(name) + len(value) + 4)
            super().on_header(name, value)

        def _count_head(self, size: int) -> None:
            self._head_size += size
            if self._head_size > MAX_HEAD_BYTES:
                self._head_too_large = True
                raise ValueError("request head too large")  # stops the parser: see send_400_response

        def send_400_response(self, msg: str) -> None:
            if self._too_deep:
                self.transport.close()  # answers to earlier requests are under way: no place for one more
                return
            if not self._head_too_large:
                super().send_400_response(msg)
                return
            # Answered, then what else comes is read and dropped until the caller closes (or the
            # read timeout does): closing with bytes unread would reset the connection, and the
            # caller could lose the answer that says why.
            self.transport.write(head_too_large)
            getattr(self.transport, "flush", lambda: None)()  # a held head goes out before the end
            if self.transport.can_write_eof():
                self.transport.write_eof()
            else:
                self.transport.close()

        def data_received(self, data: bytes) -> None:
            if not self._head_too_large:
                super().data_received(data)

        def connection_lost(self, exc) -> None:
            self._stop_waiting()
            mine = by_client.get(self._client)
            if mine is not None:
                mine.pop(self, None)
                if not mine:
                    del by_client[self._client]
            super().connection_lost(exc)

        def _displaced(self) -> Guarded | None:
            """A connection to close for this one: the oldest not being answered of the client
            holding the most connections, if that client holds more than this one's."""
            share = len(by_client[self._client])
            for held in sorted(by_client.values(), key=len, reverse=True):
                if len(held) <= share:
                    return None
                waiting = None
                for other in held:
                    if other.transport.is_closing():
                        continue
                    if other._read_deadline is not None:
                        return other
                    if waiting is None and other._waiting():
                        waiting = other
                if waiting is not None:
                    return waiting
            return None

        def _waiting(self) -> bool:
            """Whether this connection holds a read that waits for news (a long poll not yet
            answered): cut, it changes nothing, and the SDK asks again on a new connection."""
            cycle = self.cycle
            return cycle is not None and not cycle.response_started and cycle.scope.get("path") in _LONG_POLLS

        def on_headers_complete(self) -> None:
            self._await_reading()  # from now on, for the body's next part
            super().on_headers_complete()
            if len(self.pipeline) > MAX_PIPELINED:
                self._too_deep = True
                raise ValueError("too many requests pipelined")  # stops the parser: see send_400_response

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
