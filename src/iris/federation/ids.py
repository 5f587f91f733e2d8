"""Decides the id a peer gives a job it receives, and maps the peer's ids back to the parent's.

A peer keeps the jobs of every cluster that hands it work in one database, so two parents that
both hand off `/u1/train` must not collide there. The peer files a received root job under its
requester's namespace: `/u1/train` from `marin` becomes `/u1/marin.train` (its tasks
`/u1/marin.train/0`, its attempts `/u1/marin.train/0:1`). Cluster names have no '.', so the first
'.' of the root name always ends the requester, and the mapping is its own inverse without a
lookup table: the parent computes the same id to cancel or read the job, and strips the prefix from
every id a sync brings back, so the user only ever sees the id they submitted.
"""

from __future__ import annotations

from collections.abc import Iterable

from iris.core.errors import InvalidArgument
from iris.core.names import JobName, parse_id, validate_component
from iris.rpc import controller_pb2 as pb


def received_job_id(requester: str, job_id: str) -> str:
    """The id a peer files root job `job_id` from cluster `requester` under."""
    name = JobName.parse(job_id)
    if not name.is_root:
        raise InvalidArgument(f"only root jobs can be handed off; {job_id} is a child job")
    local = f"{requester}.{name.parts[0]}"
    try:
        validate_component("job name", local)
    except InvalidArgument:
        raise InvalidArgument(
            f"job name {name.parts[0]!r} cannot be received from cluster {requester!r}: a peer files it as"
            f" {local!r}, which is not a valid job name (at most 128 characters); shorten the job name"
        ) from None
    return str(JobName.root(name.user, local))


def reserved_for(root_name: str, requesters: Iterable[str]) -> str:
    """The cluster whose handoffs a root job name `root_name` is kept for ('' when none): a name
    such as `marin.train` is how this cluster files marin's `train`, so no one else may take it
    first and make marin's later handoff collide."""
    requester, dot, _ = root_name.partition(".")
    return requester if dot and requester in set(requesters) else ""


def parent_id(requester: str, peer_id: str) -> str:
    """The parent's id for a peer's job, task or attempt id in `requester`'s namespace (unchanged
    when it is not in that namespace)."""
    try:
        name = parse_id(peer_id)
    except InvalidArgument:
        return peer_id  # not an id this cluster could have handed off
    root, *below = name.job.parts
    prefix = f"{requester}."
    if not root.startswith(prefix):
        return peer_id
    return str(name.with_job(JobName(name.job.user, (root[len(prefix) :], *below))))


def sync_for_parent(requester: str, resp: pb.FederationSyncResponse) -> pb.FederationSyncResponse:
    """A peer's sync answer with every job, task and attempt id mapped back to the parent's."""
    out = pb.FederationSyncResponse()
    out.CopyFrom(resp)
    for synced in out.jobs:
        synced.job.job_id = parent_id(requester, synced.job.job_id)
        if synced.job.parent_job_id:
            synced.job.parent_job_id = parent_id(requester, synced.job.parent_job_id)
        for task in synced.tasks:
            task.task_id = parent_id(requester, task.task_id)
            task.job_id = parent_id(requester, task.job_id)
            for attempt in task.attempts:
                attempt.attempt_id = parent_id(requester, attempt.attempt_id)
    out.ClearField("tombstones")
    out.tombstones.extend(parent_id(requester, t) for t in resp.tombstones)
    out.ClearField("log_heads")
    out.log_heads.update({parent_id(requester, j): seq for j, seq in resp.log_heads.items()})
    out.ClearField("estimates")
    for job_id, estimate in resp.estimates.items():
        out.estimates[parent_id(requester, job_id)].CopyFrom(estimate)
    return out
