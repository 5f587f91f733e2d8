"""Who is calling: resolves a TCP request's Authorization header and peer address to an Identity.

The rules, in order:
- a Bearer token whose issuer is this cluster is verified with this cluster's key and yields the
  subject and role it carries;
- a Bearer token whose issuer is a peer in `auth.federation_peers` is verified with that peer's
  public key and yields Identity(principal=<peer>, role=federation-peer). It must be a federation
  token (role federation-peer, subject = the peer, audience = this cluster): otherwise any user
  holding a token from that peer could act as the peer here;
- a request with no token from `auth.trusted_cidrs` (empty by default: an explicit opt-in for a
  single-user set-up) is local_admin;
- any other request without a token is anonymous: it may read the cluster's health and info, and
  is refused anything else with a message saying how to authenticate (`policy.authorize`).

A TCP connection's address says nothing about who opened it, so no tokenless TCP caller is ever
more than anonymous unless the operator opted in. The controller's Unix socket is the tokenless way
in on its own host: there the kernel names the caller's uid at connect time (see
`iris.controller.auth.callers`).

Every token must carry an id (`jti`) that is not on the cluster's deny list (`iris token revoke`),
and may not have been minted to live longer than `auth.max_token_lifetime` allows for its role;
both are checked together with the signature, so a revoked or over-long token is refused on its
very next call.

A token that is present but bad is refused even from a trusted network: a caller that sends a token
asked to be judged by it. `client_host` must be the socket's peer address, never a forwarded header,
or anyone could claim to be in a trusted network.
"""

from __future__ import annotations

import functools
import ipaddress
import os
from collections.abc import Callable, Iterable, Mapping, Set
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from iris.controller.auth import policy
from iris.controller.auth.identity import ANONYMOUS, LOCAL_ADMIN, Identity, Role
from iris.controller.auth.keys import SigningKey, load_or_create_signing_key, load_public_key
from iris.controller.auth.tokens import mint_peer_token, unverified_issuer, verify_token
from iris.core.errors import InvalidArgument, Unauthenticated

if TYPE_CHECKING:
    from iris.core.config import ClusterConfig

DEFAULT_TRUSTED_CIDRS: tuple[str, ...] = ()  # tokenless TCP callers are anonymous unless the config opts in

_Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, eq=False)
class Authenticator:
    """One cluster's view of who may call it; built once at start from `auth:` in its config."""

    cluster_name: str
    signing_key: SigningKey
    trusted_cidrs: Iterable[str | _Network] = DEFAULT_TRUSTED_CIDRS
    federation_peers: Mapping[str, Ed25519PublicKey] = field(default_factory=dict)
    allowed_submitters: Iterable[str] = ("*",)
    max_lifetime: Callable[[str], float] | None = None
    revoked: Set[str] = field(default_factory=frozenset)  # token ids (jti) refused from now on
    _trusted_host: Callable[[str | None], bool] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.cluster_name:
            raise InvalidArgument("an Authenticator needs the cluster's name")
        cidrs = parse_cidrs(self.trusted_cidrs)
        object.__setattr__(self, "trusted_cidrs", cidrs)
        # Kept per address: every tokenless API call asks (twice), and parsing the address each
        # time cost about 25 µs of the event loop per call.
        trusted = functools.partial(_in_networks, networks=cidrs)
        object.__setattr__(self, "_trusted_host", functools.lru_cache(maxsize=4096)(trusted))
        peers = dict(self.federation_peers)
        if self.cluster_name in peers:
            raise InvalidArgument(
                f"auth.federation_peers.{self.cluster_name}: a cluster cannot list itself as a federation peer"
            )
        for name, key in peers.items():
            if not isinstance(key, Ed25519PublicKey):
                raise InvalidArgument(f"auth.federation_peers.{name}: expected an Ed25519 public key")
        object.__setattr__(self, "federation_peers", MappingProxyType(peers))
        object.__setattr__(self, "allowed_submitters", tuple(self.allowed_submitters))

    @classmethod
    def from_config(
        cls, config: ClusterConfig, base_dir: str | os.PathLike | None = None, revoked: Set[str] = frozenset()
    ) -> Authenticator:
        """Loads keys per `config.auth`; relative key paths resolve against `base_dir` (the config's folder).

        `revoked` is the live deny list of token ids; the controller keeps adding to the same set.
        """
        auth = config.auth
        signing_path = None
        if auth.signing_key is not None:
            signing_path = Path(auth.signing_key).expanduser()
            if base_dir is not None and not signing_path.is_absolute():
                signing_path = Path(base_dir) / signing_path
        return cls(
            cluster_name=config.name,
            signing_key=load_or_create_signing_key(signing_path, config.state_path),
            trusted_cidrs=auth.trusted_cidrs,
            federation_peers={
                name: load_public_key(value, peer=name, base_dir=base_dir)
                for name, value in auth.federation_peers.items()
            },
            allowed_submitters=auth.allowed_submitters,
            max_lifetime=auth.token_lifetime,
            revoked=revoked,
        )

    def identify(
        self,
        authorization_header: str | None,
        client_host: str | None,
        now: float | None = None,
    ) -> Identity:
        """The caller's identity from its Authorization header, or from its address when it sent none:
        local_admin from `auth.trusted_cidrs`, anonymous from anywhere else."""
        if authorization_header is not None and authorization_header.strip():
            return self.verify(_bearer_token(authorization_header), now=now)
        if self.is_trusted(client_host):
            return self.local_admin()
        return Identity(ANONYMOUS, Role.ANONYMOUS, self.cluster_name)

    def local_admin(self) -> Identity:
        """The operator, acting without a token."""
        return Identity(LOCAL_ADMIN, Role.ADMIN, self.cluster_name, local_admin=True)

    def verify(self, token: str, now: float | None = None) -> Identity:
        """The identity of a bearer token minted by this cluster or signed by a configured peer."""
        identity = self._verify(token, now)
        if identity.token_id in self.revoked:
            raise Unauthenticated(
                f"token {identity.token_id} (for {identity.principal!r}, role {identity.role.value}) was revoked; "
                f"ask an admin of {self.cluster_name!r} for a new one"
            )
        return identity

    def _verify(self, token: str, now: float | None) -> Identity:
        issuer = unverified_issuer(token)
        if issuer == self.cluster_name:
            return verify_token(token, self.signing_key, self.cluster_name, now=now, max_lifetime=self.max_lifetime)
        peer_key = self.federation_peers.get(issuer)
        if peer_key is None:
            peers = ", ".join(sorted(self.federation_peers)) or "none configured"
            raise Unauthenticated(
                f"foreign token: it was issued by {issuer!r}, which this cluster ({self.cluster_name!r}) does not "
                f"trust; it accepts tokens it minted and those of its auth.federation_peers ({peers})"
            )
        claimed = verify_token(
            token, peer_key, issuer, now=now, audience=self.cluster_name, max_lifetime=self.max_lifetime
        )
        if claimed.role is not Role.FEDERATION_PEER or claimed.principal != issuer:
            raise Unauthenticated(
                f"token from peer {issuer!r} has role {claimed.role.value} and subject {claimed.principal!r}; "
                f"{self.cluster_name!r} accepts only {issuer!r}'s own federation tokens, not its users' tokens"
            )
        return Identity(issuer, Role.FEDERATION_PEER, issuer, token_id=claimed.token_id)

    def is_trusted(self, client_host: str | None) -> bool:
        """Whether a tokenless request from `client_host` is local_admin."""
        return self._trusted_host(client_host)

    def peer_token(self, peer_name: str, now: float | None = None) -> str:
        """A token to sign this cluster's next call to `peer_name` with."""
        return mint_peer_token(self.signing_key, self.cluster_name, peer_name, now=now)

    def check_handoff(self, caller: Identity, requester: str, owner: str) -> None:
        """Peer admission against this cluster's `auth.allowed_submitters`: the handoff's owner is the
        accountable submitter and must be named; see `policy.check_handoff`."""
        policy.check_handoff(caller, requester, owner, self.allowed_submitters, owner=owner)


def parse_cidrs(cidrs: Iterable[str | _Network]) -> tuple[_Network, ...]:
    """`auth.trusted_cidrs` as networks; a bad entry is an InvalidArgument naming it."""
    if isinstance(cidrs, str):
        cidrs = [cidrs]
    out = []
    for cidr in cidrs:
        if isinstance(cidr, ipaddress.IPv4Network | ipaddress.IPv6Network):
            out.append(cidr)
            continue
        try:
            out.append(ipaddress.ip_network(str(cidr).strip(), strict=False))
        except ValueError:
            raise InvalidArgument(
                f"auth.trusted_cidrs: {cidr!r} is not an address or CIDR block (e.g. 127.0.0.0/8, ::1/128)"
            ) from None
    return tuple(out)


def _in_networks(host: str | None, networks: Iterable[_Network]) -> bool:
    """Whether `host` lies in one of `networks`."""
    address = parse_address(host)
    return address is not None and any(address in net for net in networks)


def parse_address(host: str | None) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The IP address `host` names (an IPv4-mapped IPv6 address as its IPv4 one); None if none."""
    if not host:
        return None
    try:
        address = ipaddress.ip_address(host.strip().removeprefix("[").removesuffix("]"))
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _bearer_token(header: str) -> str:
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        raise Unauthenticated(f"malformed Authorization header: expected 'Bearer <token>', got the {scheme!r} scheme")
    if not token.strip():
        raise Unauthenticated("malformed Authorization header: 'Bearer' with no token after it")
    return token.strip()
