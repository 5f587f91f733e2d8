"""Small builders for federation unit tests: peers, backends, availability and queued jobs."""

from __future__ import annotations

from iris.core.availability import Availability, BandHolding
from iris.core.bands import Band
from iris.core.constraints import Constraint, Op
from iris.core.resources import Device, Resources
from iris.federation.model import PeerBackend, PeerSnapshot, QueuedJob

EPOCH = 1_764_400_000_000


def availability(
    free: dict[str, float], held: dict[Band, dict[str, float]] | None = None, epoch: int = EPOCH
) -> Availability:
    holdings = tuple(BandHolding(band, amounts) for band, amounts in (held or {}).items())
    total = {k: v + sum(h.amounts.get(k, 0.0) for h in holdings) for k, v in free.items()}
    return Availability(observation_epoch_ms=epoch, amounts=free, total_amounts=total, held_by_band=holdings)


def gpu_backend(backend_id: str, variant: str, avail: Availability | None, **attributes: str) -> PeerBackend:
    attrs = {"device-type": "gpu", "device-variant": variant, **attributes}
    return PeerBackend(backend_id, "kubernetes", attrs, avail)


def cpu_backend(backend_id: str, avail: Availability | None = None, **attributes: str) -> PeerBackend:
    return PeerBackend(backend_id, "local", {"device-type": "cpu", **attributes}, avail)


def peer(peer_id: str, *backends: PeerBackend, reachable: bool = True) -> PeerSnapshot:
    return PeerSnapshot(peer_id, reachable, tuple(backends))


def h100_peer(
    peer_id: str, free: float, held: dict[Band, dict[str, float]] | None = None, epoch: int = EPOCH
) -> PeerSnapshot:
    return peer(peer_id, gpu_backend("h100", "h100", availability({"h100": free}, held, epoch)))


def gpu(variant: str = "h100", count: int = 8) -> Resources:
    return Resources(cpu=8, memory=64 * 1024**3, device=Device("gpu", variant, count))


def cpu() -> Resources:
    return Resources(cpu=1)


def job(
    job_id: str,
    resources: Resources | None = None,
    band: Band = Band.INTERACTIVE,
    submitted_ms: int = 0,
    replicas: int = 1,
    pin: str | None = None,
    constraints: tuple[Constraint, ...] = (),
) -> QueuedJob:
    if pin is not None:
        constraints = constraints + (Constraint("cluster", Op.EQ, (pin,)),)
    return QueuedJob(
        job_id=job_id,
        band=band,
        submitted_ms=submitted_ms,
        resources=resources if resources is not None else gpu(),
        replicas=replicas,
        constraints=constraints,
        pinned_peer=pin,
    )
