"""FGD in the operator learns its typical pods from what the cluster holds and what waits in the queue."""

from __future__ import annotations

import dataclasses

from scheduler.api.objects import pod as api_pod
from scheduler.core.loop import SchedulingLoop
from scheduler.framework import profile
from scheduler.queue.scheduling import SchedulingQueue
from tests.api import objects
from tests.core.harness import Clock, Cluster, Events

A100 = "NVIDIA-A100-SXM4-80GB"
H100 = "NVIDIA-H100-80GB-HBM3"


def test_pods_taking_any_model_leave_the_only_a100_node_to_the_pod_waiting_for_it() -> None:
    # Found by the e2e suite: the A100 node came first, FGD with generic typical pods saw every node alike, and the
    # first-node tie rule filled it with pods that take any model; the pod asking for an A100 found none. With the
    # waiting pods among the typical pods, FGD sees the A100 pod's demand and keeps the node for it.
    nodes = [
        objects.node("a100-0", cpu="64", gpus=8, product=A100),
        objects.node("h100-0", cpu="64", gpus=8, product=H100),
        objects.node("h100-1", cpu="64", gpus=8, product=H100),
    ]
    cluster = Cluster(nodes, config=profile.load())
    clock = Clock()
    loop = SchedulingLoop(cluster.scheduler, SchedulingQueue(clock=clock), clock=clock, events=Events())
    shapes = [("any-1", 1, None), ("any-2", 2, None), ("any-4", 4, None), ("any-8", 8, None), ("a100-2", 2, "A100")]
    for created, (name, gpus, models) in enumerate(shapes):
        pod = api_pod.parse_pod(objects.pod(name, gpus=gpus, models=models))
        loop.pod_pending(dataclasses.replace(pod, created=float(created)))
    loop.run_until_idle()
    placed = {d.pod.name: d.node for d in cluster.binder.decisions}
    assert placed.get("a100-2") == "a100-0", placed
    assert all(node.startswith("h100") for name, node in placed.items() if name != "a100-2"), placed
