"""A LaunchJob as the SDK sends it (small, plain `application/proto`, no deadline) is answered by
the controller's direct path, every other request by the Connect application; either way the
caller gets the same answer. Each request here goes to a real controller as raw HTTP twice: as the
SDK sends it, and with a `connect-timeout-ms` header, which the direct path leaves to connectrpc.
The controller's spans (IRIS_SPANS) say which way each call took. A caller that goes away while
its submit is being handled has the handler cancelled on either path."""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import socket

import httpx

from iris.controller.http import direct_launch
from iris.rpc import controller_pb2 as pb
from iris.rpc.bounds import MAX_ITEMS
from iris.rpc.controller_connect import ControllerServiceASGIApplication
from iris.rpc.request_codecs import BoundedJSONCodec, BoundedProtoCodec
from tests.controller.helpers import client, job_count, operator_http, user_token, wait_state

PATH = "/iris.v1.ControllerService/LaunchJob"
SDK_HEADERS = {"connect-protocol-version": "1", "user-agent": "iris-client", "content-type": "application/proto"}
VIA_CONNECT = {"connect-timeout-ms": "60000"}  # a deadline: served by connectrpc


def _post(http: httpx.Client, body: bytes, **headers: str) -> httpx.Response:
    return http.post(PATH, content=body, headers={**SDK_HEADERS, **headers})


def _head(answer: httpx.Response) -> list[tuple[str, str]]:
    """The answer's headers as sent, in order, but the date (which differs by the second)."""
    return [(k.decode(), v.decode()) for k, v in answer.headers.raw if k.lower() != b"date"]


def _same(direct: httpx.Response, connect: httpx.Response) -> None:
    assert direct.status_code == connect.status_code, (direct.content, connect.content)
    assert _head(direct) == _head(connect)
    assert direct.content == connect.content


def _request(name: str, **fields) -> bytes:
    return pb.LaunchJobRequest(name=name, user="alice", command=["true"], **fields).SerializeToString()


def _spans(ctl, path) -> dict:
    ctl.stop()
    return json.loads(path.read_text())


def test_direct_submits_are_answered_as_connectrpc_answers_them(controller_factory, tmp_path):
    spans_path = tmp_path / "spans.json"
    ctl = controller_factory("direct", start=False, controller={"tick_interval": "1s"})
    ctl.env = {**os.environ, "IRIS_SPANS": str(spans_path)}
    ctl.start()
    c = client(ctl)
    direct_calls = 0
    # httpx asks for gzip answers unless told otherwise; the SDK asks for none.
    with operator_http(ctl, timeout=60) as http:
        http.headers.pop("accept-encoding")
        # A good submit: the same head; the bodies differ only by the job's name, of the same length.
        direct = _post(http, _request("job-a"))
        connect = _post(http, _request("job-b"), **VIA_CONNECT)
        direct_calls += 1
        assert direct.status_code == connect.status_code == 200, (direct.content, connect.content)
        assert _head(direct) == _head(connect)
        assert _head(direct)[-4:] == [
            ("content-type", "application/proto"),
            ("content-encoding", "identity"),
            ("vary", "Accept-Encoding"),
            ("content-length", str(len(direct.content))),
        ]
        assert pb.LaunchJobResponse.FromString(direct.content).job_id == "/alice/job-a"
        assert pb.LaunchJobResponse.FromString(connect.content).job_id == "/alice/job-b"
        assert wait_state(c, "/alice/job-a").job.state == "SUCCEEDED"
        before = job_count(c)

        # Refusals, byte for byte: a body that is not a LaunchJobRequest, one past the bounds every
        # request is held to, one with a name no job may have, a token that is not one.
        refusals = [
            (b"\xff\xff\xff\xff", {}),
            (_request("wide", constraints=[pb.Constraint(key="k")] * (MAX_ITEMS + 1)), {}),
            (_request("bad name"), {}),
            (_request("job-c"), {"authorization": "Bearer not-a-token"}),
        ]
        for body, headers in refusals:
            direct = _post(http, body, **headers)
            connect = _post(http, body, **headers, **VIA_CONNECT)
            direct_calls += 1
            assert direct.status_code in (400, 401), direct.content
            assert direct.headers["content-type"] == "application/json"
            _same(direct, connect)
        assert job_count(c) == before

        # The same name again: kept as the one job (a retried submit), as connectrpc keeps it.
        direct = _post(http, _request("job-a"))
        connect = _post(http, _request("job-a"), **VIA_CONNECT)
        direct_calls += 1
        _same(direct, connect)

        # What the direct path leaves to connectrpc is still served: JSON, gzip, a large body, an
        # answer asked for in gzip, and an unknown protocol version refused as connectrpc does.
        as_json = json.dumps({"name": "job-json", "user": "alice", "command": ["true"]}).encode()
        assert _post(http, as_json, **{"content-type": "application/json"}).json()["jobId"] == "/alice/job-json"
        zipped = _post(http, gzip.compress(_request("job-gzip")), **{"content-encoding": "gzip"})
        assert pb.LaunchJobResponse.FromString(zipped.content).job_id == "/alice/job-gzip"
        large = _post(http, _request("job-large", env={"PAD": "x" * 60_000, "PAD2": "y" * 10_000}))
        assert pb.LaunchJobResponse.FromString(large.content).job_id == "/alice/job-large"
        packed = _post(http, _request("job-packed"), **{"accept-encoding": "gzip"})
        assert packed.status_code == 200 and packed.headers["content-encoding"] == "gzip"
        assert pb.LaunchJobResponse.FromString(packed.content).job_id == "/alice/job-packed"
        version = _post(http, _request("job-v2"), **{"connect-protocol-version": "2"})
        assert version.status_code == 400 and "connect-protocol-version" in version.json()["message"]
    assert job_count(c) == before + 4
    stages = _spans(ctl, spans_path)
    assert stages["api.LaunchJob.direct"]["count"] == direct_calls
    assert stages["api.LaunchJob"]["count"] == 2 * direct_calls + 5


def test_a_rate_limited_direct_submit_is_told_when_to_come_back(controller_factory, tmp_path):
    spans_path = tmp_path / "spans.json"
    ctl = controller_factory(
        "rated", start=False, controller={"tick_interval": "1s", "submit_rate": 1, "submit_burst": 1}
    )
    ctl.env = {**os.environ, "IRIS_SPANS": str(spans_path)}
    ctl.start()
    auth = {"authorization": f"Bearer {user_token(ctl, 'alice')}"}
    with httpx.Client(base_url=ctl.url, timeout=60) as http:
        http.headers.pop("accept-encoding")
        assert _post(http, _request("first"), **auth).status_code == 200
        direct = _post(http, _request("second"), **auth)
        connect = _post(http, _request("second"), **auth, **VIA_CONNECT)
        assert direct.status_code == 429 and direct.headers["retry-after"] == "1", direct.content
        assert direct.json()["code"] == "resource_exhausted"
        _same(direct, connect)
    stages = _spans(ctl, spans_path)
    assert stages["api.LaunchJob.direct"]["count"] == 2


class _Stuck:
    """A service whose LaunchJob waits until it is cancelled (each other method: never called)."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.cancelled = False

    async def launch_job(self, request, ctx):
        self.started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise

    def __getattr__(self, name: str):
        return self.launch_job


async def _caller_goes_away(serve) -> _Stuck:
    """Sends a LaunchJob to `serve(service, scope, receive, send)`, then disconnects while its
    handler runs; returns the service once the call has ended."""
    service = _Stuck()
    body = _request("stuck")
    scope = {
        "type": "http",
        "method": "POST",
        "path": PATH,
        "root_path": "",
        "scheme": "http",
        "query_string": b"",
        "client": ("127.0.0.1", 4000),
        "headers": [(k.encode(), v.encode()) for k, v in SDK_HEADERS.items()]
        + [(b"content-length", str(len(body)).encode())],
    }
    gone = asyncio.Event()
    messages = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive():
        if messages:
            return messages.pop()
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message) -> None:
        pass  # uvicorn drops what is sent to a caller that has gone

    call = asyncio.get_running_loop().create_task(serve(service, scope, receive, send))
    await service.started.wait()
    gone.set()
    done, _ = await asyncio.wait({call}, timeout=30)  # a bound, so that a call left running fails the test
    assert call in done, "the call went on after its caller had gone"
    call.result()  # ended without an error
    return service


def test_a_caller_going_away_cancels_its_handler_on_either_path():
    def via_connect(service, scope, receive, send):
        app = ControllerServiceASGIApplication(service, codecs=[BoundedProtoCodec(), BoundedJSONCodec()])
        return app(scope, receive, send)

    def direct(service, scope, receive, send):
        headers = direct_launch.headers_of(scope)
        assert headers is not None
        return direct_launch.serve(service, headers, scope, receive, send)

    for serve in (via_connect, direct):
        assert asyncio.run(_caller_goes_away(serve)).cancelled


def test_a_submit_whose_body_is_still_coming_holds_no_group(controller_factory, tmp_path):
    """A submit group waits for the submits announced to the controller, to share their commit;
    one whose body is still on its way (sent slowly, or never finished), on either path, is not
    announced yet, so the groups of the others do not wait for it."""
    spans_path = tmp_path / "spans.json"
    ctl = controller_factory("partial", start=False, controller={"tick_interval": "1s"})
    ctl.env = {**os.environ, "IRIS_SPANS": str(spans_path)}
    ctl.start()
    host, _, port = ctl.url.removeprefix("http://").partition(":")
    body = _request("never-finished")
    partial = []
    for extra in ({}, VIA_CONNECT):
        head = {**SDK_HEADERS, **extra, "host": host, "content-length": str(len(body))}
        sock = socket.create_connection((host, int(port)))
        sock.sendall(f"POST {PATH} HTTP/1.1\r\n".encode() + "".join(f"{k}: {v}\r\n" for k, v in head.items()).encode())
        sock.sendall(b"\r\n" + body[:5])
        partial.append(sock)
    try:
        c = client(ctl)
        for i in range(5):
            c.launch_job(pb.LaunchJobRequest(name=f"alone-{i}", user="alice", command=["true"]))
    finally:
        for sock in partial:
            sock.close()
    stages = _spans(ctl, spans_path)
    assert "submit.group.wait" not in stages, stages["submit.group.wait"]
