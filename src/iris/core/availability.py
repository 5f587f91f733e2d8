"""A backend's availability block: per device token the free amount, the total, and what placed
work holds per band.

Backends compute it from *placed* work only (never from what is queued), and peers advertise it to
the clusters that federate with them, so that a parent can tell both what is idle and what a job of
a higher band could reclaim there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from iris.core.bands import Band

AVAILABILITY_VERSION = 1


def _frozen(mapping: Mapping[str, float]) -> Mapping[str, float]:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True, slots=True)
class BandHolding:
    band: Band
    amounts: Mapping[str, float]

    def __post_init__(self) -> None:
        object.__setattr__(self, "amounts", _frozen(self.amounts))


@dataclass(frozen=True, slots=True)
class Availability:
    observation_epoch_ms: int
    amounts: Mapping[str, float] = field(default_factory=dict)
    total_amounts: Mapping[str, float] = field(default_factory=dict)
    held_by_band: tuple[BandHolding, ...] = ()
    version: int = AVAILABILITY_VERSION

    def __post_init__(self) -> None:
        object.__setattr__(self, "amounts", _frozen(self.amounts))
        object.__setattr__(self, "total_amounts", _frozen(self.total_amounts))

    def held(self, band: Band, token: str) -> float:
        """What work of exactly `band` holds of `token`."""
        return sum(h.amounts.get(token, 0.0) for h in self.held_by_band if h.band is band)

    def held_below(self, band: Band, token: str) -> float:
        """What work of bands strictly below `band` holds of `token` (what `band` could reclaim)."""
        return sum(h.amounts.get(token, 0.0) for h in self.held_by_band if band.outranks(h.band))

    def to_json(self) -> dict:
        return {
            "version": self.version,
            "observation_epoch_ms": self.observation_epoch_ms,
            "amounts": dict(self.amounts),
            "total_amounts": dict(self.total_amounts),
            "held_by_band": [{"band": h.band.label, "amounts": dict(h.amounts)} for h in self.held_by_band],
        }
