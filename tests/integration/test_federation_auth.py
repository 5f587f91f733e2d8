"""Federation under auth faults: a peer that answers UNAUTHENTICATED at delivery (a key not yet rolled
out, a proxy's 401) delays the job, never fails it. Real controllers; a loopback relay in front of
the peer refuses LaunchJob until the test lets it through."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from iris.controller.auth import load_or_create_signing_key, public_key_pem
from iris.rpc import controller_pb2 as pb
from tests.conftest import wait_until
from tests.controller.helpers import client, status, user_token, wait_state
from tests.integration.test_federation import FAST, gpu_backend, gpu_job, on_peer

REFUSAL = b'{"code":"unauthenticated","message":"signing key of marin is not trusted here yet"}'


class Relay(ThreadingHTTPServer):
    """Forwards every call to `upstream`, except a delivery (HandOffJobs, LaunchJob) while `refusing`
    is set: then it answers a Connect UNAUTHENTICATED error, as a peer does that does not trust the
    caller's key yet. `rewrite`, when set, is given each successful answer's path and body and
    returns the body to send instead (a man in the middle, or a replay)."""

    daemon_threads = True

    def __init__(self, upstream: str):
        super().__init__(("127.0.0.1", 0), _RelayHandler)
        self.upstream = upstream
        self.refusing = threading.Event()
        self.refused = 0
        self.rewrite: Callable[[str, bytes], bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _RelayHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *_args) -> None:
        pass

    def do_POST(self) -> None:
        relay: Relay = self.server  # type: ignore[assignment]
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path.endswith(("/HandOffJobs", "/LaunchJob")) and relay.refusing.is_set():
            relay.refused += 1
            self._answer(401, {"Content-Type": "application/json"}, REFUSAL)
            return
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length", "connection")}
        request = urllib.request.Request(relay.upstream + self.path, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=10) as resp:
                data = resp.read()
                if relay.rewrite is not None:
                    data = relay.rewrite(self.path, data)
                self._answer(resp.status, resp.headers, data)
        except urllib.error.HTTPError as exc:
            self._answer(exc.code, exc.headers, exc.read())

    def _answer(self, code: int, headers, data: bytes) -> None:
        self.send_response(code)
        for name, value in headers.items():
            if name.lower() not in ("content-length", "transfer-encoding", "connection", "date", "server"):
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def relay_federation(controller_factory) -> Iterator[tuple[object, object, Relay]]:
    marin = controller_factory(
        "marin",
        start=False,
        controller=FAST,
        backends=[{"id": "cpu", "kind": "local", "workers": 1, "capacity": {"cpu": 2, "memory": "4G"}}],
    )
    marin_key = public_key_pem(load_or_create_signing_key(None, marin.state_dir))
    h100 = controller_factory(
        "cw-h100", backends=gpu_backend("h100"), controller=FAST, auth={"federation_peers": {"marin": marin_key}}
    )
    relay = Relay(h100.url)
    thread = threading.Thread(target=relay.serve_forever, daemon=True)
    thread.start()
    try:
        marin.rewrite(peers={"cw-h100": {"address": relay.url}})
        marin.start()
        yield marin, h100, relay
    finally:
        relay.shutdown()
        relay.server_close()


def test_unauthenticated_at_delivery_keeps_the_job_pending_with_the_cause_and_runs_it_once_trusted(relay_federation):
    marin, h100, relay = relay_federation
    c = client(marin, user_token(marin, "alice"))
    wait_until(lambda: c.list_peers(pb.ListPeersRequest()).peers[0].reachable, message="first heartbeat")
    relay.refusing.set()
    job = c.launch_job(gpu_job("patient", "h100", command=("echo", "ran"))).job_id

    def refused_with_cause():
        s = status(c, job).job
        return s if relay.refused >= 2 and "credentials" in s.pending_reason else None

    pending = wait_until(refused_with_cause, timeout=30, message="delivery refused twice, cause shown")
    assert pending.state == "PENDING" and pending.handoff_state == "PENDING_HANDOFF"
    assert "cw-h100" in pending.pending_reason and "not trusted here yet" in pending.pending_reason
    assert "retrying" in pending.pending_reason

    relay.refusing.clear()  # the key is in place now
    final = wait_state(c, job, timeout=40)
    assert final.job.state == "SUCCEEDED" and final.job.cluster == "cw-h100"
    peer_run = status(client(h100), on_peer(job))
    assert len(peer_run.tasks) == 1 and len(peer_run.tasks[0].attempts) == 1
