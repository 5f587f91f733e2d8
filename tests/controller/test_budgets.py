"""Budgets end to end on a real controller: a `budgets:` config section, the over-budget band
downgrade (seen in the pending reason and `iris job explain`), and spend in `iris cluster status`
and GetClusterInfo."""

from __future__ import annotations

import json

import pytest

from iris.rpc import controller_pb2 as pb
from tests.conftest import wait_until
from tests.controller.helpers import client, launch, status

ONE_HOST = [{"id": "cpu", "kind": "local", "workers": 1, "capacity": {"cpu": 2, "memory": "4G"}}]
TASK_VALUE = 6  # one task of the default shape: 1 core (5) + 1 GiB (1)


def running(c, job_id: str) -> bool:
    return status(c, job_id).job.state == "RUNNING"


def spend_of(c, user: str) -> pb.UserSpend | None:
    return next((s for s in c.get_cluster_info(pb.GetClusterInfoRequest()).spend if s.user == user), None)


def test_over_budget_user_competes_as_batch_and_cluster_status_shows_the_spend(controller_factory):
    ctl = controller_factory("test", backends=ONE_HOST, budgets={"default": 1000, "users": {"alice": 5}})
    c = client(ctl)
    first = launch(c, "first", ["sleep", "300"])
    wait_until(lambda: running(c, first), message="alice's first job running")
    bob = launch(c, "filler", ["sleep", "300"], user="bob", priority="batch")
    wait_until(lambda: running(c, bob), message="bob's batch job running")

    # alice spends 6 against a budget of 5: her next interactive job competes as batch, so it
    # cannot preempt bob's batch job and waits, saying why.
    second = launch(c, "second", ["sleep", "300"])
    wait_until(lambda: "over budget" in status(c, second).job.pending_reason, message="over-budget reason")
    # carol, within the default budget, preempts bob's batch job at once: the band made the difference.
    carol = launch(c, "carol-job", ["sleep", "300"], user="carol")
    wait_until(lambda: running(c, carol), message="carol's interactive job running")
    assert status(c, second).job.state == "PENDING"

    explained = ctl.cli("job", "explain", second)
    assert explained.returncode == 0, explained.stderr
    assert "user alice is over budget, so it competes as batch" in explained.stdout
    as_json = json.loads(ctl.cli("-o", "json", "job", "explain", second, check=True).stdout)
    assert "over budget" in as_json["summary"]

    alice = spend_of(c, "alice")
    assert (alice.spend, alice.budget, alice.over_budget, alice.on_peers) == (TASK_VALUE, 5, True, 0)
    carol_spend = spend_of(c, "carol")
    assert (carol_spend.spend, carol_spend.budget, carol_spend.over_budget) == (TASK_VALUE, 1000, False)
    assert spend_of(c, "bob") is None  # batch work is not charged; bob has no budget of his own

    text = ctl.cli("cluster", "status")
    alice_row = next(line for line in text.stdout.splitlines() if line.startswith("alice"))
    assert "6" in alice_row and "OVER" in alice_row
    data = json.loads(ctl.cli("-o", "json", "cluster", "status").stdout)
    rows = {row["user"]: row for row in data["cluster"]["spend"]}
    assert rows["alice"]["over_budget"] is True and float(rows["alice"]["budget"]) == 5
    assert "budget" in rows["carol"] and not rows["carol"].get("over_budget")


@pytest.mark.parametrize(
    ("budgets", "words"),
    [
        ({"users": {"alice": -1}}, "budgets.users: alice: a budget must be zero or more"),
        ({"default": "lots"}, "budgets.default"),
        ({"per_user": {}}, "budgets.per_user: is not a known key"),
        ({"users": {"alice": float("nan")}}, "budgets.users.alice: Input should be a finite number"),
        ({"users": {"alice": float("inf")}}, "budgets.users.alice: Input should be a finite number"),
        ({"default": float("inf")}, "budgets.default: Input should be a finite number"),
        ({"users": {"alice": True}}, "budgets.users: alice: True is not a number"),
        ({"users": {"/alice": 5}}, "budgets.users: '/alice' can never match a user"),
        ({"users": {"": 5}}, "budgets.users: '' can never match a user"),
    ],
)
def test_budgets_config_with_a_bad_value_is_refused_naming_the_key(budgets, words):
    from iris.core.config import parse_config
    from iris.core.errors import InvalidArgument

    with pytest.raises(InvalidArgument) as caught:
        parse_config({"name": "c", "backends": ONE_HOST, "budgets": budgets})
    assert words in caught.value.message
