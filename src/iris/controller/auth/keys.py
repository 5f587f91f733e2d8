"""Which Ed25519 key a cluster signs with, and which public keys it trusts for its peers.

A cluster's identity is one Ed25519 key: given in config (`auth.signing_key`, a PEM file) or, when
absent, generated into `<state_dir>/signing_key.pem` on first start and reused on every start after,
so tokens minted yesterday still verify after a restart. Ed25519 because keys and signatures are
small, signing is fast enough to sign every federation call, and there are no parameters to get
wrong. A generated key is written with mode 0600 through a temporary file and a hard link, so a
crash mid-write never leaves a truncated key behind and two processes racing on a fresh state_dir
end up sharing whichever key was linked first.

Peers' public keys come from config as PEM text or a path to a file holding it; anything else is an
InvalidArgument that names the peer, raised at load time rather than at the first handoff.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from iris.core.errors import InvalidArgument

SIGNING_KEY_FILE = "signing_key.pem"
_PEM_MARKER = "-----BEGIN"


@dataclass(frozen=True, eq=False)
class SigningKey:
    """A cluster's private Ed25519 key; `path` is the file it lives in, None for an in-memory key."""

    private_key: Ed25519PrivateKey
    path: Path | None = None
    public_key: Ed25519PublicKey = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "public_key", self.private_key.public_key())

    @classmethod
    def generate(cls) -> SigningKey:
        """A fresh in-memory key (tests, or a cluster that keeps no state)."""
        return cls(Ed25519PrivateKey.generate())

    @functools.cached_property
    def key_id(self) -> str:  # every minted token names it: computed once, not per token
        return key_id(self.public_key)


KeyLike = SigningKey | Ed25519PrivateKey | Ed25519PublicKey


def as_public_key(key: KeyLike) -> Ed25519PublicKey:
    """The public half of any key form this module hands out."""
    if isinstance(key, SigningKey):
        return key.public_key
    if isinstance(key, Ed25519PrivateKey):
        return key.public_key()
    if isinstance(key, Ed25519PublicKey):
        return key
    raise InvalidArgument(f"expected an Ed25519 key, got {type(key).__name__}")


def key_id(key: KeyLike) -> str:
    """A short fingerprint (SHA-256 of the raw public key, 16 hex digits) to tell keys apart in messages."""
    raw = as_public_key(key).public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def public_key_pem(key: KeyLike) -> str:
    """The public half as PEM text: what `iris cluster public-key` prints and peers put in config."""
    return (
        as_public_key(key)
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode("ascii")
    )


def load_or_create_signing_key(path: str | os.PathLike | None, state_dir: str | os.PathLike) -> SigningKey:
    """The cluster's key: from `path` when configured, else `<state_dir>/signing_key.pem`, created if absent."""
    if path is not None:
        p = Path(path).expanduser()
        return SigningKey(_read_private_key(p, f"auth.signing_key {p}"), p)
    state = Path(state_dir).expanduser()
    p = state / SIGNING_KEY_FILE
    if not p.exists():
        state.mkdir(parents=True, exist_ok=True)
        _create_exclusive(p, _private_pem(Ed25519PrivateKey.generate()))
    return SigningKey(_read_private_key(p, f"signing key {p}"), p)


def load_public_key(
    text_or_path: str | os.PathLike, peer: str | None = None, base_dir: str | os.PathLike | None = None
) -> Ed25519PublicKey:
    """An Ed25519 public key from PEM text or a file holding it; a relative path resolves against `base_dir`."""
    label = f"auth.federation_peers.{peer}" if peer else "public key"
    text = os.fspath(text_or_path)
    if _PEM_MARKER in text:
        return _parse_public_pem(text.encode(), label, "the PEM text")
    p = Path(text).expanduser()
    if base_dir is not None and not p.is_absolute():
        p = Path(base_dir) / p
    try:
        data = p.read_bytes()
    except OSError as exc:
        shown = text if len(text) <= 80 else text[:77] + "..."
        raise InvalidArgument(
            f"{label}: {shown!r} is neither PEM text (-----BEGIN PUBLIC KEY-----) nor a readable file "
            f"({exc.strerror or exc}); give the peer's `iris cluster public-key` output or a file holding it"
        ) from None
    return _parse_public_pem(data, label, str(p))


def _parse_public_pem(data: bytes, label: str, source: str) -> Ed25519PublicKey:
    if b"PRIVATE KEY" in data:
        raise InvalidArgument(
            f"{label}: {source} holds a private key; give the peer's public key (`iris cluster public-key`) "
            "and keep the private key on the peer"
        )
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise InvalidArgument(f"{label}: {source} is not a PEM public key ({exc})") from None
    if not isinstance(key, Ed25519PublicKey):
        raise InvalidArgument(f"{label}: {source} is a {_kind(key)} key; Iris clusters sign with Ed25519")
    return key


def _read_private_key(p: Path, label: str) -> Ed25519PrivateKey:
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise InvalidArgument(f"{label}: cannot read it ({exc.strerror or exc})") from None
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except TypeError:
        raise InvalidArgument(f"{label} is encrypted; Iris needs an unencrypted Ed25519 key (mode 0600)") from None
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise InvalidArgument(
            f"{label} is not a PEM private key ({exc}); create one with `openssl genpkey -algorithm ed25519`"
        ) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise InvalidArgument(
            f"{label} is a {_kind(key)} key; Iris signs with Ed25519 (`openssl genpkey -algorithm ed25519`)"
        )
    return key


def _private_pem(key: Ed25519PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _create_exclusive(p: Path, data: bytes) -> None:
    """Writes `data` to `p` (mode 0600) only if `p` does not exist; a file another process won with is kept."""
    tmp = p.with_name(f".{p.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, p)
    except FileExistsError:
        pass
    except OSError:  # a filesystem without hard links: fall back to a rename, atomic but not exclusive
        if not p.exists():
            os.replace(tmp, p)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def _kind(key: object) -> str:
    name = type(key).__name__
    for suffix in ("PrivateKey", "PublicKey"):
        name = name.removesuffix(suffix)
    return name.lstrip("_") or "non-Ed25519"
