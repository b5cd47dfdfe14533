"""The cluster's Topology object, through the operator: it replaces the built-in levels, its deletion restores
them, an invalid one changes nothing but is reported, and the leader writes its status.

The nodes carry two groupings that disagree: the built-in rack label pairs each node with one on the other
switch, while the Topology's custom ``rack`` level (``example.com/switch``) pairs the nodes of one switch. A gang
that requires ``rack`` shows which levels are in use by where its members land.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from scheduler.api.crds import topology as api_topology
from scheduler.k8s import client as k8s
from scheduler.k8s import config as k8s_config
from scheduler.k8s.operator import Operator
from tests.k8s.fakeapi import FakeApiServer, eventually

GPU = "nvidia.com/gpu"
ZONE = "example.com/pod-zone"
SWITCH = "example.com/switch"
#: node -> (zone, switch, built-in rack): switches s1 and s2 in zone z1, and the built-in racks cut across them.
NODES = {
    "n0": ("z1", "s1", "ra"),
    "n1": ("z1", "s1", "rb"),
    "n2": ("z1", "s2", "ra"),
    "n3": ("z1", "s2", "rb"),
}
CUSTOM_LEVELS = [{"name": "zone", "nodeLabel": ZONE}, {"name": "rack", "nodeLabel": SWITCH}]


def node(name: str) -> dict[str, Any]:
    zone, switch, rack = NODES[name]
    labels = {ZONE: zone, SWITCH: switch, api_topology.LABEL_RACK: rack, api_topology.LABEL_HOSTNAME: name}
    capacity = {"cpu": "64", "memory": "512Gi", "pods": "110", GPU: "4"}
    return {"metadata": {"name": name, "uid": f"uid-{name}", "labels": labels}, "status": {"allocatable": capacity}}


def topology(levels: list[dict[str, str]], generation: int = 1) -> dict[str, Any]:
    return {
        "metadata": {"name": "default", "uid": "uid-topology", "generation": generation},
        "spec": {"levels": levels},
    }


def podgroup(name: str, required: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"minMember": 2, "topology": {"required": required}},
    }


def member(group: str, i: int) -> dict[str, Any]:
    name = f"{group}-{i}"
    return {
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"uid-{name}",
            "labels": {"gpusched.io/pod-group": group},
            "creationTimestamp": "2026-11-22T09:00:00Z",
        },
        "spec": {
            "schedulerName": "gpusched",
            "containers": [{"name": "main", "resources": {"requests": {"cpu": "1"}, "limits": {GPU: "4"}}}],
        },
        "status": {"phase": "Pending"},
    }


@pytest.fixture
async def operator(client: k8s.Client) -> AsyncIterator[Operator]:
    op = Operator(client, k8s_config.parse({}), identity="test")
    op.publisher.topology_status.poll_s = 0.02
    await op.start()
    task = asyncio.create_task(op.run())
    yield op
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await op.close()


def bound(fake: FakeApiServer) -> dict[str, str]:
    """Pod name -> the node it was bound to."""
    return {s.path.split("/")[-2]: s.body["target"]["name"] for s in fake.requests("POST", "/binding")}


def events(fake: FakeApiServer, reason: str) -> list[dict[str, Any]]:
    return [e for e in fake.events.values() if e["reason"] == reason]


def topology_status(fake: FakeApiServer) -> list[dict[str, Any]]:
    return [s.body["status"] for s in fake.requests("PATCH", "/topologies/default/status")]


async def submit_gang(op: Operator, fake: FakeApiServer, group: str, required: str) -> tuple[str, str]:
    """Submit a 2 x 4-GPU gang requiring ``required``; wait until it is bound and return its two nodes."""
    op.podgroup_event(podgroup(group, required))
    for i in range(2):
        op.pod_event(member(group, i))
    await eventually(lambda: {f"{group}-0", f"{group}-1"} <= set(bound(fake)))
    return bound(fake)[f"{group}-0"], bound(fake)[f"{group}-1"]


def release(op: Operator, group: str) -> None:
    for i in range(2):
        op.pod_event(member(group, i), deleted=True)


def start(op: Operator) -> None:
    op.set_leading(True)
    for name in NODES:
        op.node_event(node(name))


async def test_a_topology_with_its_own_labels_decides_where_a_gang_goes(
    fake: FakeApiServer, operator: Operator
) -> None:
    start(operator)
    operator.listed()
    # The built-in rack label: the gang shares a built-in rack, and so spans both switches.
    a, b = await submit_gang(operator, fake, "before", "rack")
    assert NODES[a][2] == NODES[b][2] and NODES[a][1] != NODES[b][1]
    release(operator, "before")

    operator.topology_event(topology([*CUSTOM_LEVELS, {"nodeLabel": api_topology.LABEL_HOSTNAME}]))
    assert operator.cache.topology.levels == (ZONE, SWITCH, api_topology.LABEL_HOSTNAME)
    a, b = await submit_gang(operator, fake, "after", "rack")
    assert NODES[a][1] == NODES[b][1], f"{a} and {b} are on different switches"
    assert a != b  # 4 GPUs each on 4-GPU nodes: one switch, two nodes, whatever built-in rack they are in


async def test_a_gang_naming_a_level_only_the_topology_has_waits_for_it_and_a_topology_before_the_listing_counts(
    fake: FakeApiServer, operator: Operator
) -> None:
    start(operator)
    operator.listed()
    operator.podgroup_event(podgroup("zoned", "zone"))
    for i in range(2):
        operator.pod_event(member("zoned", i))
    await eventually(lambda: bool(events(fake, "FailedScheduling")))
    assert "'zone' is not a level of topology default (levels: block, rack, clique, host)" in str(
        events(fake, "FailedScheduling")[0]["message"]
    )
    assert bound(fake) == {}
    # The Topology arrives: the waiting gang is woken and resolved against the new levels.
    operator.topology_event(topology(CUSTOM_LEVELS))
    await eventually(lambda: {"zoned-0", "zoned-1"} <= set(bound(fake)))


async def test_a_topology_listed_before_the_rest_is_in_use_from_the_first_decision(
    fake: FakeApiServer, operator: Operator
) -> None:
    start(operator)
    operator.topology_event(topology(CUSTOM_LEVELS))
    operator.podgroup_event(podgroup("early", "rack"))
    for i in range(2):
        operator.pod_event(member("early", i))
    operator.listed()
    await eventually(lambda: {"early-0", "early-1"} <= set(bound(fake)))
    a, b = bound(fake)["early-0"], bound(fake)["early-1"]
    assert NODES[a][1] == NODES[b][1]


async def test_deleting_the_topology_restores_the_built_in_levels(fake: FakeApiServer, operator: Operator) -> None:
    start(operator)
    operator.topology_event(topology(CUSTOM_LEVELS))
    operator.listed()
    operator.topology_event(topology(CUSTOM_LEVELS), deleted=True)
    assert operator.cache.topology == api_topology.DEFAULT_TOPOLOGY
    assert operator.feed.topology is None
    a, b = await submit_gang(operator, fake, "again", "rack")
    assert NODES[a][2] == NODES[b][2]  # one built-in rack again


async def test_an_invalid_topology_keeps_the_levels_in_use_and_is_reported(
    fake: FakeApiServer, operator: Operator
) -> None:
    start(operator)
    operator.listed()
    operator.topology_event(topology(CUSTOM_LEVELS))
    custom = operator.cache.topology
    # Bypassing the CRD's validation (an older API server): the hostname level must be the narrowest.
    bad = topology([{"nodeLabel": api_topology.LABEL_HOSTNAME}, *CUSTOM_LEVELS], generation=2)
    operator.topology_event(bad)
    assert operator.cache.topology is custom and operator.feed.topology is custom
    assert await operator.recorder.flush()
    invalid = events(fake, "InvalidObject")
    assert len(invalid) == 1
    assert invalid[0]["involvedObject"]["kind"] == "Topology"
    assert invalid[0]["involvedObject"]["uid"] == "uid-topology"
    assert invalid[0]["message"] == (
        "topology default field spec.levels[0].nodeLabel: kubernetes.io/hostname must be the narrowest (last) level"
    )
    await eventually(lambda: any(s["observedGeneration"] == 2 for s in topology_status(fake)))
    status = topology_status(fake)[-1]
    condition = status["conditions"][0]
    assert (condition["type"], condition["status"], condition["reason"]) == ("Accepted", "False", "Invalid")
    assert condition["message"].endswith("the scheduler keeps the levels zone, rack")
    assert status["levels"] is None and status["levelCount"] is None
    a, b = await submit_gang(operator, fake, "still", "rack")
    assert NODES[a][1] == NODES[b][1]  # still the Topology's rack


async def test_the_leader_writes_the_topology_status_once_it_has_listed(
    fake: FakeApiServer, operator: Operator
) -> None:
    for name in NODES:
        operator.node_event(node(name))
    operator.node_event(
        {
            "metadata": {"name": "bare", "uid": "uid-bare"},
            "status": {"allocatable": {"cpu": "8", "memory": "64Gi", "pods": "110"}},
        }
    )
    operator.topology_event(topology(CUSTOM_LEVELS))
    operator.listed()
    await asyncio.sleep(0.1)
    assert topology_status(fake) == []  # a standby writes nothing
    operator.set_leading(True)
    await eventually(lambda: bool(topology_status(fake)))
    status = topology_status(fake)[-1]
    assert status["observedGeneration"] == 1 and status["levelCount"] == 2
    assert status["levels"] == [
        {"nodeLabel": ZONE, "domains": 1, "unlabelledNodes": 1, "nestingViolations": 0},
        {"nodeLabel": SWITCH, "domains": 2, "unlabelledNodes": 1, "nestingViolations": 0},
    ]
    condition = status["conditions"][0]
    assert (condition["type"], condition["status"]) == ("Accepted", "True")
    assert condition["message"] == "levels in use, widest first: zone, rack"
    # The watch delivers our own write back as a change of the object: nothing more is written.
    operator.topology_event(topology(CUSTOM_LEVELS))
    await asyncio.sleep(0.1)
    assert len(topology_status(fake)) == 1
