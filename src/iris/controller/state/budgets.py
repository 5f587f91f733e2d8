"""Decides what `iris cluster status` and GetClusterInfo report about budgets: per user, what
their placed work is worth, how much of it runs on federation peers, their budget, and whether they
are over it.

Built from the same inputs and the same gating functions the scheduler uses on its next pass
(`user_spend`, `budget_of`, `over_budget`), so the figure a user reads is the one that decides
whether their interactive work competes as batch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from iris.rpc import controller_pb2 as pb
from iris.scheduler.gating import budget_of, over_budget, user_spend
from iris.scheduler.snapshot import RunningTask


def spend_report(
    running: Iterable[RunningTask],
    peer_spend: Mapping[str, int],
    budgets: Mapping[str, float],
    default: float | None,
) -> list[pb.UserSpend]:
    """One row per user who has placed work or a budget of their own, sorted by user."""
    spend = user_spend(running, peer_spend)
    rows = []
    for user in sorted(set(spend) | set(budgets)):
        row = pb.UserSpend(
            user=user,
            spend=spend.get(user, 0),
            on_peers=peer_spend.get(user, 0),
            over_budget=over_budget(user, spend, budgets, default),
        )
        budget = budget_of(user, budgets, default)
        if budget is not None:
            row.budget = budget
        rows.append(row)
    return rows
