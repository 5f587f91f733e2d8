"""Decides whether the controller takes one more large request body now: a budget of the bytes of
large bodies held at once, in all and per client.

A large body (a job's workspace, up to `MAX_REQUEST_BYTES`) is read whole, decoded and written
before its call ends, holding about two and a half times its size meanwhile: eight bodies of 60 MiB
sent at once took the controller from 140 MB to 1.4 GB (measured). Each is bounded, but the number
of them was not: one client opening a few hundred connections (far below the connection limit,
half of `ulimit -n`) and sending a workspace on each would take every byte of the host's memory,
and the kernel would kill the controller. So a call whose body may be large (declared past
`SMALL_BODY`, counting a compressed body at the `GZIP_MAX_RATIO` times its size it may unpack to,
or of no declared length) first reserves that size (the most a request may be, when it declares
none) from this budget, and gives it back when its answer is sent. Past the budget it is answered `resource_exhausted` (429) with a `retry-after`
of a second, which `iris` and the SDK wait out and send again, before any of its body is read.

One client (`iris.controller.http.connections.client_of`: an address, an IPv6 /64, or on the Unix
socket the caller's uid) may hold at most half of the budget, so another's upload still gets in.
Small calls, nearly all of them, never touch it. It runs on the event loop's one thread, so it
needs no lock.
"""

from __future__ import annotations

from collections.abc import Hashable


class BodyBudget:
    """Bytes of large request bodies held at once: at most `total`, and `per_client` for one client."""

    def __init__(self, total: int, per_client: int):
        self.total = total
        self.per_client = per_client
        self.held = 0
        self._by_client: dict[Hashable, int] = {}

    def take(self, client: Hashable, size: int) -> bool:
        """Reserves `size` bytes for `client`; False (nothing reserved) when that would pass a limit.
        A body larger than a limit is taken only when nothing else is held against it."""
        mine = self._by_client.get(client, 0)
        if (self.held and self.held + size > self.total) or (mine and mine + size > self.per_client):
            return False
        self.held += size
        self._by_client[client] = mine + size
        return True

    def give_back(self, client: Hashable, size: int) -> None:
        """Returns what `take` reserved."""
        self.held -= size
        left = self._by_client.get(client, 0) - size
        if left > 0:
            self._by_client[client] = left
        else:
            self._by_client.pop(client, None)
