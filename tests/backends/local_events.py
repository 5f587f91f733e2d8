"""What tests of the local backend wait for: an attempt's pid, which the backend learns after
`start` returned and reports as a `spawned` event."""

from __future__ import annotations

from iris.backends.protocol import Backend
from tests.conftest import wait_until


def spawned_pid(backend: Backend, attempt_id: str) -> int:
    """The pid of `attempt_id`'s wrapper, once the backend reports it (left unacknowledged)."""
    return wait_until(
        lambda: next((s.pid for s in backend.poll().spawned if s.attempt_id == attempt_id), None),
        message=f"the pid of {attempt_id} to be reported",
    )
