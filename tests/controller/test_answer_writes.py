"""An API answer leaves in one write, framed by its length: the transport wrapper that joins a
response's head to its body (a fake transport records the writes), and a real controller's answer
as a raw socket reads it."""

from __future__ import annotations

import asyncio
import json

from iris.controller.http.server import JoinedWrites
from tests.controller.helpers import operator_socket


class Recorder:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str):
        return ("127.0.0.1", 1) if name == "peername" else None


def _on_a_loop(steps) -> Recorder:
    """Runs `steps(transport)` on a fresh loop, then one more turn of it; returns what was written."""
    recorder = Recorder()

    async def main() -> None:
        steps(JoinedWrites(recorder, asyncio.get_running_loop()))
        await asyncio.sleep(0)
        await asyncio.sleep(0)

    asyncio.run(main())
    return recorder


def test_joined_writes_send_a_head_and_its_body_in_one_write():
    def steps(t):
        t.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
        t.write(b"ok")
        t.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
        t.write(b"")

    assert _on_a_loop(steps).writes == [
        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok",
        b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n",
    ]


def test_joined_writes_send_a_lone_head_at_the_end_of_the_loops_turn_and_keep_order():
    recorder = _on_a_loop(lambda t: t.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"))
    assert recorder.writes == [b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"]

    def closing(t):
        t.write(b"HTTP/1.1 200 OK\r\n\r\n")
        t.close()

    recorder = _on_a_loop(closing)
    assert recorder.writes == [b"HTTP/1.1 200 OK\r\n\r\n"] and recorder.closed


def test_joined_writes_never_hold_an_interim_answer():
    recorder = Recorder()
    JoinedWrites(recorder, None).write(b"HTTP/1.1 100 Continue\r\n\r\n")
    assert recorder.writes == [b"HTTP/1.1 100 Continue\r\n\r\n"]  # at once: the client waits for it


def _raw_call(ctl, method: str, doc: dict) -> bytes:
    """One call as the operator (through the controller's socket), its answer as it came."""
    body = json.dumps(doc).encode()
    head = (
        f"POST /iris.v1.ControllerService/{method} HTTP/1.1\r\nHost: 127.0.0.1:{ctl.port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    with operator_socket(ctl, timeout=20) as s:
        s.sendall(head + body)
        answer = b""
        while b"\r\n\r\n" not in answer or len(answer.partition(b"\r\n\r\n")[2]) < _length(answer):
            chunk = s.recv(65536)
            assert chunk, answer
            answer += chunk
    return answer


def _length(answer: bytes) -> int:
    for line in answer.partition(b"\r\n\r\n")[0].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    raise AssertionError(f"no content-length in {answer[:300]!r}")


def test_api_answers_and_errors_are_framed_by_their_length(controller):
    answer = _raw_call(controller, "LaunchJob", {"name": "framed", "user": "alice", "command": ["true"]})
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and b"transfer-encoding" not in head.lower()
    assert json.loads(body)["jobId"] == "/alice/framed"
    refused = _raw_call(controller, "LaunchJob", {"name": "framed", "user": "alice", "command": ["true"]})
    head, _, body = refused.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 409") and json.loads(body)["code"] == "already_exists"


def test_joined_writes_drop_what_comes_after_the_connection_is_closed():
    loop = asyncio.new_event_loop()
    try:
        recorder = Recorder()
        joined = JoinedWrites(recorder, loop)
        joined.write(b"HTTP/1.1 200 OK\r\n\r\n")
        recorder.close()  # the controller cut the connection while this answer was on its way
        joined.write(b"body")
        joined.flush()
        assert recorder.writes == []
    finally:
        loop.close()


class Counting:
    """A real transport, counting the writes that go through it (the rest go to the socket)."""

    def __init__(self, transport) -> None:
        self.transport = transport
        self.writes: list[bytes] = []

    def write(self, data) -> None:
        self.writes.append(bytes(data))
        self.transport.write(data)

    def __getattr__(self, name: str):
        return getattr(self.transport, name)


def _served(writes: list[bytes]) -> tuple[bytes, Counting]:
    """What a client reads from a uvloop server (the controller's loop) whose connection writes
    `writes` through JoinedWrites, then closes; and the transport's count of what it was given."""
    import uvloop

    counted: list[Counting] = []

    class Answering(asyncio.Protocol):
        def connection_made(self, transport) -> None:
            counted.append(Counting(transport))
            joined = JoinedWrites(counted[-1], asyncio.get_running_loop())
            for data in writes:
                joined.write(data)
            joined.close()

    async def main() -> bytes:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(Answering, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        data = await reader.read()
        writer.close()
        server.close()
        return data

    return uvloop.run(main()), counted[0]


def test_joined_writes_send_an_answer_on_the_socket_itself_and_keep_order_when_it_is_full():
    small = [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n", b"ok"]
    data, transport = _served(small)
    assert data == b"".join(small)
    assert transport.writes == []  # sent without the event loop's write (which holds the interpreter)

    # More than a loopback socket takes at once: the rest queues in the transport, and what is
    # written after it queues behind it.
    large = [b"HTTP/1.1 200 OK\r\ncontent-length: 33554432\r\n\r\n", bytes(range(256)) * 131072, b"tail"]
    data, transport = _served(large)
    assert data == b"".join(large)
    assert transport.writes and transport.writes[-1] == b"tail"
    assert 0 < sum(map(len, transport.writes)) < len(data)
