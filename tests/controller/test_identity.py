"""A verified token is remembered until the earlier of its own expiry and a short TTL, and a
revocation takes effect at once, cached or not (a real database and real signed tokens)."""

from __future__ import annotations

import time

import pytest

from iris.controller.auth import load_or_create_signing_key, mint_token
from iris.controller.auth.callers import VERIFIED_TOKEN_TTL_S, Identities
from iris.controller.auth.tokens import CLOCK_SKEW_S
from iris.controller.db.database import Database
from iris.core.config import parse_config
from iris.core.errors import Unauthenticated

CLIENT = "203.0.113.9:5000"  # not a trusted address: every call needs its token


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


class CountingAuth:
    """The real authenticator, counting the tokens it verifies."""

    def __init__(self, inner):
        self.inner = inner
        self.verified = 0

    def identify(self, authorization, host, **kw):
        if authorization:
            self.verified += 1
        return self.inner.identify(authorization, host, **kw)

    def __getattr__(self, name):
        return getattr(self.inner, name)


@pytest.fixture
def setup(tmp_path):
    config = parse_config(
        {
            "name": "c",
            "state_dir": str(tmp_path),
            "auth": {"task_uids": {"enabled": False}},
            "backends": [{"id": "cpu"}],
        }
    )
    db = Database(tmp_path / "controller.db")
    clock = Clock()
    identities = Identities(config, db, clock)
    auth = identities.auth = CountingAuth(identities.auth)  # type: ignore[assignment]
    key = load_or_create_signing_key(None, tmp_path)
    try:
        yield identities, auth, key, clock
    finally:
        db.close()


def bearer(key, user: str, ttl_s: float, issued: float | None = None) -> str:
    return "Bearer " + mint_token(key, "c", user, "user", ttl_s, now=issued)


def test_identity_a_token_is_verified_once_until_the_short_ttl_passes(setup):
    identities, auth, key, clock = setup
    token = bearer(key, "alice", 3600)
    first = identities.identify(token, CLIENT)
    assert first.principal == "alice"
    clock.now += VERIFIED_TOKEN_TTL_S - 1
    assert identities.identify(token, CLIENT) == first and auth.verified == 1
    clock.now += 2  # past the TTL, long before the token expires
    assert identities.identify(token, CLIENT) == first and auth.verified == 2


def test_identity_a_token_expiring_before_the_ttl_is_remembered_only_until_its_expiry(setup):
    identities, auth, key, clock = setup
    # accepted until clock.now + 10 s (its exp plus the skew allowance), sooner than the TTL
    token = bearer(key, "alice", 3600, issued=clock.now + 10 - CLOCK_SKEW_S - 3600)
    identities.identify(token, CLIENT)
    clock.now += 9
    identities.identify(token, CLIENT)
    assert auth.verified == 1
    clock.now += 2
    identities.identify(token, CLIENT)  # verified again (the signature check uses the real time)
    assert auth.verified == 2


def test_identity_a_refused_token_is_never_remembered(setup):
    identities, auth, key, clock = setup
    expired = bearer(key, "bob", 60, issued=clock.now - 3600)
    for _ in range(2):
        with pytest.raises(Unauthenticated):
            identities.identify(expired, CLIENT)
    assert auth.verified == 2 and identities.remembered() == 0


def test_identity_revocation_takes_effect_at_once_for_a_remembered_token(setup):
    identities, auth, key, clock = setup
    alice, carol = bearer(key, "alice", 3600), bearer(key, "carol", 3600)
    jti = identities.identify(alice, CLIENT).token_id
    identities.identify(carol, CLIENT)
    assert identities.remembered() == 2
    assert identities.revoke(jti, "alice", 0) is True
    with pytest.raises(Unauthenticated, match="revoked"):
        identities.identify(alice, CLIENT)
    assert identities.identify(carol, CLIENT).principal == "carol"  # others verify again and pass
    assert identities.revoke(jti, "alice", 0) is False  # already on the list


def test_identity_a_revocation_racing_a_verification_still_wins(setup):
    identities, auth, key, clock = setup
    alice = bearer(key, "alice", 3600)
    jti = identities.identify(alice, CLIENT).token_id
    # the deny list grows while the entry stays cached (a revoke landing between a verification
    # and its caching): the cached entry must not be served
    identities.revoked.add(jti)
    with pytest.raises(Unauthenticated, match="revoked"):
        identities.identify(alice, CLIENT)
