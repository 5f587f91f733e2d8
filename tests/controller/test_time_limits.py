"""Time limits per band (`controller.time_limits`): a default for jobs submitted without
`--timeout`, a maximum refused at submit with a clear error, and a job past its limit stopped."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from iris.core.config import ControllerSettings
from iris.rpc import controller_pb2 as pb
from tests.controller.helpers import client, error_code, status, wait_state


def test_time_limits_config_parses_durations_per_band():
    settings = ControllerSettings.model_validate({"time_limits": {"batch": {"default": "30m", "max": "2h"}}})
    assert settings.time_limits["batch"].default == 1800 and settings.time_limits["batch"].max == 7200


@pytest.mark.parametrize(
    ("limits", "words"),
    [
        ({"urgent": {"max": "1h"}}, "is not a band"),
        ({"batch": {"default": "2h", "max": "1h"}}, "is above max"),
        ({"batch": {"max": "soon"}}, "soon"),
    ],
)
def test_time_limits_config_bad_input_refused(limits, words):
    with pytest.raises(ValidationError, match=words):
        ControllerSettings.model_validate({"time_limits": limits})


def test_time_limits_on_a_real_controller(controller_factory):
    ctl = controller_factory(
        "limits",
        controller={
            "tick_interval": "1s",
            "time_limits": {"interactive": {"default": "1s", "max": "1h"}, "batch": {"max": "30m"}},
        },
    )
    c = client(ctl)

    def launch(name: str, command: list[str], **fields) -> str:
        return c.launch_job(pb.LaunchJobRequest(name=name, user="bob", command=command, **fields)).job_id

    code, message = error_code(lambda: launch("greedy", ["true"], timeout_s=7200))
    assert code == "invalid_argument"
    assert "above the 3600s this cluster allows interactive jobs" in message and "ask for at most 3600s" in message
    listed = c.list_jobs(pb.ListJobsRequest())
    assert [j.job_id for j in listed.jobs] == []  # the refusal wrote nothing

    asked = launch("asked", ["true"], timeout_s=600)
    assert status(c, asked).job.timeout_s == 600
    batch = launch("sweep", ["true"], priority="batch")
    assert status(c, batch).job.timeout_s == 1800  # only a maximum: it is the default too
    # No --timeout: the band's default, 1 s; the job runs past it and is stopped for it.
    slow = launch("slow", ["sleep", "30"])
    assert status(c, slow).job.timeout_s == 1
    final = wait_state(c, slow, timeout=30)
    assert final.job.state == "FAILED"
    assert "timed out after 1s" in (final.job.error + " ".join(a.error for t in final.tasks for a in t.attempts))
