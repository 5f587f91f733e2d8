"""A page token that decodes and carries the right list and filters but a key no row can have (an
integer past SQLite's 64-bit range) is refused with INVALID_ARGUMENT on a real controller, never
answered with an internal error, and the list keeps paging afterwards."""

from __future__ import annotations

import base64
import json

from iris.rpc import controller_pb2 as pb
from tests.controller.helpers import client, error_code, launch, wait_state


def _with_key(token: str, key: list) -> str:
    """`token` (one the server gave) with its sort key swapped for `key`; list and filters kept."""
    doc = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    doc[3] = key
    return base64.urlsafe_b64encode(json.dumps(doc).encode()).decode().rstrip("=")


def test_page_token_with_an_out_of_range_integer_key_is_refused_as_invalid_argument(controller):
    c = client(controller)
    for i in range(3):
        launch(c, f"deep-{i}", ["true"])
    wide = launch(c, "wide", ["true"], replicas=3)
    wait_state(c, wide)
    jobs_token = c.list_jobs(pb.ListJobsRequest(limit=1)).next_page_token
    tasks_token = c.list_tasks(pb.ListTasksRequest(job_id=wide, limit=1)).next_page_token
    assert jobs_token and tasks_token
    for huge in (10**30, -(10**30), 2**63):
        code, message = error_code(
            lambda k=huge: c.list_jobs(pb.ListJobsRequest(limit=1, page_token=_with_key(jobs_token, [k])))
        )
        assert code == "invalid_argument" and "next_page_token" in message, message
        code, message = error_code(
            lambda k=huge: c.list_tasks(
                pb.ListTasksRequest(job_id=wide, limit=1, page_token=_with_key(tasks_token, [k]))
            )
        )
        assert code == "invalid_argument" and "next_page_token" in message, message
    # The refusals changed nothing: the real tokens still continue their lists.
    assert len(c.list_jobs(pb.ListJobsRequest(limit=10, page_token=jobs_token)).jobs) == 3
    assert [t.index for t in c.list_tasks(pb.ListTasksRequest(job_id=wide, page_token=tasks_token)).tasks] == [1, 2]
