"""The pending reasons of DESIGN §6's table, word for word."""

from __future__ import annotations

from iris.federation.model import HandoffState
from iris.federation.reasons import pending_reason


def test_pending_reason_queued_without_pin_names_no_peer():
    assert pending_reason(HandoffState.QUEUED_HANDOFF, None) == "Queued for a federation peer to report free capacity"


def test_pending_reason_queued_with_pin_names_the_peer():
    assert pending_reason("QUEUED_HANDOFF", "cw-h100") == "Queued for peer cw-h100 to report free capacity"


def test_pending_reason_promoted_awaits_acceptance():
    assert pending_reason(HandoffState.PENDING_HANDOFF, "cw-h100") == "Awaiting acceptance by peer cw-h100"


def test_pending_reason_handed_off_awaits_first_report():
    assert (
        pending_reason(HandoffState.HANDED_OFF, "cw-h100") == "Handed off to peer cw-h100; awaiting first status report"
    )


def test_pending_reason_after_first_report_or_rejection_is_none():
    assert pending_reason(HandoffState.HANDED_OFF, "cw-h100", first_report_landed=True) is None
    assert pending_reason(HandoffState.HANDOFF_REJECTED, "cw-h100") is None
