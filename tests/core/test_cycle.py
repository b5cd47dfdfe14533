"""The scheduling cycle: a pod that fits is assumed and handed to the binder, the binder's answer confirms or
releases it, ties are broken as the profile says, and a pod that fits nowhere says why."""

from __future__ import annotations

import numpy as np

from scheduler.api.objects import pod as api_pod
from scheduler.core.loop import SchedulingLoop
from scheduler.framework import profile
from scheduler.framework.interface import ClusterEvent, Code
from scheduler.kernels import layout
from scheduler.queue.scheduling import SchedulingQueue
from tests.api import objects
from tests.core.harness import Clock, Cluster, Events


def _cpu_used(cluster: Cluster, node: str) -> float:
    return float(cluster.cache.arrays.used[cluster.cache.slot_of(node), layout.CPU])


def test_a_decision_is_assumed_and_handed_to_the_binder() -> None:
    cluster = Cluster([objects.node("a", gpus=2)])
    result = cluster.schedule(objects.pod("p", cpu="2", gpus=1))
    assert result.status.ok and result.status.code == Code.SUCCESS
    assert result.decision is not None
    assert [(d.pod.key, d.node, d.gpu_ids) for d in cluster.binder.decisions] == [("default/p", "a", (0,))]
    assert cluster.cache.is_assumed("default/p")
    assert _cpu_used(cluster, "a") == 2000
    assert cluster.free_devices("a") == [0.0, 1000.0]
    # The next pod sees the first one's devices taken, before any binding is confirmed.
    assert cluster.place(objects.pod("q", gpus=1)) == ("a", (1,))


def test_the_binders_answer_confirms_or_releases() -> None:
    cluster = Cluster([objects.node("a", cpu="4")])
    cluster.place(objects.pod("ok", cpu="2"))
    cluster.place(objects.pod("fails", cpu="2"))
    cluster.scheduler.bound("default/ok")
    cluster.scheduler.bind_failed("default/fails")
    assert not cluster.cache.is_assumed("default/ok")
    assert cluster.cache.pod("default/fails") is None
    assert _cpu_used(cluster, "a") == 2000
    assert cluster.place(objects.pod("again", cpu="2"))[0] == "a"  # the failed pod's room is free again


def test_place_is_a_what_if_that_leaves_the_cache_alone() -> None:
    cluster = Cluster([objects.node("a")])
    before = cluster.cache.arrays.used.copy()
    result = cluster.scheduler.place(api_pod.parse_pod(objects.pod("p", cpu="2")), cluster.cache.snapshot())
    assert result.decision is not None and result.decision.node == "a"
    np.testing.assert_array_equal(cluster.cache.arrays.used, before)
    assert cluster.binder.decisions == []


def test_a_pod_that_fits_nowhere_is_not_bound_and_says_why() -> None:
    cluster = Cluster([objects.node("a", cpu="1"), objects.node("b", cpu="1", unschedulable=True)])
    result = cluster.schedule(objects.pod("p", cpu="2"))
    assert result.status.code == Code.UNSCHEDULABLE
    assert result.decision is None
    assert result.diagnosis is not None
    assert result.diagnosis.nodes == 2
    assert result.diagnosis.counts == (("Insufficient cpu", 1), ("node(s) were unschedulable", 1))
    assert result.status.message == (
        "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) were unschedulable. Never fits as the cluster is: it"
        " asks cpu 2 and nodes have at most 1; it fits once a node large enough joins, or it asks for less."
    )
    assert cluster.binder.decisions == []
    assert cluster.cache.pod("default/p") is None


def test_reasons_are_ordered_by_count_then_text() -> None:
    nodes = [objects.node(f"cpu{i}") for i in range(3)] + [objects.node("small", gpus=1, product="NVIDIA-A100")]
    nodes.append(objects.node("h100", gpus=4, product="NVIDIA-H100"))
    result = Cluster(nodes).schedule(objects.pod("p", gpus=2, models="A100"))
    assert result.status.message.startswith(
        "0/5 nodes are available: 4 Insufficient nvidia.com/gpu, 1 GPU model not allowed."
    )


def test_first_breaks_ties_by_the_lowest_slot() -> None:
    cluster = Cluster([objects.node(f"n{i}", cpu="2") for i in range(3)], ["fit"])
    assert [cluster.place(objects.pod(f"p{i}"))[0] for i in range(6)] == ["n0", "n0", "n1", "n1", "n2", "n2"]


def test_random_breaks_ties_reproducibly_from_the_seed() -> None:
    def run(seed: int) -> list[str]:
        cluster = Cluster([objects.node(f"n{i}") for i in range(4)], ["fit"], tie_break="random", seed=seed)
        return [cluster.place(objects.pod(f"p{i}"))[0] for i in range(16)]

    first = run(11)
    assert run(11) == first
    assert len(set(first)) > 1
    assert any(run(seed) != first for seed in range(3))


def test_random_does_not_override_a_clear_winner() -> None:
    nodes = [objects.node("empty", cpu="16"), objects.node("half", cpu="16")]
    bound = [objects.pod("u", node_name="half", cpu="8")]
    for seed in range(5):
        cluster = Cluster(nodes, ["fit", "binpack"], bound=bound, tie_break="random", seed=seed)
        assert cluster.place(objects.pod("p", cpu="1"))[0] == "half"


def test_weights_decide_between_scorers() -> None:
    # binpack wants the busy node, scarce_avoidance the node without GPUs; the heavier weight wins.
    nodes = [objects.node("gpu-busy", cpu="16", gpus=2), objects.node("cpu-idle", cpu="16")]
    bound = [objects.pod("u", node_name="gpu-busy", cpu="12")]
    heavy_binpack = ["fit", {"name": "binpack", "weight": 10}, "scarce_avoidance"]
    heavy_scarce = ["fit", "binpack", {"name": "scarce_avoidance", "weight": 10}]
    assert Cluster(nodes, heavy_binpack, bound=bound).place(objects.pod("p", cpu="1"))[0] == "gpu-busy"
    assert Cluster(nodes, heavy_scarce, bound=bound).place(objects.pod("p", cpu="1"))[0] == "cpu-idle"


def test_the_default_profile_schedules_every_kind_of_pod() -> None:
    nodes = [objects.node("gpu", gpus=4, gpu_memory_mib="40960", product="NVIDIA-A100"), objects.node("cpu")]
    cluster = Cluster(nodes, config=profile.load())
    assert cluster.place(objects.pod("cpu-pod", cpu="2"))[0] == "cpu"  # fgd: a CPU pod on a GPU node strands GPUs
    assert cluster.place(objects.pod("shared", milli=300, gpu_memory="4Gi")) == ("gpu", (0,))
    assert cluster.place(objects.pod("whole", gpus=2, models="A100")) == ("gpu", (1, 2))
    assert cluster.place(objects.pod("small", milli=600)) == ("gpu", (0,))  # fills the shared device up


def _where(loop: SchedulingLoop, key: str) -> str:
    return dict(loop.queue.pending())[key]


def test_plugins_declare_which_cluster_events_can_help_the_pods_they_reject() -> None:
    # The queueing hints: a pod rejected only for a taint waits for a node change, not for pod deletions; a pod
    # rejected for room waits for room, not for a Topology change.
    tainted = objects.node("t0", cpu="64", gpus=8, taints=[{"key": "dedicated", "value": "x", "effect": "NoSchedule"}])
    cluster = Cluster([tainted], ("fit", "gpu"))
    clock = Clock()
    queue = SchedulingQueue(clock=clock, initial_backoff_s=0.0, max_backoff_s=0.0)
    loop = SchedulingLoop(cluster.scheduler, queue, clock=clock, events=Events())
    loop.pod_pending(api_pod.parse_pod(objects.pod("p", gpus=1)))
    loop.run_until_idle()
    assert _where(loop, "default/p") == "unschedulable"
    loop.cluster_event(ClusterEvent.POD_DELETED)
    loop.cluster_event(ClusterEvent.TOPOLOGY_CHANGED)
    assert _where(loop, "default/p") == "unschedulable"
    loop.cluster_event(ClusterEvent.NODE_UPDATED)
    assert _where(loop, "default/p") in ("active", "backoff")


def test_a_pod_without_room_is_not_woken_by_a_topology_change() -> None:
    cluster = Cluster([objects.node("n0", cpu="64", gpus=1)], ("fit", "gpu"))
    clock = Clock()
    queue = SchedulingQueue(clock=clock, initial_backoff_s=0.0, max_backoff_s=0.0)
    loop = SchedulingLoop(cluster.scheduler, queue, clock=clock, events=Events())
    loop.pod_pending(api_pod.parse_pod(objects.pod("p", gpus=2)))
    loop.run_until_idle()
    loop.cluster_event(ClusterEvent.TOPOLOGY_CHANGED)
    assert _where(loop, "default/p") == "unschedulable"
    loop.cluster_event(ClusterEvent.NODE_ADDED)
    assert _where(loop, "default/p") in ("active", "backoff")


def test_ties_go_to_the_first_node_by_name_whatever_order_the_nodes_came_in() -> None:
    # A restart lists the nodes in another order; the same pods must go to the same nodes.
    names = ["n-b", "n-c", "n-a"]
    for order in (names, list(reversed(names))):
        cluster = Cluster([objects.node(n, cpu="8", gpus=1) for n in order], ("fit", "gpu"))
        assert [cluster.place(objects.pod(f"p{i}", gpus=1))[0] for i in range(3)] == ["n-a", "n-b", "n-c"]
