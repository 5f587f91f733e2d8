"""Decides what `iris job explain` says about the peers of a federated job that waits: per peer,
whether it answers; per backend, what it has free of the job's device, and what it holds per band
below the job's band (what its scheduler would preempt to make room for the job); and whether those
figures are stale.

It reads only the manager's cached heartbeats, never calls a peer, so explaining a job cannot hang
on an unreachable one. What it calls held below is exactly what the placement pass counts as
reclaimable (`Availability.held_below`), so the diagnosis reads the same figures as the decision.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from iris.core.availability import Availability
from iris.core.bands import Band
from iris.federation.model import PeerBackend
from iris.federation.reasons import refuses
from iris.rpc import controller_pb2 as pb
from iris.rpc.codec import fill_availability


class PeerView(Protocol):
    """What explain reads of one peer's cached heartbeat (read-only, so frozen statuses qualify)."""

    @property
    def peer_id(self) -> str: ...
    @property
    def reachable(self) -> bool: ...
    @property
    def last_contact_ms(self) -> int: ...
    @property
    def last_error(self) -> str: ...
    @property
    def backends(self) -> tuple[PeerBackend, ...]: ...


@dataclass(frozen=True, slots=True)
class PeerExplanation:
    """The lines under a federated job's explain summary, and the same facts per peer backend."""

    lines: tuple[str, ...]
    backends: tuple[pb.ExplainPeerBackend, ...]


def _num(value: float) -> str:
    return f"{value:g}"


def held_below(availability: Availability, band: Band, token: str) -> list[pb.BandAmounts]:
    """Per band below `band`, what placed work holds there (of `token` only, when given)."""
    out = []
    for holding in availability.held_by_band:
        if not band.outranks(holding.band):
            continue
        amounts = {k: v for k, v in holding.amounts.items() if (k == token if token else True) and v > 0}
        if amounts:
            out.append(pb.BandAmounts(band=holding.band.label, amounts=amounts))
    return out


def _state(peer: PeerView) -> str:
    if peer.reachable:
        return "reachable"
    if refuses(peer.last_error):
        return peer.last_error  # it answers, but will not take this cluster's jobs
    return f"unreachable ({peer.last_error or 'no answer yet'})"


def _free_words(availability: Availability, token: str) -> str:
    if token:
        return f"{token} {_num(availability.amounts.get(token, 0))} free of {_num(availability.total_amounts.get(token, 0))}"
    return (
        ", ".join(
            f"{k} {_num(availability.amounts.get(k, 0))} free of {_num(v)}"
            for k, v in availability.total_amounts.items()
        )
        or "no devices"
    )


def _held_words(held: list[pb.BandAmounts], band: Band) -> str:
    if not held:
        return f"nothing held below {band.label}: no lower-band work to preempt"
    parts = [f"{h.band} " + ", ".join(f"{k} {_num(v)}" for k, v in sorted(h.amounts.items())) for h in held]
    return f"held below {band.label} (it would preempt for this job): " + "; ".join(parts)


def explain_peers(
    peers: Iterable[PeerView], token: str, band: Band, pinned: str, now_ms: int, stale_after_ms: float
) -> PeerExplanation:
    """What each candidate peer (only `pinned`, when the job names one) offers a job of `band`
    that needs device `token` ('' for a job without devices)."""
    lines: list[str] = []
    backends: list[pb.ExplainPeerBackend] = []
    for peer in peers:
        if pinned and peer.peer_id != pinned:
            continue
        state = _state(peer)
        lines.append(f"peer {peer.peer_id}: {state}")
        age = now_ms - peer.last_contact_ms if peer.last_contact_ms else None
        stale = bool(peer.backends) and age is not None and (not peer.reachable or age > stale_after_ms)
        if stale and age is not None:
            lines.append(
                f"  STALE: the figures below are from its last answer {age / 1000:.0f}s ago; the peer has not"
                " answered since, so they may no longer hold"
            )
        for b in peer.backends:
            entry = pb.ExplainPeerBackend(peer_id=peer.peer_id, backend_id=b.backend_id, state=state, stale=stale)
            a = b.availability
            if a is None:
                lines.append(f"  backend {b.backend_id}: reports no availability; matched on shape only")
            else:
                fill_availability(entry.availability, a)
                held = held_below(a, band, token)
                entry.held_below.extend(held)
                lines.append(f"  backend {b.backend_id}: {_free_words(a, token)}")
                lines.append(f"    {_held_words(held, band)}")
            backends.append(entry)
    return PeerExplanation(tuple(lines), tuple(backends))
