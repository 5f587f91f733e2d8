"""Which address a task's endpoint may be relayed to: only one on the host its attempt runs on.

The relay dials an endpoint from the controller's own host, so an address a task names is reached
with the controller's view of the network: its loopback, the machines beside it, a cloud metadata
service. A task may only offer what runs where it runs, so an endpoint's host must be that host:
for an attempt on the controller's host (the local backend, or a worker daemon calling from
loopback) any loopback address; for an attempt on a worker daemon elsewhere, the one address the
controller sees that daemon call from; for a backend that cannot say where an attempt runs,
nothing. Link-local addresses (where metadata services live) are never relayed.

Why it is built this way:

- Addresses are compared as parsed IP addresses, never as text: `127.1`, `2130706433`,
  `0x7f.0.0.1` and `::ffff:127.0.0.1` all name 127.0.0.1, and the check must see through them.
- An unspecified address (`0.0.0.0`, `::`), or no host at all, means "where I run", and becomes the
  attempt's own address; dialled as is it would reach the controller's loopback.
- A host name is resolved once and the address that passed is what is stored and dialled, so a
  name that resolves elsewhere later (DNS rebinding) cannot move the endpoint.
- The same function judges an address when a task registers it and again on every relayed request
  (an older row, or a worker now calling from another address, is refused there).
- A name is resolved before the registration's write transaction (`resolved_host`), never inside
  it, by at most `RESOLVE_SLOTS` lookups at once, each given up after `RESOLVE_TIMEOUT_S`: a task
  naming a host whose DNS never answers would otherwise hold the database's write lock, and every
  submit and scheduling pass behind it, for as long as the lookup takes.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

from iris.backends.protocol import AttemptHost, Backend
from iris.core.errors import InvalidArgument, Unavailable

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str], Iterable[str]]
LOOPBACK = ipaddress.ip_address("127.0.0.1")
# The forms inet_aton takes for an IPv4 address (`127.1`, `2130706433`, `0x7f.1`, `0177.0.0.1`).
_LEGACY_IPV4 = re.compile(r"^(0x[0-9a-f]+|[0-9]+)(\.(0x[0-9a-f]+|[0-9]+)){0,3}\Z", re.IGNORECASE)


RESOLVE_TIMEOUT_S = 2.0
RESOLVE_SLOTS = 4
_lookups = ThreadPoolExecutor(max_workers=RESOLVE_SLOTS, thread_name_prefix="iris-resolve")
_free = threading.BoundedSemaphore(RESOLVE_SLOTS)  # a slot is held until its lookup ends, answered or not


def _getaddrinfo(host: str) -> list[str]:
    try:
        return [str(info[4][0]) for info in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)]
    finally:
        _free.release()


def resolve(host: str) -> list[str]:
    """The addresses `host` resolves to on the controller's host; InvalidArgument when it does not
    resolve within `RESOLVE_TIMEOUT_S`, Unavailable while `RESOLVE_SLOTS` lookups are still out."""
    if not _free.acquire(blocking=False):
        raise Unavailable("the controller is resolving other endpoint hosts; retry, or register an IP address")
    try:
        lookup = _lookups.submit(_getaddrinfo, host)
    except BaseException:
        _free.release()
        raise
    try:
        return lookup.result(timeout=RESOLVE_TIMEOUT_S)
    except FutureTimeout:
        raise InvalidArgument(
            f"host {host!r} did not resolve within {RESOLVE_TIMEOUT_S:g} s on the controller's host;"
            " register an IP address, or no host for the one the task runs on"
        ) from None
    except (OSError, UnicodeError) as exc:
        raise InvalidArgument(f"host {host!r} does not resolve on the controller's host ({exc})") from None


def resolved_host(host: str, resolver: Resolver = resolve) -> Resolver:
    """A resolver that answers for `host` what `resolver` answered now: the lookup happens here,
    before the caller opens its write transaction, and never again inside it."""
    addresses = list(resolver(host)) if host and parse_ip(host) is None else []
    return lambda _name: addresses


def parse_ip(text: str) -> IPAddress | None:
    """`text` as an IP address (IPv4-mapped IPv6 as IPv4, legacy IPv4 forms too), or None."""
    text = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    try:
        ip: IPAddress = ipaddress.ip_address(text)
    except ValueError:
        if not _LEGACY_IPV4.match(text):
            return None
        try:
            ip = ipaddress.IPv4Address(socket.inet_aton(text))
        except OSError:
            return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def attempt_host(
    backends: Mapping[str, Backend], attempt_id: str, backend_id: str | None, worker_id: str | None, cluster: str | None
) -> AttemptHost:
    """Where attempt `attempt_id` runs, asked of the backend that placed it."""
    if cluster:
        return AttemptHost(unknown=f"attempt {attempt_id} runs on federation peer {cluster}, not on this cluster")
    backend = backends.get(backend_id or "")
    if backend is None:
        return AttemptHost(unknown=f"attempt {attempt_id} is not placed on a backend of this cluster")
    return backend.attempt_host(attempt_id, worker_id or "")


def relay_address(host: str, port: int, where: AttemptHost, resolver: Resolver = resolve) -> str:
    """The `ip:port` (`[ip]:port`) the relay dials for an endpoint at `host:port` of an attempt
    running `where`; InvalidArgument, naming the hosts it may use, when `host` is not on it."""
    own = _own_address(where)
    if isinstance(own, str):
        raise InvalidArgument(f"{own}, so Iris cannot tell which host it serves from and relays no endpoint of it")
    ip = parse_ip(host) if host else own
    candidates = [ip] if ip is not None else [parse_ip(a) for a in resolver(host)]
    for candidate in candidates:
        if candidate is None:
            continue
        if candidate.is_unspecified:
            candidate = own
        if _allowed(candidate, own):
            return f"[{candidate}]:{port}" if candidate.version == 6 else f"{candidate}:{port}"
    raise InvalidArgument(
        f"host {host!r} is not on the host this attempt runs on; an endpoint is relayed only to that host:"
        f" {_allowed_hosts(own)}"
    )


def split_address(address: str) -> tuple[str, int]:
    """A stored `host:port` (`[v6]:port`) as (host, port)."""
    host, _, port = address.rpartition(":")
    return host.removeprefix("[").removesuffix("]"), int(port) if port.isdigit() else 0


def _own_address(where: AttemptHost) -> IPAddress | str:
    """The attempt's host as one address (loopback for the controller's own host), or why not."""
    if where.local:
        return LOOPBACK
    ip = parse_ip(where.address) if where.address else None
    if ip is None or ip.is_unspecified or _never(ip):
        return where.unknown or f"the attempt's worker calls from {where.address!r}, not an address Iris relays to"
    return ip


def _never(ip: IPAddress) -> bool:
    """Addresses never relayed to: link-local (cloud metadata services live there), multicast,
    broadcast and reserved ones."""
    if ip.is_loopback:
        return False  # ::1 sits in a reserved block
    return ip.is_link_local or ip.is_multicast or ip.is_reserved or ip == ipaddress.IPv4Address("255.255.255.255")


def _allowed(ip: IPAddress, own: IPAddress) -> bool:
    if _never(ip):
        return False
    if own.is_loopback:
        return ip.is_loopback
    return ip == own


def _allowed_hosts(own: IPAddress) -> str:
    if own.is_loopback:
        return "it runs on the controller's host, so a loopback address (127.0.0.1 or ::1), or no host at all"
    return f"it runs on a worker at {own}, so {own}, or no host at all"
