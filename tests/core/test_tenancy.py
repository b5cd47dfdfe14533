"""Queues in the loop: missing queues wait, limits hold, and the next job comes from the fairest queue."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from scheduler.api.crds.podgroup import PodGroup
from scheduler.api.crds.queue import QueueSpec
from scheduler.api.objects import node as api_node
from scheduler.api.objects import pod as api_pod
from scheduler.core.loop import SchedulingLoop
from scheduler.core.preemption.preemptor import Preemptor
from scheduler.queue.scheduling import SchedulingQueue
from tests.api import objects
from tests.core.harness import Clock, Cluster, Events


def _loop(gpus: int = 8, nodes: int = 1) -> tuple[Cluster, SchedulingLoop, Clock, Events]:
    cluster = Cluster([objects.node(f"n{i}", cpu="64", gpus=gpus) for i in range(nodes)], ("fit", "gpu", "binpack"))
    clock = Clock()
    events = Events()
    queue = SchedulingQueue(clock=clock)
    return cluster, SchedulingLoop(cluster.scheduler, queue, clock=clock, events=events), clock, events


def _pod(name: str, gpus: int, queue: str = "", group: str = "") -> api_pod.PodRequest:
    labels = {}
    if queue:
        labels["gpusched.io/queue"] = queue
    if group:
        labels["gpusched.io/pod-group"] = group
    return api_pod.parse_pod(objects.pod(name, gpus=gpus, labels=labels))


def _placed(cluster: Cluster) -> list[str]:
    return [d.pod.name for d in cluster.binder.decisions]


def test_pods_without_a_queue_go_to_the_implied_default_queue() -> None:
    cluster, loop, _, _ = _loop()
    loop.pod_pending(_pod("p", 1))
    loop.run_until_idle()
    assert _placed(cluster) == ["p"]
    assert loop.held("default")["nvidia.com/gpu"] == 1.0


def test_a_pod_in_an_unknown_queue_waits_with_an_event_and_runs_once_the_queue_exists() -> None:
    cluster, loop, _, events = _loop()
    loop.pod_pending(_pod("p", 1, queue="research"))
    loop.pod_pending(_pod("p", 1, queue="research"))  # an update: one event only
    loop.run_until_idle()
    assert _placed(cluster) == []
    assert events.reasons("pod default/p") == ["QueueNotFound"]
    loop.queues_changed([QueueSpec(name="research")])
    loop.run_until_idle()
    assert _placed(cluster) == ["p"]


def test_a_gang_in_an_unknown_queue_waits_too() -> None:
    cluster, loop, _, events = _loop()
    loop.group_upsert(PodGroup("default", "g", min_member=2, queue="batch"))
    loop.pod_pending(_pod("g-0", 1, group="g"))
    loop.pod_pending(_pod("g-1", 1, group="g"))
    loop.run_until_idle()
    assert _placed(cluster) == []
    assert "QueueNotFound" in events.reasons("podgroup default/g")
    loop.queues_changed([QueueSpec(name="batch")])
    loop.run_until_idle()
    assert sorted(_placed(cluster)) == ["g-0", "g-1"]


def test_work_of_a_queue_that_exists_but_is_not_accepted_is_told_why() -> None:
    cluster, loop, _, events = _loop()
    loop.queues_changed([QueueSpec(name="orphan", parent="ml")])  # its parent is missing
    loop.pod_pending(_pod("p", 1, queue="orphan"))
    loop.group_upsert(PodGroup("default", "g", min_member=2, queue="orphan"))
    loop.pod_pending(_pod("g-0", 1, group="g"))
    loop.pod_pending(_pod("g-1", 1, group="g"))
    loop.run_until_idle()
    assert _placed(cluster) == []
    said = "queue 'orphan' is not accepted: its parent queue 'ml' does not exist; waiting until it is"
    assert events.reasons("pod default/p") == ["QueueNotAccepted"]
    assert events.messages("pod default/p") == [said]
    assert set(events.messages("podgroup default/g")) == {said}
    # The PodGroup carries the condition too (its REASON column was empty), not only its members.
    condition = loop.group_status("default/g")["conditions"][0]  # type: ignore[index]
    assert (condition["reason"], condition["message"]) == ("QueueNotAccepted", said)

    loop.queues_changed([QueueSpec(name="orphan", parent="ml"), QueueSpec(name="ml")])
    loop.run_until_idle()
    assert sorted(_placed(cluster)) == ["g-0", "g-1", "p"]
    condition = loop.group_status("default/g")["conditions"][0]  # type: ignore[index]
    assert condition["reason"] == "Scheduled"


def test_a_gang_waiting_for_a_missing_queue_says_so_in_its_own_status() -> None:
    _, loop, _, events = _loop()
    loop.group_upsert(PodGroup("default", "g", min_member=2, queue="batch"))
    loop.pod_pending(_pod("g-0", 1, group="g"))
    loop.pod_pending(_pod("g-1", 1, group="g"))
    loop.run_until_idle()
    condition = loop.group_status("default/g")["conditions"][0]  # type: ignore[index]
    assert (condition["status"], condition["reason"]) == ("False", "QueueNotFound")
    assert condition["message"] == "queue 'batch' does not exist; waiting for it"
    # Told again as each member came (the operator tells the waiting members from the PodGroup's Event): members
    # created after their PodGroup were told nothing.
    assert events.reasons("podgroup default/g") == ["QueueNotFound"] * 3


def test_a_queue_with_a_gpu_limit_shows_it_and_one_without_says_none() -> None:
    _, loop, _, _ = _loop()
    loop.queues_changed([QueueSpec(name="capped", limit={"nvidia.com/gpu": 4}), QueueSpec(name="open")])
    status = loop.queue_statuses()
    # In numbers here; the status publisher writes them as "4" and "none" (tests/k8s/test_status.py).
    assert (status["capped"].gpu_limit, status["open"].gpu_limit) == (4, None)


def test_a_queue_never_exceeds_its_limit() -> None:
    cluster, loop, clock, events = _loop()
    loop.queues_changed([QueueSpec(name="team", limit={"nvidia.com/gpu": 4})])
    for i in range(3):
        loop.pod_pending(_pod(f"p{i}", 2, queue="team"))
    loop.run_until_idle()
    assert _placed(cluster) == ["p0", "p1"]
    message = next(m for o, r, m in events.seen if o == "pod default/p2" and r == "FailedScheduling")
    assert "queue 'team' would hold 6 nvidia.com/gpu, above its ceiling 4" in message
    # p0 leaves: p2 runs.
    cluster.cache.remove_pod("default/p0")
    loop.pod_gone("default/p0")
    clock.now = 5.0
    loop.cluster_event("pod deleted")
    loop.run_until_idle()
    assert _placed(cluster)[-1] == "p2"


def test_a_parent_limit_holds_for_its_children_together() -> None:
    cluster, loop, _, _ = _loop()
    loop.queues_changed(
        [
            QueueSpec(name="org", limit={"nvidia.com/gpu": 3}),
            QueueSpec(name="a", parent="org"),
            QueueSpec(name="b", parent="org"),
        ]
    )
    loop.pod_pending(_pod("a0", 2, queue="a"))
    loop.pod_pending(_pod("b0", 2, queue="b"))
    loop.run_until_idle()
    assert len(_placed(cluster)) == 1


def test_a_queue_that_does_not_lend_keeps_its_unused_guarantee_idle_for_itself() -> None:
    cluster, loop, _, events = _loop(gpus=8, nodes=2)
    loop.queues_changed(
        [
            QueueSpec(name="infer", guaranteed={"nvidia.com/gpu": 8}, lending_allowed=False),
            QueueSpec(name="shared", guaranteed={"nvidia.com/gpu": 4}, lending_limit={"nvidia.com/gpu": 2}),
            QueueSpec(name="batch"),
        ]
    )
    for i in range(16):
        loop.pod_pending(_pod(f"b{i}", 1, queue="batch"))
    loop.run_until_idle()
    # infer keeps 8 GPUs, shared keeps 2 of its 4: batch gets 6 of 16.
    assert len(_placed(cluster)) == 6
    assert "kept idle for queues that do not lend it" in events.messages("pod default/b15")[-1]
    # infer's own work uses what it kept.
    for i in range(8):
        loop.pod_pending(_pod(f"i{i}", 1, queue="infer"))
    loop.run_until_idle()
    assert sum(name.startswith("i") for name in _placed(cluster)) == 8


def test_the_next_job_comes_from_the_queue_with_the_lowest_dominant_share() -> None:
    cluster, loop, _, _ = _loop(gpus=8)
    loop.queues_changed([QueueSpec(name="a"), QueueSpec(name="b")])
    for i in range(6):
        loop.pod_pending(_pod(f"a{i}", 1, queue="a"))
    loop.run_until_idle()
    # a holds 6 of 8 GPUs. Now a (older, created first) and b both want 2 GPUs; only 2 are free.
    loop.pod_pending(_pod("a-late", 2, queue="a"))
    loop.pod_pending(_pod("b0", 2, queue="b"))
    loop.run_until_idle()
    assert _placed(cluster)[-1] == "b0"


def test_weights_scale_the_share() -> None:
    cluster, loop, _, _ = _loop(gpus=8, nodes=2)
    loop.queues_changed([QueueSpec(name="big", weight=3.0), QueueSpec(name="small", weight=1.0)])
    loop.pod_pending(_pod("big0", 4, queue="big"))
    loop.pod_pending(_pod("small0", 4, queue="small"))
    loop.run_until_idle()
    # Both hold 4 of 16 GPUs: big's weighted share is 4/16/3, small's 4/16/1, so big goes next.
    loop.pod_pending(_pod("small1", 8, queue="small"))
    loop.pod_pending(_pod("big1", 8, queue="big"))
    loop.run_until_idle()
    assert _placed(cluster)[2] == "big1"


def test_work_within_its_guarantee_goes_before_borrowing() -> None:
    cluster, loop, _, _ = _loop(gpus=8)
    loop.queues_changed([QueueSpec(name="prod", guaranteed={"nvidia.com/gpu": 4}), QueueSpec(name="batch")])
    loop.pod_pending(_pod("prod0", 3, queue="prod"))
    loop.run_until_idle()
    # prod holds 3, its guarantee is 4, so it still ranks first though its share (3/8) is above batch's (0).
    loop.pod_pending(_pod("batch0", 5, queue="batch"))
    loop.pod_pending(_pod("prod1", 5, queue="prod"))
    loop.run_until_idle()
    assert _placed(cluster)[1] == "prod1"


def test_bad_queues_are_reported_and_the_rest_still_works() -> None:
    cluster, loop, _, events = _loop()
    loop.queues_changed([QueueSpec(name="x", parent="y"), QueueSpec(name="y", parent="x"), QueueSpec(name="ok")])
    assert any(reason == "InvalidQueue" for _, reason, _ in events.seen)
    loop.pod_pending(_pod("p", 1, queue="ok"))
    loop.pod_pending(_pod("q", 1, queue="x"))
    loop.run_until_idle()
    assert _placed(cluster) == ["p"]
    # x exists: q is told it is not accepted, and why (it was told that x does not exist).
    assert events.reasons("pod default/q") == ["QueueNotAccepted"]
    assert events.messages("pod default/q") == [
        "queue 'x' is not accepted: its parents form a cycle: x -> y -> x; waiting until it is"
    ]


def test_releases_free_the_queue() -> None:
    cluster, loop, _, _ = _loop()
    loop.pod_pending(_pod("p", 2))
    loop.run_until_idle()
    assert loop.held("default")["nvidia.com/gpu"] == 2.0
    cluster.cache.remove_pod("default/p")
    loop.pod_gone("default/p")
    loop.pod_gone("default/p")  # a repeated deletion does not release twice
    assert loop.held("default")["nvidia.com/gpu"] == 0.0


def test_a_large_job_reserves_nodes_so_small_jobs_cannot_starve_it() -> None:
    cluster, loop, clock, _ = _loop(gpus=8, nodes=2)
    loop.holds.reserve_after_s = 0.0
    loop.gate.fair_share = False  # the reservation alone (the gate would hold batch back altogether)
    loop.queues_changed([QueueSpec(name="prod", guaranteed={"nvidia.com/gpu": 8}), QueueSpec(name="batch")])
    for i in range(16):
        loop.pod_pending(_pod(f"small{i}", 1, queue="batch"))
    loop.run_until_idle()
    assert len(_placed(cluster)) == 16
    loop.pod_pending(_pod("big", 8, queue="prod"))
    loop.run_until_idle()
    assert loop.holds.reservation is not None and loop.holds.reservation.job == "default/big"
    reserved = {cluster.cache.names[s] for s in np.flatnonzero(loop.holds.reservation.slots)}
    assert len(reserved) == 1
    (node,) = reserved

    def finish(name: str) -> None:
        cluster.cache.remove_pod(f"default/{name}")
        loop.pod_gone(f"default/{name}")

    # One GPU frees on each node; new small jobs may only take the one outside the reservation.
    on_reserved = [d.pod.name for d in cluster.binder.decisions if d.node == node]
    elsewhere = [d.pod.name for d in cluster.binder.decisions if d.node != node]
    finish(on_reserved[0])
    finish(elsewhere[0])
    loop.pod_pending(_pod("late0", 1, queue="batch"))
    loop.pod_pending(_pod("late1", 1, queue="batch"))
    clock.now = 10.0
    loop.cluster_event("pod deleted")
    loop.run_until_idle()
    late = {d.pod.name: d.node for d in cluster.binder.decisions if d.pod.name.startswith("late")}
    assert list(late.values()) == [n for n in late.values() if n != node]
    assert len(late) == 1
    # The reserved node drains: the big job runs there.
    for name in on_reserved[1:]:
        finish(name)
    clock.now = 100.0
    loop.cluster_event("pod deleted")
    loop.run_until_idle()
    big = [d for d in cluster.binder.decisions if d.pod.name == "big"]
    assert len(big) == 1 and big[0].node == node
    assert loop.holds.reservation is None


def test_a_queue_at_its_fair_share_leaves_freed_gpus_to_a_queue_below_its_own() -> None:
    cluster, loop, clock, events = _loop(gpus=8, nodes=2)
    loop.queues_changed([QueueSpec(name="prod", guaranteed={"nvidia.com/gpu": 8}), QueueSpec(name="batch")])
    for i in range(16):
        loop.pod_pending(_pod(f"small{i}", 1, queue="batch"))
    loop.run_until_idle()
    loop.pod_pending(_pod("big", 8, queue="prod"))
    loop.run_until_idle()
    assert loop.gate.starving == {"prod": {"default/big": {"cpu": 1000.0, "nvidia.com/gpu": 8.0}}}
    # Four GPUs free up on one node. batch holds 12 against a fair share of 8 (prod: its guarantee of 8):
    # its new jobs wait, so the node drains for prod's job.
    node = cluster.binder.decisions[0].node
    mine = [d.pod.name for d in cluster.binder.decisions if d.node == node]
    for name in mine[:4]:
        cluster.cache.remove_pod(f"default/{name}")
        loop.pod_gone(f"default/{name}")
    loop.pod_pending(_pod("late", 1, queue="batch"))
    clock.now = 10.0
    loop.cluster_event("pod deleted")
    loop.run_until_idle()
    assert "late" not in _placed(cluster)
    assert events.messages("pod default/late")[-1] == (
        "queue 'batch' holds its fair share of nvidia.com/gpu (12 of 8) while queue 'prod', below its share (0 of 8), "
        "waits for room"
    )
    for name in mine[4:]:
        cluster.cache.remove_pod(f"default/{name}")
        loop.pod_gone(f"default/{name}")
    clock.now = 20.0
    loop.cluster_event("pod deleted")
    loop.run_until_idle()
    assert _placed(cluster)[-1] == "big"
    assert "prod" not in loop.gate.starving
    # Nobody waits for room below its share any more: batch may take what is left (work-conserving).
    assert "late" not in _placed(cluster)
    loop.pod_pending(_pod("later", 1, queue="batch"))
    other = "default/" + next(d.pod.name for d in cluster.binder.decisions if d.node != node)
    cluster.cache.remove_pod(other)
    loop.pod_gone(other)
    clock.now = 100.0
    loop.cluster_event("pod deleted")
    loop.run_until_idle()
    assert {"late", "later"} & set(_placed(cluster))


class Evictions:
    def __init__(self) -> None:
        self.pods: list[api_pod.PodRequest] = []
        #: Pod key -> its nominated node, as the operator would write it to the pod's status.
        self.nominated: dict[str, str] = {}

    def evict(self, pods: list[api_pod.PodRequest], reason: str) -> None:
        self.pods.extend(pods)

    def nominate(self, pod: api_pod.PodRequest, node: str) -> None:
        self.nominated[pod.key] = node


def _reclaim_loop(
    prod: QueueSpec, batch: QueueSpec | None = None
) -> tuple[Cluster, SchedulingLoop, Clock, Events, Evictions]:
    cluster, loop, clock, events = _loop(gpus=8, nodes=2)
    evictions = Evictions()
    loop.evictor = evictions
    loop.queues_changed([prod, batch or QueueSpec(name="batch")])
    return cluster, loop, clock, events, evictions


def _fill_with_batch(loop: SchedulingLoop, clock: Clock, count: int = 8, gpus: int = 2) -> None:
    for i in range(count):
        clock.now = float(i)  # p0 is the oldest, p7 the youngest
        loop.pod_pending(_pod(f"b{i}", gpus, queue="batch"))
        loop.run_until_idle()


def test_reservations_are_off_unless_asked_for() -> None:
    _, loop, _, _ = _loop(gpus=8, nodes=2)
    loop.queues_changed([QueueSpec(name="batch")])
    for i in range(16):
        loop.pod_pending(_pod(f"small{i}", 1, queue="batch"))
    loop.pod_pending(_pod("big", 8, queue="batch"))
    loop.run_until_idle()
    assert loop.holds.reservation is None


def test_reclaim_preempts_the_fewest_youngest_borrowers_and_the_job_then_runs() -> None:
    cluster, loop, clock, events, evictions = _reclaim_loop(QueueSpec(name="prod", guaranteed={"nvidia.com/gpu": 8}))
    _fill_with_batch(loop, clock)
    nodes = {d.pod.name: d.node for d in cluster.binder.decisions}
    clock.now = 20.0
    loop.pod_pending(_pod("prod0", 4, queue="prod"))
    loop.run_until_idle()
    victims = sorted(p.name for p in evictions.pods)
    # Two 2-GPU victims on one node free the four GPUs the job needs; the youngest such pair is b6 and b7.
    assert victims == ["b6", "b7"]
    assert nodes["b6"] == nodes["b7"]
    assert events.reasons("pod default/b7") == ["Scheduled", "Preempted"]
    for pod in evictions.pods:
        cluster.cache.remove_pod(pod.key)
        loop.pod_gone(pod.key)
    clock.now = 30.0
    loop.cluster_event("pod deleted")
    loop.run_until_idle()
    assert cluster.binder.decisions[-1].pod.name == "prod0"
    assert cluster.binder.decisions[-1].node == nodes["b7"]


def test_no_reclaim_when_the_policy_says_never() -> None:
    _, loop, clock, _, evictions = _reclaim_loop(
        QueueSpec(name="prod", guaranteed={"nvidia.com/gpu": 8}, reclaim="Never")
    )
    _fill_with_batch(loop, clock)
    loop.pod_pending(_pod("prod0", 4, queue="prod"))
    loop.run_until_idle()
    assert evictions.pods == []


def test_lower_priority_reclaim_spares_work_of_equal_priority() -> None:
    _, loop, clock, _, evictions = _reclaim_loop(
        QueueSpec(name="prod", guaranteed={"nvidia.com/gpu": 8}, reclaim="LowerPriority")
    )
    _fill_with_batch(loop, clock)
    loop.pod_pending(_pod("prod0", 4, queue="prod"))
    loop.run_until_idle()
    assert evictions.pods == []


def test_no_reclaim_beyond_the_guarantee() -> None:
    _, loop, clock, _, evictions = _reclaim_loop(QueueSpec(name="prod", guaranteed={"nvidia.com/gpu": 2}))
    _fill_with_batch(loop, clock)
    loop.pod_pending(_pod("prod0", 4, queue="prod"))  # 4 GPUs is above prod's guarantee of 2: it must wait
    loop.run_until_idle()
    assert evictions.pods == []


def test_a_gang_is_preempted_whole() -> None:
    cluster, loop, clock, _, evictions = _reclaim_loop(QueueSpec(name="prod", guaranteed={"nvidia.com/gpu": 8}))
    loop.group_upsert(PodGroup("default", "train", min_member=4, queue="batch"))
    for i in range(4):
        loop.pod_pending(_pod(f"train-{i}", 4, queue="batch", group="train"))
    loop.run_until_idle()
    assert len(cluster.binder.decisions) == 4
    clock.now = 10.0
    loop.pod_pending(_pod("prod0", 2, queue="prod"))
    loop.run_until_idle()
    assert sorted(p.name for p in evictions.pods) == [f"train-{i}" for i in range(4)]


def _with_priority(pod: api_pod.PodRequest, priority: int) -> api_pod.PodRequest:
    return dataclasses.replace(pod, priority=priority)


def test_within_a_queue_higher_priority_work_preempts_lower_priority_work() -> None:
    _cluster, loop, clock, events, evictions = _reclaim_loop(QueueSpec(name="prod"))
    for i in range(4):
        clock.now = float(i)
        loop.pod_pending(_with_priority(_pod(f"low{i}", 4, queue="batch"), 0))
        loop.run_until_idle()
    clock.now = 10.0
    loop.pod_pending(_with_priority(_pod("urgent", 4, queue="batch"), 100))
    loop.run_until_idle()
    # One 4-GPU victim is enough; the youngest goes.
    assert [p.name for p in evictions.pods] == ["low3"]
    assert events.reasons("pod default/urgent") == ["Preempting", "FailedScheduling"]
    assert "higher-priority work of queue 'batch'" in events.messages("pod default/low3")[-1]
    assert loop.action_state(Preemptor).preemptions == {"batch": 1}


def test_a_gang_member_placed_alone_preempts_at_the_priority_it_was_queued_at() -> None:
    # A member beyond minMember is queued at its gang's priority (higher than its own here): it preempts at that
    # priority too, as the whole gang did (it used to preempt at its own, and found nothing below it).
    _cluster, loop, clock, events, evictions = _reclaim_loop(QueueSpec(name="prod"))
    for i in range(3):
        clock.now = float(i)
        loop.pod_pending(_with_priority(_pod(f"low{i}", 4, queue="batch"), 10))
        loop.run_until_idle()
    loop.group_upsert(PodGroup("default", "train", min_member=1, queue="batch", priority=100))
    loop.pod_pending(_with_priority(_pod("train-0", 4, queue="batch", group="train"), 0))
    loop.run_until_idle()
    assert evictions.pods == []
    clock.now = 10.0
    loop.pod_pending(_with_priority(_pod("train-1", 4, queue="batch", group="train"), 0))
    loop.run_until_idle()
    assert [p.name for p in evictions.pods] == ["low2"]
    assert events.reasons("pod default/train-1") == ["Preempting", "FailedScheduling"]


def test_within_queue_never_and_equal_priority_preempt_nothing() -> None:
    _, loop, _, _, evictions = _reclaim_loop(QueueSpec(name="prod"), QueueSpec(name="batch", within_queue="Never"))
    for i in range(4):
        loop.pod_pending(_with_priority(_pod(f"low{i}", 4, queue="batch"), 0))
    loop.run_until_idle()
    loop.pod_pending(_with_priority(_pod("urgent", 4, queue="batch"), 100))
    loop.run_until_idle()
    assert evictions.pods == []
    _, loop, _clock, _, evictions = _reclaim_loop(QueueSpec(name="prod"))
    for i in range(4):
        loop.pod_pending(_pod(f"peer{i}", 4, queue="batch"))
    loop.run_until_idle()
    loop.pod_pending(_pod("late", 4, queue="batch"))
    loop.run_until_idle()
    assert evictions.pods == []


def test_work_of_other_queues_is_never_preempted_for_priority_alone() -> None:
    # prod has no guarantee: its urgent job may not take batch's GPUs, whatever its priority.
    _, loop, clock, _, evictions = _reclaim_loop(QueueSpec(name="prod"))
    _fill_with_batch(loop, clock)
    loop.pod_pending(_with_priority(_pod("urgent", 2, queue="prod"), 1000))
    loop.run_until_idle()
    assert evictions.pods == []


def test_queue_status_reports_allocation_guarantee_borrowing_and_pending_work() -> None:
    _cluster, loop, clock, _, _ = _reclaim_loop(QueueSpec(name="prod", guaranteed={"nvidia.com/gpu": 4}))
    loop.evictor = None
    _fill_with_batch(loop, clock, count=7)  # batch: 14 of 16 GPUs, all borrowed
    loop.pod_pending(_pod("prod0", 2, queue="prod"))
    loop.pod_pending(_pod("prod1", 2, queue="prod"))  # does not fit: pending
    loop.group_upsert(PodGroup("default", "g", min_member=2, queue="prod"))
    for i in range(2):
        loop.pod_pending(_pod(f"g{i}", 1, queue="prod", group="g"))
    loop.run_until_idle()
    status = loop.queue_statuses()
    # In the scheduler's units (CPU in milli-cores); scheduler.k8s.status writes them as quantities.
    assert _held(status["batch"].allocated) == {"cpu": 7000.0, "nvidia.com/gpu": 14.0}
    assert _held(status["batch"].borrowed) == _held(status["batch"].allocated)
    assert status["batch"].pending_pods == 0
    assert status["prod"].allocated["nvidia.com/gpu"] == 2.0
    assert status["prod"].guaranteed_in_use == {"nvidia.com/gpu": 2.0}
    # prod is guaranteed GPUs only: the CPU its GPU pods come with is not borrowed (it said {"cpu": "1"} while its
    # GPU column was blank); batch names nothing, so everything it holds counts.
    assert _held(status["prod"].borrowed) == {}
    assert (status["prod"].gpu_limit, status["batch"].gpu_limit) == (None, None)
    # prod1 and the gang of two wait.
    assert (status["prod"].pending_pods, status["prod"].pending_gangs) == (3, 1)
    # Fair share of GPUs, water-filled: prod asks for 2 + 4, gets its guarantee of 4 and half the rest: 6 of 16.
    assert status["prod"].fair_share == pytest.approx(0.375)
    prod_rank, batch_rank = status["prod"].rank_share, status["batch"].rank_share
    assert prod_rank is not None and batch_rank is not None and prod_rank < 0 < batch_rank
    assert "default" in status


def test_pods_found_running_after_a_restart_are_charged_and_can_be_reclaimed() -> None:
    cluster, loop, clock, _, evictions = _reclaim_loop(QueueSpec(name="prod", guaranteed={"nvidia.com/gpu": 8}))
    # A fresh loop (after a restart) finds 8 batch pods of 2 GPUs already bound.
    for i in range(8):
        pod = api_pod.parse_pod(
            objects.pod(f"old{i}", gpus=2, labels={"gpusched.io/queue": "batch"}, node_name=f"n{i // 4}")
        )
        cluster.cache.upsert_pod(pod)
        loop.pod_placed(pod)
    assert loop.held("batch")["nvidia.com/gpu"] == 16.0
    clock.now = 5.0
    loop.pod_pending(_pod("prod0", 4, queue="prod"))
    loop.run_until_idle()
    assert len(evictions.pods) == 2 and {p.name for p in evictions.pods} <= {f"old{i}" for i in range(8)}


def test_preemptors_in_one_batch_choose_different_victims_while_deletions_are_pending() -> None:
    # As in a cluster: evicted pods stay until the API server's deletion reaches the cache.
    cluster, loop, clock, _, evictions = _reclaim_loop(
        QueueSpec(name="prod", guaranteed={"nvidia.com/gpu": 8}),
        QueueSpec(name="batch", guaranteed={"nvidia.com/gpu": 4}),
    )
    _fill_with_batch(loop, clock, count=16, gpus=1)
    clock.now = 20.0
    for i in range(4):
        loop.pod_pending(_pod(f"prod{i}", 2, queue="prod"))
    loop.run_until_idle()
    victims = [p.name for p in evictions.pods]
    # Each 2-GPU job needs two victims, no victim is chosen twice, and batch keeps at least its guarantee of 4.
    assert len(victims) == len(set(victims)) == 8
    assert sorted(victims, key=lambda n: int(n[1:])) == [f"b{i}" for i in range(8, 16)]
    # The deletions arrive: every preemptor gets the room its victims left, though their nominations overlap.
    for pod in evictions.pods:
        cluster.cache.remove_pod(pod.key)
        loop.pod_gone(pod.key)
    clock.now = 30.0
    loop.cluster_event("pod deleted")
    loop.run_until_idle()
    assert {f"prod{i}" for i in range(4)} <= set(_placed(cluster))


def test_a_job_whose_only_free_room_is_held_for_another_job_reclaims_instead_of_waiting() -> None:
    # prod0 reclaims a whole node of batch's 1-GPU pods; seven of its eight victims are gone, so that node has 7 free
    # GPUs, all held for prod0 until the eighth goes. research, below its guarantee, asks 4 GPUs: the held room is
    # not its own, so it reclaims from batch on the other node instead of waiting for prod0's hold.
    cluster, loop, clock, events, evictions = _reclaim_loop(QueueSpec(name="prod", guaranteed={"nvidia.com/gpu": 8}))
    loop.queues_changed(
        [
            QueueSpec(name="prod", guaranteed={"nvidia.com/gpu": 8}),
            QueueSpec(name="research", guaranteed={"nvidia.com/gpu": 8}),
            QueueSpec(name="batch"),
        ]
    )
    _fill_with_batch(loop, clock, count=16, gpus=1)
    nodes = {d.pod.name: d.node for d in cluster.binder.decisions}
    clock.now = 20.0
    loop.pod_pending(_pod("prod0", 8, queue="prod"))
    loop.run_until_idle()
    first = sorted(p.name for p in evictions.pods)
    assert len(first) == 8 and len({nodes[name] for name in first}) == 1
    held_node = nodes[first[0]]
    last = evictions.pods[-1]
    for pod in evictions.pods[:-1]:
        cluster.cache.remove_pod(pod.key)
        loop.pod_gone(pod.key)
    clock.now = 30.0
    loop.cluster_event("pod deleted")
    loop.pod_pending(_pod("research0", 4, queue="research"))
    loop.run_until_idle()
    assert "prod0" not in _placed(cluster) and "research0" not in _placed(cluster)
    assert "Reclaiming" in events.reasons("pod default/research0")
    second = evictions.pods[8:]
    assert len(second) == 4 and all(nodes[p.name] != held_node for p in second), [p.name for p in second]
    # Every victim goes: each job runs where its own victims were.
    for pod in [last, *second]:
        cluster.cache.remove_pod(pod.key)
        loop.pod_gone(pod.key)
    clock.now = 40.0
    loop.cluster_event("pod deleted")
    loop.run_until_idle()
    where = {d.pod.name: d.node for d in cluster.binder.decisions}
    assert where["prod0"] == held_node and where["research0"] != held_node


def test_shared_gpu_charges_released_in_another_order_leave_exactly_nothing() -> None:
    # 0.1, 0.7, 0.3 and 2.0 GPUs charged to one queue and released in another order: float sums ended at
    # -3.55e-15, and the fair-share computation raised on the negative demand (killing the scheduling task).
    _, loop, _, _ = _loop(gpus=8, nodes=1)
    loop.queues_changed([QueueSpec(name="prod", guaranteed={"nvidia.com/gpu": 4}), QueueSpec(name="batch")])
    raws = [objects.pod(f"s{m}", milli=m, labels={"gpusched.io/queue": "prod"}) for m in (100, 700, 300)]
    pods = [api_pod.parse_pod(raw) for raw in raws]
    pods.append(_pod("w", 2, queue="prod"))
    for pod in pods:
        loop.pod_placed(dataclasses.replace(pod, node_name="n0"))
    assert loop.held("prod")["nvidia.com/gpu"] == 3.1
    for key in ("default/s700", "default/w", "default/s100", "default/s300"):
        loop.pod_gone(key)
        loop.queue_statuses()  # water-fills fair shares over what each queue holds
    assert loop.held("prod")["nvidia.com/gpu"] == 0.0
    # The gate's fair shares too, with a queue starving.
    loop.gate.starve("default/x", "batch", {"nvidia.com/gpu": 1.0})
    assert loop.tenancy.fair_share_gate("prod", {"nvidia.com/gpu": 1.0}, loop.gate.starving_totals) == ""


def test_a_restart_charges_gang_members_to_their_podgroups_queue_in_any_order() -> None:
    # After a restart the running members of a gang may be listed before their PodGroup: they must end up charged
    # to the group's queue (not to 'default'), and the queue's limit must hold for the next pod.
    def restart(group_first: bool) -> tuple[Cluster, SchedulingLoop, Events]:
        cluster, loop, _, events = _loop(gpus=8, nodes=2)
        loop.queues_changed([QueueSpec(name="capped", limit={"nvidia.com/gpu": 8})])
        group = PodGroup("default", "g", min_member=2, queue="capped")
        members = [
            dataclasses.replace(_pod(f"g-{i}", 4, group="g"), node_name=f"n{i}", phase="Running") for i in range(2)
        ]
        if group_first:
            loop.group_upsert(group)
        for member in members:
            cluster.cache.upsert_pod(member)
            loop.pod_placed(member)
        if not group_first:
            loop.group_upsert(group)
        return cluster, loop, events

    for group_first in (True, False):
        cluster, loop, events = restart(group_first)
        assert loop.held("capped") == {"cpu": 2000.0, "nvidia.com/gpu": 8.0}
        assert loop.held("default").get("nvidia.com/gpu", 0.0) == 0.0
        status = loop.queue_statuses()["capped"]
        assert _held(status.allocated) == {"cpu": 2000.0, "nvidia.com/gpu": 8.0}
        loop.pod_pending(_pod("one", 1, queue="capped"))
        loop.run_until_idle()
        assert _placed(cluster) == []
        assert "above its ceiling 8" in events.messages("pod default/one")[-1]
        # The PodGroup is deleted: its running members count as pods of their own queue ('default').
        loop.group_removed("default/g")
        assert loop.held("capped").get("nvidia.com/gpu", 0.0) == 0.0
        assert loop.held("default")["nvidia.com/gpu"] == 8.0


def test_the_what_if_is_closed_when_reclaim_gives_up_early() -> None:
    # A 16-GPU pod on 8-GPU nodes with no candidates: find_victims returned before its try/finally with a what-if
    # open, and the next snapshot raised "a what-if on the previous snapshot is still open".
    cluster, loop, _, _, evictions = _reclaim_loop(QueueSpec(name="prod", guaranteed={"nvidia.com/gpu": 24}))
    loop.pod_pending(_pod("first", 1, queue="prod"))  # 15 GPUs left free, and no victim to take
    loop.run_until_idle()
    loop.pod_pending(_pod("huge", 16, queue="prod"))
    loop.run_until_idle()
    assert evictions.pods == []
    cluster.cache.snapshot()  # raises if the what-if was left open
    loop.pod_pending(_pod("small", 1, queue="prod"))
    loop.run_until_idle()
    assert _placed(cluster) == ["first", "small"]


def test_limits_hold_at_every_level_of_the_tree() -> None:
    # org's limit of 10 bounds both leaves (fairshare's guarantee checks: tests/api/test_fairshare.py).
    _, loop, _, _ = _loop(gpus=8, nodes=2)
    loop.queues_changed(
        [
            QueueSpec(name="org", guaranteed={"nvidia.com/gpu": 8}, limit={"nvidia.com/gpu": 10}),
            QueueSpec(name="a", parent="org", guaranteed={"nvidia.com/gpu": 2}),
            QueueSpec(name="b", parent="org"),
        ]
    )
    for name, queue, gpus in (("a0", "a", 2), ("b0", "b", 5)):
        loop.pod_placed(dataclasses.replace(_pod(name, gpus, queue=queue), node_name="n0"))
    assert loop.tenancy.over_ceiling("b", {"nvidia.com/gpu": 3.0}) == ""
    assert loop.tenancy.over_ceiling("a", {"nvidia.com/gpu": 4.0}) == (
        "queue 'org' would hold 11 nvidia.com/gpu, above its ceiling 10"
    )


def _held(vector: dict[str, float]) -> dict[str, float]:
    """The resources a status vector holds some of."""
    return {name: amount for name, amount in vector.items() if amount}


def test_the_shared_capacity_follows_every_node_change_and_not_the_placements() -> None:
    # The capacity the queues share is kept between the ranks asked after each placement; a node added, changed or
    # removed makes it anew, a pod placed does not.
    cluster, loop, _, _ = _loop(gpus=8, nodes=2)
    assert loop.tenancy.capacity()["nvidia.com/gpu"] == 16.0
    version = cluster.cache.nodes_version
    loop.pod_pending(_pod("p", 2))
    loop.run_until_idle()
    placed = dataclasses.replace(cluster.binder.decisions[0].pod, node_name=cluster.binder.decisions[0].node)
    cluster.cache.upsert_pod(placed)
    loop.pod_placed(placed)
    assert cluster.cache.nodes_version == version and loop.tenancy.capacity()["nvidia.com/gpu"] == 16.0
    cluster.cache.upsert_node(api_node.parse_node(objects.node("n2", cpu="64", gpus=4)))
    assert loop.tenancy.capacity()["nvidia.com/gpu"] == 20.0
    cluster.cache.upsert_node(api_node.parse_node(objects.node("n2", cpu="32", gpus=8)))
    assert loop.tenancy.capacity()["nvidia.com/gpu"] == 24.0
    assert loop.tenancy.capacity()["cpu"] == 160_000.0  # millicores
    version = cluster.cache.nodes_version
    cluster.cache.upsert_node(api_node.parse_node(objects.node("n2", cpu="32", gpus=8)))  # the same again
    assert cluster.cache.nodes_version == version
    cluster.cache.remove_node("n0")
    assert loop.tenancy.capacity()["nvidia.com/gpu"] == 16.0 and loop.tenancy.capacity()["cpu"] == 96_000.0
    loop.tenancy.capacity()["cpu"] = 0.0  # a caller's copy: what the queues share is not changed by it
    assert loop.tenancy.capacity()["cpu"] == 96_000.0
    # A pod asking for a resource no node has adds its column: shared, as before, at 0.
    raw = objects.pod("odd", gpus=0)
    raw["spec"]["containers"][0]["resources"]["requests"]["example.com/widget"] = "1"
    cluster.cache.request_vector(api_pod.parse_pod(raw))
    assert loop.tenancy.capacity()["example.com/widget"] == 0.0
