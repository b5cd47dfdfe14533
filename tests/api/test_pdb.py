"""PodDisruptionBudgets as preemption and as the Eviction API read them: which pods a budget covers, and which
victims exceed it."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.api.basics.errors import InvalidObject
from scheduler.api.objects import pdb as api_pdb


def _raw(selector: Any, allowed: Any = 0, disrupted: Any = None) -> dict[str, Any]:
    status: dict[str, Any] = {"disruptionsAllowed": allowed}
    if disrupted is not None:
        status["disruptedPods"] = disrupted
    return {"metadata": {"name": "db", "namespace": "shop"}, "spec": {"selector": selector}, "status": status}


def test_a_budget_covers_the_pods_its_selector_picks_in_its_namespace() -> None:
    budget = api_pdb.parse_pdb(_raw({"matchLabels": {"app": "db"}}))
    assert budget.key == "shop/db"
    assert budget.covers("shop", "db-0", {"app": "db", "tier": "x"})
    assert not budget.covers("other", "db-0", {"app": "db"})
    assert not budget.covers("shop", "web-0", {"app": "web"})
    assert not budget.covers("shop", "bare", {})


def test_a_missing_or_empty_selector_covers_nothing_for_preemption() -> None:
    assert not api_pdb.parse_pdb(_raw(None)).covers("shop", "db-0", {"app": "db"})
    assert not api_pdb.parse_pdb(_raw({})).covers("shop", "db-0", {"app": "db"})


def test_a_pod_already_disrupted_costs_the_budget_nothing_again() -> None:
    budget = api_pdb.parse_pdb(_raw({"matchLabels": {"app": "db"}}, disrupted={"db-0": "2026-01-01T00:00:00Z"}))
    assert not budget.covers("shop", "db-0", {"app": "db"})
    assert budget.covers("shop", "db-1", {"app": "db"})


EVICTION = api_pdb.Reading.EVICTION


def test_an_empty_selector_covers_every_pod_of_its_namespace_for_the_eviction_api() -> None:
    everything = api_pdb.parse_pdb(_raw({}))
    assert everything.covers("shop", "db-0", {"app": "db"}, reading=EVICTION)
    assert everything.covers("shop", "bare", {}, reading=EVICTION)
    assert not everything.covers("other", "db-0", {"app": "db"}, reading=EVICTION)
    # A missing selector selects nothing in either reading.
    assert not api_pdb.parse_pdb(_raw(None)).covers("shop", "db-0", {"app": "db"}, reading=EVICTION)


def test_the_eviction_api_charges_a_pod_already_disrupted_and_reads_selectors_alike() -> None:
    budget = api_pdb.parse_pdb(_raw({"matchLabels": {"app": "db"}}, disrupted={"db-0": "2026-01-01T00:00:00Z"}))
    assert budget.covers("shop", "db-0", {"app": "db"}, reading=EVICTION)
    assert budget.covers("shop", "db-1", {"app": "db"}, reading=EVICTION)
    assert not budget.covers("shop", "web-0", {"app": "web"}, reading=EVICTION)
    assert not budget.covers("shop", "bare", {}, reading=EVICTION)


def test_the_allowance_is_spent_in_order() -> None:
    budget = api_pdb.parse_pdb(_raw({"matchExpressions": [{"key": "app", "operator": "Exists"}]}, allowed=1))
    pods = [("shop", "a", {"app": "db"}), ("shop", "b", {}), ("shop", "c", {"app": "db"}), ("shop", "d", {"app": "x"})]
    assert api_pdb.violating(pods, [budget]) == [False, False, True, True]
    assert api_pdb.violating(pods, []) == [False] * 4


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (_raw({"matchLabels": {"app": "db"}}, allowed="two"), "status.disruptionsAllowed"),
        (_raw({"matchLabels": {"app": "db"}}, disrupted=["db-0"]), "status.disruptedPods"),
        (_raw({"matchExpressions": [{"key": "app", "operator": "Near"}]}), "spec.selector.matchExpressions"),
    ],
)
def test_a_malformed_budget_is_refused_naming_the_field(raw: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidObject) as caught:
        api_pdb.parse_pdb(raw)
    assert caught.value.obj == "poddisruptionbudget shop/db"
    assert caught.value.field.startswith(field)
