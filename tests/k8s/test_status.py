"""Status writers: the Unschedulable pod condition and PodGroup status, coalesced per object."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import pytest

from scheduler.api.objects.pod import PodRequest
from scheduler.core import tenancy
from scheduler.k8s import client as k8s
from scheduler.k8s import publisher as publisher_module
from scheduler.k8s import status as k8s_status
from scheduler.k8s.operator import Operator
from scheduler.k8s.status import QUEUES, CustomStatusWriter, PodConditionWriter, StatusSettings, quantity, to_json
from tests.k8s.fakeapi import Canned, FakeApiServer, eventually, status
from tests.k8s.test_operator import flushed, node, pod, podgroup, waiting_for_gang

POD = PodRequest("ns", "p", uid="uid-p")
T0 = 1_700_000_000.0


@pytest.fixture
async def conditions(client: k8s.Client) -> AsyncIterator[PodConditionWriter]:
    writer = PodConditionWriter(client, settings=StatusSettings(interval=0.3), clock=lambda: T0)
    writer.start()
    yield writer
    await writer.close()


@pytest.fixture
async def groups(client: k8s.Client) -> AsyncIterator[CustomStatusWriter]:
    writer = CustomStatusWriter(client, settings=StatusSettings(interval=0.3))
    writer.start()
    yield writer
    await writer.close()


async def test_unschedulable_condition_patch(fake: FakeApiServer, conditions: PodConditionWriter) -> None:
    conditions.unschedulable(POD, "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")
    await eventually(lambda: len(fake.seen) == 1)
    (seen,) = fake.seen
    assert (seen.method, seen.path) == ("PATCH", "/api/v1/namespaces/ns/pods/p/status")
    assert seen.content_type == "application/strategic-merge-patch+json"
    assert seen.body == {
        "metadata": {"uid": "uid-p"},
        "status": {
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
                    "lastTransitionTime": "2023-11-14T22:13:20Z",
                }
            ]
        },
    }


async def test_writes_coalesce_and_the_last_value_wins(fake: FakeApiServer, conditions: PodConditionWriter) -> None:
    conditions.unschedulable(POD, "attempt 0")
    await eventually(lambda: len(fake.seen) == 1)
    for i in range(1, 20):
        conditions.unschedulable(POD, f"attempt {i}")
    await eventually(lambda: len(fake.seen) == 2)
    await asyncio.sleep(0.4)  # nothing else comes
    assert [s.body["status"]["conditions"][0]["message"] for s in fake.seen] == ["attempt 0", "attempt 19"]
    assert conditions.coalescer.stats["coalesced"] == 18


async def test_an_unchanged_value_is_not_written_again(fake: FakeApiServer, conditions: PodConditionWriter) -> None:
    conditions.unschedulable(POD, "same")
    assert await conditions.flush()
    conditions.unschedulable(POD, "same")
    assert await conditions.flush()
    assert len(fake.seen) == 1
    assert conditions.coalescer.stats["unchanged"] == 1


async def test_objects_do_not_wait_for_each_other(fake: FakeApiServer, client: k8s.Client) -> None:
    writer = PodConditionWriter(client, settings=StatusSettings(interval=60.0))
    writer.start()
    try:
        for i in range(10):
            writer.unschedulable(PodRequest("ns", f"p{i}"), "no room")
        await eventually(lambda: len(fake.seen) == 10)  # long before a minute
    finally:
        await writer.close()


async def test_a_bound_pod_is_not_marked_unschedulable(fake: FakeApiServer, client: k8s.Client) -> None:
    bound = {"ns/q"}
    writer = PodConditionWriter(
        client, settings=StatusSettings(interval=0.3), still_pending=lambda key: key not in bound
    )
    writer.start()
    try:
        writer.unschedulable(POD, "first")
        await eventually(lambda: len(fake.seen) == 1)
        writer.unschedulable(POD, "second")  # waits for the interval...
        writer.forget(POD.key)  # ...but the pod was bound meanwhile
        writer.unschedulable(PodRequest("ns", "q"), "raced")  # bound before its write came up
        assert await writer.flush()
        await asyncio.sleep(0.4)
    finally:
        await writer.close()
    assert [s.path for s in fake.seen] == ["/api/v1/namespaces/ns/pods/p/status"]


async def test_podgroup_status_from_the_loop(fake: FakeApiServer, groups: CustomStatusWriter) -> None:
    status_dict = {
        "phase": "Scheduling",
        "scheduled": 2,
        "running": 0,
        "lastScheduleTime": None,
        "conditions": [
            {
                "type": "Scheduled",
                "status": "False",
                "reason": "NotAllMembersFit",
                "message": "2 of 4 members fit",
                "lastTransitionTime": T0 + 0.75,
            }
        ],
    }
    groups.update("ns/g", status_dict)
    await eventually(lambda: len(fake.seen) == 1)
    (seen,) = fake.seen
    assert seen.path == "/apis/scheduling.gpusched.io/v1alpha1/namespaces/ns/podgroups/g/status"
    assert seen.content_type == "application/merge-patch+json"
    assert seen.body == {
        "status": {
            "phase": "Scheduling",
            "scheduled": 2,
            "running": 0,
            "lastScheduleTime": None,
            "conditions": [
                {
                    "type": "Scheduled",
                    "status": "False",
                    "reason": "NotAllMembersFit",
                    "message": "2 of 4 members fit",
                    "lastTransitionTime": "2023-11-14T22:13:20Z",
                }
            ],
        }
    }


async def test_podgroup_writes_coalesce(fake: FakeApiServer, groups: CustomStatusWriter) -> None:
    groups.update("ns/g", {"phase": "Pending", "scheduled": 0})
    await eventually(lambda: len(fake.seen) == 1)
    for n in range(1, 5):
        groups.update("ns/g", {"phase": "Scheduling", "scheduled": n})
    groups.update("ns/h", {"phase": "Pending", "scheduled": 0})
    await eventually(lambda: len(fake.seen) == 3)
    await asyncio.sleep(0.4)
    by_path = [(s.path.split("/")[-2], s.body["status"]) for s in fake.seen]
    assert by_path == [
        ("g", {"phase": "Pending", "scheduled": 0}),
        ("h", {"phase": "Pending", "scheduled": 0}),
        ("g", {"phase": "Scheduling", "scheduled": 4}),
    ]


async def test_server_errors_are_retried_and_404_dropped(fake: FakeApiServer, groups: CustomStatusWriter) -> None:
    fake.status_answers.append(Canned(500, status(500, "InternalError", "etcd")))
    groups.update("ns/g", {"phase": "Scheduled"})
    await eventually(lambda: groups.coalescer.stats["written"] == 1, timeout=2.0)
    assert len(fake.seen) == 2 and fake.seen[0].body == fake.seen[1].body
    assert groups.coalescer.stats["retried"] == 1 and groups.coalescer.stats["written"] == 1

    fake.status_answers.append(Canned(404, status(404, "NotFound", "podgroups not found")))
    groups.update("ns/gone", {"phase": "Pending"})
    assert await groups.flush()
    await asyncio.sleep(0.4)
    assert len(fake.requests("PATCH", "/gone/status")) == 1
    assert groups.coalescer.stats["dropped"] == 1


async def test_a_replica_that_lost_the_lease_does_not_retry_its_writes(fake: FakeApiServer, client: k8s.Client) -> None:
    # The fault test's seed 1: a leader's queue status write failed while the API server restarted; the replica
    # lost the lease meanwhile and, once the API server was back, its retry overwrote the new leader's status with
    # an older one, which the new leader never wrote again (it had written that value already).
    leading = True
    writer = CustomStatusWriter(client, QUEUES, settings=StatusSettings(interval=0.1), may_write=lambda: leading)
    writer.start()
    try:
        fake.status_answers.append(Canned(503, status(503, "ServiceUnavailable", "the API server is starting")))
        writer.update("team-a", {"allocated": {"nvidia.com/gpu": 3}})
        await eventually(lambda: writer.coalescer.stats["retried"] == 1, timeout=2.0)
        leading = False
        await asyncio.sleep(0.4)
        assert await writer.flush()
        assert len(fake.requests("PATCH", "/queues/team-a/status")) == 1  # the failed one only
        assert writer.coalescer.stats["written"] == 0

        # Leading again: what it wrote before may have been overwritten by another leader, so it writes again.
        leading = True
        writer.update("team-a", {"allocated": {"nvidia.com/gpu": 3}})
        assert await writer.flush()
        assert writer.coalescer.stats["written"] == 1
        writer.leadership_changed()
        writer.update("team-a", {"allocated": {"nvidia.com/gpu": 3}})
        assert await writer.flush()
        assert writer.coalescer.stats["written"] == 2
    finally:
        await writer.close()


async def test_cluster_scoped_resource(fake: FakeApiServer, client: k8s.Client) -> None:
    writer = CustomStatusWriter(client, QUEUES)
    writer.start()
    try:
        writer.update("team-a", {"allocated": {"nvidia.com/gpu": 3}})
        assert await writer.flush()
    finally:
        await writer.close()
    (seen,) = fake.seen
    assert seen.path == "/apis/scheduling.gpusched.io/v1alpha1/queues/team-a/status"


def test_to_json_converts_times_only() -> None:
    assert to_json({"lastScheduleTime": T0, "scheduled": 3, "ok": True, "x": [{"sinceTime": 0}]}) == {
        "lastScheduleTime": "2023-11-14T22:13:20Z",
        "scheduled": 3,
        "ok": True,
        "x": [{"sinceTime": "1970-01-01T00:00:00Z"}],
    }


# --- what the operator tells waiting pods -----------------------------------------------------------------------


def _pod_condition(fake: FakeApiServer, name: str) -> dict[str, object]:
    patches = fake.requests("PATCH", f"/pods/{name}/status")
    assert patches, f"no condition written for {name}"
    condition: dict[str, object] = patches[-1].body["status"]["conditions"][0]
    assert (condition["type"], condition["status"], condition["reason"]) == ("PodScheduled", "False", "Unschedulable")
    return condition


async def test_a_gang_member_waiting_for_its_siblings_is_told_so_after_a_grace(
    fake: FakeApiServer, operator: Operator, monkeypatch: pytest.MonkeyPatch
) -> None:
    operator.set_leading(True)
    operator.node_event(node("gpu-0"))
    operator.podgroup_event(podgroup("train", 4))
    operator.pod_event(pod("train-0", 1, labels={"gpusched.io/pod-group": "train"}))
    operator.pod_event(pod("train-1", 1, labels={"gpusched.io/pod-group": "train"}))
    operator.listed()
    # While its controller is still creating the others, the members are left alone (kube-scheduler writes nothing
    # on a pod it has not placed yet either): no condition, no Event.
    operator.publish_status()
    await flushed(operator)
    assert not fake.requests("PATCH", "/pods/train-0/status") and not fake.requests("PATCH", "/pods/train-1/status")
    assert not waiting_for_gang(fake)
    monkeypatch.setattr(publisher_module, "MEMBERS_GRACE_S", 0.0)  # the grace over: still short, they are told
    operator.publish_status()
    await eventually(lambda: bool(fake.requests("PATCH", "/pods/train-1/status")))
    message = _pod_condition(fake, "train-1")["message"]
    assert str(message).startswith("waiting for gang default/train: 2 of 4 members exist")
    await eventually(lambda: any(e["reason"] == "WaitingForGang" for e in fake.events.values()))


async def test_a_gang_that_does_not_fit_tells_every_member(fake: FakeApiServer, operator: Operator) -> None:
    operator.set_leading(True)
    operator.node_event(node("gpu-0", gpus=4))
    operator.podgroup_event(podgroup("train", 2))
    for i in range(2):
        operator.pod_event(pod(f"train-{i}", 4, labels={"gpusched.io/pod-group": "train"}))
    operator.listed()
    # The members' conditions are written concurrently, in no set order: wait for both.
    await eventually(lambda: all(fake.requests("PATCH", f"/pods/train-{i}/status") for i in range(2)))
    for i in range(2):
        message = str(_pod_condition(fake, f"train-{i}")["message"])
        assert message.startswith("waiting for gang default/train: 0 of 2 members placed; "), message
    await eventually(
        lambda: (
            sum(
                1
                for e in fake.events.values()
                if e["reason"] == "FailedScheduling" and e["involvedObject"]["kind"] == "Pod"
            )
            == 2
        )
    )


async def test_podgroup_not_found_waits_for_the_same_apply(
    fake: FakeApiServer, operator: Operator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(publisher_module, "GROUP_GRACE_S", 0.5)
    operator.set_leading(True)
    operator.node_event(node("gpu-0"))
    operator.listed()
    operator.pod_event(pod("late-0", 1, labels={"gpusched.io/pod-group": "late"}))
    operator.pod_event(pod("lone-0", 1, labels={"gpusched.io/pod-group": "lone"}))
    await asyncio.sleep(0.2)
    operator.podgroup_event(podgroup("late", 1))  # the same apply: the group a moment after its pod
    await eventually(lambda: any(e["reason"] == "PodGroupNotFound" for e in fake.events.values()))
    missing = [e["involvedObject"]["name"] for e in fake.events.values() if e["reason"] == "PodGroupNotFound"]
    assert missing == ["lone-0"]
    await eventually(lambda: bool(fake.requests("PATCH", "/pods/lone-0/status")))
    assert "PodGroup default/lone does not exist" in str(_pod_condition(fake, "lone-0")["message"])


async def test_an_unreadable_pod_and_an_unknown_queue_get_the_condition(
    fake: FakeApiServer, operator: Operator
) -> None:
    operator.set_leading(True)
    operator.node_event(node("gpu-0"))
    bad = pod("bad", 1)
    bad["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    operator.pod_event(bad)
    operator.pod_event(pod("lost", 1, labels={"gpusched.io/queue": "nope"}))
    operator.listed()
    await eventually(lambda: bool(fake.requests("PATCH", "/pods/bad/status")))
    assert "spec.containers[0].resources.requests.cpu" in str(_pod_condition(fake, "bad")["message"])
    await eventually(lambda: bool(fake.requests("PATCH", "/pods/lost/status")))
    assert "queue 'nope' does not exist" in str(_pod_condition(fake, "lost")["message"])


async def test_an_invalid_queue_gets_a_status_condition(fake: FakeApiServer, operator: Operator) -> None:
    operator.set_leading(True)
    operator.queue_event({"metadata": {"name": "broken", "uid": "u"}, "spec": {"weight": "heavy"}})
    operator.queue_event({"metadata": {"name": "team-a", "uid": "u2"}, "spec": {"guaranteed": {"memory": "256Gi"}}})
    operator.node_event(node("gpu-0"))
    operator.pod_event(pod("a", 1, labels={"gpusched.io/queue": "team-a"}, cpu="2500m"))
    operator.listed()
    await eventually(lambda: bool(fake.requests("PATCH", "/queues/broken/status")))
    condition = fake.requests("PATCH", "/queues/broken/status")[-1].body["status"]["conditions"][0]
    assert (condition["type"], condition["status"], condition["reason"]) == ("Accepted", "False", "Invalid")

    def team_a() -> dict[str, Any]:
        patches = fake.requests("PATCH", "/queues/team-a/status")
        return patches[-1].body["status"] if patches else {}

    await eventually(lambda: team_a().get("admittedJobs") == 1)
    assert team_a()["allocated"] == {"cpu": "2500m", "nvidia.com/gpu": "1"}
    assert team_a()["conditions"][0]["status"] == "True"


async def test_without_queues_the_status_walks_no_job(
    fake: FakeApiServer, operator: Operator, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The Queues' status counts every pending and placed job, once a second: with no Queue to write it to, nothing
    # is counted (the pods still get their conditions); with one, it is written.
    operator.set_leading(True)
    operator.node_event(node("gpu-0"))
    operator.pod_event(pod("a", 1))
    operator.pod_event(pod("big", 9))
    operator.listed()
    walked: list[str] = []
    walk = operator.loop.queue_statuses
    monkeypatch.setattr(operator.loop, "queue_statuses", lambda: walked.append("statuses") or walk())
    operator.publish_status()
    await eventually(lambda: bool(fake.requests("PATCH", "/pods/big/status")))
    assert walked == []
    operator.queue_event({"metadata": {"name": "default", "uid": "u"}, "spec": {}})
    operator.publish_status()
    await eventually(lambda: bool(fake.requests("PATCH", "/queues/default/status")))
    assert walked == ["statuses"]


async def test_a_bad_gpu_topology_annotation_is_told_on_the_node(fake: FakeApiServer, operator: Operator) -> None:
    operator.set_leading(True)
    bad = node("gpu-0")
    bad["metadata"]["annotations"] = {"gpusched.io/gpu-topology": "{not json"}
    operator.node_event(bad)
    await eventually(lambda: any(e["reason"] == "InvalidGPUTopology" for e in fake.events.values()))
    (event,) = [e for e in fake.events.values() if e["reason"] == "InvalidGPUTopology"]
    assert event["involvedObject"]["kind"] == "Node" and event["involvedObject"]["name"] == "gpu-0"
    operator.metrics.refresh_state(operator.loop, operator.pending, node_problems=operator.cache.gpu_topology_problems)
    assert 'gpusched_node_annotation_problems{annotation="gpusched.io/gpu-topology"} 1.0' in (
        operator.metrics.exposition().decode()
    )


def test_quantities_are_canonical() -> None:
    assert quantity("cpu", 2000) == "2"
    assert quantity("cpu", 2500) == "2500m"
    assert quantity("memory", 274877906944) == "256Gi"
    assert quantity("memory", 10**9) == "1G"
    assert quantity("nvidia.com/gpu", 0.5) == "0.5"
    assert quantity("nvidia.com/gpu", 8.0) == "8"


def test_a_queues_gpu_limit_is_written_as_a_quantity_or_none() -> None:
    numbers = tenancy.QueueStatus(
        allocated={"nvidia.com/gpu": 2.0},
        guaranteed_in_use={},
        borrowed={},
        decayed_usage={},
        pending_pods=0,
        pending_gangs=0,
        dominant_share=0.0,
        fair_share=0.0,
        rank_share=None,
    )
    assert k8s_status.queue_status(numbers)["gpuLimit"] == "none"
    assert k8s_status.queue_status(dataclasses.replace(numbers, gpu_limit=4.0))["gpuLimit"] == "4"
