"""Times one federation placement pass (`assign_queued`) over a large queue and many peers.

Queues of 1k, 10k and 100k jobs of mixed shapes, bands and pins against 10 and 100 peers of four
backends each (h100 with a band split, preemptible h100, gb200, and a CPU backend without a metric).
Prints the best of a few runs per case, once with the default cap of 8 promotions per peer and once
uncapped, which is the worst case: every job that fits is placed. Target: 100k × 100 under 1 s.

    .venv/bin/python bench/federation_placement.py [--repeat 3] [--seed 7]
"""

from __future__ import annotations

import argparse
import random
import time

from iris.core.availability import Availability, BandHolding
from iris.core.bands import Band
from iris.core.constraints import Constraint, Op
from iris.core.resources import Device, Resources
from iris.federation.availability import ReservationLedger, assign_queued
from iris.federation.model import PeerBackend, PeerSnapshot, Promotion, QueuedJob

EPOCH = 1_764_400_000_000
GiB = 1024**3


def _gpu_backend(rng: random.Random, backend_id: str, variant: str, total: int, **attrs: str) -> PeerBackend:
    free = rng.randrange(0, total // 4)
    batch = rng.randrange(0, total - free)
    held = (BandHolding(Band.BATCH, {variant: batch}), BandHolding(Band.INTERACTIVE, {variant: total - free - batch}))
    availability = Availability(EPOCH, {variant: free}, {variant: total}, held)
    return PeerBackend(
        backend_id, "kubernetes", {"device-type": "gpu", "device-variant": variant, **attrs}, availability
    )


def make_peers(rng: random.Random, count: int) -> list[PeerSnapshot]:
    peers = []
    for i in range(count):
        backends = (
            _gpu_backend(rng, "h100", "h100", 512),
            _gpu_backend(rng, "h100-spot", "h100", 256, preemptible="true"),
            _gpu_backend(rng, "gb200", "gb200", 288),
            PeerBackend("cpu", "workers", {"device-type": "cpu"}, None),
        )
        peers.append(PeerSnapshot(f"cw-{i:03d}", reachable=rng.random() > 0.05, backends=backends))
    return peers


SHAPES = (
    (Resources(cpu=8, memory=64 * GiB, device=Device("gpu", "h100", 8)), ()),
    (Resources(cpu=1, memory=8 * GiB, device=Device("gpu", "h100", 1)), ()),
    (
        Resources(cpu=8, memory=64 * GiB, device=Device("gpu", "h100", 8)),
        (Constraint("preemptible", Op.EQ, ("true",)),),
    ),
    (Resources(cpu=16, memory=128 * GiB, device=Device("gpu", "gb200", 4)), ()),
    (Resources(cpu=8, memory=64 * GiB, device=Device("gpu", "", 8)), ()),
    (Resources(cpu=2, memory=4 * GiB), ()),
    (Resources(cpu=8, memory=64 * GiB, device=Device("gpu", "h100", 8)), (Constraint("region", Op.EQ, ("us-east5",)),)),
)


def make_queue(rng: random.Random, count: int, peers: list[PeerSnapshot]) -> list[QueuedJob]:
    jobs = []
    for i in range(count):
        resources, constraints = rng.choice(SHAPES)
        pin = rng.choice(peers).peer_id if rng.random() < 0.05 else None
        if pin is not None:
            constraints = constraints + (Constraint("cluster", Op.EQ, (pin,)),)
        jobs.append(
            QueuedJob(
                job_id=f"/user{i % 50}/job-{i}",
                band=rng.choice((Band.PRODUCTION, Band.INTERACTIVE, Band.INTERACTIVE, Band.BATCH)),
                submitted_ms=EPOCH - rng.randrange(0, 86_400_000),
                resources=resources,
                replicas=rng.choice((1, 1, 1, 2, 4, 16)),
                constraints=constraints,
                pinned_peer=pin,
            )
        )
    return jobs


def time_pass(
    jobs: list[QueuedJob], peers: list[PeerSnapshot], cap: int, repeat: int
) -> tuple[float, tuple[Promotion, ...]]:
    best, promotions = float("inf"), ()
    for _ in range(repeat):
        start = time.perf_counter()
        promotions = assign_queued(jobs, peers, ReservationLedger(), cap)
        best = min(best, time.perf_counter() - start)
    return best, promotions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    print(f"{'jobs':>7} {'peers':>5} {'cap':>9} {'promoted':>9} {'pass':>10}")
    for peer_count in (10, 100):
        rng = random.Random(args.seed)
        peers = make_peers(rng, peer_count)
        for job_count in (1_000, 10_000, 100_000):
            jobs = make_queue(rng, job_count, peers)
            for cap in (8, 10**9):
                seconds, promotions = time_pass(jobs, peers, cap, args.repeat)
                label = "uncapped" if cap == 10**9 else str(cap)
                print(f"{job_count:>7} {peer_count:>5} {label:>9} {len(promotions):>9} {seconds * 1000:>8.1f}ms")
    print("target: 100000 jobs x 100 peers under 1000 ms per pass")


if __name__ == "__main__":
    main()
