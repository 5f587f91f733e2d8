"""Decides which known word a mistyped one most likely meant, for the errors that refuse it.

A config key, a backend kind, a constraint key or a job state that is not known is refused with the
closest known spelling (`tick_intervl` → `tick_interval`), so a typo costs one reading instead of a
trip to the documentation. The match is difflib's ratio, as a person judges a near miss; below its
cutoff nothing is suggested, since a wrong guess misleads more than none.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing's own constant costs `import typing` on the CLI's submit path
if TYPE_CHECKING:
    from collections.abc import Iterable


def closest(word: str, known: Iterable[str]) -> str | None:
    """The known word nearest `word` (letter case ignored), or None when none is near enough."""
    import difflib

    by_lower = {k.lower(): k for k in known}
    found = difflib.get_close_matches(word.lower(), list(by_lower), n=1, cutoff=0.6)
    return by_lower[found[0]] if found else None


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """`did you mean 'tick_interval'?`, or "" when no known word is near `word`."""
    match = closest(word, known)
    return f"did you mean {match!r}?" if match else ""
