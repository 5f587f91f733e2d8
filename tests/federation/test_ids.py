"""The ids a peer files received jobs under, and their mapping back to the parent's."""

from __future__ import annotations

import pytest

from iris.core.errors import InvalidArgument
from iris.federation.ids import parent_id, received_job_id, reserved_for, sync_for_parent
from iris.rpc import controller_pb2 as pb


def test_received_id_is_namespaced_by_requester_and_maps_back():
    assert received_job_id("marin", "/u1/train") == "/u1/marin.train"
    assert received_job_id("lab", "/u1/train") == "/u1/lab.train"
    assert parent_id("marin", "/u1/marin.train") == "/u1/train"
    assert parent_id("marin", "/u1/marin.a.b/0:2") == "/u1/a.b/0:2"
    assert parent_id("marin", "/u1/lab.train") == "/u1/lab.train"  # another requester's: untouched


def test_names_with_dots_from_different_requesters_never_collide():
    # Cluster names have no '.', so the first '.' always ends the requester.
    assert received_job_id("a", "/u/b.c") != received_job_id("a-b", "/u/c")


def test_child_job_or_too_long_name_is_refused_with_the_reason():
    with pytest.raises(InvalidArgument, match="only root jobs"):
        received_job_id("marin", "/u1/train/child")
    with pytest.raises(InvalidArgument, match="shorten the job name"):
        received_job_id("marin", "/u1/" + "x" * 125)


def test_sync_answer_comes_back_in_the_parents_ids():
    resp = pb.FederationSyncResponse(cursor=7, tombstones=["/u1/marin.old"])
    synced = resp.jobs.add(job=pb.JobStatus(job_id="/u1/marin.train", state="RUNNING"))
    task = synced.tasks.add(task_id="/u1/marin.train/0", job_id="/u1/marin.train")
    task.attempts.add(attempt_id="/u1/marin.train/0:1")
    out = sync_for_parent("marin", resp)
    assert out.jobs[0].job.job_id == "/u1/train" and out.cursor == 7
    assert out.jobs[0].tasks[0].task_id == "/u1/train/0" and out.jobs[0].tasks[0].job_id == "/u1/train"
    assert out.jobs[0].tasks[0].attempts[0].attempt_id == "/u1/train/0:1"
    assert list(out.tombstones) == ["/u1/old"]
    assert resp.jobs[0].job.job_id == "/u1/marin.train"  # the peer's answer itself is left as it was


def test_parent_id_maps_task_ids_of_child_jobs_and_leaves_unreadable_ids_alone():
    assert parent_id("marin", "/u1/marin.train/eval/3") == "/u1/train/eval/3"
    assert parent_id("marin", "/u1/marin.train/eval/3:2") == "/u1/train/eval/3:2"
    assert parent_id("marin", "not an id") == "not an id"


def test_a_root_name_starting_with_a_requester_and_a_dot_is_kept_for_its_handoffs():
    requesters = {"marin": "key", "lab": "key"}
    assert reserved_for("marin.train", requesters) == "marin"
    assert reserved_for("lab.x.y", requesters) == "lab"
    assert reserved_for("train", requesters) == ""
    assert reserved_for("marina.train", requesters) == ""
    assert reserved_for("other.train", requesters) == ""
