"""A worker token is bound to one worker name, and registers at a bounded rate."""

from __future__ import annotations

from connectrpc.errors import ConnectError

from tests.conftest import wait_until
from tests.controller.helpers import client, error_code, launch, pb, user_token, wait_state


def _register(c, name: str, boot: str = "b1") -> pb.RegisterWorkerResponse:
    return c.register_worker(
        pb.RegisterWorkerRequest(
            backend_id="pool", name=name, boot_id=boot, capacity=pb.Resources(cpu=1, memory_bytes=1 << 30)
        )
    )


def _worker_token(ctl, name: str) -> str:
    made = ctl.cli(
        "token", "create", "--config", str(ctl.config_path), "--user", name, "--role", "worker", "--worker", name
    )
    assert made.returncode == 0, made.stderr
    return made.stdout.strip()


def _names(ctl) -> list[str]:
    return sorted(w.worker_id for w in client(ctl).list_workers(pb.ListWorkersRequest()).workers)


def test_workers_tokens_a_host_token_registers_only_its_host(pool, worker_factory):
    token = _worker_token(pool, "host-a")
    evil = worker_factory(pool, "evil", env={"IRIS_TOKEN": token}, wait=False)
    assert evil.proc.wait(timeout=60) != 0
    said = evil.log.read_text()
    assert "minted for worker 'host-a'" in said and "may not register worker 'evil'" in said, said
    code, message = error_code(lambda: _register(client(pool, token), "evil"))
    assert code == "permission_denied" and "--name host-a" in message
    assert "evil" not in _names(pool)

    worker_factory(pool, "host-a", env={"IRIS_TOKEN": token})
    c = client(pool)
    job = launch(c, "hello", ["sh", "-c", "echo on $IRIS_WORKER_ID"])
    done = wait_state(c, job, timeout=60)
    assert done.job.state == "SUCCEEDED" and done.tasks[0].worker_id == "host-a", done
    assert _names(pool) == ["host-a"]

    refused = pool.cli("token", "create", "--config", str(pool.config_path), "--user", "u", "--worker", "x")
    assert refused.returncode != 0 and "pass --role worker" in refused.stderr, refused.stderr


def test_workers_tokens_an_unbound_token_keeps_its_first_name_across_a_restart(pool):
    token = user_token(pool, "old-host", role="worker")  # minted without --worker
    _register(client(pool, token), "w-first")
    pool.kill()
    pool.start()
    old = client(pool, token)
    code, message = error_code(lambda: _register(old, "w-second"))
    assert code == "permission_denied" and "registered worker 'w-first' first" in message, message
    _register(old, "w-first", boot="b2")  # its own name still registers (a daemon restarted)
    assert "w-second" not in _names(pool)


def test_workers_tokens_a_burst_of_registrations_is_limited_per_token(pool, worker_factory):
    flood = client(pool, _worker_token(pool, "host-f"))
    answers = []
    for _ in range(100):
        try:
            _register(flood, "host-f")
            answers.append("ok")
        except ConnectError as exc:
            answers.append(exc.code.name.lower())
    assert set(answers) == {"ok", "resource_exhausted"} and answers.count("ok") <= 20, answers
    code, message = error_code(lambda: _register(flood, "host-f"))
    assert code == "resource_exhausted" and "try again in" in message, message
    # Another token's daemon registers meanwhile as usual.
    worker_factory(pool, "host-g", env={"IRIS_TOKEN": _worker_token(pool, "host-g")})
    wait_until(lambda: "host-g" in _names(pool), message="host-g to join")
