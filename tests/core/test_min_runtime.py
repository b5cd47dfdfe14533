"""A Queue's minimum run time: running work younger than it is not preempted within its queue, reclaimed by another
queue or moved by consolidation; once older, it is (KAI-Scheduler's preemptMinRuntime/reclaimMinRuntime)."""

from __future__ import annotations

import dataclasses

from scheduler.api.crds.podgroup import PodGroup
from scheduler.api.crds.queue import QueueSpec
from scheduler.api.objects import pod as api_pod
from scheduler.core import min_runtime
from scheduler.core.loop import ClusterEvent
from scheduler.core.preemption import nodes as node_preemption
from scheduler.core.preemption.victims import Candidate
from tests.api import objects
from tests.core import test_consolidate, test_preemption, test_tenancy


def test_a_queue_inherits_its_minimum_from_the_nearest_ancestor_that_sets_one() -> None:
    loop = test_tenancy._loop()[1]
    loop.queues_changed(
        [
            QueueSpec(name="org", reclaim_min_runtime_s=600, preempt_min_runtime_s=60),
            QueueSpec(name="team", parent="org", reclaim_min_runtime_s=0),
            QueueSpec(name="other", parent="org"),
        ]
    )
    tree = loop.tenancy.tree
    assert tree.min_runtime_s("team", "reclaim") == 0  # its own 0: at once
    assert tree.min_runtime_s("team", "preempt") == 60  # its parent's
    assert tree.min_runtime_s("other", "reclaim") == 600
    assert tree.min_runtime_s("other", "move") == 0  # nobody sets it
    assert tree.min_runtime_s("default", "reclaim") == tree.min_runtime_s("nowhere", "reclaim") == 0


def test_reclaim_spares_borrowers_younger_than_their_queues_minimum_and_takes_them_once_older() -> None:
    _, loop, clock, _, evictions = test_tenancy._reclaim_loop(
        QueueSpec(name="prod", guaranteed={"nvidia.com/gpu": 8}),
        QueueSpec(name="batch", reclaim_min_runtime_s=80),
    )
    test_tenancy._fill_with_batch(loop, clock)  # b0..b7 placed at 0..7, two GPUs each, on two nodes of 8
    clock.now = 20.0
    loop.pod_pending(test_tenancy._pod("prod0", 4, queue="prod"))
    loop.run_until_idle()
    assert evictions.pods == []  # every borrower is younger than 80 s
    # At 85 s (past the unschedulable pool's minute: the job is tried again) b0..b5 have run their minimum, b6 and
    # b7 not yet: the youngest pair on one node that may go is taken (without the minimum it was b6 and b7:
    # test_tenancy's test_reclaim_preempts_the_fewest_youngest_borrowers).
    clock.now = 85.0
    loop.run_until_idle()
    assert sorted(p.name for p in evictions.pods) == ["b4", "b5"]


def test_a_single_pod_spares_a_victim_younger_than_the_minimum_and_says_why() -> None:
    _, loop, clock, events, evictions = test_preemption._loop(("n0", 2))
    loop.queues_changed([QueueSpec(name="default", preempt_min_runtime_s=100)])
    test_preemption._run(loop, clock, [test_preemption._pod("low", 2, 1)])
    test_preemption._run(loop, clock, [test_preemption._pod("urgent", 2, 10)])
    assert evictions.pods == []
    said = events.messages("pod default/urgent")[-1]
    assert f"preemption: 0/1 nodes are available: 1 {node_preemption.YOUNG_VICTIMS}." in said, said
    clock.now = 200.0  # past the unschedulable pool's minute: tried again
    loop.run_until_idle()
    assert [p.name for p in evictions.pods] == ["low"]


def test_a_gang_victim_is_protected_whole_until_it_has_run_the_minimum() -> None:
    _, loop, clock, _, evictions = test_preemption._loop(("n0", 2), ("n1", 2))
    loop.queues_changed([QueueSpec(name="default", preempt_min_runtime_s=100)])
    loop.group_upsert(PodGroup("default", "g", min_member=2))
    for i in range(2):
        raw = objects.pod(f"g-{i}", extra={test_preemption.FOO: "2"}, labels={"gpusched.io/pod-group": "g"})
        loop.pod_pending(api_pod.parse_pod(raw))
    loop.run_until_idle()
    urgent = api_pod.parse_pod(objects.pod("urgent", extra={test_preemption.FOO: "2"}))
    loop.group_upsert(PodGroup("default", "u", min_member=1, priority=10))
    loop.pod_pending(dataclasses.replace(urgent, labels={"gpusched.io/pod-group": "u"}, priority=10))
    loop.run_until_idle()
    assert evictions.pods == []
    clock.now = 150.0
    loop.run_until_idle()
    assert sorted(p.name for p in evictions.pods) == ["g-0", "g-1"]


def test_a_pods_own_start_time_counts_over_when_the_scheduler_saw_it() -> None:
    # After a restart the scheduler sees a bound pod placed "now"; its status.startTime says it ran an hour already.
    loop = test_tenancy._loop()[1]
    loop.queues_changed([QueueSpec(name="default", reclaim_min_runtime_s=600)])
    tenancy = loop.tenancy
    now = 1_767_225_600.0 + 3600
    tenancy.clock = lambda: now
    raw = {**objects.pod("p", gpus=1, node_name="n0"), "status": {"startTime": "2026-01-01T00:00:00Z"}}
    pod = api_pod.parse_pod(raw)
    seen_now = Candidate(pod.key, "default", 0, now, [pod])
    assert min_runtime.may_disturb(tenancy, seen_now, "reclaim")
    fresh = Candidate(pod.key, "default", 0, now, [dataclasses.replace(pod, started=0.0)])
    assert not min_runtime.may_disturb(tenancy, fresh, "reclaim")
    # An elastic gang's surplus member is lent room: never protected.
    assert min_runtime.may_disturb(tenancy, dataclasses.replace(fresh, gang="gang:default/g"), "reclaim")


def test_consolidation_moves_no_pod_younger_than_its_queues_minimum_and_says_why() -> None:
    world = test_consolidate.World(queues=[QueueSpec(name="default", move_min_runtime_s=600)])
    world.loop.pod_pending(world.pod("big", gpus=4))
    world.step()
    assert world.made == 0 and world.cluster.cache.pod("default/big") is None
    d1 = world.cluster.cache.pod("default/d1-0")
    assert d1 is not None
    why = world.moves.why_not(d1.pod, 0, world.clock.now)
    assert "spec.consolidation.moveMinRuntimeSeconds" in why and "minimum of 600s" in why, why
    world.clock.now = 700.0
    world.loop.cluster_event(ClusterEvent.POD_DELETED)
    world.step()
    assert world.cluster.cache.pod("default/big") is not None, world.events.seen
    assert world.made == 2
