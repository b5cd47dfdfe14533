"""The Topology Manager replayed: what a node's kubelet admits under each policy and scope, and which zones a pod
takes, on the cases users meet (4-GPU pods on 2-socket nodes whose sockets small pods fragmented)."""

from __future__ import annotations

from collections.abc import Mapping

from hypothesis import given
from hypothesis import strategies as st

from scheduler.api.devices import gputopo, numa
from scheduler.api.devices import topology_manager as admission

GPU = "nvidia.com/gpu"
GIB = 2**30


def node(
    policy: numa.Policy, free: list[Mapping[str, int]], *, scope: numa.Scope = numa.Scope.CONTAINER, gpus: int = 4
) -> numa.NodeZones:
    """Zones of ``gpus`` GPUs, 32 CPUs and 256Gi each, with ``free`` left."""
    capacity = {GPU: gpus, "cpu": 32_000, "memory": 256 * GIB}
    zones = tuple(numa.Zone(f"node-{i}", i, capacity, capacity, {**capacity, **left}) for i, left in enumerate(free))
    return numa.NodeZones("gpu-0", policy, scope, zones)


def test_single_numa_node_refuses_gpus_that_only_two_zones_hold_together() -> None:
    fragmented = node(numa.Policy.SINGLE_NUMA_NODE, [{GPU: 2}, {GPU: 3}])
    refused = admission.admit(fragmented, containers=[{GPU: 4}], guaranteed=False)
    assert not refused.admitted and refused.why == "no NUMA zone has 4 nvidia.com/gpu (single-numa-node)"
    fits = admission.admit(fragmented, containers=[{GPU: 3}], guaranteed=False)
    assert fits.admitted and fits.taken == ({}, {GPU: 3})


def test_restricted_admits_what_needs_two_zones_only_if_it_cannot_fit_one() -> None:
    fragmented = node(numa.Policy.RESTRICTED, [{GPU: 2}, {GPU: 3}])
    # 4 GPUs fit one zone of 4 when it is free: spread over two, the kubelet refuses.
    four = admission.admit(fragmented, containers=[{GPU: 4}], guaranteed=False)
    assert not four.admitted and "restricted" in four.why
    # 5 never fit one zone: two zones is as few as it can take.
    five = admission.admit(fragmented, containers=[{GPU: 5}], guaranteed=False)
    assert five.admitted and five.taken == ({GPU: 2}, {GPU: 3})
    assert not admission.admit(fragmented, containers=[{GPU: 6}], guaranteed=False).admitted


def test_best_effort_admits_everything_and_policy_none_judges_nothing() -> None:
    for policy in (numa.Policy.BEST_EFFORT, numa.Policy.NONE):
        fragmented = node(policy, [{GPU: 2}, {GPU: 3}])
        assert admission.admit(fragmented, containers=[{GPU: 4}], guaranteed=False).admitted
    steered = admission.admit(
        node(numa.Policy.BEST_EFFORT, [{GPU: 2}, {GPU: 3}]), containers=[{GPU: 3}], guaranteed=False
    )
    assert steered.taken == ({}, {GPU: 3})


def test_cpus_are_aligned_only_for_a_guaranteed_pod_of_whole_cpus() -> None:
    busy = node(numa.Policy.SINGLE_NUMA_NODE, [{"cpu": 4_000}, {"cpu": 4_000}])
    ask = [{"cpu": 6_000, "memory": GIB}]
    refused = admission.admit(busy, containers=ask, guaranteed=True)
    assert not refused.admitted and refused.why == "no NUMA zone has 6 cpu (single-numa-node)"
    assert admission.admit(busy, containers=ask, guaranteed=False).admitted  # burstable: the shared pool
    assert admission.admit(busy, containers=[{"cpu": 5_500, "memory": GIB}], guaranteed=True).admitted


def test_gpus_and_cpus_must_share_a_zone() -> None:
    split = node(numa.Policy.SINGLE_NUMA_NODE, [{GPU: 4, "cpu": 2_000}, {GPU: 1, "cpu": 16_000}])
    refused = admission.admit(split, containers=[{GPU: 2, "cpu": 4_000, "memory": GIB}], guaranteed=True)
    assert not refused.admitted
    assert refused.why == "no NUMA zone has 4 cpu, 1Gi memory, 2 nvidia.com/gpu together (single-numa-node)"
    fits = admission.admit(split, containers=[{GPU: 1, "cpu": 4_000, "memory": GIB}], guaranteed=True)
    assert fits.admitted and fits.taken == ({}, {GPU: 1, "cpu": 4_000, "memory": GIB})


def test_container_scope_aligns_each_container_and_pod_scope_the_whole_pod() -> None:
    free = [{GPU: 4}, {GPU: 4}]
    two = [{GPU: 3}, {GPU: 3}]
    per_container = admission.admit(node(numa.Policy.SINGLE_NUMA_NODE, free), containers=two, guaranteed=False)
    assert per_container.admitted and per_container.taken == ({GPU: 3}, {GPU: 3})
    whole = node(numa.Policy.SINGLE_NUMA_NODE, free, scope=numa.Scope.POD)
    assert not admission.admit(whole, containers=two, guaranteed=False).admitted
    # An init container runs first and hands its devices on: judged on the zones as they are, taking nothing.
    init = admission.admit(whole, containers=[{GPU: 4}], init_containers=[{GPU: 4}], guaranteed=False)
    assert init.admitted and init.taken == ({GPU: 4}, {})


def test_the_callers_own_accounting_replaces_a_stale_object() -> None:
    published = node(numa.Policy.SINGLE_NUMA_NODE, [{GPU: 4}, {GPU: 4}])
    own = [{GPU: 1}, {GPU: 2}]  # pods bound since the agent last published
    assert not admission.admit(published, containers=[{GPU: 3}], guaranteed=False, available=own).admitted


@given(
    free=st.lists(st.tuples(st.integers(0, 8), st.integers(0, 32)), min_size=1, max_size=4),
    gpus=st.integers(0, 8),
    cpus=st.integers(0, 32),
)
def test_single_numa_node_admits_exactly_when_one_zone_holds_the_whole_pod(
    free: list[tuple[int, int]], gpus: int, cpus: int
) -> None:
    zones = node(
        numa.Policy.SINGLE_NUMA_NODE, [{GPU: g, "cpu": c * 1000} for g, c in free], gpus=8, scope=numa.Scope.POD
    )
    answer = admission.admit(zones, containers=[{GPU: gpus, "cpu": cpus * 1000}], guaranteed=True)
    assert answer.admitted == any(g >= gpus and c >= cpus for g, c in free)
    if answer.admitted and (gpus or cpus):
        used = [i for i, taken in enumerate(answer.taken) if taken]
        assert len(used) == 1 and answer.taken[used[0]] == {
            k: v for k, v in {GPU: gpus, "cpu": cpus * 1000}.items() if v
        }


@given(free=st.lists(st.integers(0, 4), min_size=2, max_size=4), gpus=st.integers(1, 16))
def test_restricted_admits_exactly_when_the_fewest_zones_that_could_ever_hold_it_hold_it_now(
    free: list[int], gpus: int
) -> None:
    zones = node(numa.Policy.RESTRICTED, [{GPU: g} for g in free])
    least = -(-gpus // 4)  # zones of 4 GPUs
    answer = admission.admit(zones, containers=[{GPU: gpus}], guaranteed=False)
    best_of_least = sum(sorted(free, reverse=True)[:least]) if least <= len(free) else -1
    assert answer.admitted == (best_of_least >= gpus)
    if answer.admitted:
        assert sum(t.get(GPU, 0) for t in answer.taken) == gpus


def test_a_zones_gpus_come_from_the_gpu_topology_else_in_zone_order() -> None:
    capacity = {"nvidia.com/gpu": 2}
    node = numa.NodeZones(
        "n",
        numa.Policy.SINGLE_NUMA_NODE,
        numa.Scope.CONTAINER,
        (numa.Zone("node-0", 0, capacity, capacity, capacity), numa.Zone("node-1", 1, capacity, capacity, capacity)),
    )
    crossed = gputopo.GpuTopology.of([gputopo.Gpu(i, numa=1 - i // 2) for i in range(4)])
    assert admission.zone_gpus(node, crossed, 4) == [[2, 3], [0, 1]]
    # One GPU's NUMA node unknown: the whole annotation is not trusted for zones, GPUs go in zone order.
    partial = gputopo.GpuTopology.of([gputopo.Gpu(i, numa=-1 if i == 0 else 1) for i in range(4)])
    assert admission.zone_gpus(node, partial, 4) == [[0, 1], [2, 3]]
    assert admission.zone_gpus(node, None, 4) == [[0, 1], [2, 3]]


_AMOUNTS = {GPU: 8, "cpu": 32_000, "memory": 8 * GIB, "rdma/ib": 2}
_requests = st.dictionaries(st.sampled_from(sorted(_AMOUNTS)), st.integers(0, 8), max_size=len(_AMOUNTS)).map(
    lambda r: {name: amount * _AMOUNTS[name] // 8 + (name == "cpu") * (amount % 2) * 500 for name, amount in r.items()}
)
_zone = st.tuples(_requests, _requests)  # capacity, and what of it is free (min of the two)


@given(
    policy=st.sampled_from(list(numa.Policy)),
    scope=st.sampled_from(list(numa.Scope)),
    zones=st.lists(_zone, min_size=1, max_size=4),
    containers=st.lists(_requests, min_size=1, max_size=3),
    init_containers=st.lists(_requests, max_size=2),
    guaranteed=st.booleans(),
)
def test_the_remembered_answer_is_the_replay_on_the_whole_zones(
    policy: numa.Policy,
    scope: numa.Scope,
    zones: list[tuple[dict[str, int], dict[str, int]]],
    containers: list[dict[str, int]],
    init_containers: list[dict[str, int]],
    guaranteed: bool,
) -> None:
    # Zones list other resources too (pods, hugepages): the memo reads only what the pod asks for, and must not
    # answer otherwise than the replay on everything; each case is asked twice, the second answer from the memo.
    made = tuple(
        numa.Zone(
            f"node-{i}",
            i,
            {**capacity, "hugepages-2Mi": GIB},
            {**capacity, "hugepages-2Mi": GIB},
            {**{name: min(free.get(name, 0), amount) for name, amount in capacity.items()}, "pods": 110},
        )
        for i, (capacity, free) in enumerate(zones)
    )
    node_zones = numa.NodeZones("gpu-0", policy, scope, made)

    def admit(*, available: list[Mapping[str, int]] | None = None, memo: bool = True) -> admission.Admission:
        return admission.admit(
            node_zones,
            containers=containers,
            init_containers=init_containers,
            guaranteed=guaranteed,
            available=available,
            memo=memo,
        )

    plain = admit(memo=False)
    for _ in range(2):
        assert admit() == plain
    empty = [z.capacity for z in made]
    assert admit(available=empty) == admit(available=empty, memo=False)
