"""Victim searches on nodes with NUMA zones (issue 42): a victim set must free a zone the preemptor's kubelet will
admit it to, not only room on the node; a spared victim keeps its own zone; a gang's members each take their zone in
the one what-if; and when no zone can be freed, nothing is evicted and the message says why."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import pytest

from scheduler.api.devices import numa
from scheduler.api.objects import pod as api_pod
from scheduler.core.loop import SchedulingLoop
from scheduler.core.preemption import victims as reclaim
from scheduler.framework import profile
from scheduler.queue.scheduling import SchedulingQueue
from tests.api import objects
from tests.core.harness import Clock, Cluster, Events, gone
from tests.core.test_consolidate import Mover
from tests.core.test_tenancy import Evictions

GPU = "nvidia.com/gpu"


def _zones(node: str, free: Sequence[int], *, cpus: int = 32) -> numa.NodeZones:
    """A node's object: two sockets of 4 GPUs and 32 CPUs, ``free`` GPUs and ``cpus`` CPUs left in each,
    ``single-numa-node``."""
    capacity = {GPU: 4, "cpu": 32_000}
    return numa.NodeZones(
        node,
        numa.Policy.SINGLE_NUMA_NODE,
        numa.Scope.CONTAINER,
        tuple(numa.Zone(f"node-{i}", i, capacity, capacity, {GPU: f, "cpu": cpus * 1000}) for i, f in enumerate(free)),
    )


def _pod(name: str, gpus: int, priority: int, *, group: str = "") -> api_pod.PodRequest:
    """A Guaranteed pod (requests equal limits, whole CPUs): its GPUs and CPUs come from one zone."""
    raw: dict[str, Any] = objects.pod(name, gpus=gpus, labels={"gpusched.io/pod-group": group} if group else None)
    resources = raw["spec"]["containers"][0]["resources"]
    resources["requests"] = {"cpu": "1", "memory": "1Gi"}
    resources["limits"] = {"cpu": "1", "memory": "1Gi", GPU: str(gpus)}
    raw["spec"]["priority"] = priority
    return api_pod.parse_pod(raw)


def _loop() -> tuple[Cluster, SchedulingLoop, Clock, Events, Evictions]:
    cluster = Cluster(
        [objects.node("a-0", gpus=8)], config=profile.parse({"plugins": ["fit", "gpu", "numa"], "tieBreak": "first"})
    )
    cluster.cache.numa.upsert(_zones("a-0", [4, 4]), now=0.0)
    clock, events, evictions = Clock(), Events(), Evictions()
    loop = SchedulingLoop(cluster.scheduler, SchedulingQueue(clock=clock), clock=clock, events=events)
    loop.evictor = evictions
    return cluster, loop, clock, events, evictions


def _fill(cluster: Cluster, loop: SchedulingLoop, clock: Clock, priorities: Sequence[int], *, shown: bool) -> None:
    """Four pods of 2 GPUs, one after another: s0 and s1 fill zone 0, s2 and s3 zone 1. ``shown``: the node's
    object is then published again and shows them (the store keeps no prediction of its own for them)."""
    for i, priority in enumerate(priorities):
        clock.now += 1.0
        loop.pod_pending(_pod(f"s{i}", 2, priority))
        loop.run_until_idle()
    store = cluster.cache.numa
    one = {GPU: 2, "cpu": 1000}
    assert [store.predicted(f"default/s{i}") for i in range(4)] == [(one, {})] * 2 + [({}, one)] * 2
    if shown:
        for i in range(4):
            store.running(f"default/s{i}", since=clock.now)
        store.upsert(_zones("a-0", [0, 0], cpus=30), now=clock.now + 60.0)
        assert store.predicted("default/s0") is None


def _preempt(
    priorities: Sequence[int], priority: int, *, shown: bool
) -> tuple[Cluster, SchedulingLoop, Clock, Events, Evictions]:
    """The four small pods of ``priorities`` placed (:func:`_fill`), then a 4-GPU pod of ``priority`` tried."""
    cluster, loop, clock, events, evictions = _loop()
    _fill(cluster, loop, clock, priorities, shown=shown)
    clock.now += 1.0
    loop.pod_pending(_pod("big", 4, priority))
    loop.run_until_idle()
    return cluster, loop, clock, events, evictions


@pytest.mark.parametrize("shown", [False, True], ids=["counted by the store", "shown by the object"])
def test_a_pod_that_needs_one_zone_evicts_the_pods_of_one_zone(shown: bool) -> None:
    # The cheapest victims (s0, s2, priority 1) sit one in each zone: evicting them frees 4 GPUs on the node but 2 in
    # each zone, and the kubelet refuses the 4-GPU pod. Each zone holds one pod of priority 5 too: the pods of one
    # zone have to go, and those of zone 1 are the less important (s3 started after s1).
    cluster, loop, clock, events, evictions = _preempt([1, 5, 1, 5], 100, shown=shown)
    assert sorted(p.name for p in evictions.pods) == ["s2", "s3"]
    assert evictions.nominated == {"default/big": "a-0"}
    assert events.messages("pod default/big")[0] == "preempting 2 lower-priority pod(s) of queue 'default' on node a-0"
    # Gone from the API server, the victims have left their zone, whether or not the object shows it yet: the
    # preemptor binds there, and no one more is evicted (counted used until the agent's next round, the zone looked
    # full still, and the pods of the other zone went too).
    gone(cluster, loop, clock, evictions.pods)
    assert sorted(p.name for p in evictions.pods) == ["s2", "s3"], events.messages("pod default/big")
    (placed,) = [d for d in cluster.binder.decisions if d.pod.name == "big"]
    assert placed.node == "a-0"
    assert cluster.cache.numa.predicted("default/big") == ({}, {GPU: 4, "cpu": 1000})


@pytest.mark.parametrize("shown", [False, True], ids=["counted by the store", "shown by the object"])
def test_no_pod_is_evicted_when_the_victims_allowed_free_no_zone(shown: bool) -> None:
    # The preemptor (priority 10) may evict s0 and s2 only: 4 GPUs on the node, 2 in each zone.
    _, _, _, events, evictions = _preempt([1, 50, 1, 50], 10, shown=shown)
    assert evictions.pods == []
    assert events.messages("pod default/big") == [
        "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: 0/1 nodes are available:"
        " 1 no NUMA zone has 4 nvidia.com/gpu (single-numa-node)."
    ]


def test_a_gangs_victims_free_a_zone_for_each_member() -> None:
    cluster, loop, clock, _, _ = _loop()
    _fill(cluster, loop, clock, [1, 2, 3, 4], shown=True)
    candidates = [
        reclaim.Candidate(f"default/s{i}", "batch", priority, float(i), [_pod(f"s{i}", 2, priority)])
        for i, priority in enumerate([1, 2, 3, 4])
    ]
    # Two members of 3 GPUs: the first member takes a zone of the what-if, the second needs the other one freed
    # as well. Counted on the node alone three victims (6 GPUs) would do; every pod goes.
    gang = [_pod(f"g-{i}", 3, 10, group="g") for i in range(2)]
    victims = reclaim.find_victims(cluster.scheduler, gang, priority=10, policy="Any", candidates=candidates)
    assert sorted(v.key for v in victims) == [f"default/s{i}" for i in range(4)]
    # One member of 3 GPUs needs one zone freed: the cheaper one's two pods.
    victims = reclaim.find_victims(cluster.scheduler, gang[:1], priority=10, policy="Any", candidates=candidates)
    assert sorted(v.key for v in victims) == ["default/s0", "default/s1"]


def test_consolidation_moves_the_pods_of_one_zone_not_the_first_pods_alike() -> None:
    config = profile.parse({"plugins": ["fit", "gpu", "numa"], "actions": ["allocate", "consolidate"]})
    nodes = [objects.node("a-0", cpu="64", gpus=8)] + [objects.node(f"b-{i}", cpu="64", gpus=8) for i in range(2)]
    cluster = Cluster(nodes, config=config)
    cluster.cache.numa.upsert(_zones("a-0", [4, 4]), now=0.0)
    clock, events, mover = Clock(), Events(), Mover()
    loop = SchedulingLoop(cluster.scheduler, SchedulingQueue(clock=clock), clock=clock, events=events)
    loop.mover = mover

    def bound(name: str, gpus: int, node: str, owner: str = "") -> None:
        pod = api_pod.parse_pod(objects.pod(name, gpus=gpus, node_name=node, phase="Running"))
        pod = dataclasses.replace(pod, owner=owner, owner_kind="ReplicaSet" if owner else "")
        cluster.cache.upsert_pod(pod)
        loop.pod_placed(pod)

    # a-0: a pod that may not move takes 3 GPUs of zone 0, then three movable pods of 1 GPU alike: x0 fills zone 0,
    # x1 and x2 take 2 of zone 1. The b nodes have 1 GPU free each: a moved pod goes to each.
    bound("fixed", 3, "a-0")
    for i in range(3):
        bound(f"x{i}", 1, "a-0", owner="x")
    for i in range(2):
        bound(f"fill-{i}", 7, f"b-{i}")
    assert [cluster.cache.numa.predicted(f"default/x{i}") for i in range(3)] == [({GPU: 1}, {})] + [({}, {GPU: 1})] * 2
    loop.pod_pending(api_pod.parse_pod(objects.pod("big", gpus=4)))
    loop.run_until_idle()
    # The pods are alike on the node, not in its zones: moving x0 and x1 frees 4 GPUs on the node but 3 in zone 1;
    # the plan moves the two of zone 1.
    assert sorted(p.name for p in mover.pods) == ["x1", "x2"]
