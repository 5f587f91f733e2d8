"""Tokens round-trip, and every way a token can be wrong is refused with a message that says which."""

from __future__ import annotations

import base64
import json

import jwt
import pytest
from cryptography.hazmat.primitives import serialization

from iris.controller.auth import Role, SigningKey, mint_token, unverified_issuer, verify_token
from iris.core.errors import InvalidArgument, Unauthenticated

NOW = 1_750_000_000.0


@pytest.fixture
def key() -> SigningKey:
    return SigningKey.generate()


def _tamper(token: str, **changes) -> str:
    header, payload, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims.update(changes)
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return f"{header}.{forged}.{signature}"


def test_token_round_trip_returns_identity(key):
    token = mint_token(key, "marin", "alice@example.org", "user", 3600, now=NOW)
    ident = verify_token(token, key, "marin", now=NOW + 10)
    assert ident.principal == "alice@example.org"
    assert ident.role is Role.USER
    assert ident.issuer == "marin"
    assert ident.local_admin is False
    assert ident.token_id and len(ident.token_id) == 32


def test_token_claims_carry_iss_sub_role_iat_exp_jti(key):
    token = mint_token(key, "marin", "alice", Role.DASHBOARD, 60, now=NOW)
    claims = jwt.decode(token, key.public_key, algorithms=["EdDSA"], options={"verify_exp": False})
    assert claims["iss"] == "marin" and claims["sub"] == "alice" and claims["role"] == "dashboard"
    assert claims["iat"] == int(NOW) and claims["exp"] == int(NOW) + 60
    assert jwt.get_unverified_header(token)["alg"] == "EdDSA"


def test_token_each_mint_new_jti(key):
    a = verify_token(mint_token(key, "marin", "alice", "user", 60, now=NOW), key, "marin", now=NOW)
    b = verify_token(mint_token(key, "marin", "alice", "user", 60, now=NOW), key, "marin", now=NOW)
    assert a.token_id != b.token_id


def test_token_expired_unauthenticated_says_when_and_how_to_mint(key):
    token = mint_token(key, "marin", "alice", "user", 60, now=NOW)
    with pytest.raises(Unauthenticated) as err:
        verify_token(token, key, "marin", now=NOW + 3600)
    assert "token expired at 2025-06-15T15:07:40Z" in err.value.message
    assert "iris token create" in err.value.message
    assert err.value.code == "unauthenticated"


def test_token_just_past_expiry_within_clock_skew_accepted(key):
    token = mint_token(key, "marin", "alice", "user", 60, now=NOW)
    assert verify_token(token, key, "marin", now=NOW + 60 + 5).principal == "alice"


def test_token_issued_in_future_unauthenticated(key):
    token = mint_token(key, "marin", "alice", "user", 60, now=NOW + 3600)
    with pytest.raises(Unauthenticated, match=r"issued in the future"):
        verify_token(token, key, "marin", now=NOW)


def test_token_tampered_role_unauthenticated_signature(key):
    token = _tamper(mint_token(key, "marin", "alice", "user", 60, now=NOW), role="admin")
    with pytest.raises(Unauthenticated, match=r"signature does not verify .*altered after minting"):
        verify_token(token, key, "marin", now=NOW)


def test_token_foreign_key_same_issuer_unauthenticated_signature(key):
    token = mint_token(SigningKey.generate(), "marin", "alice", "user", 60, now=NOW)
    expected = rf"signature does not verify with the key of 'marin' \(key id {key.key_id}\)"
    with pytest.raises(Unauthenticated, match=expected):
        verify_token(token, key, "marin", now=NOW)


def test_token_foreign_issuer_unauthenticated_names_issuer(key):
    token = mint_token(SigningKey.generate(), "cw-h100", "alice", "user", 60, now=NOW)
    with pytest.raises(Unauthenticated, match=r"foreign token: it was issued by cluster 'cw-h100', not by 'marin'"):
        verify_token(token, key, "marin", now=NOW)


@pytest.mark.parametrize("token", ["", "   ", "not-a-jwt", "a.b.c", "eyJhbGciOiJFZERTQSJ9.e30"])
def test_token_malformed_unauthenticated_malformed(key, token):
    with pytest.raises(Unauthenticated, match=r"^malformed token"):
        verify_token(token, key, "marin", now=NOW)


def test_token_hs256_with_public_key_as_secret_unauthenticated(key):
    public_bytes = key.public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    claims = {"iss": "marin", "sub": "mallory", "role": "admin", "iat": int(NOW), "exp": int(NOW) + 60}
    forged = jwt.encode(claims, public_bytes, algorithm="HS256")
    with pytest.raises(Unauthenticated, match=r"signed with 'HS256'.*accepts only EdDSA"):
        verify_token(forged, key, "marin", now=NOW)


def test_token_alg_none_unauthenticated(key):
    claims = {"iss": "marin", "sub": "mallory", "role": "admin", "iat": int(NOW), "exp": int(NOW) + 60}
    forged = jwt.encode(claims, None, algorithm="none")
    with pytest.raises(Unauthenticated, match=r"signed with 'none'"):
        verify_token(forged, key, "marin", now=NOW)


def test_token_signed_without_role_claim_unauthenticated(key):
    claims = {"iss": "marin", "sub": "alice", "iat": int(NOW), "exp": int(NOW) + 60}
    token = jwt.encode(claims, key.private_key, algorithm="EdDSA")
    with pytest.raises(Unauthenticated, match=r"malformed token: it lacks the 'role' claim"):
        verify_token(token, key, "marin", now=NOW)


def test_token_signed_with_unknown_role_unauthenticated(key):
    claims = {"iss": "marin", "sub": "alice", "role": "root", "iat": int(NOW), "exp": int(NOW) + 60, "jti": "x"}
    token = jwt.encode(claims, key.private_key, algorithm="EdDSA")
    with pytest.raises(Unauthenticated, match=r"unknown role 'root'"):
        verify_token(token, key, "marin", now=NOW)


def test_token_any_of_several_keys_verifies(key):
    retired = SigningKey.generate()
    token = mint_token(retired, "marin", "alice", "user", 60, now=NOW)
    assert verify_token(token, [key, retired], "marin", now=NOW).principal == "alice"


def test_token_addressed_to_a_cluster_refused_without_matching_audience(key):
    token = mint_token(key, "marin", "marin", "federation-peer", 60, now=NOW, audience="cw-h100")
    assert verify_token(token, key, "marin", now=NOW, audience="cw-h100").role is Role.FEDERATION_PEER
    with pytest.raises(Unauthenticated, match=r"addressed to 'cw-h100', not to 'cw-gb200'"):
        verify_token(token, key, "marin", now=NOW, audience="cw-gb200")
    with pytest.raises(Unauthenticated, match=r"addressed to 'cw-h100', not to this cluster"):
        verify_token(token, key, "marin", now=NOW)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"role": "root"}, r"unknown role 'root'"),
        ({"subject": ""}, r"needs a subject"),
        ({"issuer_cluster": ""}, r"needs an issuer"),
        ({"ttl_s": 0}, r"ttl must be positive"),
    ],
)
def test_mint_token_bad_argument_invalid_argument(key, kwargs, message):
    args = {"issuer_cluster": "marin", "subject": "alice", "role": "user", "ttl_s": 60} | kwargs
    with pytest.raises(InvalidArgument, match=message):
        mint_token(key, **args)


def test_unverified_issuer_reads_iss(key):
    assert unverified_issuer(mint_token(key, "marin", "alice", "user", 60)) == "marin"


def test_token_worker_claim_binds_a_worker_token_to_its_name(key):
    token = mint_token(key, "marin", "host-a", "worker", 60, now=NOW, worker="host-a")
    assert verify_token(token, key, "marin", now=NOW).worker == "host-a"
    assert verify_token(mint_token(key, "marin", "h", "worker", 60, now=NOW), key, "marin", now=NOW).worker is None
    with pytest.raises(InvalidArgument, match="only a worker token names a worker"):
        mint_token(key, "marin", "alice", "user", 60, now=NOW, worker="host-a")
    # A user token that somehow carries the claim is not bound to (nor made into) a worker.
    signed = jwt.encode(
        {"iss": "marin", "sub": "a", "role": "user", "iat": int(NOW), "exp": int(NOW) + 60, "jti": "x" * 32,
         "wkr": "host-a"},
        key.private_key, algorithm="EdDSA", headers={"kid": key.key_id},
    )  # fmt: skip
    assert verify_token(signed, key, "marin", now=NOW).worker is None
