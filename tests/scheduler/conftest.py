"""Fixtures shared by the scheduler tests."""

from __future__ import annotations

import pytest

from iris.scheduler import ledger


@pytest.fixture(params=["as-tuned", "pools-only"])
def searches(request, monkeypatch):
    """Runs a test as tuned (a shape or group of few workers is searched by scanning them) and
    with every best-fit search through sorted pools, so the tests' small clusters still hold the
    pools to the reference scheduler."""
    if request.param == "pools-only":
        monkeypatch.setattr(ledger, "_SCANNED", 0)
    return request.param
