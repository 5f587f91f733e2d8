"""Which bearer token a client sends to a controller: the one given, else $IRIS_TOKEN, else the stored one.

The stored one is the token `iris token create --save` (or a person) put in the CLI's token file for
that controller URL, so that a cluster's users type `--token` once, not once per command. An
explicit token always wins, then the environment, so a script can override what is stored without
touching the file.

The token file is read through `iris.client.token_store`, a module of its own beside this one and
not part of the controller's auth package, whose import pulls in PyJWT and cryptography (about
0.15 s, paid by every command of a person with a saved token when the store lived there). Most
commands run where no token file exists (a laptop talking to its own loopback cluster), so the
file's existence is checked first and even the store's few imports (`pathlib`, `urllib.parse`) are
paid only when there is something to read.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing's own constant costs `import typing` (4 ms) on the CLI's submit path
if TYPE_CHECKING:
    from pathlib import Path


def token_file() -> Path:
    """Where the CLI keeps its tokens: `~/.iris/tokens.json` (the auth package's default path)."""
    from pathlib import Path

    return Path(_token_path())


def _token_path() -> str:
    return os.path.join(os.path.expanduser("~"), ".iris", "tokens.json")


def stored_token(controller_url: str) -> str | None:
    """The token remembered for `controller_url` in the CLI's token file, or None."""
    if not os.path.exists(_token_path()):
        return None
    from iris.client.token_store import TokenStore

    return TokenStore(token_file()).get(controller_url)


# The stored tokens this process chose to send: (controller URL, file). A refusal of one names the
# file it came from (`refused_token_note`), since the person never typed it.
_SENT_FROM_FILE: list[tuple[str, str]] = []


def token_for(controller_url: str, explicit: str | None = None) -> str | None:
    """The token to send: `explicit` (--token), else $IRIS_TOKEN, else the one stored for the URL.

    Given but empty (`--token ""`, `IRIS_TOKEN=`) means "send no token": it does not fall through
    to the next source, so a person can call without the token stored for a cluster.
    """
    if explicit is not None:
        return explicit.strip() or None
    if "IRIS_TOKEN" in os.environ:
        return os.environ["IRIS_TOKEN"].strip() or None
    stored = stored_token(controller_url)
    if stored:
        _SENT_FROM_FILE.append((controller_url, _token_path()))
    return stored


def refused_token_note() -> str:
    """What to add to a controller's refusal of this process's token when it came from the token
    file: which file, and how to forget it; "" when the person gave the token (or sent none)."""
    if not _SENT_FROM_FILE:
        return ""
    url, path = _SENT_FROM_FILE[-1]
    return (
        f" (the token sent is the one saved for {url} in {path}; `iris token forget {url}` removes it, or pass --token)"
    )


def token_subject(token: str | None) -> str | None:
    """The user a token was minted for (its `sub` claim), read without verifying it.

    Only used to default the submitting user to the token's own user; the controller verifies the
    token and refuses a submission under any other name.
    """
    if not token or token.count(".") != 2:
        return None
    import base64
    import json

    payload = token.split(".")[1]
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (ValueError, UnicodeDecodeError):
        return None
    subject = claims.get("sub") if isinstance(claims, dict) else None
    return subject if isinstance(subject, str) and claims.get("role") == "user" else None
