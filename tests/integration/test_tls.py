"""TLS end to end: real controllers serving https on loopback with certificates a throw-away CA
signed, the `iris` CLI, a worker daemon and a federation peer (which asks its callers for a client
certificate) reaching them over it, and certificates that must not be trusted refused with words
that say why.

One federation serves the module: marin (a `workers` pool) hands GPU jobs to cw-h100, both over
https with mutual TLS, and every test leaves it as it found it.
"""

from __future__ import annotations

import http.client
import os
import socket
import ssl
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from iris.controller.auth import LOCAL_ADMIN, load_or_create_signing_key, public_key_pem
from iris.rpc import controller_pb2 as pb
from iris.testing.tls import Authority, Issued
from tests.conftest import ControllerFactory, RunningController, start_together, wait_until
from tests.controller.helpers import client, user_token
from tests.integration.test_federation import FAST, gpu_backend
from tests.workers.conftest import WorkerFactory

EXIT_USAGE = 3


@dataclass
class TlsFederation:
    marin: RunningController
    h100: RunningController
    ca: Authority
    stranger: Authority  # a CA nobody here trusts
    marin_cert: Issued
    h100_cert: Issued
    alice_cert: Issued  # what the CLI and the worker daemons present
    workers: WorkerFactory
    base: Path

    def cli(self, ctl: RunningController, *args: str, env: dict[str, str | None] | None = None):
        """`iris ARGS…` against `ctl`'s https URL as alice, trusting the module's CA, unless `env`
        says otherwise (a value None: unset)."""
        given = {"IRIS_TOKEN": user_token(ctl, "alice"), **self.tls_env(), **(env or {})}
        cwd = self.base / "cwd"
        cwd.mkdir(exist_ok=True)
        environ: dict[str, str | None] = {**os.environ, "IRIS_CONTROLLER": ctl.url, **given}
        return subprocess.run(
            [sys.executable, "-m", "iris.cli.main", *args],
            stdin=subprocess.DEVNULL,
            env={k: v for k, v in environ.items() if v is not None},
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=60,
        )

    def tls_env(self) -> dict[str, str | None]:
        """The environment that trusts the module's CA and presents alice's client certificate."""
        return {
            "IRIS_CA": str(self.ca.ca),
            "IRIS_CLIENT_CERT": str(self.alice_cert.certificate),
            "IRIS_CLIENT_KEY": str(self.alice_cert.key),
        }


@pytest.fixture(scope="module")
def fed(tmp_path_factory) -> Iterator[TlsFederation]:
    base = tmp_path_factory.mktemp("tls")
    ca, stranger = Authority(base / "ca"), Authority(base / "stranger", "Someone else's CA")
    # marin's certificate names only 127.0.0.1: reached as `localhost`, it is for another name.
    marin_cert, h100_cert, alice_cert = ca.issue("marin", ("127.0.0.1",)), ca.issue("cw-h100"), ca.issue("alice")
    factory = ControllerFactory(base)
    workers = WorkerFactory(base)
    try:
        marin = factory(
            "marin",
            start=False,
            backends=[{"id": "pool", "kind": "workers"}],
            controller={**FAST, "worker_grace_period": "5s"},
            tls={"certificate": str(marin_cert.certificate), "key": str(marin_cert.key), "client_ca": str(ca.ca)},
            # tasks find $IRIS_CA set by the controller; a client certificate is theirs to be given
            defaults={
                "task_env": {"IRIS_CLIENT_CERT": str(alice_cert.certificate), "IRIS_CLIENT_KEY": str(alice_cert.key)}
            },
        )
        marin_key = public_key_pem(load_or_create_signing_key(None, marin.state_dir))
        h100 = factory(
            "cw-h100",
            start=False,
            backends=gpu_backend("h100"),
            controller={**FAST, "request_read_timeout": "1s"},
            auth={"federation_peers": {"marin": marin_key}},
            tls={"certificate": str(h100_cert.certificate), "key": str(h100_cert.key), "client_ca": str(ca.ca)},
        )
        marin.rewrite(
            peers={
                "cw-h100": {"address": h100.url, "ca": str(ca.ca)},
                # the same peer, its certificate checked against a CA that did not sign it
                "cw-untrusted": {"address": h100.url, "ca": str(stranger.ca)},
            }
        )
        start_together(h100, marin)
        yield TlsFederation(marin, h100, ca, stranger, marin_cert, h100_cert, alice_cert, workers, base)
    finally:
        workers.cleanup()
        factory.cleanup()


def test_tls_cli_runs_a_job_over_https_on_a_worker_that_joined_over_https(fed):
    assert fed.marin.url.startswith("https://")
    fed.workers(fed.marin, "w1", env=fed.tls_env())
    done = fed.cli(fed.marin, "job", "run", "--", "echo", "served over tls")
    assert done.returncode == 0, done.stderr
    assert "served over tls" in done.stdout
    workers = client(fed.marin).list_workers(pb.ListWorkersRequest()).workers
    assert [w.worker_id for w in workers if w.alive] == ["w1"], workers


def test_tls_a_task_calls_its_controller_back_over_https(fed):
    if not _joined(fed, "w1"):  # the first test's worker, when this one runs alone
        fed.workers(fed.marin, "w1", env=fed.tls_env())
    call_back = "from iris.client.client import IrisClient; print('back at', IrisClient().cluster_info().name)"
    done = fed.cli(fed.marin, "job", "run", "--", sys.executable, "-c", call_back)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "back at marin" in done.stdout


def _joined(fed: TlsFederation, name: str) -> bool:
    return any(w.worker_id == name and w.alive for w in client(fed.marin).list_workers(pb.ListWorkersRequest()).workers)


def test_tls_federation_hands_a_job_to_a_peer_over_mutual_tls(fed):
    c = client(fed.marin)

    def peers():
        return {p.peer_id: p for p in c.list_peers(pb.ListPeersRequest()).peers}

    wait_until(lambda: peers()["cw-h100"].reachable, message="the peer's first heartbeat")
    done = fed.cli(fed.marin, "job", "run", "--gpu", "H100x8", "--", "echo", "ran on the peer")
    assert done.returncode == 0, done.stderr
    assert "ran on the peer" in done.stdout
    handed = c.execute_raw_query(
        pb.ExecuteRawQueryRequest(sql="SELECT peer_id, handoff_state FROM federated_jobs WHERE direction = 'SENT'")
    ).rows
    assert [list(row.values) for row in handed] and all(
        row.values[0].string_value == "cw-h100" and row.values[1].string_value == "HANDED_OFF" for row in handed
    ), handed
    untrusted = wait_until(lambda: peers()["cw-untrusted"].last_error, message="the untrusted peer's heartbeat")
    assert not peers()["cw-untrusted"].reachable and "certificate is not trusted" in untrusted, untrusted


def test_tls_a_certificate_from_an_unknown_ca_is_refused_with_exit_3(fed):
    done = fed.cli(fed.marin, "job", "list", env={"IRIS_CA": str(fed.stranger.ca)})
    assert done.returncode == EXIT_USAGE, done.stderr
    assert "certificate is not trusted" in done.stderr and "--ca" in done.stderr, done.stderr
    # Without any CA, the system's store does not know this one either.
    plain = fed.cli(fed.marin, "job", "list", env={"IRIS_CA": None})
    assert plain.returncode == EXIT_USAGE and "certificate is not trusted" in plain.stderr, plain.stderr


def test_tls_plain_http_to_a_tls_port_says_to_use_https(fed):
    done = fed.cli(fed.marin, "--controller", fed.marin.url.replace("https://", "http://"), "job", "list")
    assert done.returncode == EXIT_USAGE, done.stderr
    assert "use https://" in done.stderr, done.stderr


def test_tls_a_certificate_for_another_host_name_is_refused_with_exit_3(fed):
    elsewhere = fed.marin.url.replace("127.0.0.1", "localhost")
    done = fed.cli(fed.marin, "--controller", elsewhere, "job", "list")
    assert done.returncode == EXIT_USAGE, done.stderr
    assert "certificate is not for this address" in done.stderr, done.stderr


def test_tls_a_worker_given_the_wrong_ca_stops_before_joining_and_says_why(fed):
    worker = fed.workers(fed.marin, "w-wrong", env={**fed.tls_env(), "IRIS_CA": str(fed.stranger.ca)}, wait=False)
    assert worker.proc.wait(timeout=60) == EXIT_USAGE
    log = worker.log.read_text()
    assert "certificate is not trusted" in log, log


def test_tls_a_peer_asking_for_client_certificates_refuses_a_caller_without_one(fed):
    done = fed.cli(fed.h100, "job", "list", env={"IRIS_CLIENT_CERT": None, "IRIS_CLIENT_KEY": None})
    assert done.returncode == EXIT_USAGE, done.stderr
    assert "client" in done.stderr and "certificate" in done.stderr, done.stderr
    # With one its client CA signed, the same call goes through.
    admin = {"IRIS_TOKEN": user_token(fed.h100, LOCAL_ADMIN, role="admin"), "IRIS_CLIENT_CERT": None}
    certified = fed.cli(
        fed.h100,
        "--client-cert",
        str(fed.alice_cert.certificate),
        "--client-key",
        str(fed.alice_cert.key),
        "job",
        "list",
        env=admin,
    )
    assert certified.returncode == 0, certified.stderr


def test_tls_connection_guard_closes_a_tls_connection_that_sends_nothing(fed):
    context = ssl.create_default_context(cafile=str(fed.ca.ca))
    context.load_cert_chain(str(fed.marin_cert.certificate), str(fed.marin_cert.key))
    with socket.create_connection(("127.0.0.1", fed.h100.port), timeout=30) as raw:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            # The request's head never comes: past request_read_timeout (1 s) the controller closes.
            assert tls.recv(1) == b""


def test_tls_connection_guard_closes_a_connection_that_never_starts_its_handshake(fed):
    with socket.create_connection(("127.0.0.1", fed.h100.port), timeout=30) as raw:
        # No ClientHello ever comes: the handshake is cut after request_read_timeout (1 s), not the
        # event loop's minute.
        try:
            assert raw.recv(1) == b""
        except ConnectionResetError:
            pass


def _get(fed: TlsFederation, ctl: RunningController, path: str) -> tuple[int, bytes]:
    """GET `path` from `ctl` over TLS, presenting alice's certificate."""
    context = ssl.create_default_context(cafile=str(fed.ca.ca))
    context.load_cert_chain(str(fed.alice_cert.certificate), str(fed.alice_cert.key))
    conn = http.client.HTTPSConnection("127.0.0.1", ctl.port, timeout=30, context=context)
    try:
        conn.request("GET", path)
        answer = conn.getresponse()
        return answer.status, answer.read()
    finally:
        conn.close()


def test_tls_the_endpoint_relay_reaches_a_peer_over_tls_and_not_one_it_cannot_verify(fed):
    # A capability token the peer cannot verify: the peer's own refusal comes back through the relay.
    status, body = _get(fed, fed.marin, "/proxy/t/cluster=cw-h100/not-a-token/web/")
    assert status in (401, 403, 404) and b'"code"' in body, (status, body)
    status, body = _get(fed, fed.marin, "/proxy/t/cluster=cw-untrusted/not-a-token/web/")
    assert status == 502, (status, body)


def test_tls_a_named_cluster_entry_carries_its_ca(fed):
    home = fed.base / "home"
    home.mkdir(exist_ok=True)
    env = {"HOME": str(home), "IRIS_CA": None, "IRIS_CONTROLLER": None}
    added = fed.cli(fed.marin, "cluster", "add", "marin", "--url", fed.marin.url, "--ca", str(fed.ca.ca), env=env)
    assert added.returncode == 0, added.stderr
    listed = fed.cli(fed.marin, "--cluster", "marin", "job", "list", env=env)
    assert listed.returncode == 0, listed.stderr
    status = fed.cli(fed.marin, "cluster", "list", "-o", "json", env=env)
    assert '"status": "up"' in status.stdout, status.stdout + status.stderr
