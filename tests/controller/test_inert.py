"""With no peers configured, federation is inert: no manager, no clients, no threads."""

from __future__ import annotations

import threading

from iris.controller.app import Controller
from iris.core.config import parse_config


def test_controller_without_peers_builds_no_federation_machinery(tmp_path):
    before = {t.name for t in threading.enumerate()}
    controller = Controller(parse_config({"name": "solo", "state_dir": str(tmp_path), "backends": [{"id": "cpu"}]}))
    try:
        controller.start()
        assert controller.federation is None and controller.tick.federation is None
        started = {t.name for t in threading.enumerate()} - before
        assert not any(name.startswith("federation") for name in started)
    finally:
        controller.shutdown()


def test_controller_with_peers_builds_one_client_per_peer(tmp_path):
    controller = Controller(
        parse_config(
            {
                "name": "parent",
                "state_dir": str(tmp_path),
                "backends": [{"id": "cpu"}],
                "peers": {"a": {"address": "http://127.0.0.1:1"}, "b": {"address": "http://127.0.0.1:2"}},
            }
        )
    )
    try:
        assert set(controller.federation.clients) == {"a", "b"}
    finally:
        controller.shutdown()
