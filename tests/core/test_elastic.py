"""Elastic gangs in the loop: placed at minMember, grown up to maxMember as room appears, shrunk surplus first."""

from __future__ import annotations

import pytest

from scheduler.api.basics.errors import InvalidObject
from scheduler.api.crds.podgroup import PodGroup, member_rank, parse_podgroup
from scheduler.api.crds.queue import QueueSpec
from scheduler.api.objects import pod as api_pod
from scheduler.core.loop import SchedulingLoop
from scheduler.queue.scheduling import SchedulingQueue
from tests.api import objects
from tests.core.harness import Clock, Cluster, Events, gone
from tests.core.test_tenancy import Evictions


def _loop(queues: list[QueueSpec]) -> tuple[Cluster, SchedulingLoop, Clock, Evictions]:
    """Two nodes of 8 GPUs, the issue's cluster."""
    cluster = Cluster([objects.node(f"n{i}", cpu="64", gpus=8) for i in range(2)], ("fit", "gpu", "binpack"))
    clock = Clock()
    loop = SchedulingLoop(cluster.scheduler, SchedulingQueue(clock=clock), clock=clock, events=Events())
    evictions = Evictions()
    loop.evictor = evictions
    loop.queues_changed(queues)
    return cluster, loop, clock, evictions


def _pod(name: str, gpus: int, queue: str, group: str = "", priority: int = 0) -> api_pod.PodRequest:
    labels = {"gpusched.io/queue": queue}
    if group:
        labels["gpusched.io/pod-group"] = group
    raw = objects.pod(name, gpus=gpus, labels=labels)
    raw["spec"]["priority"] = priority
    return api_pod.parse_pod(raw)


def _live(cluster: Cluster, evictions: Evictions) -> set[str]:
    """Pods bound, on their node still, and not being evicted."""
    gone = {p.key for p in evictions.pods}
    return {
        d.pod.name
        for d in cluster.binder.decisions
        if d.pod.key not in gone and cluster.cache.pod(d.pod.key) is not None
    }


def _elastic_gang(loop: SchedulingLoop, name: str, queue: str, pods: int, *, min_member: int, max_member: int) -> None:
    loop.group_upsert(PodGroup("default", name, min_member=min_member, max_member=max_member, queue=queue))
    for i in range(pods):
        loop.pod_pending(_pod(f"{name}-{i}", 4, queue, group=name))
    loop.run_until_idle()


def test_a_guarantee_is_reclaimed_from_an_elastic_gang_s_surplus_and_the_gang_grows_back() -> None:
    """The issue's opening example: qa (guarantee 8) borrows 8 with a 4 x 4-GPU gang of minMember 2; qb's 8-GPU pod
    gets its guarantee by reclaiming exactly the 2 surplus members, the highest index first; the core keeps its
    pods; when qb's pod leaves, the gang's recreated members take the room back."""
    qa = QueueSpec(name="qa", guaranteed={"nvidia.com/gpu": 8})
    qb = QueueSpec(name="qb", guaranteed={"nvidia.com/gpu": 8})
    cluster, loop, clock, evictions = _loop([qa, qb])
    _elastic_gang(loop, "train", "qa", 4, min_member=2, max_member=4)
    assert _live(cluster, evictions) == {f"train-{i}" for i in range(4)}
    status = loop.group_status("default/train")
    assert status is not None and (status["minMember"], status["maxMember"]) == (2, 4)

    clock.now = 10.0
    loop.pod_pending(_pod("big", 8, "qb"))
    loop.run_until_idle()
    assert sorted(p.name for p in evictions.pods) == ["train-2", "train-3"]
    gone(cluster, loop, clock, list(evictions.pods))
    assert _live(cluster, evictions) == {"train-0", "train-1", "big"}
    job = loop.gang("default/train")
    assert job is not None and sorted(p.name for p in job.placed.values()) == ["train-0", "train-1"]

    # The workload's controller makes the evicted members again: they wait while there is no room...
    for i in (2, 3):
        loop.pod_pending(_pod(f"train-{i}", 4, "qa", group="train"))
    loop.run_until_idle()
    assert len(job.placed) == 2 and len(job.pending) == 2
    assert len(evictions.pods) == 2, "qa is at its guarantee: it reclaims nothing back"
    # ...and take the room back once qb's pod leaves.
    bound = len(cluster.binder.decisions)
    big = next(d.pod for d in cluster.binder.decisions if d.pod.name == "big")
    gone(cluster, loop, clock, [big])
    assert sorted(d.pod.name for d in cluster.binder.decisions[bound:]) == ["train-2", "train-3"]
    assert len(job.placed) == 4


def test_a_rigid_gang_in_the_same_place_is_not_reclaimed() -> None:
    """The same gang with minMember 4: taking it would push qa below its guarantee, so nothing is reclaimed (the
    behaviour the issue starts from, kept for a rigid gang)."""
    qa = QueueSpec(name="qa", guaranteed={"nvidia.com/gpu": 8})
    qb = QueueSpec(name="qb", guaranteed={"nvidia.com/gpu": 8})
    _, loop, clock, evictions = _loop([qa, qb])
    _elastic_gang(loop, "train", "qa", 4, min_member=4, max_member=4)
    clock.now = 10.0
    loop.pod_pending(_pod("big", 8, "qb"))
    loop.run_until_idle()
    assert evictions.pods == []


def test_the_core_goes_only_whole_and_only_after_the_surplus() -> None:
    """A 12-GPU pod within its guarantee needs more than the surplus: the surplus goes, then the whole core (never
    one core member alone)."""
    qa = QueueSpec(name="qa")
    qb = QueueSpec(name="qb", guaranteed={"nvidia.com/gpu": 16})
    _, loop, clock, evictions = _loop([qa, qb])
    _elastic_gang(loop, "train", "qa", 4, min_member=2, max_member=4)
    clock.now = 10.0
    loop.pod_pending(_pod("wide-0", 8, "qb"))
    loop.pod_pending(_pod("wide-1", 4, "qb"))
    loop.run_until_idle()
    assert sorted(p.name for p in evictions.pods) == [f"train-{i}" for i in range(4)]


def test_an_elastic_gang_never_holds_more_than_its_maximum() -> None:
    cluster, loop, _clock, _evictions = _loop([QueueSpec(name="qa")])
    _elastic_gang(loop, "train", "qa", 4, min_member=1, max_member=3)
    # Room for 4, but the gang stops at 3; the fourth waits, not queued in a loop of attempts.
    assert len(cluster.binder.decisions) == 3
    job = loop.gang("default/train")
    assert job is not None and len(job.pending) == 1 and job.full
    assert not [item for item in loop.queue.items() if item.key.startswith("default/train")]
    placed = next(iter(job.placed.values()))
    cluster.cache.remove_pod(placed.key)
    loop.pod_gone(placed.key)
    loop.run_until_idle()
    assert len(cluster.binder.decisions) == 4 and len(job.placed) == 3


def test_within_a_queue_higher_priority_work_takes_the_surplus_first() -> None:
    _cluster, loop, clock, evictions = _loop([QueueSpec(name="qa")])
    _elastic_gang(loop, "train", "qa", 4, min_member=2, max_member=4)
    clock.now = 10.0
    loop.pod_pending(_pod("urgent", 4, "qa", priority=100))
    loop.run_until_idle()
    assert [p.name for p in evictions.pods] == ["train-3"]


def test_max_member_is_parsed_and_checked() -> None:
    raw = {"metadata": {"name": "g", "namespace": "ns"}, "spec": {"minMember": 2, "maxMember": 4}}
    group = parse_podgroup(raw)
    assert (group.min_member, group.max_member, group.elastic) == (2, 4, True)
    assert parse_podgroup({**raw, "spec": {"minMember": 2}}).max_member == 0
    with pytest.raises(InvalidObject, match=r"spec\.maxMember"):
        parse_podgroup({**raw, "spec": {"minMember": 3, "maxMember": 2}})
    with pytest.raises(InvalidObject, match=r"spec\.maxMember"):
        parse_podgroup({**raw, "spec": {"minMember": 1, "maxMember": "4"}})


def test_members_rank_by_their_workload_s_indices_then_their_name() -> None:
    jobset = [
        ({"jobset.sigs.k8s.io/job-global-index": "1", "batch.kubernetes.io/job-completion-index": "0"}, "js-w-1-0-a"),
        ({"jobset.sigs.k8s.io/job-global-index": "0", "batch.kubernetes.io/job-completion-index": "1"}, "js-w-0-1-b"),
        ({"jobset.sigs.k8s.io/job-global-index": "0", "batch.kubernetes.io/job-completion-index": "0"}, "js-w-0-0-c"),
    ]
    assert [n for _, n in sorted(jobset, key=lambda m: member_rank(*m))] == ["js-w-0-0-c", "js-w-0-1-b", "js-w-1-0-a"]
    pytorch = [
        ({"training.kubeflow.org/replica-type": "worker", "training.kubeflow.org/replica-index": "0"}, "pt-worker-0"),
        ({"training.kubeflow.org/replica-type": "master", "training.kubeflow.org/replica-index": "0"}, "pt-master-0"),
    ]
    assert [n for _, n in sorted(pytorch, key=lambda m: member_rank(*m))] == ["pt-master-0", "pt-worker-0"]
    assert sorted(["g-10", "g-9", "g-2"], key=lambda n: member_rank({}, n)) == ["g-2", "g-9", "g-10"]


def test_a_member_growing_its_gang_goes_after_work_waiting_to_start() -> None:
    """Room freed goes first to a job waiting for its minimum, then to the growth of a gang already running."""
    cluster, loop, clock, evictions = _loop([QueueSpec(name="qa")])
    loop.pod_pending(_pod("filler", 8, "qa"))
    loop.run_until_idle()
    _elastic_gang(loop, "a", "qa", 3, min_member=1, max_member=3)
    loop.pod_pending(_pod("waiting", 8, "qa"))
    loop.run_until_idle()
    assert _live(cluster, evictions) == {"filler", "a-0", "a-1"}
    clock.now = 30.0  # past every backoff
    gone(cluster, loop, clock, [next(d.pod for d in cluster.binder.decisions if d.pod.name == "filler")])
    assert _live(cluster, evictions) == {"a-0", "a-1", "waiting"}


def test_a_gang_waiting_for_its_minimum_takes_the_surplus_of_its_own_queue_at_equal_priority() -> None:
    """Surplus is lent: a gang of the same queue and priority that cannot start takes it (never a core); the
    members given back then wait for room rather than take it back."""
    cluster, loop, clock, evictions = _loop([QueueSpec(name="qa")])
    _elastic_gang(loop, "a", "qa", 4, min_member=2, max_member=4)
    clock.now = 10.0
    _elastic_gang(loop, "b", "qa", 2, min_member=2, max_member=2)
    assert sorted(p.name for p in evictions.pods) == ["a-2", "a-3"]
    gone(cluster, loop, clock, list(evictions.pods))
    assert _live(cluster, evictions) == {"a-0", "a-1", "b-0", "b-1"}
    for i in (2, 3):
        loop.pod_pending(_pod(f"a-{i}", 4, "qa", group="a"))
    clock.now = 60.0
    loop.run_until_idle()
    assert len(evictions.pods) == 2, "a member growing its gang takes nothing of equal priority"
