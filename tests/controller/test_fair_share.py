"""Fair share end to end on a real controller: while one user's many-replica job fills every
worker and still has replicas waiting, another user's one-task job of the same band takes the
first slot that frees, ahead of the first user's remaining replicas."""

from __future__ import annotations

from tests.conftest import wait_until
from tests.controller.helpers import client, launch, status

TWO_HOSTS = [{"id": "cpu", "kind": "local", "workers": 2, "capacity": {"cpu": 2, "memory": "4G"}}]
SLOTS = 4  # two hosts of 2 cores; each task takes the default 1 core


def states(c, job_id: str) -> list[str]:
    return [t.state for t in status(c, job_id).tasks]


def test_small_job_of_another_user_takes_the_first_freed_slot_before_a_huge_jobs_replicas(controller_factory, tmp_path):
    ctl = controller_factory("test", backends=TWO_HOSTS)
    c = client(ctl)
    go = tmp_path / "go"
    # Replica 0 ends once `go` exists, freeing one slot; every other replica holds its slot.
    script = f'if [ "$IRIS_TASK_INDEX" = 0 ]; then while [ ! -e {go} ]; do sleep 0.05; done; else sleep 300; fi'
    huge = launch(c, "huge", ["sh", "-c", script], user="alice", replicas=1000)
    wait_until(lambda: states(c, huge).count("RUNNING") == SLOTS, message="alice's job fills the workers")

    small = launch(c, "small", ["sleep", "300"], user="bob")
    wait_until(lambda: status(c, small).job.pending_reason, message="bob's job waits for a slot")
    assert states(c, huge).count("PENDING") == 1000 - SLOTS

    go.touch()
    wait_until(lambda: status(c, small).job.state == "RUNNING", timeout=10, message="bob's job takes the slot")
    alice = states(c, huge)
    # The freed slot went to bob: alice still has her three running replicas and no new one.
    assert alice.count("RUNNING") == SLOTS - 1 and alice.count("PENDING") == 1000 - SLOTS, alice
