"""`iris job run --cpu` that is not a finite number is a usage error (exit 3) that names the value,
before anything reaches the controller, through a real CLI process."""

from __future__ import annotations

from iris.client import IrisClient


def test_job_run_with_a_cpu_that_is_not_finite_is_a_usage_error_and_submits_nothing(controller):
    for value in ("nan", "inf", "-inf", "1e400"):
        refused = controller.cli("job", "run", "--no-wait", "--no-workspace", "--cpu", value, "--", "true")
        assert refused.returncode == 3, (value, refused.stderr)
        assert "finite" in refused.stderr and "unmarshal" not in refused.stderr, refused.stderr
    with IrisClient(controller.url) as client:
        assert client.list(limit=10) == []
