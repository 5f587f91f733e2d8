"""Parses human sizes (`8G`, `512M`) and durations (`30`, `30s`, `5m`) into numbers.

Both the CLI and the config loader accept the same spellings, so one parser serves both.
"""

from __future__ import annotations

import re

from iris.core.errors import InvalidArgument

_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1024,
    "kb": 1024,
    "ki": 1024,
    "kib": 1024,
    "m": 1024**2,
    "mb": 1024**2,
    "mi": 1024**2,
    "mib": 1024**2,
    "g": 1024**3,
    "gb": 1024**3,
    "gi": 1024**3,
    "gib": 1024**3,
    "t": 1024**4,
    "tb": 1024**4,
    "ti": 1024**4,
    "tib": 1024**4,
}
_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")

_DURATION_UNITS = {"": 1.0, "ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(value: str | int | float) -> int:
    """Returns a byte count for `8G`, `512M`, `1.5Gi`, `1024` (bytes)."""
    if isinstance(value, bool):
        raise InvalidArgument(f"size {value!r} is not a size; use a number of bytes or e.g. 8G, 512M")
    if isinstance(value, (int, float)):
        if value < 0:
            raise InvalidArgument(f"size {value!r} is negative")
        return int(value)
    match = _SIZE_RE.match(str(value))
    unit = match.group(2).lower() if match else None
    if not match or unit not in _SIZE_UNITS:
        raise InvalidArgument(
            f"size {value!r} is not understood; use a number with an optional unit K, M, G or T (e.g. 8G, 512M)"
        )
    return int(float(match.group(1)) * _SIZE_UNITS[unit])


def parse_duration(value: str | int | float) -> float:
    """Returns seconds for `30`, `30s`, `5m`, `2h`, `1d`, `250ms`."""
    if isinstance(value, bool):
        raise InvalidArgument(f"duration {value!r} is not a duration; use seconds or e.g. 30s, 5m")
    if isinstance(value, (int, float)):
        if value < 0:
            raise InvalidArgument(f"duration {value!r} is negative")
        return float(value)
    match = _DURATION_RE.match(str(value))
    unit = match.group(2).lower() if match else None
    if not match or unit not in _DURATION_UNITS:
        raise InvalidArgument(
            f"duration {value!r} is not understood; use seconds (30) or a unit ms, s, m, h, d (e.g. 30s, 5m)"
        )
    return float(match.group(1)) * _DURATION_UNITS[unit]


def format_size(num_bytes: int) -> str:
    """Formats bytes the way the CLI accepts them back (8G, 512M, 100)."""
    for suffix, scale in (("T", 1024**4), ("G", 1024**3), ("M", 1024**2), ("K", 1024)):
        if num_bytes >= scale:
            amount = num_bytes / scale
            return f"{amount:.0f}{suffix}" if amount == int(amount) else f"{amount:.1f}{suffix}"
    return str(num_bytes)
