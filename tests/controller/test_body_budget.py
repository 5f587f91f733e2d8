"""Large request bodies held at once are bounded, in all and per client: one client opening
connection after connection, each announcing a workspace-sized body, gets `resource_exhausted`
with a `retry-after` before its body is read, while small calls go on and a large call is taken
again once the others are gone. Real controller, raw sockets on loopback."""

from __future__ import annotations

import contextlib
import gzip
import socket
from collections.abc import Iterator

from connectrpc.errors import ConnectError

from iris.controller.http.body_budget import BodyBudget
from iris.controller.http.request_bodies import GZIP_MAX_RATIO, SMALL_BODY
from iris.controller.http.server import LARGE_BODIES_HELD, MAX_REQUEST_BYTES
from iris.rpc import controller_pb2 as pb
from tests.conftest import wait_until
from tests.controller.helpers import client

LAUNCH = "/iris.v1.ControllerService/LaunchJob"


def test_body_budget_bounds_bytes_held_in_all_and_per_client():
    budget = BodyBudget(total=100, per_client=50)
    assert budget.take("a", 30) and budget.take("a", 20)
    assert not budget.take("a", 1)  # a's half is held
    assert budget.take("b", 50)
    assert not budget.take("c", 1)  # all is held
    budget.give_back("a", 30)
    assert budget.take("c", 30) and budget.held == 100
    for who, size in (("a", 20), ("b", 50), ("c", 30)):
        budget.give_back(who, size)
    assert budget.held == 0 and budget.take("d", 500)  # alone, a body past a limit is still taken


def _announce(url: str, size: int, *headers: str, send: bytes = b"\x0a\x05") -> socket.socket:
    """A connection that sends a LaunchJob's head announcing `size` bytes (and `headers`) and the
    first few of them (or `send`)."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    lines = [f"POST {LAUNCH} HTTP/1.1", f"Host: {host}:{port}", "Content-Type: application/proto"]
    head = "\r\n".join([*lines, f"Content-Length: {size}", *headers, "", ""])
    sock.sendall(head.encode() + send)
    return sock


def _answer(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


@contextlib.contextmanager
def _share_held(controller) -> Iterator[None]:
    """Holds as many large bodies on their way as one client may (each announced, none sent), so
    whatever the same client sends next meets a full share."""
    size = MAX_REQUEST_BYTES - 1024
    fits = (LARGE_BODIES_HELD // 2) // size
    held = [_announce(controller.url, size) for _ in range(fits)]
    try:
        client(controller).list_jobs(pb.ListJobsRequest())  # every connection above has been taken in
        yield
    finally:
        for sock in held:
            sock.close()


def test_a_client_announcing_more_large_bodies_than_it_may_hold_is_told_to_retry(controller):
    with _share_held(controller):
        refused = _announce(controller.url, MAX_REQUEST_BYTES - 1024)
        try:
            answer = _answer(refused).decode("latin-1").lower()
        finally:
            refused.close()
        assert answer.startswith("http/1.1 429") and "retry-after: 1" in answer, answer
        assert client(controller).list_jobs(pb.ListJobsRequest()) is not None  # small calls go on
    workspace = pb.LaunchJobRequest(
        name="/alice/after", command=["true"], workdir_files={"big.bin": b"x" * 200_000}, existing_job_policy="keep"
    )

    def launched() -> bool:  # the budget is given back as the controller sees each connection go
        try:
            return client(controller).launch_job(workspace).job_id == "/alice/after"
        except ConnectError as exc:
            assert exc.code.name == "RESOURCE_EXHAUSTED", exc
            return False

    wait_until(launched, message="a large call taken once the others are gone")


def test_a_body_sent_with_two_content_encodings_counts_as_the_one_it_is_unpacked_by(controller):
    """A gzip body counts as what it may unpack to; named gzip, then identity, it is unpacked as
    gzip (each header's first value), so it counts so too: past a client's share, told to retry."""
    with _share_held(controller):
        refused = _announce(controller.url, 60_000, "Content-Encoding: gzip", "Content-Encoding: identity")
        try:
            answer = _answer(refused).decode("latin-1").lower()
        finally:
            refused.close()
        assert answer.startswith("http/1.1 429") and "retry-after: 1" in answer, answer


def test_a_small_compressed_body_is_held_to_the_budget_by_what_it_unpacks_to(controller):
    """A gzip body of a few kilobytes reserves nothing as it arrives, yet may unpack to megabytes,
    held until it is answered: what it unpacked to is taken from the budget once it is known, so a
    client already holding its share is told to retry instead of holding more."""
    body = gzip.compress(
        pb.LaunchJobRequest(
            name="/alice/zeros", command=["true"], workspace_bundle=bytes(2 * 1024**2)
        ).SerializeToString()
    )
    assert len(body) * GZIP_MAX_RATIO <= SMALL_BODY  # nothing reserved for it as it arrives
    with _share_held(controller):
        packed = _announce(controller.url, len(body), "Content-Encoding: gzip", send=body)
        try:
            answer = _answer(packed).decode("latin-1").lower()
        finally:
            packed.close()
        assert answer.startswith("http/1.1 429") and "retry-after: 1" in answer, answer
