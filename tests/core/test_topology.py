"""Topology-aware gangs: the tightest domain that holds the whole gang, as few domains as possible when only
preferred, a clear reason when no domain can hold it, unknown levels reported, and contiguous preemption."""

from __future__ import annotations

from collections import Counter

from scheduler.api.crds import topology
from scheduler.api.crds.podgroup import PodGroup
from scheduler.api.crds.topology import TopologyConstraint
from scheduler.api.objects import pod as api_pod
from scheduler.core import gang
from scheduler.core.loop import SchedulingLoop
from scheduler.core.preemption import victims as reclaim
from scheduler.queue.scheduling import SchedulingQueue
from tests.api import objects
from tests.core.harness import Clock, Cluster, Events

PROFILE = ("fit", "gpu", {"name": "gang", "weight": 50}, {"name": "spread", "weight": 60}, "topology")


def _cluster(layout: dict[str, tuple[str, str]], gpus: int = 8, plugins: tuple[object, ...] = PROFILE) -> Cluster:
    """Nodes by name -> (block, rack); an empty value leaves the label off."""
    nodes = []
    for name, (block, rack) in layout.items():
        labels = {}
        if block:
            labels[topology.LABEL_BLOCK] = block
        if rack:
            labels[topology.LABEL_RACK] = rack
        nodes.append(objects.node(name, cpu="64", gpus=gpus, labels=labels))
    return Cluster(nodes, plugins)


def _members(group: str, count: int, gpus: int) -> list[api_pod.PodRequest]:
    return [
        api_pod.parse_pod(objects.pod(f"{group}-{i}", gpus=gpus, labels={"gpusched.io/pod-group": group}))
        for i in range(count)
    ]


def _racks(cluster: Cluster, decisions: list[str]) -> Counter[str]:
    labels = {n: cluster.cache.nodes[cluster.cache.slot_of(n) or 0].info.labels for n in decisions}
    return Counter(labels[n].get(topology.LABEL_RACK, "-") for n in decisions)


def _place(cluster: Cluster, name: str, count: int, gpus: int, **constraint: str) -> gang.GangResult:
    group = PodGroup("default", name, min_member=count, topology=TopologyConstraint(**constraint))
    return gang.place_gang(cluster.scheduler, group, _members(name, count, gpus))


# 4 nodes in rack big, 2 in rack mid, 1 in rack small; one node without a rack label.
RACKS = {
    "big-0": ("b1", "big"),
    "big-1": ("b1", "big"),
    "big-2": ("b1", "big"),
    "big-3": ("b1", "big"),
    "mid-0": ("b1", "mid"),
    "mid-1": ("b1", "mid"),
    "small-0": ("b1", "small"),
    "loose": ("b1", ""),
}


def test_a_required_rack_goes_to_the_tightest_rack_that_holds_the_whole_gang() -> None:
    cluster = _cluster(RACKS)
    result = _place(cluster, "two", 2, 8, required="rack")
    assert result.status.ok
    assert _racks(cluster, [d.node for d in result.decisions]) == Counter({"mid": 2})
    result = _place(cluster, "one", 1, 8, required="rack")
    assert result.status.ok
    assert _racks(cluster, [d.node for d in result.decisions]) == Counter({"small": 1})
    result = _place(cluster, "three", 3, 8, required="rack")
    assert result.status.ok
    assert _racks(cluster, [d.node for d in result.decisions]) == Counter({"big": 3})


def test_members_smaller_than_a_node_fill_the_rack_they_fit_exactly() -> None:
    cluster = _cluster(RACKS)
    result = _place(cluster, "four", 4, 4, required="rack")
    assert result.status.ok
    assert _racks(cluster, [d.node for d in result.decisions]) == Counter({"mid": 4})


def test_no_rack_can_hold_it_says_why_and_holds_nothing() -> None:
    cluster = _cluster(RACKS)
    result = _place(cluster, "huge", 5, 8, required="rack")
    assert not result.status.ok
    assert result.status.message == (
        "Never fits as the cluster is: no rack can hold 40 GPUs: the largest has 32 GPUs in all; 1 node outside every"
        " rack (no label network.topology.gpusched.io/rack); it fits once a rack that large forms, or it asks for"
        " fewer GPUs"
    )
    assert not cluster.binder.decisions and cluster.cache.arrays.used[:, 3].sum() == 0


def test_a_required_level_is_never_left_even_when_the_cluster_has_room() -> None:
    cluster = _cluster({"a": ("b1", "r1"), "b": ("b1", "r2"), "c": ("b1", "r3")})
    result = _place(cluster, "g", 2, 8, required="rack")
    assert not result.status.ok and "no rack can hold 16 GPUs: the largest has 8 GPUs in all" in result.status.message


def test_preferred_keeps_one_domain_when_one_holds_the_gang_and_else_the_fewest() -> None:
    layout = {f"r{r}-{i}": ("b1", f"r{r}") for r in range(4) for i in range(2)}
    cluster = _cluster(layout)
    result = _place(cluster, "fits", 4, 4, preferred="rack")
    assert result.status.ok and len(_racks(cluster, [d.node for d in result.decisions])) == 1
    result = _place(cluster, "spills", 5, 8, preferred="rack")
    assert result.status.ok
    # 40 GPUs in racks of 16: three racks at least, and no more.
    assert len(_racks(cluster, [d.node for d in result.decisions])) == 3


def test_inside_the_required_block_the_gang_fills_as_few_racks_as_possible() -> None:
    layout = {f"b1-r{r}-{i}": ("b1", f"b1-r{r}") for r in range(3) for i in range(2)}
    layout.update({f"b2-r{r}-{i}": ("b2", f"b2-r{r}") for r in range(4) for i in range(2)})
    cluster = _cluster(layout)
    result = _place(cluster, "g", 4, 8, required="block")
    assert result.status.ok
    racks = _racks(cluster, [d.node for d in result.decisions])
    # Block b1 (48 GPUs) fits tighter than b2 (64); inside it, two racks of two nodes, not three.
    assert set(racks) <= {"b1-r0", "b1-r1", "b1-r2"} and len(racks) == 2


def test_a_gang_naming_an_unknown_level_waits_with_an_event_and_condition() -> None:
    cluster = _cluster(RACKS)
    clock, events = Clock(), Events()
    queue = SchedulingQueue(clock=clock, initial_backoff_s=1.0, max_backoff_s=10.0, unschedulable_timeout_s=60.0)
    loop = SchedulingLoop(cluster.scheduler, queue, clock=clock, events=events)
    loop.group_upsert(PodGroup("default", "g", min_member=2, topology=TopologyConstraint(required="row")))
    for pod in _members("g", 2, 1):
        loop.pod_pending(pod)
    loop.run_until_idle()
    assert not cluster.binder.decisions
    status = loop.group_status("default/g")
    assert status is not None
    condition = status["conditions"][0]  # type: ignore[index]
    assert condition["reason"] == "InvalidTopology"
    assert "spec.topology.required" in condition["message"] and "'row' is not a level" in condition["message"]
    assert "FailedScheduling" in events.reasons("podgroup default/g")
    # Other work still runs.
    loop.pod_pending(api_pod.parse_pod(objects.pod("plain", gpus=1)))
    loop.run_until_idle()
    assert [d.pod.name for d in cluster.binder.decisions] == ["plain"]


def test_a_profile_without_the_topology_plugin_refuses_rather_than_ignores_a_constraint() -> None:
    cluster = _cluster(RACKS, plugins=("fit", "gpu"))
    result = _place(cluster, "g", 2, 8, required="rack")
    assert not result.status.ok and "no topology plugin" in result.status.message
    assert _place(cluster, "free", 2, 8).status.ok


def test_a_plain_pod_with_a_required_level_avoids_unlabelled_nodes_and_fits_the_tightest_rack() -> None:
    cluster = _cluster({"loose": ("b1", ""), "a-0": ("b1", "a"), "a-1": ("b1", "a"), "c-0": ("b1", "c")})
    node, _ = cluster.place(objects.pod("p", gpus=8, annotations={"gpusched.io/topology-required": "rack"}))
    assert node == "c-0"
    node, _ = cluster.place(objects.pod("q", gpus=4, annotations={"gpusched.io/topology-required": "rack"}))
    assert node.startswith("a-")
    result = cluster.schedule(objects.pod("r", gpus=1, annotations={"gpusched.io/topology-required": "row"}))
    assert not result.status.ok
    assert "metadata.annotations[gpusched.io/topology-required]" in result.status.message


# --- contiguous preemption ------------------------------------------------------------------------------------


def _running(cluster: Cluster, name: str, node: str, priority: int) -> reclaim.Candidate:
    pod = api_pod.parse_pod(objects.pod(name, gpus=8, node_name=node))
    cluster.cache.upsert_pod(pod)
    return reclaim.Candidate(name, "batch", priority, 0.0, [pod])


def test_preemption_for_a_required_rack_frees_one_rack() -> None:
    cluster = _cluster({"a1": ("b1", "ra"), "a2": ("b1", "ra"), "b1": ("b1", "rb"), "b2": ("b1", "rb")})
    candidates = [
        _running(cluster, "on-a1", "a1", 1),
        _running(cluster, "on-b1", "b1", 1),
        _running(cluster, "on-a2", "a2", 5),
        _running(cluster, "on-b2", "b2", 3),
    ]
    job = _members("g", 2, 8)
    # Without topology the two cheapest victims sit in different racks.
    plain = reclaim.find_victims(cluster.scheduler, job, priority=10, policy="Any", candidates=candidates)
    assert {v.key for v in plain} == {"on-a1", "on-b1"}
    level = cluster.cache.topology.find_level("rack")
    assert level is not None
    victims = reclaim.find_victims_in_domain(
        cluster.scheduler, job, level=level, priority=10, policy="Any", candidates=candidates
    )
    assert {v.key for v in victims} == {"on-b1", "on-b2"}


def test_no_preemption_when_no_single_rack_can_be_freed_enough() -> None:
    cluster = _cluster({"a1": ("b1", "ra"), "a2": ("b1", "ra"), "b1": ("b1", "rb"), "b2": ("b1", "rb")})
    _running(cluster, "keep-a2", "a2", 100)
    _running(cluster, "keep-b2", "b2", 100)
    candidates = [_running(cluster, "on-a1", "a1", 1), _running(cluster, "on-b1", "b1", 1)]
    level = cluster.cache.topology.find_level("rack")
    assert level is not None
    victims = reclaim.find_victims_in_domain(
        cluster.scheduler, _members("g", 2, 8), level=level, priority=10, policy="Any", candidates=candidates
    )
    assert victims == []


def test_a_member_beyond_min_member_joins_its_gang_in_the_required_rack() -> None:
    cluster = _cluster(
        {"a1": ("b1", "ra"), "a2": ("b1", "ra"), "b1": ("b1", "rb"), "b2": ("b1", "rb")},
        plugins=("fit", "gpu", {"name": "spread", "weight": 60}, "topology"),
    )
    clock, events = Clock(), Events()
    queue = SchedulingQueue(clock=clock, initial_backoff_s=1.0, max_backoff_s=10.0, unschedulable_timeout_s=60.0)
    loop = SchedulingLoop(cluster.scheduler, queue, clock=clock, events=events)
    # Rack ra is half full, so the gang of two goes there (the tighter rack); its third member follows it, although
    # the spread score alone sends it to an empty node of rack rb.
    cluster.cache.upsert_pod(api_pod.parse_pod(objects.pod("busy", gpus=8, node_name="a1")))
    loop.group_upsert(PodGroup("default", "g", min_member=2, topology=TopologyConstraint(required="rack")))
    members = _members("g", 3, 2)
    for pod in members[:2]:
        loop.pod_pending(pod)
    loop.run_until_idle()
    first = {d.node for d in cluster.binder.decisions}
    assert first == {"a2"}
    loop.pod_pending(members[2])
    loop.run_until_idle()
    racks = _racks(cluster, [d.node for d in cluster.binder.decisions])
    assert len(cluster.binder.decisions) == 3 and set(racks) == {"ra"}
