"""The page tokens and page sizes every list shares (iris.controller.db.paging), without a server."""

from __future__ import annotations

import base64
import json

import pytest

from iris.controller.db.paging import DEFAULT_PAGE, MAX_PAGE, Listing, page_of, page_size
from iris.core.errors import InvalidArgument


def test_page_size_defaults_and_caps():
    assert page_size(0) == DEFAULT_PAGE and page_size(-3) == DEFAULT_PAGE
    assert page_size(7) == 7 and page_size(10**9) == MAX_PAGE


def test_a_token_continues_after_its_key_and_only_under_its_own_filters():
    jobs = Listing("jobs", (int,), (["PENDING"], "/a/", "", "", ""))
    token = jobs.token((42,))
    assert jobs.after(token) == (42,) and jobs.after("") is None
    with pytest.raises(InvalidArgument, match="other filters"):
        Listing("jobs", (int,), (["RUNNING"], "/a/", "", "", "")).after(token)
    with pytest.raises(InvalidArgument, match="another list"):
        Listing("tasks", (int,), ("/a/j",)).after(token)


@pytest.mark.parametrize("key", [["42"], [1.5], [1, 2], [], [True]])
def test_a_token_whose_key_has_the_wrong_shape_is_refused(key):
    listing = Listing("jobs", (int,))
    forged = listing.token((1,))
    doc = json.loads(base64.urlsafe_b64decode(forged + "=" * (-len(forged) % 4)))
    doc[3] = key
    bad = base64.urlsafe_b64encode(json.dumps(doc).encode()).decode().rstrip("=")
    with pytest.raises(InvalidArgument, match="next_page_token"):
        listing.after(bad)


def test_in_memory_pages_cover_every_row_once_while_rows_are_added():
    listing = Listing("workers", (str, str))
    rows = [("cpu", f"w{i:02d}") for i in range(0, 20, 2)]
    seen, token = [], ""
    while True:
        page = page_of(rows, lambda r: r, listing, token, 3)
        seen += page.rows
        rows.append(("cpu", f"w{len(rows) * 2 - 1:02d}"))  # a newcomer between pages, anywhere in the order
        token = page.next_token
        if not token:
            break
    original = [("cpu", f"w{i:02d}") for i in range(0, 20, 2)]
    assert set(original) <= set(seen) and len(seen) == len(set(seen)) and seen == sorted(seen)
