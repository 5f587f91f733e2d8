"""Decides which clusters this one receives jobs from, for `ListPeers` and `iris cluster peers`.

A cluster that only receives handoffs configures no `peers:` (it dials no one), so the federation
manager, which knows only the peers a cluster sends to, has nothing to list there. The inbound side
is read from three places: the clusters `auth.federation_peers` trusts, the requesters of the jobs
this cluster holds for others, and, in memory, when each peer last made a handoff or sync call
here. The last contact is kept in memory only: it changes every few seconds per peer (each sync),
a write per sync would cost the database for a figure that a restart makes stale anyway, and the
map is bounded by the peers whose keys the config trusts (a caller is a peer only once its signed
identity is verified).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from sqlalchemy.engine import Connection

from iris.controller.auth import Identity, Role
from iris.controller.db import federation as fed
from iris.rpc import controller_pb2 as pb


class InboundPeers:
    def __init__(self, trusted: Iterable[str], now_ms: Callable[[], int]):
        self._trusted = frozenset(trusted)
        self._now_ms = now_ms
        self._lock = threading.Lock()
        self._last: dict[str, tuple[int, str]] = {}  # peer -> (when, which call)

    def note(self, identity: Identity, method: str) -> None:
        """Records a call by a federation peer (any other caller is not a peer's contact)."""
        if identity.role is not Role.FEDERATION_PEER:
            return
        with self._lock:
            self._last[identity.principal] = (self._now_ms(), method)

    def listing(self, conn: Connection) -> list[pb.InboundPeer]:
        """Every cluster that may hand jobs here or has jobs here, by name."""
        counts = fed.received_counts(conn)
        with self._lock:
            last = dict(self._last)
        out = []
        for peer in sorted(self._trusted | set(counts) | set(last)):
            when, method = last.get(peer, (0, ""))
            out.append(
                pb.InboundPeer(
                    peer_id=peer,
                    last_contact_ms=when,
                    last_call=method,
                    active_federated_jobs=counts.get(peer, 0),
                    trusted=peer in self._trusted,
                )
            )
        return out
