"""Minting and verifying bearer tokens: EdDSA-signed JWTs that name a principal, a role and an issuer.

A token is a JWT (PyJWT) signed with the issuing cluster's Ed25519 key, carrying `iss` (the cluster),
`sub` (the principal), `role`, `iat`, `exp` and a random `jti`, plus `aud` for federation calls so a
token one peer received cannot be replayed against another. Only EdDSA is accepted: a token that
names any other algorithm is refused before any key is touched, which closes the classic
algorithm-confusion holes.

Verification checks in the order that gives the most useful message: is it a JWT at all, is it
from the expected issuer, does the signature verify, are the claims complete, is it still valid.
Time checks are done here rather than by PyJWT so that `now` can be injected, with a small
allowance for clock skew between clusters.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from iris.controller.auth.identity import Identity, Role
from iris.controller.auth.keys import KeyLike, SigningKey, as_public_key, key_id
from iris.core.errors import InvalidArgument, Unauthenticated

ALGORITHM = "EdDSA"
CLOCK_SKEW_S = 30.0
PEER_TOKEN_TTL_S = 300.0
MINT_HINT = "mint a new one with `iris token create`"


def mint_token(
    key: SigningKey,
    issuer_cluster: str,
    subject: str,
    role: Role | str,
    ttl_s: float,
    now: float | None = None,
    audience: str | None = None,
    job_scope: str | None = None,
    attempt_id: str | None = None,
    credential: str | None = None,
    worker: str | None = None,
) -> str:
    """A signed JWT saying `issuer_cluster` vouches for `subject` in `role` for `ttl_s` seconds.

    A task token (role task) also names the job it is confined to and the attempt it ends with,
    and `credential`: the id of the token whose submission the job's tree came from (none for the
    operator's), so that revoking that token stops its tasks too. A worker token may name the one
    `worker` it registers (claim `wkr`).
    """
    role = Role.parse(role)
    if not issuer_cluster:
        raise InvalidArgument("a token needs an issuer: the name of the cluster that mints it")
    if not subject:
        raise InvalidArgument("a token needs a subject: the user (or service) it identifies, e.g. --user alice")
    if not ttl_s > 0:
        raise InvalidArgument(f"a token's ttl must be positive, got {ttl_s}")
    t = time.time() if now is None else now
    iat = int(t)
    claims: dict[str, Any] = {
        "iss": issuer_cluster,
        "sub": subject,
        "role": role.value,
        "iat": iat,
        "exp": max(iat + 1, math.ceil(t + ttl_s)),
        "jti": uuid.uuid4().hex,
    }
    if audience is not None:
        claims["aud"] = audience
    if role is Role.TASK:
        if not job_scope or not attempt_id:
            raise InvalidArgument("a task token needs the job and the attempt it belongs to")
        claims.update(job=job_scope, att=attempt_id)
        if credential:
            claims["cred"] = credential
    if worker is not None:
        if role is not Role.WORKER:
            raise InvalidArgument(f"only a worker token names a worker; this one has role {role.value}")
        claims["wkr"] = worker
    return jwt.encode(claims, key.private_key, algorithm=ALGORITHM, headers={"kid": key.key_id})


def mint_peer_token(
    key: SigningKey, cluster_name: str, peer_name: str, ttl_s: float = PEER_TOKEN_TTL_S, now: float | None = None
) -> str:
    """The short-lived token a cluster signs its calls to `peer_name` with (role federation-peer)."""
    return mint_token(key, cluster_name, cluster_name, Role.FEDERATION_PEER, ttl_s, now=now, audience=peer_name)


def unverified_issuer(token: str) -> str:
    """The `iss` a token claims, before any signature check: only for choosing which key to verify with."""
    claims = _unverified_claims(token)
    iss = claims.get("iss")
    if not isinstance(iss, str) or not iss:
        raise Unauthenticated("malformed token: it has no issuer (iss) claim; " + MINT_HINT)
    return iss


def verify_token(
    token: str,
    key_or_keys: KeyLike | Iterable[KeyLike],
    issuer: str,
    now: float | None = None,
    audience: str | None = None,
    max_lifetime: Callable[[str], float] | None = None,
) -> Identity:
    """The identity in `token` if `issuer` minted it with one of `key_or_keys` and it is still valid.

    `audience` is the cluster verifying a federation token; a token's `aud` must equal it, so a token
    addressed to one cluster is refused everywhere else (and an addressed token where none is expected).
    `max_lifetime(role)` caps how long a token of that role may have been minted for.
    """
    claims = _unverified_claims(token)
    claimed = claims.get("iss")
    if claimed != issuer:
        who = f"cluster {claimed!r}" if isinstance(claimed, str) and claimed else "no issuer"
        raise Unauthenticated(
            f"foreign token: it was issued by {who}, not by {issuer!r}; use a token minted by {issuer!r} "
            "(`iris token create --config …` on that cluster)"
        )
    keys = _public_keys(key_or_keys)
    claims = _verified_claims(token, keys, issuer)
    subject, role, token_id = _required_claims(claims)
    if claims.get("aud") != audience:
        # A token addressed to one cluster must not work anywhere else, including back at its issuer.
        addressed = f"addressed to {claims['aud']!r}" if claims.get("aud") else "addressed to no cluster"
        here = repr(audience) if audience else "this cluster"
        raise Unauthenticated(
            f"token from {issuer!r} (role {role.value}, subject {subject!r}) is {addressed}, not to {here}; "
            "a federation token is valid only at the peer it was minted for"
        )
    t = time.time() if now is None else now
    exp, iat = float(claims["exp"]), float(claims["iat"])
    if max_lifetime is not None and exp - iat > max_lifetime(role.value) + 1:
        raise Unauthenticated(
            f"token for {subject!r} (role {role.value}) was minted to live {_span(exp - iat)}, longer than this "
            f"cluster allows for that role ({_span(max_lifetime(role.value))}, auth.max_token_lifetime); "
            "mint a shorter one with `iris token create --ttl`"
        )
    if t > exp + CLOCK_SKEW_S:
        if audience is not None and exp - iat <= PEER_TOKEN_TTL_S:
            # A federation token is minted for each call and lives minutes: "expired" on arrival
            # means this host's clock runs ahead of the issuer's, not that the token is old.
            raise Unauthenticated(
                f"the clocks of {issuer!r} and {audience!r} disagree by about {_span(t - iat)}: {issuer!r} signed "
                f"this call at {_iso(iat)} by its clock, and it is {_iso(t)} here, past the token's "
                f"{_span(exp - iat)} lifetime; synchronise both hosts' clocks (NTP)"
            )
        raise Unauthenticated(f"token expired at {_iso(exp)}; {MINT_HINT}")
    if iat > t + CLOCK_SKEW_S:
        raise Unauthenticated(
            f"token was issued in the future ({_iso(iat)}); the clocks of {issuer!r} and this host disagree "
            f"by about {_span(iat - t)}; synchronise both hosts' clocks (NTP)"
        )
    job_scope, attempt_id, credential = claims.get("job"), claims.get("att"), claims.get("cred")
    if role is Role.TASK and not (isinstance(job_scope, str) and job_scope and isinstance(attempt_id, str)):
        raise Unauthenticated("malformed task token: it names no job and attempt; tasks get theirs from the cluster")
    if credential is not None and not (isinstance(credential, str) and credential):
        raise Unauthenticated("malformed task token: its credential (cred) is not a token id; " + MINT_HINT)
    worker = claims.get("wkr")
    if role is Role.WORKER and worker is not None and not (isinstance(worker, str) and worker):
        raise Unauthenticated("malformed worker token: the worker name it is bound to (wkr) is empty; " + MINT_HINT)
    return Identity(
        principal=subject,
        role=role,
        issuer=issuer,
        token_id=token_id,
        job_scope=job_scope if role is Role.TASK else None,
        attempt_id=attempt_id if role is Role.TASK else None,
        credential=credential if role is Role.TASK else None,
        worker=worker if role is Role.WORKER else None,
    )


def _unverified_claims(token: str) -> dict[str, Any]:
    token = (token or "").strip()
    if not token:
        raise Unauthenticated("malformed token: the bearer token is empty; " + MINT_HINT)
    try:
        header = jwt.get_unverified_header(token)
        claims = jwt.decode(token, options={"verify_signature": False})
    except jwt.InvalidTokenError as exc:
        raise Unauthenticated(f"malformed token: not a JWT ({exc}); " + MINT_HINT) from None
    if header.get("alg") != ALGORITHM:
        raise Unauthenticated(
            f"malformed token: it is signed with {header.get('alg')!r}, and Iris accepts only {ALGORITHM} "
            "(Ed25519) tokens minted by a cluster"
        )
    if not isinstance(claims, dict):
        raise Unauthenticated("malformed token: its payload is not a JSON object; " + MINT_HINT)
    return claims


def _verified_claims(token: str, keys: list[Ed25519PublicKey], issuer: str) -> dict[str, Any]:
    options: jwt.types.Options = {
        "verify_exp": False,
        "verify_iat": False,
        "verify_nbf": False,
        "verify_iss": False,
        "verify_aud": False,
        "verify_sub": False,
        "verify_jti": False,
    }
    for key in keys:
        try:
            return jwt.decode(token, key, algorithms=[ALGORITHM], options=options)
        except jwt.InvalidSignatureError:
            continue
        except jwt.InvalidTokenError as exc:
            raise Unauthenticated(f"malformed token: {exc}; " + MINT_HINT) from None
    expected = ", ".join(key_id(k) for k in keys)
    raise Unauthenticated(
        f"token signature does not verify with the key of {issuer!r} (key id {expected}): it was altered "
        "after minting or signed by a different key; " + MINT_HINT
    )


def _required_claims(claims: dict[str, Any]) -> tuple[str, Role, str]:
    for name in ("sub", "role", "iat", "exp", "jti"):
        if name not in claims:
            raise Unauthenticated(f"malformed token: it lacks the {name!r} claim; " + MINT_HINT)
    subject, role, jti = claims["sub"], claims["role"], claims.get("jti")
    if not isinstance(subject, str) or not subject:
        raise Unauthenticated("malformed token: its subject (sub) is empty; " + MINT_HINT)
    if not all(isinstance(claims[c], int | float) and not isinstance(claims[c], bool) for c in ("iat", "exp")):
        raise Unauthenticated("malformed token: iat and exp must be numbers; " + MINT_HINT)
    try:
        parsed = Role.parse(role)
    except (InvalidArgument, ValueError):
        raise Unauthenticated(f"malformed token: unknown role {role!r}; " + MINT_HINT) from None
    if not isinstance(jti, str) or not jti:
        raise Unauthenticated("malformed token: its id (jti) is empty; " + MINT_HINT)
    return subject, parsed, jti


def _public_keys(key_or_keys: KeyLike | Iterable[KeyLike]) -> list[Ed25519PublicKey]:
    if isinstance(key_or_keys, Iterable):
        keys = [as_public_key(k) for k in key_or_keys]
    else:
        keys = [as_public_key(key_or_keys)]
    if not keys:
        raise InvalidArgument("verify_token needs at least one key")
    return keys


def _span(seconds: float) -> str:
    """`90 s`, `12 min`, `3.0 h`, `30 d`: a duration as a person reads it."""
    seconds = abs(seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.0f} d"


def _iso(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def token_expiry(authorization: str) -> float:
    """When (epoch seconds) `verify_token` stops accepting the bearer token in an Authorization
    header: its `exp` plus the clock-skew allowance. Read without verifying the token: only for
    remembering one that was just verified, until then."""
    token = authorization.strip().partition(" ")[2].strip() or authorization.strip()
    exp = _unverified_claims(token).get("exp")
    return float(exp) + CLOCK_SKEW_S if isinstance(exp, int | float) else 0.0
