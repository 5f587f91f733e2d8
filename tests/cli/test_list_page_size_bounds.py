"""`iris job list --page-size` past what the server allows is a usage error naming the bound
(exit 3), through a real CLI process and a real controller, never an internal error."""

from __future__ import annotations

import json

from iris.client import IrisClient


def test_job_list_page_size_past_the_server_maximum_is_a_usage_error(controller):
    with IrisClient(controller.url, token="") as c:
        c.submit(["true"], name="/alice/only", user="alice")
    for size in ("5001", "3000000000"):
        refused = controller.cli("-o", "json", "job", "list", "--page-size", size)
        assert refused.returncode == 3, refused.stderr
        assert "--page-size" in refused.stderr and "5000" in refused.stderr, refused.stderr
        assert "internal error" not in refused.stderr
        assert json.loads(refused.stdout)["error"]["code"] == "invalid_argument"
    largest = controller.cli("-o", "json", "job", "list", "--page-size", "5000")
    assert largest.returncode == 0 and [j["job_id"] for j in json.loads(largest.stdout)["jobs"]] == ["/alice/only"]
