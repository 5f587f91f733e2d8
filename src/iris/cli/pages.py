"""How the list commands gather a paged list: one page, at most `--limit` rows, or `--all` of them,
and the hint printed when they stop before the end.

The server caps a page (5000 rows), so `--limit 20000` and `--all` follow next_page_token page
after page; the rows come back in one table or one JSON array either way. The hint goes to
stderr, so `-o json` output on stdout stays one document.
"""

from __future__ import annotations

from iris.cli.main import echo

TYPE_CHECKING = False  # typing's own constant costs `import typing`: the lean `job list` pages through here
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

MAX_PAGE = 5000  # the server's largest page (iris.controller.db.paging.MAX_PAGE)


class Collected:
    """The rows gathered, how many the list holds in all, and whether some were left unfetched.

    A plain class: `dataclasses` (with `re` and `enum` under it) would be most of what the lean
    `job list` imports."""

    __slots__ = ("rows", "total", "more")

    def __init__(self, rows: list[Any], total: int, more: bool):
        self.rows = rows
        self.total = total
        self.more = more


def collect(
    fetch: Callable[[str, int], Any], field: str, limit: int = 0, everything: bool = False, page_size: int = 0
) -> Collected:
    """Gathers rows of a paged list. `fetch(page_token, page_size)` returns one page (a response with
    `field`, `next_page_token` and `total`). Without `limit` or `everything`: the first page.
    `page_size` asks for pages of that size (0: the server's default)."""
    rows: list[Any] = []
    token, total = "", 0
    seen: set[str] = set()  # tokens followed: one sent again would repeat pages for ever
    while True:
        size = page_size
        if limit and not everything:
            size = min(limit - len(rows), page_size or MAX_PAGE)
        resp = fetch(token, size)
        batch = list(getattr(resp, field))
        rows.extend(batch)
        total = total or resp.total
        if resp.next_page_token and resp.next_page_token in seen:
            from iris.core.errors import IrisError
            from iris.rpc.transport import repeated_page_token

            raise IrisError(repeated_page_token(f"the {field} listing", resp.next_page_token))
        token = resp.next_page_token
        seen.add(token)
        if not token or not batch:
            return Collected(rows, max(total, len(rows)), False)
        if not everything and (not limit or len(rows) >= limit):
            return Collected(rows, max(total, len(rows)), True)


def hint(collected: Collected, noun: str, how: str = "--all for every one, --limit N for more") -> None:
    """Says on stderr that the list stopped early, and how to see the rest."""
    if collected.more:
        echo(f"showing {len(collected.rows):,} of {collected.total:,} {noun}; {how}", err=True)


def check_all_or_limit(everything: bool, limit: int, all_flag: str = "--all") -> None:
    if everything and limit:
        from iris.cli import commands as cmd

        raise cmd.UsageError(f"{all_flag} and --limit contradict each other; give one")
