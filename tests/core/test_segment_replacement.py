"""A segmented gang's members made again go back to their own segment's domain, and a segmented gang's victim
search frees room segment by segment; ``reclaim.find_victims`` leaves out the nodes its context holds, and on the
nodes held for other jobs that it may share counts only the room its own victims free (docs/gangs.md, reclaim
latency)."""

from __future__ import annotations

import numpy as np

from scheduler.api.crds import topology
from scheduler.api.crds.podgroup import PodGroup
from scheduler.api.crds.queue import QueueSpec
from scheduler.api.crds.topology import TopologyConstraint
from scheduler.api.objects import pod as api_pod
from scheduler.core.cycle import Context
from scheduler.core.loop import SchedulingLoop
from scheduler.core.preemption import victims as reclaim
from scheduler.queue.scheduling import SchedulingQueue
from tests.api import objects
from tests.core.harness import Clock, Cluster, Events, gone
from tests.core.test_tenancy import Evictions

PROFILE = ("fit", "gpu", {"name": "gang", "weight": 50}, "topology")
INDEX = "batch.kubernetes.io/job-completion-index"


def _loop(nodes: list[tuple[str, int, str]], queues: list[QueueSpec] = ()) -> tuple[Cluster, SchedulingLoop, Clock]:
    """Nodes given as (name, GPUs, clique)."""
    made = [objects.node(name, cpu="64", gpus=gpus, labels={topology.LABEL_CLIQUE: c}) for name, gpus, c in nodes]
    cluster = Cluster(made, PROFILE)
    clock = Clock()
    loop = SchedulingLoop(cluster.scheduler, SchedulingQueue(clock=clock), clock=clock, events=Events())
    if queues:
        loop.evictor = Evictions()
        loop.queues_changed(list(queues))
    return cluster, loop, clock


def _member(i: int, gpus: int = 4, queue: str = "") -> api_pod.PodRequest:
    labels = {"gpusched.io/pod-group": "g", INDEX: str(i)}
    if queue:
        labels["gpusched.io/queue"] = queue
    return api_pod.parse_pod(objects.pod(f"g-{i}", gpus=gpus, labels=labels))


def _segmented(count: int, size: int, queue: str = "") -> PodGroup:
    level = TopologyConstraint(required=topology.LABEL_CLIQUE)
    return PodGroup("default", "g", min_member=count, segment_size=size, segment_topology=level, queue=queue)


def _where(cluster: Cluster) -> dict[str, str]:
    """The node each member was last bound to."""
    return {d.pod.name: d.node for d in cluster.binder.decisions}


def _lose(cluster: Cluster, loop: SchedulingLoop, clock: Clock, names: list[str]) -> None:
    """The pods ``names`` are lost (their node failed) and their controller makes them again."""
    clock.now += 30.0
    gone(cluster, loop, clock, [_member(int(n.split("-")[1])) for n in names])
    for name in names:
        loop.pod_pending(_member(int(name.split("-")[1])))
    loop.run_until_idle()


def _placed(nodes: list[tuple[str, int, str]]) -> tuple[Cluster, SchedulingLoop, Clock, dict[str, str]]:
    """4 members x 4 GPUs in segments of 2 required on a clique, placed on ``nodes``: each segment in one clique."""
    cluster, loop, clock = _loop(nodes)
    loop.group_upsert(_segmented(4, 2))
    for i in range(4):
        loop.pod_pending(_member(i))
    loop.run_until_idle()
    first = _where(cluster)
    assert first["g-0"] == first["g-1"] and first["g-2"] == first["g-3"] != first["g-0"], first
    return cluster, loop, clock, first


def test_a_member_made_again_goes_back_to_its_own_segment_s_clique() -> None:
    """Two one-node cliques of 12 GPUs; 4 members x 4 GPUs in segments of 2 required on a clique: one segment per
    clique, 4 GPUs left on each. Member 1 is lost and made again: its clique (8 free, one member left) is where its
    segment runs; the other clique (4 free, two members of the gang) is where the gang score alone would send it."""
    cluster, loop, clock, first = _placed([("x", 12, "X"), ("y", 12, "Y")])
    _lose(cluster, loop, clock, ["g-1"])
    assert _where(cluster)["g-1"] == first["g-0"], _where(cluster)


def test_members_of_two_segments_made_again_each_go_back_to_their_own_clique() -> None:
    """Three one-node cliques of 8 GPUs; 4 members x 4 GPUs in segments of 2: two cliques full, one empty. Members 1
    and 3 (one of each segment) are lost together, so the gang is placed again whole: cut afresh they would be one
    new segment, in the empty clique; each goes back to its own segment's clique instead."""
    cluster, loop, clock, first = _placed([("x", 8, "X"), ("y", 8, "Y"), ("z", 8, "Z")])
    _lose(cluster, loop, clock, ["g-1", "g-3"])
    again = _where(cluster)
    assert again["g-1"] == first["g-0"] and again["g-3"] == first["g-2"], again


def test_a_whole_segment_made_again_is_placed_as_a_new_segment() -> None:
    """The same cluster; both members of segment 1 are lost: no member of theirs runs, so they are a new segment,
    in one clique that holds both (theirs, or the empty one)."""
    cluster, loop, clock, first = _placed([("x", 8, "X"), ("y", 8, "Y"), ("z", 8, "Z")])
    _lose(cluster, loop, clock, ["g-2", "g-3"])
    again = _where(cluster)
    assert again["g-2"] == again["g-3"] != first["g-0"], again


def test_a_reclaim_for_a_segmented_gang_frees_one_clique_for_its_segment() -> None:
    """Cliques X and Y of two 4-GPU nodes; queue qa (no guarantee) borrows x1 and y1, so x0 and y0 are free: 8 GPUs
    in all but 4 in each clique. qb (guarantee 16) asks a segment of 2 members x 4 GPUs in one clique: the free GPUs
    add up, the segment fits nowhere; the reclaim evicts the one pod that frees a whole clique (before, its what-if
    placed the members apart, found that no victim was needed, and nothing was ever reclaimed)."""
    qa = QueueSpec(name="qa", guaranteed={"nvidia.com/gpu": 0})
    qb = QueueSpec(name="qb", guaranteed={"nvidia.com/gpu": 16})
    cluster, loop, clock = _loop([("x0", 4, "X"), ("x1", 4, "X"), ("y0", 4, "Y"), ("y1", 4, "Y")], [qa, qb])
    for node in ("x1", "y1"):
        raw = objects.pod(f"borrow-{node}", gpus=4, labels={"gpusched.io/queue": "qa"})
        raw["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
        loop.pod_pending(api_pod.parse_pod(raw))
    loop.run_until_idle()
    assert {d.node for d in cluster.binder.decisions} == {"x1", "y1"}
    loop.group_upsert(_segmented(2, 2, queue="qb"))
    for i in range(2):
        loop.pod_pending(_member(i, queue="qb"))
    loop.run_until_idle()
    evictions = loop.evictor
    assert isinstance(evictions, Evictions)
    assert len(evictions.pods) == 1, [p.name for p in evictions.pods]
    victim = evictions.pods[0]
    gone(cluster, loop, clock, [victim])
    loop.run_until_idle()
    where = {n: node for n, node in _where(cluster).items() if n.startswith("g-")}
    assert set(where) == {"g-0", "g-1"}
    assert {node[0] for node in where.values()} == {victim.name[-2]}, where


def test_the_victim_search_leaves_nodes_held_for_another_job_alone() -> None:
    """One free 4-GPU node, held for another job: a pod of 4 GPUs fits there only if the hold is ignored. With the
    hold in the search's context the victims free another node; without, the search finds it needs none."""
    cluster, _, _ = _loop([("a", 4, "X"), ("b", 4, "X")])
    cluster.place(objects.pod("there", gpus=4, node_selector={"kubernetes.io/hostname": "b"}))
    entry = cluster.cache.pod("default/there")
    assert entry is not None
    candidate = reclaim.Candidate("default/there", "qa", 0, 0.0, [entry.pod], {"nvidia.com/gpu": 4.0})
    job = [api_pod.parse_pod(objects.pod("wants", gpus=4))]
    assert reclaim.find_victims(cluster.scheduler, job, priority=1, policy="Any", candidates=[candidate]) == []
    slot = cluster.cache.slot_of("a")
    assert slot is not None
    held = np.arange(cluster.cache.arrays.slots) == slot
    context = Context(reserved=held)
    victims = reclaim.find_victims(
        cluster.scheduler, job, priority=1, policy="Any", candidates=[candidate], context=context
    )
    assert [v.key for v in victims] == ["default/there"]


def test_on_a_node_held_for_another_job_only_the_room_the_victims_free_counts() -> None:
    """Node a (4 GPUs) is held for another job, with 2 GPUs free and a 2-GPU candidate; node b has a 4-GPU candidate.
    A pod of 4 GPUs fits on a with a's candidate gone only by taking the 2 GPUs held for the other job: the search
    chooses b's candidate, whose room is all its own; without the hold it chooses a's."""
    cluster, _, _ = _loop([("a", 4, "X"), ("b", 4, "X")])
    candidates = []
    for name, gpus, node in (("half", 2, "a"), ("there", 4, "b")):
        cluster.place(objects.pod(name, gpus=gpus, node_selector={"kubernetes.io/hostname": node}))
        entry = cluster.cache.pod(f"default/{name}")
        assert entry is not None
        candidates.append(reclaim.Candidate(entry.pod.key, "qa", 0, 0.0, [entry.pod], {"nvidia.com/gpu": gpus}))
    job = [api_pod.parse_pod(objects.pod("wants", gpus=4))]
    free = reclaim.find_victims(cluster.scheduler, job, priority=1, policy="Any", candidates=candidates)
    assert [v.key for v in free] == ["default/half"]
    slot = cluster.cache.slot_of("a")
    assert slot is not None
    held = np.arange(cluster.cache.arrays.slots) == slot
    snapshot = cluster.cache.snapshot()
    victims = reclaim.find_victims(
        cluster.scheduler, job, priority=1, policy="Any", candidates=candidates, held=held, snapshot=snapshot
    )
    assert [v.key for v in victims] == ["default/there"]
    # Nothing of the what-ifs stays in the cycle's snapshot: the held node's 2 GPUs are free there again.
    assert not snapshot.in_what_if and int((snapshot.arrays.gpu_free[slot] > 0).sum()) == 2


def test_a_preemption_for_a_segmented_gang_frees_one_clique_for_its_segment() -> None:
    """The same cluster within one queue: lower-priority pods on x1 and y1; a gang of priority 10 asks a segment of
    2 x 4 GPUs in one clique and preempts the one pod that frees a whole clique."""
    cluster, loop, clock = _loop([("x0", 4, "X"), ("x1", 4, "X"), ("y0", 4, "Y"), ("y1", 4, "Y")])
    evictions = Evictions()
    loop.evictor = evictions
    for node in ("x1", "y1"):
        raw = objects.pod(f"low-{node}", gpus=4)
        raw["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
        loop.pod_pending(api_pod.parse_pod(raw))
    loop.run_until_idle()
    loop.group_upsert(_segmented(2, 2))
    for i in range(2):
        raw = objects.pod(f"g-{i}", gpus=4, labels={"gpusched.io/pod-group": "g", INDEX: str(i)})
        raw["spec"]["priority"] = 10
        loop.pod_pending(api_pod.parse_pod(raw))
    loop.run_until_idle()
    assert len(evictions.pods) == 1, [p.name for p in evictions.pods]
    gone(cluster, loop, clock, list(evictions.pods))
    where = {n: node for n, node in _where(cluster).items() if n.startswith("g-")}
    assert {node[0] for node in where.values()} == {evictions.pods[0].name[-2]}, where
