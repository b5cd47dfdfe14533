"""The cluster's Topology object through ``gpusched run``: its levels replace the built-in ones, and deleting it
brings them back.

The nodes carry two groupings that disagree: the Topology's ``rack`` level is the custom label
``example.com/switch`` (switch s1: nodes 0 and 1; s2: nodes 2 and 3), while the built-in ``rack`` label pairs each
node with one on the other switch. A gang of two 8-GPU members that requires ``rack`` fills exactly one rack of
whichever levels are in use, so where it lands says which levels the scheduler used.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from tests.e2e import kube as kube_mod
from tests.e2e.kube import Scenario, node_of
from tests.e2e.localcluster import APIError

pytestmark = pytest.mark.e2e

ZONE = "example.com/pod-zone"
SWITCH = "example.com/switch"
#: node suffix -> (switch, built-in rack)
LAYOUT = {0: ("s1", "ra"), 1: ("s1", "rb"), 2: ("s2", "ra"), 3: ("s2", "rb")}
TOPOLOGY_PATH = kube_mod.Kube.custom_path("topologies", name="default")


@pytest.fixture
def topology(sched: Scenario) -> Iterator[dict[str, Any]]:
    """The Topology ``default`` with custom levels; deleted at the end (it is cluster-wide, one per cluster)."""
    body = {
        "apiVersion": f"{kube_mod.GROUP}/{kube_mod.VERSION}",
        "kind": "Topology",
        "metadata": {"name": "default"},
        "spec": {"levels": [{"name": "zone", "nodeLabel": ZONE}, {"name": "rack", "nodeLabel": SWITCH}]},
    }
    with contextlib.suppress(APIError):
        sched.kube.request("DELETE", TOPOLOGY_PATH)
    created: dict[str, Any] = sched.kube.request("POST", kube_mod.Kube.custom_path("topologies"), body)
    try:
        yield created
    finally:
        with contextlib.suppress(APIError):
            sched.kube.request("DELETE", TOPOLOGY_PATH)


def _gang(sched: Scenario, group: str) -> list[str]:
    sched.create_podgroup(kube_mod.podgroup(group, min_member=2, topology_required="rack"))
    names = [f"{group}-{m}" for m in range(2)]
    for name in names:
        sched.create_pod(kube_mod.pod(name, gpus=8, group=group))
    return names


def _accepted(kube: kube_mod.Kube) -> dict[str, Any] | None:
    status = kube.request("GET", TOPOLOGY_PATH).get("status") or {}
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    accepted = conditions.get("Accepted") or {}
    return status if accepted.get("status") == "True" else None


def test_a_gang_requiring_a_custom_level_lands_in_one_domain_of_its_label(
    sched: Scenario, topology: Mapping[str, Any]
) -> None:
    prefix = sched.name[:30].rstrip("-")
    nodes = {
        f"{prefix}-{i}": kube_mod.gpu_node(f"{prefix}-{i}", rack=rack, labels={ZONE: "z1", SWITCH: switch})
        for i, (switch, rack) in LAYOUT.items()
    }
    sched.add_nodes(nodes.values())
    switch_of = {name: n["metadata"]["labels"][SWITCH] for name, n in nodes.items()}
    rack_of = {name: n["metadata"]["labels"][kube_mod.LABEL_RACK] for name, n in nodes.items()}
    sched.start_gpusched()

    # The Topology existed before the scheduler started: in use from its first decision, and accepted.
    placed = sched.wait_bound(_gang(sched, "custom"), timeout=60)
    switches = {switch_of.get(node_of(p)) for p in placed}
    assert len(switches) == 1 and None not in switches, f"gang spread over switches: {kube_mod.summary(placed)}"
    assert len({node_of(p) for p in placed}) == 2
    status = kube_mod.wait_until(lambda: _accepted(sched.kube), timeout=30, what="Topology default Accepted=True")
    assert status["levelCount"] == 2
    assert [level["nodeLabel"] for level in status["levels"]] == [ZONE, SWITCH]
    assert status["levels"][1]["domains"] >= 2
    printed = sched.kube.kubectl("get", "topologies", "default", "--no-headers").stdout.split()
    assert printed[:5] == ["default", ZONE, SWITCH, "2", "True"], printed
    kube_mod.check_no_overcommit(sched.pods(), sched.my_nodes())

    # Deleted: the built-in levels are back, and the same request now fills one built-in rack.
    for p in placed:
        sched.delete_pod(p["metadata"]["name"])
    sched.kube.request("DELETE", TOPOLOGY_PATH)
    placed = sched.wait_bound(_gang(sched, "builtin"), timeout=60)
    racks = {rack_of.get(node_of(p)) for p in placed}
    assert len(racks) == 1 and None not in racks, f"gang spread over built-in racks: {kube_mod.summary(placed)}"
    assert len({switch_of[node_of(p)] for p in placed}) == 2
