"""PeerRouter.classify: each disposition in DESIGN §6's order, and each refusal."""

from __future__ import annotations

import pytest

from iris.core.constraints import Constraint, Op
from iris.core.errors import InvalidArgument, PermissionDenied
from iris.core.resources import Device, Resources
from iris.federation.model import DispositionKind, LocalBackendShape, SubmittedJob, Submitter
from iris.federation.router import PeerRouter
from iris.federation.shape import shapes_feasibility
from tests.federation.federation_builders import availability, cpu, cpu_backend, gpu, gpu_backend, h100_peer, peer

USER = Submitter("alice@example.org")
LOCAL_ADMIN = Submitter("127.0.0.1", local_admin=True)
CPU_ONLY = [LocalBackendShape("cpu", Resources(cpu=8, memory=32 * 1024**3), {"region": "us-east5"})]
PEERS = [h100_peer("cw-h100", 8), peer("cw-gb200", gpu_backend("gb200", "gb200", availability({"gb200": 4})))]


def submitted(
    job_id: str = "/alice/train", resources: Resources | None = None, *constraints: Constraint
) -> SubmittedJob:
    return SubmittedJob(job_id, resources if resources is not None else gpu("h100", 8), tuple(constraints))


def pin(peer_id: str) -> Constraint:
    return Constraint("cluster", Op.EQ, (peer_id,))


def test_classify_pin_queues_for_that_peer_even_when_locally_feasible():
    disposition = PeerRouter(CPU_ONLY).classify(submitted("/alice/etl", cpu(), pin("cw-h100")), PEERS, USER)
    assert (disposition.kind, disposition.peer_id) == (DispositionKind.QUEUE, "cw-h100")
    assert disposition.reason == "Queued for peer cw-h100 to report free capacity"


def test_classify_pin_to_unreachable_peer_still_queues():
    peers = [h100_peer("cw-h100", 8), peer("cw-down", reachable=False)]
    disposition = PeerRouter(CPU_ONLY).classify(submitted("/alice/a", gpu(), pin("cw-down")), peers, USER)
    assert (disposition.kind, disposition.peer_id) == (DispositionKind.QUEUE, "cw-down")


def test_classify_pin_to_unknown_peer_is_invalid_argument():
    with pytest.raises(InvalidArgument, match="not a configured peer.*cw-gb200, cw-h100"):
        PeerRouter(CPU_ONLY).classify(submitted("/alice/a", gpu(), pin("nowhere")), PEERS, USER)


def test_classify_locally_feasible_runs_local():
    disposition = PeerRouter(CPU_ONLY).classify(submitted("/alice/etl", cpu()), PEERS, USER)
    assert disposition.kind is DispositionKind.LOCAL and disposition.peer_id is None


def test_classify_accepts_a_feasibility_callable():
    router = PeerRouter(lambda resources, constraints: not resources.device.is_accelerator)
    assert router.classify(submitted("/alice/etl", cpu()), PEERS, USER).kind is DispositionKind.LOCAL
    assert router.classify(submitted("/alice/t", gpu()), PEERS, USER).kind is DispositionKind.QUEUE


def test_classify_gpu_job_queues_with_no_peer_chosen():
    disposition = PeerRouter(CPU_ONLY).classify(submitted(), PEERS, USER)
    assert (disposition.kind, disposition.peer_id) == (DispositionKind.QUEUE, None)
    assert disposition.candidate_peers == ("cw-h100",)
    assert disposition.reason == "Queued for a federation peer to report free capacity"


def test_classify_queue_ignores_capacity_at_submit():
    peers = [h100_peer("cw-h100", 0)]
    assert PeerRouter(CPU_ONLY).classify(submitted(), peers, USER).kind is DispositionKind.QUEUE


def test_classify_gpu_count_is_not_a_routing_key():
    one = submitted("/alice/one", gpu("h100", 1))
    many = submitted("/alice/many", gpu("h100", 8), Constraint("gpu-count", Op.GE, ("64",)))
    router = PeerRouter(CPU_ONLY)
    assert router.classify(one, PEERS, USER) == router.classify(many, PEERS, USER)


def test_classify_key_the_peer_does_not_advertise_rejects():
    job = submitted("/alice/a", gpu(), Constraint("region", Op.EQ, ("us-east5",)))
    disposition = PeerRouter(CPU_ONLY).classify(job, PEERS, USER)
    assert disposition.kind is DispositionKind.REJECT
    assert "region EQ us-east5" in disposition.reason


def test_classify_peer_advertising_the_key_takes_it():
    peers = [peer("cw", gpu_backend("h100", "h100", None, region="us-east5"))]
    job = submitted("/alice/a", gpu(), Constraint("region", Op.EQ, ("us-east5",)))
    assert PeerRouter(CPU_ONLY).classify(job, peers, USER).kind is DispositionKind.QUEUE


def test_classify_only_unreachable_peers_rejects_naming_them():
    peers = [peer("cw-h100", gpu_backend("h100", "h100", None), reachable=False)]
    disposition = PeerRouter(CPU_ONLY).classify(submitted(), peers, USER)
    assert disposition.kind is DispositionKind.REJECT
    assert "unreachable: cw-h100" in disposition.reason


def test_classify_nothing_hosts_shape_rejects():
    tpu = Resources(device=Device("tpu", "v5p", 8, "v5p-8"))
    disposition = PeerRouter(CPU_ONLY).classify(submitted("/alice/a", tpu), PEERS, USER)
    assert disposition.kind is DispositionKind.REJECT
    assert disposition.reason.startswith("no local backend can host")


def test_classify_no_peers_rejects_what_is_not_local():
    disposition = PeerRouter(CPU_ONLY).classify(submitted(), [], USER)
    assert disposition.kind is DispositionKind.REJECT


def test_classify_local_backend_pin_never_federates():
    job = submitted("/alice/a", gpu(), Constraint("backend", Op.EQ, ("cpu",)))
    assert PeerRouter(CPU_ONLY).classify(job, PEERS, USER).kind is DispositionKind.REJECT


def test_classify_local_gpu_backend_keeps_gpu_work_local():
    shapes = CPU_ONLY + [
        LocalBackendShape("h100", Resources(cpu=16, memory=128 * 1024**3, device=Device("gpu", "h100", 8)))
    ]
    assert PeerRouter(shapes).classify(submitted(), PEERS, USER).kind is DispositionKind.LOCAL
    too_many = submitted("/alice/a", gpu("h100", 16))
    assert PeerRouter(shapes).classify(too_many, PEERS, USER).kind is DispositionKind.QUEUE


def test_classify_child_job_routing_to_peer_is_refused_naming_target_cluster():
    with pytest.raises(InvalidArgument, match="--target-cluster"):
        PeerRouter(CPU_ONLY).classify(submitted("/alice/coord/train"), PEERS, USER)


def test_classify_pinned_child_job_is_refused():
    with pytest.raises(InvalidArgument, match="--target-cluster cw-h100"):
        PeerRouter(CPU_ONLY).classify(submitted("/alice/coord/train", gpu(), pin("cw-h100")), PEERS, USER)


def test_classify_child_job_running_locally_is_allowed():
    disposition = PeerRouter(CPU_ONLY).classify(submitted("/alice/coord/etl", cpu()), PEERS, USER)
    assert disposition.kind is DispositionKind.LOCAL


def test_classify_local_admin_never_federates():
    with pytest.raises(PermissionDenied, match="local_admin"):
        PeerRouter(CPU_ONLY).classify(submitted(), PEERS, LOCAL_ADMIN)
    with pytest.raises(PermissionDenied):
        PeerRouter(CPU_ONLY).classify(submitted("/alice/a", cpu(), pin("cw-h100")), PEERS, LOCAL_ADMIN)


def test_classify_local_admin_runs_local_work():
    disposition = PeerRouter(CPU_ONLY).classify(submitted("/alice/etl", cpu()), PEERS, LOCAL_ADMIN)
    assert disposition.kind is DispositionKind.LOCAL


def test_classify_cpu_job_too_big_locally_routes_to_any_peer_backend():
    big = Resources(cpu=64, memory=32 * 1024**3)
    peers = [peer("cw", cpu_backend("cpu"))]
    assert PeerRouter(CPU_ONLY).classify(submitted("/alice/a", big), peers, USER).kind is DispositionKind.QUEUE


def test_classify_job_only_a_joined_pool_worker_hosts_runs_local():
    joined: list[LocalBackendShape] = []
    worker = LocalBackendShape("pool", Resources(cpu=2, memory=4 * 1024**3), {"pool": "pool", "zone": "home"})
    router = PeerRouter(shapes_feasibility(CPU_ONLY, lambda: joined))
    at_home = submitted("/alice/etl", cpu(), Constraint("zone", Op.EQ, ("home",)))
    on_pool = submitted("/alice/etl2", cpu(), Constraint("backend", Op.EQ, ("pool",)))
    assert router.classify(at_home, PEERS, USER).kind is DispositionKind.REJECT
    assert router.classify(on_pool, PEERS, USER).kind is DispositionKind.REJECT
    joined.append(worker)
    assert router.classify(at_home, PEERS, USER).kind is DispositionKind.LOCAL
    assert router.classify(on_pool, PEERS, USER).kind is DispositionKind.LOCAL
    too_big = submitted("/alice/big", Resources(cpu=4), Constraint("backend", Op.EQ, ("pool",)))
    assert router.classify(too_big, PEERS, USER).kind is DispositionKind.REJECT
