"""The numa filter: a pod goes only where its node's kubelet (Topology Manager) admits it, the zones counted by the
scheduler itself while the published objects lag, a gang's members each in their zone, and the messages."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from scheduler.api.crds import podgroup as api_podgroup
from scheduler.api.devices import numa
from scheduler.api.objects import node as api_node
from scheduler.api.objects import pod as api_pod
from scheduler.core import capacity, gang
from scheduler.framework import profile
from scheduler.framework.interface import Code
from scheduler.plugins import numa as numa_plugin
from tests.api import objects
from tests.core.harness import Cluster

GPU = "nvidia.com/gpu"


def zones(node: str, free: Sequence[int], *, policy: numa.Policy = numa.Policy.SINGLE_NUMA_NODE) -> numa.NodeZones:
    """Zones of 4 GPUs and 32 CPUs each with ``free`` GPUs left, as the node's NodeResourceTopology says."""
    capacity_ = {GPU: 4, "cpu": 32_000}
    return numa.NodeZones(
        node,
        policy,
        numa.Scope.CONTAINER,
        tuple(numa.Zone(f"node-{i}", i, capacity_, capacity_, {GPU: f, "cpu": 32_000}) for i, f in enumerate(free)),
    )


def cluster(*published: numa.NodeZones, plain: Sequence[str] = ()) -> Cluster:
    names = [z.node for z in published] + list(plain)
    c = Cluster(
        [objects.node(name, gpus=8) for name in names],
        config=profile.parse({"plugins": ["fit", "gpu", "numa"], "tieBreak": "first"}),
    )
    for z in published:
        c.cache.numa.upsert(z, now=0.0)
    return c


def test_a_pod_goes_where_one_zone_holds_its_gpus_not_where_most_gpus_are_free() -> None:
    # a-0 has 5 GPUs free, split 2 + 3 (small pods fragmented both sockets); b-0 has 4, all in zone 1.
    c = cluster(zones("a-0", [2, 3]), zones("b-0", [0, 4]))
    assert c.place(objects.pod("train", gpus=4))[0] == "b-0"


def test_the_message_says_what_the_kubelet_would_say() -> None:
    c = cluster(zones("a-0", [2, 3]), zones("b-0", [3, 1]))
    result = c.schedule(objects.pod("train", gpus=4))
    assert result.decision is None
    assert "2 no NUMA zone has 4 nvidia.com/gpu (single-numa-node)" in result.status.message, result.status.message


def test_the_schedulers_own_count_keeps_a_second_pod_off_a_zone_the_object_still_shows_free() -> None:
    c = cluster(zones("a-0", [4, 0]), zones("b-0", [4, 0]))
    first, _ = c.place(objects.pod("first", gpus=3))
    # The object of the first pod's node still says 4 free in zone 0; the kubelet has 1 left there.
    second, _ = c.place(objects.pod("second", gpus=3))
    assert {first, second} == {"a-0", "b-0"}
    assert c.cache.numa.available(first) == [{GPU: 1, "cpu": 32_000}, {GPU: 0, "cpu": 32_000}]


def test_restricted_admits_what_needs_two_zones_and_best_effort_refuses_nothing() -> None:
    c = cluster(zones("r-0", [4, 3], policy=numa.Policy.RESTRICTED))
    assert c.schedule(objects.pod("six", gpus=6)).decision is not None  # never fits one zone: two are the fewest
    c = cluster(zones("r-0", [2, 3], policy=numa.Policy.RESTRICTED))
    assert c.schedule(objects.pod("four", gpus=4)).decision is None  # fits one zone once free: not spread now
    c = cluster(zones("b-0", [2, 3], policy=numa.Policy.BEST_EFFORT))
    assert c.schedule(objects.pod("four", gpus=4)).decision is not None


def test_nodes_without_an_object_keep_todays_rules() -> None:
    c = cluster(zones("a-0", [2, 3]), plain=["z-0"])
    assert c.place(objects.pod("train", gpus=4))[0] == "z-0"


def owned(name: str, owner: str, *, gpus: int) -> dict[str, Any]:
    """A pod of ReplicaSet ``owner`` (its uid is its name here)."""
    raw = objects.pod(name, gpus=gpus)
    raw["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": owner, "uid": owner, "controller": True}
    ]
    return raw


def test_a_node_whose_kubelet_refused_a_pod_of_the_owner_is_kept_from_its_next_pods_and_says_why() -> None:
    # No object on either node: the kubelet enforces a policy nobody published, and refused web-1 on a-0.
    c = cluster(plain=["a-0", "b-0"])
    c.cache.kubelet_refusals.refused(owner="web", node="a-0")
    assert c.place(owned("web-2", "web", gpus=8))[0] == "b-0"  # a-0 comes first by name, and is empty
    result = c.schedule(owned("web-3", "web", gpus=8))
    assert result.decision is None
    message = result.status.message
    assert "1 node(s) whose kubelet refused a pod of the same owner (TopologyAffinityError)" in message, message
    assert "1 Insufficient nvidia.com/gpu" in message and capacity.NEVER not in message, message
    # Another owner's pod is not kept off: its shape may well fit where web's did not.
    assert c.place(owned("api-1", "api", gpus=8))[0] == "a-0"


def test_a_pod_asking_for_single_numa_node_is_kept_to_it_where_the_kubelet_enforces_nothing() -> None:
    spec = {numa.KOORDINATOR_POD_SPEC: '{"numaTopologyPolicy": "SingleNUMANode"}'}
    c = cluster(zones("a-0", [2, 3], policy=numa.Policy.NONE), zones("b-0", [0, 4], policy=numa.Policy.NONE))
    assert c.place(objects.pod("asks", gpus=4, annotations=spec))[0] == "b-0"
    assert c.place(objects.pod("plain", gpus=4))[0] == "a-0"  # without the ask: the first node with room


def test_a_nodes_koordinator_label_gives_its_pods_a_policy_below_the_kubelets_and_the_pods_own() -> None:
    label = {numa.KOORDINATOR_NODE_POLICY: "SingleNUMANode"}
    c = Cluster(
        [objects.node(name, gpus=8, labels=label) for name in ("a-0", "b-0", "c-0")],
        config=profile.parse({"plugins": ["fit", "gpu", "numa"], "tieBreak": "first"}),
    )
    # a-0's kubelet enforces nothing: its label's rule holds; c-0's kubelet says best-effort, which wins over it.
    for z in (zones("a-0", [2, 3], policy=numa.Policy.NONE), zones("c-0", [2, 3], policy=numa.Policy.BEST_EFFORT)):
        c.cache.numa.upsert(z, now=0.0)
    c.cache.numa.upsert(zones("b-0", [0, 4], policy=numa.Policy.NONE), now=0.0)
    assert c.place(objects.pod("labelled", gpus=4))[0] == "b-0"
    result = c.schedule(objects.pod("next", gpus=4))
    assert result.decision is not None and result.decision.node == "c-0"
    # The pod's own ask wins over the label: asking for no rule, it may span a-0's zones.
    spec = {numa.KOORDINATOR_POD_SPEC: '{"numaTopologyPolicy": "None"}'}
    assert c.place(objects.pod("spans", gpus=4, annotations=spec))[0] == "a-0"


def test_an_unreadable_koordinator_label_is_reported_and_the_node_keeps_no_rule_of_its_own() -> None:
    info = api_node.parse_node(objects.node("a-0", gpus=8, labels={numa.KOORDINATOR_NODE_POLICY: "OneSocket"}))
    assert info.numa_policy is None
    (problem,) = info.problems
    assert problem.field == f"metadata.labels[{numa.KOORDINATOR_NODE_POLICY}]" and "OneSocket" in str(problem)


def test_zones_too_small_for_the_pod_never_fit_and_say_so() -> None:
    c = cluster(zones("a-0", [4, 4]), zones("b-0", [4, 4]))
    result = c.schedule(objects.pod("big", gpus=6))
    assert result.decision is None
    assert "2 no NUMA zone has 6 nvidia.com/gpu (single-numa-node)" in result.status.message
    assert f"{capacity.NEVER}: of the nodes with room for it, 2 no NUMA zone has 6" in result.status.message
    assert "it fits there once a node whose NUMA zones can hold it joins" in result.status.message


@pytest.mark.parametrize("members", [2, 3])
def test_a_gangs_members_each_take_their_zone_in_the_one_what_if(members: int) -> None:
    c = cluster(zones("a-0", [4, 4]))
    group = api_podgroup.PodGroup(namespace="default", name="g", min_member=members)
    pods = [api_pod.parse_pod(objects.pod(f"m{i}", gpus=3)) for i in range(members)]
    placed = gang.place_gang(c.scheduler, group, pods)
    # Two members of 3 GPUs take a zone each; a third finds 1 GPU left in each zone and the gang does not fit.
    assert (placed.status.code is Code.SUCCESS) == (members == 2), placed.status.message


def scored(*published: numa.NodeZones) -> Cluster:
    """Like :func:`cluster`, with the numa score and nothing else to choose between nodes."""
    names = [z.node for z in published]
    c = Cluster(
        [objects.node(name, gpus=8) for name in names],
        config=profile.parse({"plugins": ["fit", "gpu", {"name": "numa", "weight": 1}], "tieBreak": "first"}),
    )
    for z in published:
        c.cache.numa.upsert(z, now=0.0)
    return c


def test_a_small_pod_takes_the_lone_gpu_of_a_broken_zone_not_one_of_a_whole_zone() -> None:
    # a-0: 4 + 1 free, the kubelet would give a 1-GPU pod zone 0 and break the only zone a 4-GPU pod fits in.
    # b-0: 1 + 4 free, it takes the lone GPU of zone 0 and breaks nothing.
    c = scored(zones("a-0", [4, 1]), zones("b-0", [1, 4]))
    assert c.place(objects.pod("small", gpus=1)) == ("b-0", (0,))
    assert c.place(objects.pod("train", gpus=4))[0] in {"a-0", "b-0"}


def test_a_small_pod_goes_to_a_partly_used_zone_and_leaves_empty_ones_whole() -> None:
    c = scored(zones("empty-0", [4, 4]), zones("used-0", [2, 4]))
    assert c.place(objects.pod("small", gpus=2))[0] == "used-0"
    # Now used-0 has 0 + 4 and empty-0 4 + 4: three 4-GPU pods still find a whole zone each.
    assert {c.place(objects.pod(f"x{i}", gpus=4))[0] for i in range(3)} == {"empty-0", "used-0"}


def test_on_a_best_effort_node_an_aligned_placement_wins() -> None:
    # spread-0 could only spread 4 GPUs over its two zones; whole-0 holds them in zone 1.
    c = scored(
        zones("spread-0", [2, 3], policy=numa.Policy.BEST_EFFORT),
        zones("whole-0", [0, 4], policy=numa.Policy.BEST_EFFORT),
    )
    assert c.place(objects.pod("train", gpus=4)) == ("whole-0", (4, 5, 6, 7))


def test_the_score_is_skipped_without_zones_and_for_pods_nothing_of_which_is_aligned() -> None:
    plain = Cluster([objects.node(name, gpus=8) for name in ("a-0", "b-0")], ["fit", "gpu", "numa"])
    result = plain.schedule(objects.pod("p", gpus=1))
    assert result.state is not None
    out = np.full(2, -1.0)
    score = numa_plugin.Numa({}).score
    assert score(result.state, np.arange(2), out) is False and list(out) == [-1.0, -1.0]
    c = scored(zones("a-0", [4, 1]), zones("b-0", [1, 4]))
    result = c.schedule(objects.pod("cpu-only", cpu="2"))  # not Guaranteed: its CPUs come from the shared pool
    assert result.state is not None
    assert score(result.state, np.arange(2), out) is False


def test_the_gpus_chosen_are_those_of_the_zone_the_kubelet_gives() -> None:
    # Zone 0 is full (pods of another scheduler hold its GPUs: the cache sees every GPU free); GPUs in zone order.
    c = cluster(zones("a-0", [0, 4]))
    assert c.place(objects.pod("two", gpus=2)) == ("a-0", (4, 5))
    assert c.place(objects.pod("next", gpus=2)) == ("a-0", (6, 7))


def test_the_gpus_chosen_follow_the_numa_nodes_the_gpu_topology_annotation_gives() -> None:
    # GPUs alternate between the sockets: even ones on NUMA node 0, odd ones on NUMA node 1.
    topology = {"gpus": [{"index": i, "numa": i % 2} for i in range(8)]}
    c = Cluster(
        [objects.node("a-0", gpus=8, annotations={"gpusched.io/gpu-topology": json.dumps(topology)})],
        config=profile.parse({"plugins": ["fit", "gpu", "numa"]}),
    )
    c.cache.numa.upsert(zones("a-0", [0, 4]), now=0.0)
    assert c.place(objects.pod("two", gpus=2)) == ("a-0", (1, 3))


def test_pods_of_one_shape_see_each_change_of_the_zones() -> None:
    # The filter remembers its answer per node and pod shape until the node's zones change: each pod placed changes
    # them, so the same 4-GPU pod fills zone 0, then zone 1, then finds no zone, then one again once one is free.
    c = Cluster(
        [objects.node("a-0", gpus=12)],  # GPUs outside the zones (the node has room): only the zones refuse
        config=profile.parse({"plugins": ["fit", "gpu", "numa"], "tieBreak": "first"}),
    )
    c.cache.numa.upsert(zones("a-0", [4, 4]), now=0.0)
    assert [c.place(objects.pod(f"p{i}", gpus=4))[0] for i in range(2)] == ["a-0", "a-0"]
    assert c.cache.numa.available("a-0") == [{GPU: 0, "cpu": 32_000}, {GPU: 0, "cpu": 32_000}]
    result = c.schedule(objects.pod("p2", gpus=4))
    assert result.decision is None and "no NUMA zone has 4 nvidia.com/gpu" in result.status.message
    c.cache.numa.gone("default/p0")
    assert c.place(objects.pod("p2", gpus=4))[0] == "a-0"
