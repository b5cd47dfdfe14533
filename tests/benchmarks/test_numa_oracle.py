"""The benchmark's stand-in for the kubelet's Topology Manager (benchmarks/numa_oracle.py), on hand-made nodes whose
answer the kubelet's rules give plainly: what it admits, in which zone, what is left for the next pod."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from benchmarks import numa_oracle
from benchmarks.numa_oracle import Node, Pod

GPU = "nvidia.com/gpu"


def node(policy: str, gpus_free: Sequence[int], cpus_free: Sequence[int] = (32, 32), scope: str = "container") -> Node:
    """Two zones of 4 GPUs and 32 CPUs each."""
    capacity = [{GPU: 4, "cpu": 32}, {GPU: 4, "cpu": 32}]
    free = [{GPU: g, "cpu": c} for g, c in zip(gpus_free, cpus_free, strict=True)]
    return Node.of("n", policy=policy, capacity=capacity, free=free, scope=scope)


def pod(gpus: int, cpus: int = 1, *, guaranteed: bool = True, name: str = "p") -> Pod:
    return Pod(name, ({GPU: gpus, "cpu": cpus},), guaranteed=guaranteed)


def gpus_taken(taken: Sequence[Mapping[str, int]]) -> list[int]:
    return [zone.get(GPU, 0) for zone in taken]


def test_single_numa_node_refuses_a_pod_no_one_zone_holds_though_the_node_does() -> None:
    n = node("single-numa-node", [2, 3])
    refused = numa_oracle.admit(pod(4), n)
    assert not refused.admitted
    assert [z[GPU] for z in n.free] == [2, 3]  # a refused pod takes nothing
    three = numa_oracle.admit(pod(3), n)
    assert three.admitted and three.zones == (1,) and gpus_taken(three.taken) == [0, 3]


def test_the_lowest_zone_that_holds_the_pod_is_the_kubelets_choice() -> None:
    verdict = numa_oracle.admit(pod(2), node("single-numa-node", [4, 4]))
    assert verdict.zones == (0,) and gpus_taken(verdict.taken) == [2, 0]


def test_whole_cpus_of_a_guaranteed_pod_are_aligned_with_its_gpus_and_those_of_a_burstable_one_are_not() -> None:
    # Zone 0 has the GPUs, zone 1 the CPUs.
    assert not numa_oracle.admit(pod(2, 8), node("single-numa-node", [2, 0], [4, 32])).admitted
    burstable = numa_oracle.admit(pod(2, 8, guaranteed=False), node("single-numa-node", [2, 0], [4, 32]))
    assert burstable.admitted and burstable.zones == (0,)


def test_restricted_admits_a_pod_over_two_zones_only_when_no_one_zone_could_ever_hold_it() -> None:
    six = node("restricted", [3, 4])
    verdict = numa_oracle.admit(pod(6), six)
    # The CPU's preferred hint (one zone) narrows the merged one to zone 0: the device manager takes zone 0's GPUs
    # first, then the rest from zone 1.
    assert verdict.admitted and verdict.zones == (0,)
    assert gpus_taken(verdict.taken) == [3, 3]
    assert [z[GPU] for z in six.free] == [0, 1]
    # 3 GPUs fit one zone of capacity 4: spread over two, the hint is not preferred and restricted refuses it.
    assert not numa_oracle.admit(pod(3), node("restricted", [2, 2])).admitted


def test_restricted_refuses_gpus_and_cpus_that_only_two_zones_together_can_give() -> None:
    assert not numa_oracle.admit(pod(2, 8), node("restricted", [2, 0], [4, 32])).admitted


def test_a_pod_whose_request_no_zones_could_ever_hold_is_refused_by_both_policies() -> None:
    for policy in numa_oracle.POLICIES:
        assert not numa_oracle.admit(pod(9), node(policy, [4, 4])).admitted


def test_replay_gives_each_binding_what_the_earlier_ones_left() -> None:
    nodes = {"n": node("single-numa-node", [4, 4])}
    verdicts = numa_oracle.replay([(pod(3, name=f"p{i}"), "n") for i in range(3)], nodes)
    assert [(v.pod, v.admitted, v.zones) for v in verdicts] == [
        ("p0", True, (0,)),
        ("p1", True, (1,)),
        ("p2", False, ()),
    ]


def test_scope_container_aligns_each_container_on_its_own_and_scope_pod_the_pod_at_once() -> None:
    two_by_two = Pod("p", ({GPU: 2, "cpu": 1}, {GPU: 2, "cpu": 1}))
    container = numa_oracle.admit(two_by_two, node("single-numa-node", [3, 3]))
    assert container.admitted and container.zones == (0, 1) and gpus_taken(container.taken) == [2, 2]
    assert not numa_oracle.admit(two_by_two, node("single-numa-node", [3, 3], scope="pod")).admitted


def test_a_policy_the_oracle_does_not_judge_is_an_error() -> None:
    with pytest.raises(ValueError, match="best-effort"):
        Node.of("n", policy="best-effort", capacity=[{GPU: 4}], free=[{GPU: 4}])
