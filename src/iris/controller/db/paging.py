"""Decides how a list the API serves is cut into pages: a page's size, and the opaque token that
says where the next page starts.

Why keyset tokens and not offsets: an offset counts rows, so a row inserted or removed before it
shifts every later page (a row seen twice, or one never seen), and reaching page N costs a scan of
the N pages before it. A token here holds the sort key of the last row served, so the next page
is "rows after this key" (one index seek however deep), rows added while someone pages never
repeat a row, and no row that existed when paging started is skipped.

A token also carries which list it belongs to and a digest of the filters it was made under, so a
token of another list, or replayed with other filters, is refused with INVALID_ARGUMENT instead of
silently paging something else. It is URL-safe base64 of a small JSON document; clients must treat
it as opaque (its layout may change between versions).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from iris.core.errors import InvalidArgument

DEFAULT_PAGE = 1000
MAX_PAGE = 5000
MAX_TOKEN_CHARS = 2048
_VERSION = 1
_INT64 = range(-(2**63), 2**63)  # what SQLite stores as an integer: a key outside it matches no row

T = TypeVar("T")
Key = tuple[Any, ...]


def page_size(requested: int, default: int = DEFAULT_PAGE, maximum: int = MAX_PAGE) -> int:
    """The rows a page holds: the list's default for 0 (or less), never more than its maximum."""
    if requested <= 0:
        return default
    return min(requested, maximum)


@dataclass(frozen=True)
class Listing:
    """One list under one set of filters: what its tokens are bound to, and its key's column types."""

    name: str  # "jobs", "tasks", …
    key_types: tuple[type, ...]  # the sort key's parts, e.g. (int,) or (str, str)
    filters: tuple[Any, ...] = ()

    def _digest(self) -> str:
        raw = json.dumps([self.name, list(self.filters)], default=str, separators=(",", ":"))
        return hashlib.sha256(raw.encode()).hexdigest()[:12]

    def token(self, key: Key) -> str:
        """The next_page_token for a page whose last row has sort key `key`."""
        doc = json.dumps([_VERSION, self.name, self._digest(), list(key)], separators=(",", ":"))
        return base64.urlsafe_b64encode(doc.encode()).decode().rstrip("=")

    def after(self, token: str) -> Key | None:
        """The sort key a page token continues after (None for the first page); refuses any token
        this list did not give under these filters."""
        if not token:
            return None
        doc = _decode(token)
        if doc is None or len(doc) != 4 or doc[0] != _VERSION or not isinstance(doc[3], list):
            raise InvalidArgument(
                f"page_token {token[:40]!r} is not one this server gave; pass the next_page_token of the previous "
                "page, or leave it empty for the first page"
            )
        if doc[1] != self.name or doc[2] != self._digest():
            what = f"of another list ({doc[1]!r})" if doc[1] != self.name else "for other filters"
            raise InvalidArgument(
                f"page_token is a token {what}; page {self.name} with the same filters that gave the token, "
                "or leave it empty for the first page"
            )
        key = doc[3]
        if len(key) != len(self.key_types) or not all(
            type(part) is kind and (kind is not int or part in _INT64)
            for part, kind in zip(key, self.key_types, strict=True)
        ):
            raise InvalidArgument(
                f"page_token {token[:40]!r} is not one this server gave; pass the next_page_token of the previous "
                "page, or leave it empty for the first page"
            )
        return tuple(key)


def _decode(token: str) -> list | None:
    if len(token) > MAX_TOKEN_CHARS or not token.isascii():
        return None
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        doc = json.loads(raw)
    except (binascii.Error, ValueError, UnicodeDecodeError):
        return None
    return doc if isinstance(doc, list) else None


@dataclass(frozen=True)
class Page(Generic[T]):
    """The rows of one page, the token of the next ("" at the end), and how many rows match in all."""

    rows: tuple[T, ...]
    next_token: str
    total: int


def page_of(rows: Sequence[T], key: Callable[[T], Key], listing: Listing, token: str, limit: int) -> Page[T]:
    """One page of an in-memory list (workers, backends, peers): `rows` in any order, sorted here by
    `key`, the page after `token`'s key."""
    after = listing.after(token)
    ordered = sorted(rows, key=key)
    if after is not None:
        ordered = [r for r in ordered if key(r) > after]
    size = page_size(limit)
    chosen = ordered[:size]
    more = len(ordered) > size
    return Page(tuple(chosen), listing.token(key(chosen[-1])) if more else "", len(rows))
