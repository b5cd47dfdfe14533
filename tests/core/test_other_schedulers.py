"""Pods another scheduler bound (kube-scheduler's, on nodes both use): they hold their node's capacity and no
queue's, the queues share what they leave, and gpusched never evicts them, whether to preempt, to reclaim a
guarantee or to consolidate (docs/operator.md, "Running beside kube-scheduler")."""

from __future__ import annotations

import dataclasses
from typing import Any

from scheduler.api.crds.queue import QueueSpec
from scheduler.api.objects import pod as api_pod
from scheduler.core.loop import SchedulingLoop
from scheduler.dashboard import cluster_map
from tests.api import objects
from tests.core.harness import Clock, Cluster, Events
from tests.core.test_consolidate import World
from tests.core.test_tenancy import Evictions, _loop

GPU = "nvidia.com/gpu"


def _theirs(name: str, gpus: int, node: str, *, priority: int = 0, owner: str = "") -> api_pod.PodRequest:
    """A pod kube-scheduler bound to ``node``, of the lowest priority unless told."""
    raw: dict[str, Any] = objects.pod(name, gpus=gpus, node_name=node, scheduler_name="default-scheduler")
    raw["spec"]["priority"] = priority
    raw["status"] = {"phase": "Running"}
    pod = api_pod.parse_bound_pod(raw)[0]
    return dataclasses.replace(pod, owner=owner, owner_kind="ReplicaSet" if owner else "")


def _mine(name: str, gpus: int, *, queue: str = "", priority: int = 0) -> api_pod.PodRequest:
    raw = objects.pod(name, gpus=gpus, labels={"gpusched.io/queue": queue} if queue else None)
    raw["spec"]["priority"] = priority
    return api_pod.parse_pod(raw)


def _outside(cluster: Cluster, loop: SchedulingLoop, pod: api_pod.PodRequest) -> None:
    """What the pod feed does with another scheduler's bound pod."""
    cluster.cache.upsert_pod(pod)
    loop.pod_outside(pod)


def _reclaim_world() -> tuple[Cluster, SchedulingLoop, Clock, Events, Evictions]:
    """Two nodes of 8 GPUs; kube-scheduler holds n1 whole; queue prod is guaranteed 8 GPUs, batch nothing."""
    cluster, loop, clock, events = _loop(gpus=8, nodes=2)
    evictions = Evictions()
    loop.evictor = evictions
    loop.queues_changed(
        [QueueSpec(name="prod", guaranteed={GPU: 8}), QueueSpec(name="batch"), QueueSpec(name="default")]
    )
    for i in range(4):
        _outside(cluster, loop, _theirs(f"theirs{i}", 2, "n1"))
    return cluster, loop, clock, events, evictions


def test_their_pods_hold_capacity_in_no_queue_and_the_queues_share_what_is_left() -> None:
    cluster, loop, clock, _, _ = _reclaim_world()
    for i in range(4):
        clock.now = float(i)
        loop.pod_pending(_mine(f"b{i}", 2, queue="batch"))
        loop.run_until_idle()
    assert {d.node for d in cluster.binder.decisions} == {"n0"}  # n1 is kube-scheduler's: no GPU given twice
    for d in cluster.binder.decisions:
        placed = dataclasses.replace(d.pod, node_name=d.node)
        cluster.cache.upsert_pod(placed)
        loop.pod_placed(placed)

    statuses = loop.queue_statuses()
    # Queue default holds nothing: kube-scheduler's pods (no queue label) are charged to no queue.
    assert statuses["default"].allocated.get(GPU, 0.0) == 0.0
    assert statuses["batch"].allocated[GPU] == 8.0
    assert sum(s.allocated.get(GPU, 0.0) for s in statuses.values()) == 8.0
    # The queues share the 8 GPUs kube-scheduler leaves: batch holds all of them, a dominant share of 1.
    assert loop.tenancy.capacity()[GPU] == 8.0 and loop.tenancy.outside()[GPU] == 8.0
    assert statuses["batch"].dominant_share == 1.0
    # The same pod seen again counts once; seen with other requests (resized in place), with those.
    loop.pod_outside(_theirs("theirs0", 2, "n1"))
    assert loop.tenancy.outside()[GPU] == 8.0
    loop.pod_outside(_theirs("theirs0", 1, "n1"))
    assert loop.tenancy.outside()[GPU] == 7.0
    loop.pod_outside(_theirs("theirs0", 2, "n1"))
    assert loop.queue_of(_theirs("theirs0", 2, "n1")) == "" and loop.queue_of(_mine("b0", 2)) == "batch"

    # The dashboard's map shows their GPUs held, in no queue's colour.
    nodes = {n.name: n for n in cluster_map.build(cluster.cache, queue_of=loop.queue_of).nodes}
    assert {cell.queue for cell in nodes["n1"].cells} == {""}
    assert {cell.state for cell in nodes["n1"].cells} == {"whole"}
    assert {cell.queue for cell in nodes["n0"].cells} == {"batch"}

    # Their pods go: the capacity comes back to the queues.
    for i in range(4):
        cluster.cache.remove_pod(f"default/theirs{i}")
        loop.pod_gone(f"default/theirs{i}")
    assert loop.tenancy.capacity()[GPU] == 16.0 and loop.tenancy.outside() == {}
    assert loop.queue_statuses()["batch"].dominant_share == 0.5


def test_reclaim_for_a_guarantee_takes_from_borrowers_never_from_their_pods() -> None:
    _, loop, clock, _, evictions = _reclaim_world()
    for i in range(4):
        clock.now = float(i)
        loop.pod_pending(_mine(f"b{i}", 2, queue="batch"))
        loop.run_until_idle()
    clock.now = 20.0
    loop.pod_pending(_mine("prod0", 4, queue="prod"))
    loop.run_until_idle()
    # Their lowest-priority pods on n1 would free the room as well; only batch's borrowed pods are victims.
    assert evictions.pods and {p.name for p in evictions.pods} <= {f"b{i}" for i in range(4)}
    assert sum(p.gpu.count for p in evictions.pods) == 4


def test_a_guarantee_kube_scheduler_took_waits_when_no_queue_borrows() -> None:
    # kube-scheduler holds half the cluster; prod is guaranteed 16 GPUs of 16 but only 8 are left to the queues.
    cluster, loop, _, events = _loop(gpus=8, nodes=2)
    evictions = Evictions()
    loop.evictor = evictions
    loop.queues_changed([QueueSpec(name="prod", guaranteed={GPU: 16})])
    for i in range(4):
        _outside(cluster, loop, _theirs(f"theirs{i}", 2, "n1"))
    loop.pod_pending(_mine("prod-a", 8, queue="prod"))
    loop.pod_pending(_mine("prod-b", 8, queue="prod"))
    loop.run_until_idle()
    assert [d.pod.name for d in cluster.binder.decisions] == ["prod-a"]
    assert evictions.pods == []
    assert events.reasons("pod default/prod-b")[-1] == "FailedScheduling"


def test_a_higher_priority_pod_never_preempts_their_pods() -> None:
    cluster, loop, _, events = _loop(gpus=8, nodes=1)
    evictions = Evictions()
    loop.evictor = evictions
    _outside(cluster, loop, _theirs("theirs", 8, "n0", priority=0))
    loop.pod_pending(_mine("urgent", 8, priority=1000))
    loop.run_until_idle()
    assert evictions.pods == [] and cluster.binder.decisions == []
    assert events.reasons("pod default/urgent") == ["FailedScheduling"]

    # The same node held by a pod of ours of the same priority: that one is preempted (the rule is who bound it).
    cluster, loop, _, events = _loop(gpus=8, nodes=1)
    loop.evictor = evictions
    ours = dataclasses.replace(_mine("ours", 8, priority=0), node_name="n0")
    cluster.cache.upsert_pod(ours)
    loop.pod_placed(ours)
    loop.pod_pending(_mine("urgent", 8, priority=1000))
    loop.run_until_idle()
    assert [p.name for p in evictions.pods] == ["ours"]


def test_consolidation_never_moves_their_pods() -> None:
    # Queue default allows moves (ExceptTraining): pods of ours without a label would move, kube-scheduler's not.
    world = World(used=(0, 0, 0), queues=[QueueSpec(name="default")])
    for i, count in enumerate((7, 6, 7)):
        for j in range(count):
            _outside(world.cluster, world.loop, _theirs(f"d{i}-{j}", 1, f"n{i}", owner=f"d{i}"))
    world.loop.pod_pending(world.pod("big", gpus=4))
    world.step()
    assert world.made == 0 and world.moves.moved == 0
    assert world.cluster.cache.pod("default/big") is None
    assert world.moves.why_not(_theirs("d0-0", 1, "n0", owner="d0"), 1000, 0.0).startswith("another scheduler")
