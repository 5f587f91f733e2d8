"""Identity resolution: own tokens, peer tokens, trusted networks, and everything else refused."""

from __future__ import annotations

import jwt
import pytest

from iris.controller.auth import (
    ANONYMOUS,
    LOCAL_ADMIN,
    Authenticator,
    Identity,
    Role,
    SigningKey,
    authorize,
    load_or_create_signing_key,
    mint_peer_token,
    mint_token,
    public_key_pem,
)
from iris.core.config import parse_config
from iris.core.errors import InvalidArgument, PermissionDenied, Unauthenticated

NOW = 1_750_000_000.0


@pytest.fixture
def marin_key() -> SigningKey:
    return SigningKey.generate()


@pytest.fixture
def peer_key() -> SigningKey:
    return SigningKey.generate()


@pytest.fixture
def auth(peer_key, marin_key) -> Authenticator:
    """cw-h100, which trusts marin as a federation peer."""
    return Authenticator(
        "cw-h100",
        peer_key,
        federation_peers={"marin": marin_key.public_key},
        allowed_submitters=["*@example.org"],
    )


def bearer(token: str) -> str:
    return f"Bearer {token}"


def test_identify_own_token_returns_subject_and_role(auth, peer_key):
    token = mint_token(peer_key, "cw-h100", "alice@example.org", "dashboard", 60, now=NOW)
    ident = auth.identify(bearer(token), "10.1.2.3", now=NOW)
    assert ident == Identity("alice@example.org", Role.DASHBOARD, "cw-h100", token_id=ident.token_id)


def test_identify_lowercase_bearer_scheme_accepted(auth, peer_key):
    token = mint_token(peer_key, "cw-h100", "alice", "user", 60, now=NOW)
    assert auth.identify(f"bearer  {token} ", "10.1.2.3", now=NOW).principal == "alice"


def test_identify_peer_token_returns_federation_peer(auth, marin_key):
    token = mint_peer_token(marin_key, "marin", "cw-h100", now=NOW)
    ident = auth.identify(bearer(token), "10.9.9.9", now=NOW)
    assert (ident.principal, ident.role, ident.issuer, ident.local_admin) == (
        "marin",
        Role.FEDERATION_PEER,
        "marin",
        False,
    )


def test_identify_authenticator_peer_token_accepted_by_that_peer(marin_key, peer_key):
    marin = Authenticator("marin", marin_key)
    cw = Authenticator("cw-h100", peer_key, federation_peers={"marin": marin_key.public_key})
    assert cw.identify(bearer(marin.peer_token("cw-h100")), "10.0.0.5").principal == "marin"


def test_identify_peer_token_claiming_other_peer_issuer_unauthenticated(marin_key, peer_key):
    gb200_key = SigningKey.generate()
    auth = Authenticator(
        "cw-h100", peer_key, federation_peers={"marin": marin_key.public_key, "cw-gb200": gb200_key.public_key}
    )
    forged = mint_peer_token(gb200_key, "marin", "cw-h100", now=NOW)
    with pytest.raises(Unauthenticated, match=r"signature does not verify with the key of 'marin'"):
        auth.identify(bearer(forged), "10.0.0.5", now=NOW)


def test_identify_peer_users_token_unauthenticated(auth, marin_key):
    users_token = mint_token(marin_key, "marin", "alice@example.org", "admin", 60, now=NOW)
    with pytest.raises(Unauthenticated, match=r"role admin, subject 'alice@example.org'\) is addressed to no cluster"):
        auth.identify(bearer(users_token), "10.0.0.5", now=NOW)


def test_identify_peer_non_federation_role_addressed_here_unauthenticated(auth, marin_key):
    token = mint_token(marin_key, "marin", "marin", "admin", 60, now=NOW, audience="cw-h100")
    with pytest.raises(Unauthenticated, match=r"accepts only 'marin''s own federation tokens"):
        auth.identify(bearer(token), "10.0.0.5", now=NOW)


def test_identify_peer_token_minted_for_another_cluster_unauthenticated(auth, marin_key):
    token = mint_peer_token(marin_key, "marin", "cw-gb200", now=NOW)
    with pytest.raises(Unauthenticated, match=r"addressed to 'cw-gb200', not to 'cw-h100'"):
        auth.identify(bearer(token), "10.0.0.5", now=NOW)


def test_identify_own_peer_token_replayed_at_issuer_unauthenticated(peer_key):
    marin_key = SigningKey.generate()
    marin = Authenticator("marin", marin_key, federation_peers={"cw-h100": peer_key.public_key})
    sent_to_peer = marin.peer_token("cw-h100", now=NOW)
    with pytest.raises(Unauthenticated, match=r"addressed to 'cw-h100', not to this cluster"):
        marin.identify(bearer(sent_to_peer), "10.0.0.5", now=NOW)


def test_identify_peer_token_from_a_clock_behind_says_the_clocks_disagree_and_by_how_much(auth, marin_key):
    # A federation token is minted for each call: "expired" on arrival means the clocks disagree.
    token = mint_peer_token(marin_key, "marin", "cw-h100", ttl_s=60, now=NOW)
    with pytest.raises(Unauthenticated, match=r"clocks of 'marin' and 'cw-h100' disagree by about 10 min") as err:
        auth.identify(bearer(token), "10.0.0.5", now=NOW + 600)
    assert "mint a new one" not in err.value.message


def test_identify_peer_token_from_a_clock_ahead_says_by_how_much(auth, marin_key):
    token = mint_peer_token(marin_key, "marin", "cw-h100", now=NOW + 300)
    with pytest.raises(Unauthenticated, match=r"issued in the future .* disagree by about 5 min"):
        auth.identify(bearer(token), "10.0.0.5", now=NOW)


def test_identify_revoked_token_unauthenticated(peer_key, marin_key):
    token = mint_token(peer_key, "cw-h100", "alice", "user", 60, now=NOW)
    jti = jwt.decode(token, options={"verify_signature": False})["jti"]
    revoked: set[str] = set()
    auth = Authenticator("cw-h100", peer_key, revoked=revoked)
    assert auth.identify(bearer(token), None, now=NOW).principal == "alice"
    revoked.add(jti)
    with pytest.raises(Unauthenticated, match=r"was revoked"):
        auth.identify(bearer(token), None, now=NOW)


def test_identify_token_longer_than_its_roles_lifetime_unauthenticated(peer_key):
    auth = Authenticator("cw-h100", peer_key, max_lifetime=lambda role: 3600.0)
    token = mint_token(peer_key, "cw-h100", "alice", "user", 2 * 3600, now=NOW)
    with pytest.raises(
        Unauthenticated, match=r"minted to live 2.0 h, longer than .* \(60 min, auth.max_token_lifetime\)"
    ):
        auth.identify(bearer(token), None, now=NOW)
    assert auth.identify(bearer(mint_token(peer_key, "cw-h100", "alice", "user", 3600, now=NOW)), None, now=NOW)


def test_identify_unknown_issuer_unauthenticated_lists_trusted(auth):
    stranger = mint_peer_token(SigningKey.generate(), "evil", "cw-h100", now=NOW)
    expected = r"issued by 'evil', which this cluster \('cw-h100'\) does not trust.*\(marin\)"
    with pytest.raises(Unauthenticated, match=expected):
        auth.identify(bearer(stranger), "10.0.0.5", now=NOW)


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "10.0.0.1", "2001:db8::1", None, "", "testclient"])
def test_identify_tokenless_tcp_caller_is_anonymous_by_default(auth, host):
    """No network is trusted unless the config says so, loopback included: an address names no one."""
    ident = auth.identify(None, host)
    assert ident == Identity(ANONYMOUS, Role.ANONYMOUS, "cw-h100")
    assert not ident.local_admin


def test_identify_anonymous_may_read_cluster_info_only(auth):
    anonymous = auth.identify("  ", "127.0.0.1")
    authorize(anonymous, "GetClusterInfo")
    with pytest.raises(Unauthenticated, match=r"^ListJobs needs a caller .* no token .* IRIS_TOKEN .* Unix socket"):
        authorize(anonymous, "ListJobs")


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.9.10", "::1", "[::1]", "::ffff:127.0.0.1"])
def test_identify_opted_in_loopback_without_token_local_admin(peer_key, host):
    auth = Authenticator("cw-h100", peer_key, trusted_cidrs=["127.0.0.0/8", "::1/128"])
    assert auth.identify(None, host) == Identity(LOCAL_ADMIN, Role.ADMIN, "cw-h100", local_admin=True)


def test_identify_configured_cidr_trusts_that_network_only(peer_key):
    auth = Authenticator("cw-h100", peer_key, trusted_cidrs=["10.0.0.0/8"])
    assert auth.identify(None, "10.20.30.40").local_admin
    assert auth.identify(None, "127.0.0.1").role is Role.ANONYMOUS


def test_anonymous_is_no_tokens_role(peer_key):
    with pytest.raises(InvalidArgument, match=r"unknown role 'anonymous'"):
        mint_token(peer_key, "cw-h100", "alice", "anonymous", 60, now=NOW)


def test_identify_bad_token_from_loopback_unauthenticated_not_local_admin(auth):
    with pytest.raises(Unauthenticated, match=r"^malformed token"):
        auth.identify("Bearer garbage", "127.0.0.1")


@pytest.mark.parametrize(
    ("header", "message"),
    [("Basic dXNlcjpwdw==", r"got the 'Basic' scheme"), ("Bearer", r"'Bearer' with no token")],
)
def test_identify_malformed_authorization_header_unauthenticated(auth, header, message):
    with pytest.raises(Unauthenticated, match=message):
        auth.identify(header, "127.0.0.1")


def test_authenticator_bad_cidr_invalid_argument(peer_key):
    with pytest.raises(InvalidArgument, match=r"auth.trusted_cidrs: 'localhost' is not an address or CIDR"):
        Authenticator("cw-h100", peer_key, trusted_cidrs=["localhost"])


def test_authenticator_itself_as_peer_invalid_argument(peer_key):
    with pytest.raises(InvalidArgument, match=r"cannot list itself"):
        Authenticator("cw-h100", peer_key, federation_peers={"cw-h100": peer_key.public_key})


def test_authenticator_check_handoff_uses_allowed_submitters(auth, marin_key):
    caller = auth.identify(bearer(mint_peer_token(marin_key, "marin", "cw-h100", now=NOW)), "10.0.0.5", now=NOW)
    auth.check_handoff(caller, "marin", "alice@example.org")
    with pytest.raises(PermissionDenied, match=r"submitter 'bob@other.org' is not allowed"):
        auth.check_handoff(caller, "marin", "bob@other.org")


def test_authenticator_from_config_loads_peers_and_persists_key(tmp_path, marin_key):
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "marin.pub").write_text(public_key_pem(marin_key))
    gb200 = SigningKey.generate()
    config = parse_config(
        {
            "name": "cw-h100",
            "state_dir": "state",
            "backends": [{"id": "cpu"}],
            "auth": {
                "trusted_cidrs": ["10.0.0.0/8"],
                "federation_peers": {"marin": "./keys/marin.pub", "cw-gb200": public_key_pem(gb200)},
                "allowed_submitters": ["*@example.org"],
            },
        },
        base_dir=tmp_path,
    )
    first = Authenticator.from_config(config, base_dir=tmp_path)
    second = Authenticator.from_config(config, base_dir=tmp_path)
    assert first.signing_key.key_id == second.signing_key.key_id
    assert first.signing_key.path == tmp_path / "state" / "signing_key.pem"
    assert sorted(first.federation_peers) == ["cw-gb200", "marin"]
    assert first.allowed_submitters == ("*@example.org",)
    assert first.identify(None, "10.1.1.1").local_admin
    token = mint_peer_token(gb200, "cw-gb200", "cw-h100")
    assert second.identify(bearer(token), "192.0.2.1").principal == "cw-gb200"


def test_authenticator_from_config_configured_signing_key_relative_to_base_dir(tmp_path):
    key = load_or_create_signing_key(None, tmp_path / "keys")
    config = parse_config(
        {"name": "marin", "backends": [{"id": "cpu"}], "auth": {"signing_key": "keys/signing_key.pem"}},
        base_dir=tmp_path,
    )
    assert Authenticator.from_config(config, base_dir=tmp_path).signing_key.key_id == key.key_id


def test_authenticator_from_config_bad_peer_key_invalid_argument_names_peer(tmp_path):
    config = parse_config(
        {"name": "marin", "backends": [{"id": "cpu"}], "auth": {"federation_peers": {"cw-h100": "keys/none.pub"}}},
        base_dir=tmp_path,
    )
    # the config loader resolves the relative path against the config's folder
    with pytest.raises(InvalidArgument, match=r"auth.federation_peers.cw-h100: '.*' is neither"):
        Authenticator.from_config(config, base_dir=tmp_path)
