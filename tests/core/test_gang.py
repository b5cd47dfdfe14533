"""Gangs: placed all or nothing, never deadlocked, backed off and timed out, and robust to bad PodGroups."""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler.api.basics.errors import InvalidObject
from scheduler.api.crds.podgroup import PodGroup, parse_podgroup
from scheduler.api.objects import node as api_node
from scheduler.api.objects import pod as api_pod
from scheduler.core import gang
from scheduler.core.loop import SchedulingLoop
from scheduler.framework import profile
from scheduler.queue.scheduling import SchedulingQueue
from tests.api import objects
from tests.core.harness import Clock, Cluster, Events

GANG_PROFILE = ("fit", "gpu", {"name": "gang", "weight": 50}, "binpack")


def _loop(nodes: int = 2, gpus: int = 8) -> tuple[Cluster, SchedulingLoop, Clock, Events]:
    cluster = Cluster([objects.node(f"n{i}", cpu="64", gpus=gpus) for i in range(nodes)], GANG_PROFILE)
    clock = Clock()
    events = Events()
    queue = SchedulingQueue(clock=clock, initial_backoff_s=1.0, max_backoff_s=10.0, unschedulable_timeout_s=60.0)
    return cluster, SchedulingLoop(cluster.scheduler, queue, clock=clock, events=events), clock, events


def _member(group: str, i: int, gpus: int, namespace: str = "default") -> api_pod.PodRequest:
    raw = objects.pod(f"{group}-{i}", gpus=gpus, labels={"gpusched.io/pod-group": group}, namespace=namespace)
    return api_pod.parse_pod(raw)


def _used_gpus(cluster: Cluster) -> float:
    a = cluster.cache.arrays
    return float(a.used[:, 3].sum())


def test_a_gang_that_fits_is_placed_whole_on_few_nodes() -> None:
    cluster, loop, _, events = _loop()
    loop.group_upsert(PodGroup("default", "train", min_member=4))
    for i in range(4):
        loop.pod_pending(_member("train", i, gpus=4))
    loop.run_until_idle()
    nodes = {d.node for d in cluster.binder.decisions}
    assert len(cluster.binder.decisions) == 4
    assert nodes == {"n0", "n1"}  # 4 x 4 GPUs on two 8-GPU nodes: no third node is touched
    status = loop.group_status("default/train")
    assert status is not None and status["phase"] == "Scheduled" and status["scheduled"] == 4
    assert "Scheduled" in events.reasons("podgroup default/train")


def test_a_gang_that_does_not_fit_holds_nothing() -> None:
    cluster, loop, _, events = _loop()
    before = cluster.cache.arrays.used.copy()
    gen_before = cluster.cache.arrays.gen.copy()
    loop.group_upsert(PodGroup("default", "big", min_member=3))
    for i in range(3):
        loop.pod_pending(_member("big", i, gpus=8))
    loop.run_until_idle()
    assert cluster.binder.decisions == []
    np.testing.assert_array_equal(cluster.cache.arrays.used, before)
    np.testing.assert_array_equal(cluster.cache.arrays.gen, gen_before)  # the cache was never touched
    status = loop.group_status("default/big")
    assert status is not None
    condition = status["conditions"][0]  # type: ignore[index]
    assert (condition["type"], condition["status"]) == ("Scheduled", "False")
    assert "24 whole GPUs" in condition["message"]
    assert "FailedScheduling" in events.reasons("podgroup default/big")


def test_a_gang_that_never_fits_says_so_in_its_reason_and_one_that_waits_does_not() -> None:
    cluster, loop, _, _ = _loop()  # 2 nodes of 8 GPUs
    loop.group_upsert(PodGroup("default", "big", min_member=3))
    for i in range(3):
        loop.pod_pending(_member("big", i, gpus=8))  # 24 GPUs: more than the cluster has in all
    # 2 x 8 GPUs fit the cluster, not while a pod holds one of its nodes.
    cluster.cache.upsert_pod(api_pod.parse_pod(objects.pod("busy", gpus=8, node_name="n0")))
    loop.group_upsert(PodGroup("default", "later", min_member=2))
    for i in range(2):
        loop.pod_pending(_member("later", i, gpus=8))
    loop.run_until_idle()
    assert cluster.binder.decisions == []
    big, later = loop.group_status("default/big"), loop.group_status("default/later")
    assert big is not None and later is not None
    assert big["conditions"][0]["reason"] == "NeverFits"  # type: ignore[index]
    assert big["conditions"][0]["message"].startswith("Never fits as the cluster is")  # type: ignore[index]
    assert later["conditions"][0]["reason"] == "NotAllMembersFit"  # type: ignore[index]


def test_the_what_if_rolls_back_when_the_last_member_fails() -> None:
    # Three members of 4 GPUs and 40 CPUs: the GPUs pass the cheap check (room for four groups of 4), but each
    # 64-CPU node takes only one of them, so the third member fits nowhere after two were placed on the snapshot.
    cluster, loop, _, _ = _loop()
    group = PodGroup("default", "odd", min_member=3)
    members = [
        api_pod.parse_pod(objects.pod(f"odd-{i}", cpu="40", gpus=4, labels={"gpusched.io/pod-group": "odd"}))
        for i in range(3)
    ]
    result = gang.place_gang(cluster.scheduler, group, members)
    assert not result.status.ok
    assert result.blocked.startswith("default/odd-")
    assert "Insufficient cpu" in result.status.message
    assert _used_gpus(cluster) == 0.0
    assert cluster.cache.snapshot().arrays._open == 0
    del loop


def test_the_cheap_check_refuses_members_that_cannot_share_nodes() -> None:
    # Three members of 5 GPUs: 15 of the 16 free GPUs, but each 8-GPU node holds one group of 5.
    cluster, _, _, _ = _loop()
    members = [_member("odd", i, gpus=5) for i in range(3)]
    result = gang.place_gang(cluster.scheduler, PodGroup("default", "odd", min_member=3), members)
    assert result.status.message == (
        "Never fits as the cluster is: 3 member(s) need 5+ whole GPUs on one node and the nodes have room for 2 such"
        " group(s); it fits once nodes join, or it asks for fewer members or GPUs."
    )
    assert _used_gpus(cluster) == 0.0


@given(
    free=st.lists(st.integers(0, 8), min_size=1, max_size=6),
    needs=st.lists(st.integers(1, 8), min_size=1, max_size=5),
)
def test_the_cheap_check_never_refuses_a_job_that_fits(free: list[int], needs: list[int]) -> None:
    # Brute force: try every assignment of members to nodes.
    fits = any(
        all(sum(n for n, at in zip(needs, where, strict=True) if at == node) <= f for node, f in enumerate(free))
        for where in itertools.product(range(len(free)), repeat=len(needs))
    )
    short = gang.whole_gpus_short(np.array(free, dtype=np.int64), needs)
    if fits:
        assert short == ""
    if len(set(needs)) == 1:
        # Members of one size: the check is exact.
        assert (short == "") == fits


def test_two_large_gangs_arriving_interleaved_do_not_deadlock() -> None:
    cluster, loop, clock, _ = _loop(nodes=2, gpus=8)
    loop.group_upsert(PodGroup("default", "a", min_member=3, created=1.0))
    loop.group_upsert(PodGroup("default", "b", min_member=3, created=2.0))
    for i in range(3):  # each gang needs 12 of the 16 GPUs; members arrive interleaved
        loop.pod_pending(_member("a", i, gpus=4))
        loop.pod_pending(_member("b", i, gpus=4))
    loop.run_until_idle()
    placed = {d.pod.pod_group for d in cluster.binder.decisions}
    assert len(placed) == 1 and len(cluster.binder.decisions) == 3
    winner = placed.pop()
    loser = "b" if winner == "a" else "a"
    # The winner finishes; the loser runs.
    for d in list(cluster.binder.decisions):
        cluster.cache.remove_pod(d.pod.key)
        loop.pod_gone(d.pod.key)
    clock.now = 5.0  # past the loser's first backoff
    loop.cluster_event("pod deleted")
    cluster.binder.decisions.clear()
    loop.run_until_idle()
    assert {d.pod.pod_group for d in cluster.binder.decisions} == {loser}
    assert len(cluster.binder.decisions) == 3


def test_a_gang_is_not_tried_before_min_member_pods_exist() -> None:
    cluster, loop, _, _ = _loop()
    loop.group_upsert(PodGroup("default", "g", min_member=3))
    loop.pod_pending(_member("g", 0, gpus=1))
    loop.pod_pending(_member("g", 1, gpus=1))
    loop.run_until_idle()
    assert cluster.binder.decisions == []
    status = loop.group_status("default/g")
    assert status is not None and status["phase"] == "Pending"
    loop.pod_pending(_member("g", 2, gpus=1))
    loop.run_until_idle()
    assert len(cluster.binder.decisions) == 3


def test_members_beyond_min_member_are_placed_afterwards_near_the_gang() -> None:
    cluster, loop, _, _ = _loop(nodes=3)
    loop.group_upsert(PodGroup("default", "g", min_member=2))
    for i in range(4):
        loop.pod_pending(_member("g", i, gpus=2))
    loop.run_until_idle()
    assert len(cluster.binder.decisions) == 4
    assert {d.node for d in cluster.binder.decisions} == {"n0"}


def test_backoff_then_unschedulable_after_the_timeout_and_still_retried() -> None:
    cluster, loop, clock, _ = _loop(nodes=1)
    # 2 x 4 GPUs fit the 8-GPU node once the pod holding half of it goes: the gang waits (a gang that never fits
    # the cluster says NeverFits instead, whatever its timeout).
    cluster.cache.upsert_pod(api_pod.parse_pod(objects.pod("busy", gpus=4, node_name="n0")))
    loop.group_upsert(PodGroup("default", "g", min_member=2, schedule_timeout_s=30.0))
    loop.pod_pending(_member("g", 0, gpus=4))
    loop.pod_pending(_member("g", 1, gpus=4))
    assert loop.run_until_idle() == 1
    status = loop.group_status("default/g")
    assert status is not None and status["phase"] == "Scheduling"
    clock.now = 0.5
    loop.cluster_event("node added")
    assert loop.run_until_idle() == 0  # still backing off
    clock.now = 31.0
    loop.cluster_event("node added")
    assert loop.run_until_idle() == 1
    status = loop.group_status("default/g")
    assert status is not None and status["phase"] == "Unschedulable"
    assert status["conditions"][0]["reason"] == "Unschedulable"  # type: ignore[index]
    # Room appears (a second node): the group is retried and runs.
    cluster.cache.upsert_node(api_node.parse_node(objects.node("n9", cpu="64", gpus=8)))
    clock.now = 200.0
    loop.cluster_event("node added")
    loop.run_until_idle()
    assert len(cluster.binder.decisions) == 2
    status = loop.group_status("default/g")
    assert status is not None and status["phase"] == "Scheduled"


def test_members_of_a_missing_group_wait_with_an_event_and_join_when_it_appears() -> None:
    cluster, loop, _, events = _loop()
    for i in range(2):
        loop.pod_pending(_member("late", i, gpus=1))
    loop.run_until_idle()
    assert cluster.binder.decisions == []
    assert events.reasons("pod default/late-0") == ["PodGroupNotFound"]
    loop.pod_pending(_member("late", 0, gpus=1))  # an update: no second event
    assert events.reasons("pod default/late-0") == ["PodGroupNotFound"]
    loop.group_upsert(PodGroup("default", "late", min_member=2))
    loop.run_until_idle()
    assert len(cluster.binder.decisions) == 2


def test_a_bind_failure_keeps_the_other_members_and_retries_that_one() -> None:
    cluster, loop, _, events = _loop()
    loop.group_upsert(PodGroup("default", "g", min_member=3))
    members = [_member("g", i, gpus=2) for i in range(3)]
    for m in members:
        loop.pod_pending(m)
    loop.run_until_idle()
    assert len(cluster.binder.decisions) == 3
    failed = cluster.binder.decisions[0].pod
    loop.bind_failed(failed, "admission webhook denied")
    assert not cluster.cache.is_assumed(failed.key)
    assert all(cluster.cache.is_assumed(m.key) for m in members if m.key != failed.key)
    status = loop.group_status("default/g")
    assert status is not None and status["conditions"][0]["reason"] == "MemberBindFailed"  # type: ignore[index]
    loop.run_until_idle()
    assert cluster.binder.decisions[-1].pod.key == failed.key
    assert "FailedBinding" in events.reasons(f"pod {failed.key}")


def test_min_resources_are_checked_before_trying() -> None:
    cluster, _, _, _ = _loop(nodes=1)
    group = PodGroup("default", "g", min_member=1, min_resources={"cpu": 100_000})
    result = gang.place_gang(cluster.scheduler, group, [_member("g", 0, gpus=1)])
    assert not result.status.ok and "minResources" in result.status.message and "cpu" in result.status.message


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"minMember": 0}, "spec.minMember"),
        ({"minMember": "two"}, "spec.minMember"),
        ({"minMember": 2, "scheduleTimeoutSeconds": 0}, "spec.scheduleTimeoutSeconds"),
        ({"minMember": 2, "minResources": {"cpu": "lots"}}, "spec.minResources.cpu"),
        ({"minMember": 2, "queue": 3}, "spec.queue"),
        ({"minMember": 2, "topology": {"required": 1}}, "spec.topology.required"),
    ],
)
def test_bad_podgroups_name_the_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidObject) as info:
        parse_podgroup({"metadata": {"name": "g", "namespace": "ml"}, "spec": spec})
    assert info.value.field == field
    assert "podgroup ml/g" in str(info.value)


def test_the_default_profile_keeps_gangs_together() -> None:
    config = profile.load()
    assert "gang" in [p.name for p in config.plugins]


def test_a_preempted_gangs_late_member_is_never_placed_alone() -> None:
    # minMember 5 of six members: the sixth waits as a member beyond minMember while the gang runs. When the five
    # placed members go (preempted), the sixth must wait for the gang to be placed whole again, not be placed alone
    # as "1 of 5 members exist" (found under faults in the e2e suite).
    cluster, loop, _, _ = _loop(nodes=4, gpus=8)
    loop.group_upsert(PodGroup("default", "g", min_member=5))
    for i in range(5):
        loop.pod_pending(_member("g", i, gpus=4))
    loop.run_until_idle()
    assert len(cluster.binder.decisions) == 5
    for i in range(5):
        loop.pod_placed(dataclasses.replace(_member("g", i, gpus=4), node_name="n0"))
    # The five are deleted (preempted) before the sixth, which arrived meanwhile, gets its cycle.
    sixth = _member("g", 5, gpus=4)
    loop.pod_pending(sixth)
    for i in range(5):
        cluster.cache.remove_pod(f"default/g-{i}")
        loop.pod_gone(f"default/g-{i}")
    loop.run_until_idle()
    assert [d.pod.key for d in cluster.binder.decisions[5:]] == []
    assert not cluster.cache.is_assumed(sixth.key)
    status = loop.group_status("default/g")
    assert status is not None and status["phase"] == "Pending" and status["scheduled"] == 0
    # Its replacements come: the gang is placed whole, with the sixth among them.
    for i in range(6, 10):
        loop.pod_pending(_member("g", i, gpus=4))
    loop.run_until_idle()
    placed = {d.pod.key for d in cluster.binder.decisions[5:]}
    assert len(placed) == 5


def test_a_late_member_already_in_its_own_cycle_waits_for_its_gang() -> None:
    # The guard in the pod cycle itself: the sixth member's item is taken while the gang holds nothing.
    cluster, loop, _, _ = _loop(nodes=4, gpus=8)
    loop.group_upsert(PodGroup("default", "g", min_member=2))
    for i in range(3):
        loop.pod_pending(_member("g", i, gpus=4))
    loop.run_until_idle()
    assert len(cluster.binder.decisions) == 3
    # Member 2's binding fails while members 0 and 1 are preempted: 0 placed of minMember 2.
    for i in range(2):
        cluster.cache.remove_pod(f"default/g-{i}")
        loop.pod_gone(f"default/g-{i}")
    loop.bind_failed(cluster.binder.decisions[2].pod, "conflict")
    loop.run_until_idle()
    assert len(cluster.binder.decisions) == 3
    status = loop.group_status("default/g")
    assert status is not None and status["scheduled"] == 0


def test_a_finished_gang_says_so_and_no_stale_wait() -> None:
    # A Job's gang runs to completion: its PodGroup must read Succeeded with its members counted as completed,
    # not "0 of 4 members exist" (found by a user); a member that failed makes the outcome Failed.
    for outcome, phases in (("Succeeded", ("Succeeded", "Succeeded")), ("Failed", ("Succeeded", "Failed"))):
        cluster, loop, _, _ = _loop(nodes=2, gpus=8)
        loop.group_upsert(PodGroup("default", "g", min_member=2))
        members = [_member("g", i, gpus=2) for i in range(2)]
        for member in members:
            loop.pod_pending(member)
        loop.run_until_idle()
        for member in members:
            loop.pod_placed(dataclasses.replace(member, node_name="n0", phase="Running"))
        status = loop.group_status("default/g")
        assert status is not None and status["phase"] == "Running"
        # One member ends first: the gang still runs (it does not wait for a member that completed).
        cluster.cache.remove_pod(members[0].key)
        loop.pod_gone(members[0].key, finished=phases[0])
        status = loop.group_status("default/g")
        assert status is not None and status["phase"] == "Running", outcome
        cluster.cache.remove_pod(members[1].key)
        loop.pod_gone(members[1].key, finished=phases[1])
        status = loop.group_status("default/g")
        assert status is not None and status["phase"] == outcome
        assert (status["succeeded"], status["failed"]) == ((2, 0) if outcome == "Succeeded" else (1, 1))
        messages = [c["message"] for c in status["conditions"]]  # type: ignore[attr-defined]
        assert not any("members exist" in m for m in messages)
        assert len(cluster.binder.decisions) == 2  # nothing placed again


def test_the_groups_count_of_members_that_exist_follows_each_arrival() -> None:
    # The PodGroup said "0 of 4 members exist" while a member was there (found by a user).
    _, loop, _, _ = _loop()
    loop.group_upsert(PodGroup("default", "g", min_member=4))
    loop.pod_pending(_member("g", 0, gpus=1))
    status = loop.group_status("default/g")
    assert status is not None
    assert status["conditions"][0]["message"] == "1 of 4 members exist"  # type: ignore[index]
