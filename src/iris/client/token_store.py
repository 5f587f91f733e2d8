"""Where the CLI keeps its bearer tokens: one per controller URL, in a file only its owner can read.

The CLI remembers the token it last used for each controller so a person types `--token` once per
cluster, not once per command. The file is JSON (`{"version": 1, "tokens": {url: token}}`), mode
0600 inside a 0700 folder, and is replaced atomically (write a temporary file, then rename) so a
crash or a concurrent reader never sees half a file. URLs are normalised (scheme and host lowercased,
trailing slash dropped) so `http://Host:1/` and `http://host:1` share a token. Two CLIs storing
tokens at the same instant do not interleave: the later write wins whole.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from iris.core.errors import InvalidArgument

_VERSION = 1


def default_token_path() -> Path:
    return Path.home() / ".iris" / "tokens.json"


@dataclass(frozen=True)
class TokenStore:
    """The tokens file at `path` (default `~/.iris/tokens.json`)."""

    path: Path = field(default_factory=default_token_path)

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path).expanduser())

    def get(self, controller_url: str) -> str | None:
        """The token remembered for `controller_url`, or None."""
        return self._read().get(_normalise(controller_url))

    def put(self, controller_url: str, token: str) -> None:
        """Remembers `token` for `controller_url`, replacing any earlier one."""
        if not token or not token.strip():
            raise InvalidArgument("refusing to store an empty token")
        tokens = self._read()
        tokens[_normalise(controller_url)] = token.strip()
        self._write(tokens)

    def delete(self, controller_url: str) -> bool:
        """Forgets the token for `controller_url`; whether there was one."""
        tokens = self._read()
        if tokens.pop(_normalise(controller_url), None) is None:
            return False
        self._write(tokens)
        return True

    def _read(self) -> dict[str, str]:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise InvalidArgument(f"cannot read the token file {self.path}: {exc.strerror or exc}") from None
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InvalidArgument(
                f"the token file {self.path} is not valid JSON ({exc.msg}); delete it and pass --token again"
            ) from None
        tokens = doc.get("tokens") if isinstance(doc, dict) else None
        if not isinstance(tokens, dict) or not all(isinstance(v, str) for v in tokens.values()):
            raise InvalidArgument(
                f"the token file {self.path} is not an Iris token file; delete it and pass --token again"
            )
        return dict(tokens)

    def _write(self, tokens: dict[str, str]) -> None:
        folder = self.path.parent
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        data = json.dumps({"version": _VERSION, "tokens": dict(sorted(tokens.items()))}, indent=2) + "\n"
        tmp = folder / f".{self.path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            try:
                os.fchmod(fd, 0o600)
                os.write(fd, data.encode())
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()


def _normalise(controller_url: str) -> str:
    url = controller_url.strip()
    if not url:
        raise InvalidArgument("a token is stored per controller URL, and the URL is empty")
    parts = urlsplit(url)
    if not parts.scheme or not parts.netloc:
        return url.rstrip("/")
    return urlunsplit((parts.scheme.lower(), parts.netloc.lower(), parts.path.rstrip("/"), parts.query, ""))
