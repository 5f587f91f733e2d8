"""Signing keys persist across starts; peer public keys load from PEM text or files with clear errors."""

from __future__ import annotations

import stat
import threading

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from iris.controller.auth import (
    SIGNING_KEY_FILE,
    SigningKey,
    key_id,
    load_or_create_signing_key,
    load_public_key,
    mint_token,
    public_key_pem,
    verify_token,
)
from iris.core.errors import InvalidArgument


def test_signing_key_first_start_creates_file_mode_0600(tmp_path):
    state = tmp_path / "state" / "marin"
    key = load_or_create_signing_key(None, state)
    path = state / SIGNING_KEY_FILE
    assert key.path == path
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert b"PRIVATE KEY" in path.read_bytes()
    assert [p.name for p in state.iterdir()] == [SIGNING_KEY_FILE]


def test_signing_key_second_start_reuses_key(tmp_path):
    first = load_or_create_signing_key(None, tmp_path)
    token = mint_token(first, "marin", "alice", "user", 60)
    second = load_or_create_signing_key(None, tmp_path)
    assert second.key_id == first.key_id
    assert verify_token(token, second, "marin").principal == "alice"


def test_signing_key_concurrent_first_starts_share_one_key(tmp_path):
    keys: list[SigningKey] = []
    barrier = threading.Barrier(8)

    def start():
        barrier.wait()
        keys.append(load_or_create_signing_key(None, tmp_path))

    threads = [threading.Thread(target=start) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({k.key_id for k in keys}) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == [SIGNING_KEY_FILE]


def test_signing_key_configured_path_used_instead_of_state_dir(tmp_path):
    configured = tmp_path / "marin.pem"
    original = load_or_create_signing_key(None, tmp_path / "elsewhere")
    configured.write_bytes((tmp_path / "elsewhere" / SIGNING_KEY_FILE).read_bytes())
    state = tmp_path / "state"
    key = load_or_create_signing_key(configured, state)
    assert key.key_id == original.key_id
    assert key.path == configured
    assert not state.exists()


def test_signing_key_configured_missing_file_invalid_argument(tmp_path):
    with pytest.raises(InvalidArgument, match=r"auth.signing_key .*missing.pem: cannot read it"):
        load_or_create_signing_key(tmp_path / "missing.pem", tmp_path)


def test_signing_key_rsa_file_invalid_argument_names_ed25519(tmp_path):
    path = tmp_path / "rsa.pem"
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    path.write_bytes(
        rsa_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    with pytest.raises(InvalidArgument, match=r"is a RSA key; Iris signs with Ed25519"):
        load_or_create_signing_key(path, tmp_path)


def test_signing_key_garbage_file_invalid_argument(tmp_path):
    path = tmp_path / "junk.pem"
    path.write_text("not a key\n")
    with pytest.raises(InvalidArgument, match=r"is not a PEM private key"):
        load_or_create_signing_key(path, tmp_path)


def test_public_key_pem_text_loads_same_key():
    key = SigningKey.generate()
    loaded = load_public_key(public_key_pem(key), peer="marin")
    assert key_id(loaded) == key.key_id


def test_public_key_file_path_loads_relative_to_base_dir(tmp_path):
    key = SigningKey.generate()
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "marin.pub").write_text(public_key_pem(key))
    assert key_id(load_public_key(tmp_path / "keys" / "marin.pub", peer="marin")) == key.key_id
    assert key_id(load_public_key("./keys/marin.pub", peer="marin", base_dir=tmp_path)) == key.key_id


def test_public_key_neither_pem_nor_file_invalid_argument_names_peer(tmp_path):
    with pytest.raises(InvalidArgument, match=r"auth.federation_peers.cw-h100: .*neither PEM text .* nor a readable"):
        load_public_key(str(tmp_path / "nope.pub"), peer="cw-h100")


def test_public_key_private_pem_given_invalid_argument(tmp_path):
    load_or_create_signing_key(None, tmp_path)
    private_text = (tmp_path / SIGNING_KEY_FILE).read_text()
    with pytest.raises(InvalidArgument, match=r"auth.federation_peers.marin: .*holds a private key"):
        load_public_key(private_text, peer="marin")


def test_public_key_broken_pem_text_invalid_argument():
    with pytest.raises(InvalidArgument, match=r"auth.federation_peers.marin: the PEM text is not a PEM public key"):
        load_public_key("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n", peer="marin")
