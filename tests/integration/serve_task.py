"""A task that serves HTTP (standard library) and a WebSocket echo, registers both, and serves
until its job is stopped. Run by the endpoint tests as a real job's command."""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from websockets.exceptions import ConnectionClosed
from websockets.sync.server import serve

from iris.client.client import IrisClient

RELEASE = threading.Event()
HOLDS_RELEASED = threading.Event()  # /hold answers once /release-holds is called (or after 5 minutes)
SUBPROTOCOL = "iris.echo.v1"
LAST_CLOSE: dict[str, object] = {}  # how the last WebSocket client closed: code, reason
CONNECTIONS = {"open": 0, "opened": 0}  # WebSocket connections open now, and ever opened
COUNT = threading.Lock()
# Where /redirect/<kind> sends the client: the Host the request came to stands for the app's own URL.
REDIRECTS = {
    "abs": "/hello?via=abs",
    "own": "http://{host}/hello?via=own",
    "rel": "hello?via=rel",
    "dots": "/../../../../hello?via=dots",
    "schemeless": "//{host}/hello?via=schemeless",
    # Not ASCII, as raw UTF-8 on the wire (what `send_header` writes as latin-1).
    "utf8": "/日本?x=é".encode().decode("latin-1"),
    "away": "https://example.org/elsewhere",
    "climb": "../../../../../iris.v1.ControllerService/ListJobs",
    "script": "javascript:alert(1)",
}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path.startswith("/hello"):
            seen = {k.lower(): v for k, v in self.headers.items()}
            doc = {"path": self.path, "authorization": seen.get("authorization"), "cookie": seen.get("cookie")}
            self._send(200, json.dumps(doc).encode())
        elif self.path.startswith("/headers"):
            # Every header as it arrived (names lower-cased, repeats kept), and the raw request target.
            doc = {"target": self.path, "headers": [[k.lower(), v] for k, v in self.headers.items()]}
            self._send(200, json.dumps(doc).encode())
        elif self.path.startswith("/answer-hop"):
            body = b"{}"
            self.send_response(200)
            self.send_header("connection", "x-private")
            self.send_header("x-private", "upstream-only")
            self.send_header("set-cookie", "session=app; Path=/")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif self.path.startswith("/redirect/") and self.path[len("/redirect/") :] in REDIRECTS:
            self.send_response(302)
            self.send_header("location", REDIRECTS[self.path[len("/redirect/") :]].format(host=self.headers["host"]))
            self.send_header("content-length", "0")
            self.end_headers()
        elif self.path == "/ws-closed":
            self._send(200, json.dumps(LAST_CLOSE).encode())
        elif self.path == "/ws-connections":
            with COUNT:
                self._send(200, json.dumps(CONNECTIONS).encode())
        elif self.path == "/release":
            RELEASE.set()
            self._send(200, b"{}")
        elif self.path.startswith("/hold"):
            HOLDS_RELEASED.wait(300)
            self._send(200, b'{"held": true}')
        elif self.path == "/release-holds":
            HOLDS_RELEASED.set()
            self._send(200, b"{}")
        elif self.path.startswith("/stream"):
            # Chunked: the first chunk goes out, the second only after /release was called, so a
            # client that reads the first before releasing proves the relay does not buffer.
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            for part in (b"data: first\n\n", b"data: second\n\n"):
                if part.startswith(b"data: second"):
                    RELEASE.wait(60)
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        elif self.path.startswith("/bytes/"):
            size = int(self.path.rsplit("/", 1)[1])
            self.send_response(200)
            self.send_header("content-length", str(size))
            self.end_headers()
            block = b"x" * (1 << 20)
            while size > 0:
                n = min(size, len(block))
                self.wfile.write(block[:n])
                size -= n
        else:
            self._send(404, b"{}")

    def do_POST(self):
        remaining = int(self.headers.get("content-length", 0))
        digest = hashlib.sha256()
        while remaining:
            chunk = self.rfile.read(min(remaining, 1 << 20))
            digest.update(chunk)
            remaining -= len(chunk)
        self._send(200, json.dumps({"sha256": digest.hexdigest()}).encode())


def echo(ws):
    with COUNT:
        CONNECTIONS["open"] += 1
        CONNECTIONS["opened"] += 1
    try:
        _echo(ws)
    finally:
        with COUNT:
            CONNECTIONS["open"] -= 1


def _echo(ws):
    try:
        for message in ws:
            if isinstance(message, str) and message.startswith("big:"):
                ws.send(b"x" * int(message[4:]))  # one message of that many bytes
            elif message == "subprotocol?":
                ws.send(ws.subprotocol or "")
            elif isinstance(message, str) and message.startswith("close:"):
                _, code, reason = message.split(":", 2)
                ws.close(int(code), reason)
            else:
                ws.send(message)
    except ConnectionClosed:  # a close code other than 1000/1001
        pass
    LAST_CLOSE.update(code=ws.close_code, reason=ws.close_reason)


def slow_handshake(ws, request):
    """A handshake to /slow is answered 3 s late: time for a client to leave the relay meanwhile."""
    if request.path.startswith("/slow"):
        time.sleep(3)


def pick_subprotocol(ws, offered):
    """The app's subprotocol where the client offers it; none otherwise (the handshake goes on)."""
    return SUBPROTOCOL if SUBPROTOCOL in offered else None


def main() -> None:
    bind = os.environ.get("SERVE_BIND", "127.0.0.1")  # 0.0.0.0 on a worker the controller dials from afar
    httpd = ThreadingHTTPServer((bind, 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    ws_server = serve(echo, bind, 0, select_subprotocol=pick_subprotocol, process_request=slow_handshake)
    threading.Thread(target=ws_server.serve_forever, daemon=True).start()
    client = IrisClient()
    client.register_endpoint("web", httpd.server_address[1])
    client.register_endpoint("ws", ws_server.socket.getsockname()[1])
    print("serving", flush=True)
    threading.Event().wait()  # serves until the job is stopped


if __name__ == "__main__":
    main()
