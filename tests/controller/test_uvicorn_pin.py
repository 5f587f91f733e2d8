"""uvicorn is pinned exactly because `iris.controller.http.connections` extends its httptools protocol:
an upgrade must come with a look at what that subclass relies on, and these tests say what it is."""

from __future__ import annotations

import asyncio
import re
import tomllib
from importlib.metadata import version
from pathlib import Path

from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle
from uvicorn.server import ServerState

from iris.controller.http.connections import guarded

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"

# The hooks the guard overrides and calls through to.
OVERRIDDEN = (
    "connection_made",
    "connection_lost",
    "data_received",
    "on_message_begin",
    "on_url",
    "on_header",
    "on_headers_complete",
    "on_body",
    "on_message_complete",
    "on_response_complete",
    "handle_websocket_upgrade",
    "send_400_response",
)
# What it reads of a connection once made, and of the request-response cycle under way.
CONNECTION_STATE = ("loop", "connections", "pipeline", "transport", "flow", "client", "server", "cycle")
CYCLE_STATE = ("scope", "response_started", "response_complete", "more_body")


def test_uvicorn_is_pinned_to_one_version_and_that_one_is_installed():
    deps = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    pins = [d for d in deps if re.match(r"uvicorn\b", d)]
    assert len(pins) == 1 and "==" in pins[0], pins
    assert pins[0].split("==")[1].split()[0] == version("uvicorn")


def test_uvicorn_httptools_protocol_has_every_hook_the_guard_overrides():
    guard = guarded(HttpToolsProtocol, read_timeout=5.0, max_connections=64)
    for name in OVERRIDDEN:
        assert callable(getattr(HttpToolsProtocol, name, None)), f"uvicorn's HttpToolsProtocol lost {name}"
        assert name in vars(guard), f"the guard no longer overrides {name}: drop it from this list"


class _Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written = b""
        self.closed = False

    def get_extra_info(self, name, default=None):
        return {"peername": ("127.0.0.1", 50000), "sockname": ("127.0.0.1", 10000)}.get(name, default)

    def write(self, data) -> None:
        self.written += bytes(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def test_uvicorn_connection_and_cycle_hold_the_state_the_guard_reads():
    async def exchange():
        async def app(scope, receive, send):
            await receive()
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})

        config = Config(app=app, http="httptools", log_level="critical")
        config.load()
        guard = guarded(HttpToolsProtocol, read_timeout=5.0, max_connections=64)
        conn = guard(config=config, server_state=ServerState(), app_state={})
        transport = _Transport()
        conn.connection_made(transport)
        conn.data_received(b"POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\nhi")
        for name in CONNECTION_STATE:
            assert hasattr(conn, name), f"uvicorn's connection no longer has {name}"
        assert isinstance(conn.cycle, RequestResponseCycle)
        for name in CYCLE_STATE:
            assert hasattr(conn.cycle, name), f"uvicorn's request cycle no longer has {name}"
        assert conn.client == ("127.0.0.1", 50000) and conn.server == ("127.0.0.1", 10000)
        assert hasattr(conn.flow, "read_paused")
        for _ in range(20):
            if conn.cycle.response_complete:
                break
            await asyncio.sleep(0)
        assert (
            conn.cycle.response_complete
            and transport.written.startswith(b"HTTP/1.1 200")
            and b"ok" in transport.written
        )
        conn.connection_lost(None)

    asyncio.run(exchange())
