"""The pending reason a federated job shows while it waits, one sentence per handoff stage.

A queued job and a delivered one are both PENDING on the parent but wait on different things
(capacity, the peer's admission, the first sync), so `job list` and `describe` say which. The
wording is the table in DESIGN §6; it is defined once here so every surface shows the same text.
"""

from __future__ import annotations

from iris.core.errors import FailedPrecondition, IrisError, PermissionDenied, Unauthenticated, Unavailable
from iris.federation.model import HandoffState


def peer_error_words(exc: Exception) -> str:
    """What a failed call to a peer means, in plain words (what `cluster peers` and reasons show)."""
    message = exc.message if isinstance(exc, IrisError) else str(exc)
    if isinstance(exc, Unauthenticated):
        return (
            f"refuses this cluster's key ({message}); on the peer, list this cluster's public key"
            " (`iris cluster public-key`) under auth.federation_peers"
        )
    if isinstance(exc, PermissionDenied):
        return f"refuses this cluster ({message})"
    if isinstance(exc, FailedPrecondition):
        return f"answers, but {message}"
    if isinstance(exc, Unavailable):
        return f"does not answer ({message})"
    return f"failed: {type(exc).__name__}: {message}"


def refuses(last_error: str) -> bool:
    """Whether a peer's last error says it answers but refuses this cluster (not that it is down)."""
    return last_error.startswith("refuses")


def queued_reason(peer_id: str | None = None, peer_errors: dict[str, str] | None = None) -> str:
    """In the queue: no peer chosen yet, or pinned to `peer_id` (--target-cluster); with the cause
    when the peers it could go to fail (`peer_errors`: peer -> its last error in words)."""
    errors = peer_errors or {}
    if peer_id:
        reason = f"Queued for peer {peer_id} to report free capacity"
        return f"{reason}; peer {peer_id} {errors[peer_id]}" if peer_id in errors else reason
    reason = "Queued for a federation peer to report free capacity"
    if errors:
        reason += "; " + "; ".join(f"peer {p} {e}" for p, e in sorted(errors.items()))
    return reason


def awaiting_acceptance_reason(peer_id: str) -> str:
    """Promoted and delivered; the peer has not admitted it yet."""
    return f"Awaiting acceptance by peer {peer_id}"


def awaiting_first_report_reason(peer_id: str) -> str:
    """Admitted by the peer; its first status report has not landed."""
    return f"Handed off to peer {peer_id}; awaiting first status report"


def credentials_refused_reason(peer_id: str, message: str, retry_in_s: float) -> str:
    """Delivered, and the peer refused this cluster's credentials: kept pending, retried."""
    return (
        f"Peer {peer_id} refused this cluster's credentials at delivery ({message}); "
        f"retrying in {retry_in_s:.0f}s. Check that {peer_id} lists this cluster's public key "
        "(auth.federation_peers) and that both clocks agree"
    )


def pending_reason(state: HandoffState | str, peer_id: str | None, first_report_landed: bool = False) -> str | None:
    """The pending reason for a SENT handle in `state`, or None when the handoff says nothing.

    Once the first status report has landed the mirrored job carries the peer's own reason, and a
    rejected handoff is not pending at all.
    """
    state = HandoffState(state)
    if state is HandoffState.QUEUED_HANDOFF:
        return queued_reason(peer_id)
    if state is HandoffState.PENDING_HANDOFF and peer_id:
        return awaiting_acceptance_reason(peer_id)
    if state is HandoffState.HANDED_OFF and peer_id and not first_report_landed:
        return awaiting_first_report_reason(peer_id)
    return None


# What a federated job's expected start says while no scheduler here plans it and its peer has
# reported none: unknown, and why. (A peer reports the expected start of each job it holds waiting.)
_UNKNOWN_START = {
    HandoffState.QUEUED_HANDOFF.value: (
        "no estimate: it waits here for a federation peer with room, and peers report no start times"
        " for jobs they do not hold"
    ),
    HandoffState.PENDING_HANDOFF.value: "no estimate: it is being handed to peer {peer}",
    HandoffState.HANDED_OFF.value: "no estimate: it waits on peer {peer}, which has reported no start time for it yet",
}


def unknown_start(handoff_state: str, peer: str) -> str | None:
    """Why a federated job in `handoff_state` (on `peer`) has no expected start; None for a job
    in no such stage (a local one, whose start the scheduler here estimates)."""
    words = _UNKNOWN_START.get(handoff_state)
    return words.format(peer=peer) if words is not None else None
