"""A cluster whose users' tasks share one uid says so: at start, and in `iris cluster status`."""

from __future__ import annotations

import json

from iris.controller.auth.isolation import not_isolated_reason


def test_a_controller_without_per_user_uids_says_so_in_cluster_status(controller):
    # The test controllers run tasks under their own uid (auth.task_uids.enabled false, or not root).
    shown = controller.cli("cluster", "status")
    assert shown.returncode == 0, shown.stderr
    warning = next(line for line in shown.stdout.splitlines() if line.strip().startswith("WARNING"))
    assert "not isolated from each other" in warning
    doc = json.loads(controller.cli("-o", "json", "cluster", "status").stdout)
    assert "not isolated" in doc["cluster"]["task_isolation_warning"]
    assert "not isolated" in controller.log_path.read_text()


def test_the_reason_names_what_to_change():
    assert "uid 1000, not root" in not_isolated_reason(True, euid=1000)
    assert "run it as root" in not_isolated_reason(True, euid=1000)
    assert "auth.task_uids.enabled is false" in not_isolated_reason(False, euid=0)
    assert not_isolated_reason(True, euid=0) == ""
