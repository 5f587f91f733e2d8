from __future__ import annotations

import pytest

from tests.client.fake_controller import FakeController


@pytest.fixture
def fake_controller():
    """A fake ControllerService on a free loopback port (real HTTP, real Connect protocol)."""
    server = FakeController().start()
    yield server
    server.stop()
