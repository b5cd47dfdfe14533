"""A gang that loses members with their node: the members made again go into the domain the others run in."""

from __future__ import annotations

from scheduler.api.crds import topology
from scheduler.api.crds.podgroup import PodGroup
from scheduler.api.crds.topology import TopologyConstraint
from scheduler.api.objects import pod as api_pod
from scheduler.core.loop import SchedulingLoop
from scheduler.queue.scheduling import SchedulingQueue
from tests.api import objects
from tests.core.harness import Clock, Cluster, Events

PROFILE = ("fit", "gpu", {"name": "gang", "weight": 50}, "binpack", "topology")


def _setup() -> tuple[Cluster, SchedulingLoop, Clock]:
    """Clique A: a0 to a3 of 8 GPUs; clique B: b0 of 8 GPUs."""
    nodes = [
        objects.node(name, cpu="64", gpus=gpus, labels={topology.LABEL_CLIQUE: clique})
        for name, gpus, clique in (("a0", 8, "A"), ("a1", 8, "A"), ("a2", 8, "A"), ("a3", 8, "A"), ("b0", 8, "B"))
    ]
    cluster = Cluster(nodes, PROFILE)
    clock = Clock()
    loop = SchedulingLoop(cluster.scheduler, SchedulingQueue(clock=clock), clock=clock, events=Events())
    return cluster, loop, clock


def _member(i: int) -> api_pod.PodRequest:
    return api_pod.parse_pod(objects.pod(f"g-{i}", gpus=4, labels={"gpusched.io/pod-group": "g"}))


def test_members_lost_with_their_node_come_back_in_the_clique_of_the_others() -> None:
    """4 members x 4 GPUs required in one clique land in A (B is too small), two on a node. A node holding two
    of them is deleted and the two are made again: they need 8 GPUs, which B (8 free: the tightest) and A (16
    free) both have; they go to A, with the others, not to the tightest clique."""
    cluster, loop, clock = _setup()
    group = PodGroup("default", "g", min_member=4, topology=TopologyConstraint(required=topology.LABEL_CLIQUE))
    loop.group_upsert(group)
    for i in range(4):
        loop.pod_pending(_member(i))
    loop.run_until_idle()
    first = {d.pod.name: d.node for d in cluster.binder.decisions}
    assert set(first.values()) <= {"a0", "a1", "a2", "a3"}, first
    # The node of two members fails: the node and its pods go, the controller makes the pods again.
    lost = sorted(name for name, node in first.items() if node == first["g-0"])
    assert len(lost) == 2, first
    for name in lost:
        cluster.cache.remove_pod(f"default/{name}")
        loop.pod_gone(f"default/{name}")
    cluster.cache.remove_node(first["g-0"])
    clock.now = 30.0
    loop.cluster_event("pod deleted")
    for name in lost:
        loop.pod_pending(_member(int(name[-1])))
    loop.run_until_idle()
    again = {d.pod.name: d.node for d in cluster.binder.decisions[4:]}
    assert sorted(again) == lost
    assert set(again.values()) <= {"a0", "a1", "a2", "a3"} - {first["g-0"]}, again
