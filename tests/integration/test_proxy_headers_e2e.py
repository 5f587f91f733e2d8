"""What the relay passes on besides the body: the path exactly as the client sent it, no header the
client (or the app) declared hop-by-hop, and no WebSocket message larger than the controller holds,
directly and through a parent's `cluster=` relay (real controllers, a real task serving)."""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from iris.controller.http.proxy import MAX_WS_MESSAGE_BYTES
from iris.rpc import controller_pb2 as pb
from tests.conftest import ControllerFactory, wait_until
from tests.controller.helpers import client, launch, user_token

SERVE = str(Path(__file__).with_name("serve_task.py"))


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A parent relaying to peer `cw`, where alice's task serves; yields the two URLs of its `web`."""
    factory = ControllerFactory(tmp_path_factory.mktemp("relay-headers"))
    try:
        child = factory("cw")
        parent = factory("marin", start=False)
        parent.rewrite(peers={"cw": {"address": child.url}})
        parent.start()
        alice = client(child, user_token(child, "alice"))
        job = launch(alice, "serve", [sys.executable, SERVE])
        listed = lambda: client(child).list_endpoints(pb.ListEndpointsRequest(job_id=job)).endpoints  # noqa: E731
        wait_until(lambda: len(listed()) == 2, timeout=60, message="endpoints registered")
        direct = alice.mint_endpoint_url(pb.MintEndpointUrlRequest(job_id=job, name="web", ttl_s=600)).url
        ws = alice.mint_endpoint_url(pb.MintEndpointUrlRequest(job_id=job, name="ws", ttl_s=600)).url
        yield {
            "direct": direct,
            "via a parent": direct.replace(f"{child.url}/proxy/t/", f"{parent.url}/proxy/t/cluster=cw/"),
            "ws": "ws" + ws[len("http") :],
            "ws via a parent": "ws" + ws.replace(f"{child.url}/proxy/t/", f"{parent.url}/proxy/t/cluster=cw/")[4:],
        }
    finally:
        factory.cleanup()


@pytest.mark.parametrize("route", ["direct", "via a parent"])
def test_relay_passes_the_path_as_sent_and_drops_headers_named_by_connection(served, route):
    url = served[route]
    with httpx.Client(timeout=30) as http:
        got = http.get(
            url + "headers/a%2Fb%3Fc%23d?q=1",
            headers=[
                ("connection", "keep-alive, x-hop"),
                ("x-hop", "must not reach the app"),
                ("x-iris-relayed", "forged"),
                ("host", "169.254.169.254"),
                ("x-kept", "1"),
                ("x-forwarded-for", "127.0.0.1"),
                ("forwarded", "for=127.0.0.1;host=admin.internal"),
                ("x-real-ip", "127.0.0.1"),
            ],
        )
        assert got.status_code == 200, got.text
        seen = got.json()
        # Encoded separators stay data: the app is asked for the path the client asked for.
        assert seen["target"] == "/headers/a%2Fb%3Fc%23d?q=1"
        headers = dict(seen["headers"])
        assert "x-hop" not in headers and headers["x-kept"] == "1"
        # The client's word about where it is never reaches the app as if a proxy had said it.
        assert not {"x-forwarded-for", "forwarded", "x-real-ip"} & set(headers)
        assert [v for k, v in seen["headers"] if k == "x-iris-relayed"] == ["cw"]  # the relay's own, once
        assert headers["host"].startswith("127.0.0.1:")

        answered = http.get(url + "answer-hop")
        assert answered.status_code == 200
        assert "x-private" not in answered.headers  # the app named it in its Connection header
        assert "set-cookie" not in answered.headers  # it would hold for every port of the controller's host
        assert len(answered.headers.get_list("date")) == 1


def test_relay_websocket_message_larger_than_the_bound_closes_the_socket(served):
    with connect(served["ws"], open_timeout=10, max_size=None) as ws:
        ws.send("big:1000000")
        assert len(ws.recv(timeout=30)) == 1000000
        ws.send(f"big:{MAX_WS_MESSAGE_BYTES + 1}")
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=30)


@pytest.mark.parametrize("route", ["direct", "via a parent"])
def test_relay_keeps_an_apps_redirect_inside_the_capability_url(served, route):
    url = served[route]
    mount = urlsplit(url).path  # /proxy/t/…/web/, as the client used it
    with httpx.Client(timeout=30) as http:
        kinds = ("abs", "own", "rel", "away", "dots", "schemeless", "utf8")
        where = {kind: http.get(url + f"redirect/{kind}").headers.get_list("location") for kind in kinds}
        where = {kind: v[0] if len(v) == 1 else v for kind, v in where.items()}
        # An absolute path or the app's own address would leave the capability URL: both are moved under it,
        # dot segments resolved first (a browser would climb out of it otherwise).
        assert where["abs"] == mount + "hello?via=abs"
        assert where["own"] == mount + "hello?via=own"
        assert where["dots"] == mount + "hello?via=dots"
        assert where["schemeless"] == mount + "hello?via=schemeless"
        # Not ASCII: passed on byte for byte (the UTF-8 the app sent, which httpx decodes).
        assert where["utf8"] == mount + "日本?x=é"
        # Relative to where the client is, and staying under the capability URL: passed on as the app said.
        assert where["rel"] == "hello?via=rel"
        # Off the endpoint (another site, a scheme, a relative path climbing out of its URL): neither
        # followed nor passed on, so a capability URL is no open redirect.
        for kind in ("away", "climb", "script"):
            answer = http.get(url + f"redirect/{kind}")
            assert answer.status_code == 502 and "location" not in answer.headers, (kind, answer.headers)
            assert "redirected off itself" in answer.json()["error"]
        followed = http.get(url + "redirect/abs", follow_redirects=True)
        assert followed.status_code == 200 and followed.json()["path"] == "/hello?via=abs"


@pytest.mark.parametrize("route", ["ws", "ws via a parent"])
def test_relay_websocket_negotiates_the_apps_subprotocol_and_passes_close_codes_both_ways(served, route):
    with connect(served[route], open_timeout=10, subprotocols=["other", "iris.echo.v1"]) as ws:
        assert ws.subprotocol == "iris.echo.v1"  # the app's choice, relayed in the handshake
        ws.send("subprotocol?")
        assert ws.recv(timeout=10) == "iris.echo.v1"  # and the app was offered it
        ws.send("close:4001:done here")
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=30)
    assert closed.value.rcvd is not None and (closed.value.rcvd.code, closed.value.rcvd.reason) == (4001, "done here")

    with connect(served[route], open_timeout=10) as ws:
        assert ws.subprotocol is None  # none offered: the app goes on without one
        ws.send("ping")
        assert ws.recv(timeout=10) == "ping"
        ws.close(4002, "client leaves")
    web = served["direct"]
    with httpx.Client(timeout=30) as http:
        wait_until(
            lambda: http.get(web + "ws-closed").json() == {"code": 4002, "reason": "client leaves"},
            message="the app to see the client's close code",
        )


@pytest.mark.parametrize("offered", ["chat, not a token", "x@y", "é", "chat, {json}", "a/b", "(x)"])
def test_relay_refuses_a_websocket_handshake_whose_subprotocol_is_not_a_token_and_serves_on(served, offered):
    url = urlsplit(served["ws"])
    handshake = (
        f"GET {url.path} HTTP/1.1\r\nHost: {url.netloc}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
        f"Sec-WebSocket-Protocol: {offered}\r\n\r\n"
    )
    with socket.create_connection((url.hostname, url.port), timeout=30) as sock:
        sock.sendall(handshake.encode())
        status_line = sock.makefile("rb").readline().decode()
    assert status_line.split()[1] in ("400", "403"), status_line  # refused, by the server or the relay
    with connect(served["ws"], open_timeout=10) as ws:
        ws.send("still here")
        assert ws.recv(timeout=10) == "still here"


@pytest.mark.parametrize("route", ["ws", "ws via a parent"])
def test_relay_closes_its_connection_to_the_app_when_the_client_leaves_during_the_handshake(served, route):
    web = served["direct"]
    with httpx.Client(timeout=30) as http:
        before = http.get(web + "ws-connections").json()["opened"]
        url = urlsplit(served[route] + "slow")
        for _ in range(2):  # the app answers these handshakes 3 s late; each client leaves before that
            with socket.create_connection((url.hostname, url.port), timeout=30) as sock:
                sock.sendall(
                    f"GET {url.path} HTTP/1.1\r\nHost: {url.netloc}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
                )
                time.sleep(0.3)
        wait_until(
            lambda: http.get(web + "ws-connections").json()["opened"] >= before + 2,
            timeout=30,
            message="the app to finish both handshakes",
        )
        wait_until(
            lambda: http.get(web + "ws-connections").json()["open"] == 0,
            timeout=30,
            message="the relay to close its connections to the app",
        )


@pytest.mark.parametrize("route", ["ws", "ws via a parent"])
def test_relay_offers_the_app_every_subprotocol_header_line(served, route):
    url = urlsplit(served[route])
    with socket.create_connection((url.hostname, url.port), timeout=30) as sock:
        sock.sendall(
            f"GET {url.path} HTTP/1.1\r\nHost: {url.netloc}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
            "Sec-WebSocket-Protocol: chat\r\nSec-WebSocket-Protocol: iris.echo.v1\r\n\r\n".encode()
        )
        head = sock.recv(4096).decode(errors="replace").lower()
    assert head.startswith("http/1.1 101") and "sec-websocket-protocol: iris.echo.v1" in head, head
