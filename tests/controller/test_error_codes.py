"""A refusal keeps its type from the server to each kind of caller: the SDK, a peer's client and
anyone holding a raw Connect client, all reading the one table in `iris.core.errors`."""

from __future__ import annotations

import pytest

from iris.client import IrisClient
from iris.core.errors import NotFound, Unauthenticated, Unavailable
from iris.federation.peer import PeerClient
from iris.rpc import controller_pb2 as pb
from tests.conftest import free_port
from tests.controller.helpers import client, error_code, user_token


def test_error_codes_reach_sdk_peer_and_raw_callers_as_the_same_type(controller):
    missing = "/alice/never-submitted"
    code, message = error_code(lambda: client(controller).explain_job(pb.ExplainJobRequest(job_id=missing)))
    assert code == "not_found" and missing in message

    with IrisClient(controller.url) as sdk, pytest.raises(NotFound) as sdk_err:
        sdk.explain(missing)
    assert sdk_err.value.message == message

    admin = user_token(controller, "root", role="admin")  # a peer always calls with a token
    peer = PeerClient("upstream", controller.url, token_source=lambda: admin, requester="home")
    with pytest.raises(NotFound) as peer_err:
        peer.terminate_job(missing, "test")
    # the peer files what cluster "home" hands it under "home." and answers in its own ids
    assert peer_err.value.message.startswith("peer upstream: ")
    assert "/alice/home.never-submitted" in peer_err.value.message

    with pytest.raises(Unauthenticated):
        PeerClient("upstream", controller.url, token_source=lambda: "not-a-token").list_backends()


def test_error_codes_a_peer_that_does_not_answer_is_unavailable():
    with pytest.raises(Unavailable) as err:
        PeerClient("gone", f"http://127.0.0.1:{free_port()}", timeout_s=2).list_backends()
    assert "gone" in err.value.message
