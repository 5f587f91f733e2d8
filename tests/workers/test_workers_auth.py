"""Worker tokens: a worker may call only the worker RPCs, and only as the worker it registered as."""

from __future__ import annotations

from tests.controller.helpers import client, error_code, launch, pb, user_token, wait_state
from tests.workers.conftest import GRACE, workers_backends


def _register(c, name: str) -> pb.RegisterWorkerResponse:
    return c.register_worker(
        pb.RegisterWorkerRequest(
            backend_id="pool", name=name, boot_id="b1", capacity=pb.Resources(cpu=1, memory_bytes=1 << 30)
        )
    )


def test_workers_token_roles_worker_joins_user_may_not(controller_factory, worker_factory):
    ctl = controller_factory(
        "locked",
        backends=workers_backends(),
        controller={"tick_interval": "1s", "worker_grace_period": GRACE},
    )
    token = ctl.cli("token", "create", "--config", str(ctl.config_path), "--user", "host-1", "--role", "worker")
    assert token.returncode == 0, token.stderr
    worker_factory(ctl, "host-1", env={"IRIS_TOKEN": token.stdout.strip()})

    alice = client(ctl, user_token(ctl, "alice"))
    job = launch(alice, "hello", ["sh", "-c", 'test -n "$IRIS_TOKEN" && echo has-owner-token'], user="alice")
    assert wait_state(alice, job).job.state == "SUCCEEDED"

    as_worker = client(ctl, token.stdout.strip())
    code, message = error_code(lambda: launch(as_worker, "nope", ["true"]))
    assert code == "permission_denied" and "may not call LaunchJob" in message
    code, message = error_code(lambda: _register(alice, "host-9"))
    assert code == "permission_denied" and "RegisterWorker" in message

    other = client(ctl, user_token(ctl, "host-2", role="worker"))
    code, message = error_code(lambda: _register(other, "host-1"))
    assert code == "permission_denied" and "belongs to host-1" in message
    session = _register(other, "host-2").session
    code, _ = error_code(
        lambda: as_worker.worker_poll(pb.WorkerPollRequest(backend_id="pool", session=session, wait_ms=0))
    )
    assert code == "permission_denied"


def test_workers_bad_registration_is_refused_with_the_reason(controller_factory):
    ctl = controller_factory(
        "strict",
        backends=[{"id": "cpu", "kind": "local"}, *workers_backends({"zone": "z1", "device-variant": "h100"})],
        controller={"tick_interval": "1s", "worker_grace_period": GRACE},
    )
    c = client(ctl)
    code, message = error_code(lambda: _register(c, "w1"))
    assert code == "invalid_argument" and "--attr zone=z1" in message
    a100 = pb.RegisterWorkerRequest(
        backend_id="pool", name="w1", boot_id="b", capacity=pb.Resources(cpu=1, memory_bytes=1),
        attributes={"zone": "z1", "device-type": "gpu", "device-variant": "a100"},
    )  # fmt: skip
    code, message = error_code(lambda: c.register_worker(a100))
    assert code == "invalid_argument" and "device-variant=h100" in message and "with --devices" in message
    req = pb.RegisterWorkerRequest(
        backend_id="cpu", name="w1", boot_id="b", capacity=pb.Resources(cpu=1, memory_bytes=1)
    )
    code, message = error_code(lambda: c.register_worker(req))
    assert code == "invalid_argument" and "kind local" in message
    req = pb.RegisterWorkerRequest(backend_id="pool", name="bad name!", boot_id="b", attributes={"zone": "z1"})
    code, message = error_code(lambda: c.register_worker(req))
    assert code == "invalid_argument" and "not usable" in message
    assert not c.list_workers(pb.ListWorkersRequest(backend_id="pool")).workers
