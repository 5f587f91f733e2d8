"""Decides, once per submission, whether a job runs here, queues for a peer, or fails at once.

`PeerRouter.classify` applies DESIGN §6's order and nothing else:

1. a `cluster=<peer>` pin (`--target-cluster`) queues for that peer, even if the job could run here;
2. a job some local backend could in principle host runs locally (a pool of worker daemons: one of
   the workers joined to it now could);
3. a job some reachable peer could host by shape (a backend whose advertised attributes satisfy
   every routing constraint) queues, with no peer chosen;
4. a job left over on a cluster with a pool of worker daemons runs locally all the same: it waits
   (bounded by its scheduling timeout) for a worker that can host it to join;
5. anything else is rejected, so it fails fast as UNSCHEDULABLE instead of wedging.

A cluster with no peers classifies its submissions too (with none to queue for), so a job none of
its backends can host is refused at submit, where `iris job run --no-wait` still sees it.

Submit only classifies. Which peer a queued job lands on is decided on the control tick against the
peers' reported capacity (`iris.federation.availability`), so that a job waits for a peer with room
rather than piling onto the first one that merely could host it.

Two refusals guard whatever would cross the boundary: only root jobs federate (a peer runs a
handed-off job as a root of its own and cannot hold a child whose parent it lacks), and only an
accountable user does (a `local_admin` identity has no principal a peer could check).
"""

from __future__ import annotations

from collections.abc import Sequence

from iris.core.constraints import constraint_value
from iris.core.errors import InvalidArgument, PermissionDenied
from iris.core.names import JobName
from iris.federation.model import (
    Disposition,
    DispositionKind,
    LocalBackendShape,
    PeerSnapshot,
    SubmittedJob,
    Submitter,
)
from iris.federation.reasons import queued_reason
from iris.federation.shape import (
    LocalFeasibility,
    describe_constraints,
    peer_backend_hosts,
    routing_constraints,
    shapes_feasibility,
)


class PeerRouter:
    """Classifies submissions against the local backends' shapes and the peers' last heartbeat."""

    def __init__(self, local: LocalFeasibility | Sequence[LocalBackendShape], pools: Sequence[str] = ()):
        self._local_feasible: LocalFeasibility = local if callable(local) else shapes_feasibility(local)
        self._pools = tuple(pools)  # backends whose workers join while the cluster runs

    def classify(self, job: SubmittedJob, peers: Sequence[PeerSnapshot], submitter: Submitter) -> Disposition:
        """The disposition of `job`; raises InvalidArgument or PermissionDenied for a refused one."""
        pin = constraint_value(job.constraints, "cluster")
        if pin is not None:
            peer_id = _configured_peer(pin, peers)
            _check_may_federate(job, submitter, peer_id)
            return Disposition(DispositionKind.QUEUE, peer_id, queued_reason(peer_id), (peer_id,))
        if self._local_feasible(job.resources, job.constraints):
            return Disposition(DispositionKind.LOCAL)  # no reason to give: it runs here as usual
        local_pin = constraint_value(job.constraints, "backend")
        if local_pin is not None:
            if local_pin in self._pools:
                return Disposition(DispositionKind.LOCAL, None, _waits_for_worker((local_pin,)))
            return Disposition(
                DispositionKind.REJECT,
                None,
                f"it is pinned to local backend {local_pin}, which cannot host {job.resources.describe()}",
            )
        hosts = _peers_hosting(job, peers)
        if hosts:
            _check_may_federate(job, submitter, None)
            return Disposition(DispositionKind.QUEUE, None, queued_reason(None), hosts)
        if self._pools:
            return Disposition(DispositionKind.LOCAL, None, _waits_for_worker(self._pools))
        return Disposition(DispositionKind.REJECT, None, _reject_reason(job, peers))


def _waits_for_worker(pools: Sequence[str]) -> str:
    named = ", ".join(pools)
    return f"no worker joined to {'backend' if len(pools) == 1 else 'backends'} {named} can host it yet; it waits for one that can"


def _configured_peer(pin: str, peers: Sequence[PeerSnapshot]) -> str:
    for peer in peers:
        if peer.peer_id.lower() == pin.lower():
            return peer.peer_id
    known = ", ".join(sorted(p.peer_id for p in peers)) or "none are configured"
    raise InvalidArgument(f"--target-cluster {pin!r} is not a configured peer; known peers: {known}")


def _check_may_federate(job: SubmittedJob, submitter: Submitter, peer_id: str | None) -> None:
    """Refuses a handoff of a child job, or of a submission with no accountable user."""
    if not JobName.parse(job.job_id).is_root:
        target = peer_id or "PEER"
        raise InvalidArgument(
            f"job {job.job_id} is a child job and would run on a federation peer, but only root jobs "
            f"federate (a peer cannot hold a child whose parent it does not have); submit its root job "
            f"with --target-cluster {target} so the whole tree runs there"
        )
    if submitter.local_admin:
        raise PermissionDenied(
            f"job {job.job_id} would be handed to a federation peer, but it was submitted as local_admin "
            f"(the operator without a token, no accountable user); submit it with a user token "
            f"(iris token create) to federate it"
        )


def _peers_hosting(job: SubmittedJob, peers: Sequence[PeerSnapshot]) -> tuple[str, ...]:
    """The reachable peers with at least one backend that satisfies every routing constraint."""
    routing = routing_constraints(job.resources, job.constraints)
    return tuple(
        sorted(p.peer_id for p in peers if p.reachable and any(peer_backend_hosts(b, routing) for b in p.backends))
    )


def _reject_reason(job: SubmittedJob, peers: Sequence[PeerSnapshot]) -> str:
    routing = routing_constraints(job.resources, job.constraints)
    reason = f"no local backend can host {job.resources.describe()}"
    if not peers:
        return reason
    reason += f", and no reachable peer advertises a backend matching {describe_constraints(routing)}"
    unreachable = sorted(p.peer_id for p in peers if not p.reachable)
    if unreachable:
        reason += f" (unreachable: {', '.join(unreachable)})"
    return reason
