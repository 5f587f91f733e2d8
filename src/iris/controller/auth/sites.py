"""Decides whether a tokenless call names this controller as its site, and so may be local_admin.

A call without a token from a trusted address (loopback) acts as local_admin. A web page in a
browser on the controller's host can make such calls: a page of another site whose name it points
at 127.0.0.1 (DNS rebinding) is, to the browser, talking to its own site, so it may POST a
LaunchJob as JSON and read the answer, and without this check it would run any command as
local_admin. Such a call names the other site in its Host header (and a cross-site one in its
Origin), while every client of Iris names the controller by an address (127.0.0.1, ::1), by
`localhost`, by the host's own name, or by the name in the cluster's `listen` or `public_url`.
So a tokenless call whose Host or Origin names anything else is refused as local_admin; with a
token, the token decides and these headers do not matter.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from urllib.parse import urlsplit


def host_name(authority: str) -> str:
    """The host of a Host header or an Origin's authority, lower-cased, without port or brackets."""
    text = authority.strip().lower()
    if text.startswith("["):
        return text[1:].partition("]")[0]
    if text.count(":") > 1:  # a bare IPv6 address
        return text
    return text.partition(":")[0]


class OwnSites:
    """The names a tokenless call may give this controller (see the module docstring)."""

    def __init__(self, names: Iterable[str]):
        own = {"localhost", socket.gethostname().lower()}
        own.update(host_name(n) for n in names if n)
        self.names = frozenset(n for n in own if n)

    @classmethod
    def of(cls, listen: str, public_url: str | None) -> OwnSites:
        return cls([listen, urlsplit(public_url).netloc if public_url else ""])

    def owns(self, authority: str) -> bool:
        """Whether a Host header's value names this controller: an address, or one of its names."""
        host = host_name(authority)
        if host in self.names:
            return True
        try:
            ipaddress.ip_address(host)
        except ValueError:
            return False
        return True

    def refusal(self, host: str | None, origin: str | None) -> str | None:
        """Why a tokenless call with these headers may not be local_admin, or None when it may."""
        if host and not self.owns(host):
            return f"names another site ({host_name(host)!r}) as its host"
        if origin:  # "null" (a sandboxed page, a file) is no site of this controller's either
            parts = urlsplit(origin)
            if parts.scheme not in ("http", "https") or not self.owns(parts.netloc):
                return f"comes from a page of another site ({origin!r})"
        return None
