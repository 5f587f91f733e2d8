"""A peer that answers ListBackends with pages without end is read only so far: it is reported
with the cause and offered no work, and the heartbeat of every other peer goes on. Real
controllers; the endless peer is a loopback server that pages forever."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from iris.controller.auth import load_or_create_signing_key, public_key_pem
from iris.rpc import controller_pb2 as pb
from tests.conftest import wait_until
from tests.controller.helpers import client
from tests.integration.test_federation import FAST, gpu_backend


class _EndlessPages(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    pages = 0

    def log_message(self, *_args) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        _EndlessPages.pages += 1
        answer = pb.ListBackendsResponse(cluster="endless", next_page_token=f"page-{_EndlessPages.pages}")
        answer.backends.add(id=f"b{_EndlessPages.pages}", kind="local", attributes={"device-type": "gpu"})
        data = answer.SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/proto")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def test_a_peer_paging_its_backends_without_end_is_cut_off_and_others_go_on(controller_factory):
    endless = ThreadingHTTPServer(("127.0.0.1", 0), _EndlessPages)
    threading.Thread(target=endless.serve_forever, daemon=True).start()
    try:
        marin = controller_factory("marin", start=False, controller=FAST)
        marin_key = public_key_pem(load_or_create_signing_key(None, marin.state_dir))
        h100 = controller_factory(
            "cw-h100", backends=gpu_backend("h100"), controller=FAST, auth={"federation_peers": {"marin": marin_key}}
        )
        marin.rewrite(
            peers={
                "cw-h100": {"address": h100.url},
                "endless": {"address": f"http://127.0.0.1:{endless.server_address[1]}"},
            }
        )
        marin.start()
        c = client(marin)

        def both_seen():
            peers = {p.peer_id: p for p in c.list_peers(pb.ListPeersRequest()).peers}
            good, bad = peers["cw-h100"], peers["endless"]
            return (good, bad) if good.reachable and "without end" in bad.last_error else None

        good, bad = wait_until(both_seen, timeout=30, message="a heartbeat that reads both peers")
        assert [b.id for b in good.backends] == ["h100"]
        assert not bad.backends, "an endless peer is offered no work"
    finally:
        endless.shutdown()
        endless.server_close()
