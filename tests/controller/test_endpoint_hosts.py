"""Which address a task's endpoint may be relayed to (`iris.controller.api.endpoint_hosts`): the
pure rule, with a resolver given as a table."""

from __future__ import annotations

import pytest

from iris.backends.protocol import AttemptHost
from iris.controller.api.endpoint_hosts import parse_ip, relay_address, split_address
from iris.core.errors import InvalidArgument

HERE = AttemptHost(local=True)
WORKER = AttemptHost(address="10.0.0.5")
NAMES = {
    "localhost": ["::1", "127.0.0.1"],
    "w1.internal": ["10.0.0.5"],
    "other.internal": ["10.0.0.9"],
    "rebound": ["169.254.169.254", "10.0.0.5"],
    "metadata.google.internal": ["169.254.169.254"],
}


def table(host: str) -> list[str]:
    return NAMES.get(host, [])


def refused(host: str, where: AttemptHost = HERE) -> str:
    with pytest.raises(InvalidArgument) as caught:
        relay_address(host, 8080, where, table)
    return caught.value.message


@pytest.mark.parametrize(
    "host", ["127.1", "2130706433", "0x7f.0.0.1", "0177.0.0.1", "::ffff:127.0.0.1", "[::ffff:7f00:1]", "127.0.0.1"]
)
def test_endpoint_hosts_ipv4_aliases_of_loopback_parse_as_127_0_0_1(host):
    assert str(parse_ip(host)) == "127.0.0.1"
    assert relay_address(host, 8080, HERE, table) == "127.0.0.1:8080"


@pytest.mark.parametrize("host", ["", "0.0.0.0", "::", "0", "[::]", "::ffff:0.0.0.0"])
def test_endpoint_hosts_empty_or_unspecified_host_is_the_attempts_own_host(host):
    assert relay_address(host, 8080, HERE, table) == "127.0.0.1:8080"
    assert relay_address(host, 8080, WORKER, table) == "10.0.0.5:8080"


def test_endpoint_hosts_controller_host_attempt_may_use_any_loopback_address():
    assert relay_address("::1", 1, HERE, table) == "[::1]:1"
    assert relay_address("127.0.0.2", 1, HERE, table) == "127.0.0.2:1"
    assert relay_address("localhost", 1, HERE, table) == "[::1]:1"


@pytest.mark.parametrize(
    "host", ["10.0.0.5", "192.168.1.1", "169.254.169.254", "fe80::1", "metadata.google.internal", "nowhere"]
)
def test_endpoint_hosts_controller_host_attempt_refuses_other_hosts_naming_loopback(host):
    message = refused(host)
    assert repr(host) in message and "127.0.0.1 or ::1" in message


def test_endpoint_hosts_worker_attempt_may_use_only_the_workers_address():
    assert relay_address("10.0.0.5", 80, WORKER, table) == "10.0.0.5:80"
    assert relay_address("::ffff:10.0.0.5", 80, WORKER, table) == "10.0.0.5:80"
    assert relay_address("w1.internal", 80, WORKER, table) == "10.0.0.5:80"
    # A name with one good address among bad ones is stored (and dialled) as the good one.
    assert relay_address("rebound", 80, WORKER, table) == "10.0.0.5:80"
    for host in ("127.0.0.1", "127.1", "localhost", "::1", "10.0.0.9", "other.internal", "169.254.169.254"):
        message = refused(host, WORKER)
        assert "runs on a worker at 10.0.0.5, so 10.0.0.5, or no host at all" in message, message


def test_endpoint_hosts_worker_calling_from_loopback_is_the_controllers_host():
    here = AttemptHost(address="127.0.0.1")
    assert relay_address("", 80, here, table) == "127.0.0.1:80"
    assert relay_address("127.0.0.3", 80, here, table) == "127.0.0.3:80"
    assert "127.0.0.1 or ::1" in refused("10.0.0.5", here)


@pytest.mark.parametrize("worker", ["169.254.169.254", "fe80::1", "0.0.0.0", "224.0.0.1", "not-an-ip"])
def test_endpoint_hosts_worker_at_a_never_relayed_address_serves_nothing(worker):
    message = refused("", AttemptHost(address=worker))
    assert "Iris cannot tell which host it serves from" in message


def test_endpoint_hosts_unknown_host_refuses_with_the_backends_reason():
    message = refused("127.0.0.1", AttemptHost(unknown="backend gpu is a Slurm partition"))
    assert message.startswith("backend gpu is a Slurm partition, so Iris cannot tell")


def test_endpoint_hosts_split_address_reads_both_forms():
    assert split_address("127.0.0.1:80") == ("127.0.0.1", 80)
    assert split_address("[::1]:443") == ("::1", 443)
    assert split_address("somehost:8080") == ("somehost", 8080)
