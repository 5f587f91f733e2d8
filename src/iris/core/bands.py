"""Priority bands: production > interactive (the default) > batch.

A band's rank orders work (lower rank first) and decides preemption: only a strictly higher band
may evict a task.
"""

from __future__ import annotations

import enum

from iris.core.errors import InvalidArgument


class Band(enum.IntEnum):
    """The value is the rank: lower schedules first and may preempt higher ranks."""

    PRODUCTION = 0
    INTERACTIVE = 1
    BATCH = 2

    @property
    def label(self) -> str:
        return self.name.lower()

    def outranks(self, other: Band) -> bool:
        """True when work of this band may preempt work of `other`."""
        return self.value < other.value

    @staticmethod
    def parse(value: str | Band | None) -> Band:
        if value is None or value == "":
            return Band.INTERACTIVE
        if isinstance(value, Band):
            return value
        try:
            return Band[str(value).strip().upper()]
        except KeyError:
            raise InvalidArgument(f"priority {value!r} is not a band; use production, interactive or batch") from None


DEFAULT_BAND = Band.INTERACTIVE
