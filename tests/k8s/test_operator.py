"""The operator between the watches and the API server: what it does with what the watches deliver.

Objects go in as raw dicts through the same methods the kopf handlers call; what comes out is what the fake API
server receives (bindings, Events, pod conditions, status patches, deletions).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from scheduler.api.devices import numa
from scheduler.api.objects import pod as api_pod
from scheduler.cache import numa_store
from scheduler.k8s import client as k8s
from scheduler.k8s import config as k8s_config
from scheduler.k8s import operator as operator_module
from scheduler.k8s import publisher as publisher_module
from scheduler.k8s.feeds import numa_zones
from scheduler.k8s.operator import LISTINGS, Operator
from scheduler.k8s.ports import adapter as adapter_module
from scheduler.k8s.serve import explain
from tests.api import test_numa
from tests.k8s.fakeapi import Canned, FakeApiServer, eventually, status

GPU = "nvidia.com/gpu"


def node(name: str, gpus: int = 8) -> dict[str, Any]:
    capacity = {"cpu": "64", "memory": "512Gi", "pods": "110", GPU: str(gpus)}
    return {"metadata": {"name": name, "uid": f"uid-{name}"}, "status": {"allocatable": capacity}}


def pod(
    name: str,
    gpus: int = 1,
    *,
    scheduler: str = "gpusched",
    node_name: str = "",
    labels: dict[str, str] | None = None,
    cpu: str = "1",
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "containers": [{"name": "main", "resources": {"requests": {"cpu": cpu}, "limits": {GPU: str(gpus)}}}],
    }
    if node_name:
        spec["nodeName"] = node_name
    return {
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"uid-{name}",
            "labels": labels or {},
            "creationTimestamp": "2026-11-22T09:00:00Z",
        },
        "spec": spec,
        "status": {"phase": "Running" if node_name else "Pending"},
    }


def podgroup(name: str, min_member: int) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"}, "spec": {"minMember": min_member}}


def bound(fake: FakeApiServer) -> dict[str, Any]:
    """Pod name -> the Binding the API server got for it."""
    return {s.path.split("/")[-2]: s.body for s in fake.requests("POST", "/binding")}


def events(fake: FakeApiServer, reason: str) -> list[dict[str, Any]]:
    return [e for e in fake.events.values() if e["reason"] == reason]


async def flushed(op: Operator) -> None:
    for writer in (op.recorder, op.conditions, op.publisher.group_status, op.publisher.queue_status):
        assert await writer.flush()


async def settled(op: Operator) -> None:
    """Until the operator has acted on all it was given: its scheduling task has taken the last wake-up (it clears
    the flag, then checks readiness and leadership and runs the cycles, without yielding in between) and the
    background work it started (owner reads, PodGroup creations, deletions) is done. What it has not done by then,
    it decided not to do."""
    await eventually(lambda: not op._wake.is_set() and not op._tasks)


def waiting_for_gang(fake: FakeApiServer) -> set[str]:
    """The pods told that their gang waits for members (what the gate decided), after a status round."""
    return {e["involvedObject"]["name"] for e in events(fake, "WaitingForGang")}


async def test_no_decision_before_the_first_full_listing(fake: FakeApiServer, operator: Operator) -> None:
    operator.set_leading(True)
    operator.pod_event(pod("train", 2, labels={"gpusched.io/queue": "team-a"}))
    operator.node_event(node("gpu-0"))
    await settled(operator)
    assert not operator.ready and operator.loop.job_of("default/train") is None  # not even queued
    assert bound(fake) == {} and operator.cache.pod("default/train") is None

    # The pod's queue arrives later in the listing: it must not be reported missing, nor wait.
    operator.queue_event({"metadata": {"name": "team-a", "uid": "uid-q"}, "spec": {}})
    operator.listed()
    await eventually(lambda: "train" in bound(fake))
    binding = bound(fake)["train"]
    assert binding["target"]["name"] == "gpu-0"
    assert binding["metadata"]["uid"] == "uid-train"
    assert len(binding["metadata"]["annotations"]["gpusched.io/gpu-ids"].split(",")) == 2
    await flushed(operator)
    assert events(fake, "QueueNotFound") == []
    assert [e["involvedObject"]["uid"] for e in events(fake, "Scheduled")] == ["uid-train"]
    # kube-scheduler's wording: Kubernetes' own e2e tests match Scheduled Events on it.
    gpus = binding["metadata"]["annotations"]["gpusched.io/gpu-ids"]
    assert events(fake, "Scheduled")[0]["message"] == f"Successfully assigned default/train to gpu-0 (GPUs {gpus})"


async def test_readiness_waits_for_the_numa_zones_where_they_are_expected(
    fake: FakeApiServer, operator: Operator
) -> None:
    # gpusched run expects the NodeResourceTopology listing: a pod placed before it would be placed blind to the zones.
    operator.set_leading(True)
    operator.feed.zones.expect()
    operator.node_event(node("gpu-0"))
    operator.pod_event(pod("train", 2))
    for part in LISTINGS:
        operator.part_listed(part)
    await settled(operator)
    assert not operator.ready and bound(fake) == {}
    operator.feed.zones.part_listed(numa_zones.KINDS[0])  # listed (none published here)
    assert operator.ready
    await eventually(lambda: "train" in bound(fake))


@pytest.mark.parametrize("first", ["zones", "pods"])
async def test_after_a_restart_the_zones_are_read_alike_whichever_listing_comes_first(
    fake: FakeApiServer, operator: Operator, first: str
) -> None:
    # Another scheduler's pod runs on 3 GPUs of zone 0; the node's object, published after it started and never
    # again (no agent runs: kwok), shows it and fingerprints it. Were it counted again on top of the object, it would
    # be predicted into zone 1 (zone 0 shows 1 GPU free) and no zone would hold the 4-GPU pod.
    operator.set_leading(True)
    operator.feed.zones.expect()
    operator.node_event(node("gpu-0"))
    attributes = [
        {"name": "topologyManagerPolicy", "value": "single-numa-node"},
        {"name": numa.FINGERPRINT, "value": numa_store.pods_fingerprint([("default", "theirs")])},
    ]
    zones = [
        test_numa.zone(0, gpus=4, cpus=32, memory="256Gi", free_gpus=1),
        test_numa.zone(1, gpus=4, cpus=32, memory="256Gi"),
    ]
    published = test_numa.nrt("gpu-0", zones=zones, attributes=attributes)
    theirs = pod("theirs", 3, scheduler="default-scheduler", node_name="gpu-0")
    if first == "zones":
        operator.feed.zones.event(published)
        operator.pod_event(theirs)
    else:
        operator.pod_event(theirs)
        operator.feed.zones.event(published)
    operator.pod_event(pod("four", 4))
    operator.listed()
    operator.feed.zones.part_listed(numa_zones.KINDS[0])
    assert operator.cache.numa.available("gpu-0") == [
        {"cpu": 30_000, "memory": 256 * 2**30, GPU: 1},
        {"cpu": 30_000, "memory": 256 * 2**30, GPU: 4},
    ]
    await eventually(lambda: "four" in bound(fake))


async def test_readiness_waits_for_the_disruption_budgets_and_services_too(
    fake: FakeApiServer, operator: Operator
) -> None:
    # Preemption must weigh every PodDisruptionBudget from its first decision, and the default spread every
    # Service: kube-scheduler waits for those informers too before it schedules.
    operator.set_leading(True)
    operator.node_event(node("gpu-0"))
    operator.pod_event(pod("train", 2))
    for part in LISTINGS - {"poddisruptionbudgets"}:
        operator.part_listed(part)
    await settled(operator)
    assert not operator.ready and operator.loop.job_of("default/train") is None  # not even queued
    assert bound(fake) == {} and operator.cache.pod("default/train") is None
    operator.part_listed("poddisruptionbudgets")
    assert operator.ready
    await eventually(lambda: "train" in bound(fake))


async def test_bound_pods_of_any_scheduler_count_and_the_pending_pod_is_told_why(
    fake: FakeApiServer, operator: Operator
) -> None:
    operator.set_leading(True)
    operator.node_event(node("gpu-0", gpus=8))
    operator.pod_event(pod("theirs", 8, scheduler="default-scheduler", node_name="gpu-0"))
    operator.pod_event(pod("mine", 1))
    operator.listed()
    await eventually(lambda: bool(events(fake, "FailedScheduling")))
    await flushed(operator)
    assert bound(fake) == {}
    message = events(fake, "FailedScheduling")[0]["message"]
    assert message == (
        "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. no new claims to deallocate, preemption: 0/1 nodes"
        " are available: 1 No preemption victims found for incoming pod."
    )
    patches = fake.requests("PATCH", "/pods/mine/status")
    condition = patches[-1].body["status"]["conditions"][0]
    assert (condition["type"], condition["status"], condition["reason"]) == ("PodScheduled", "False", "Unschedulable")
    assert condition["message"] == message

    # The other scheduler's pod goes: the GPUs are free again and the waiting pod is bound.
    operator.pod_event(pod("theirs", 8, scheduler="default-scheduler", node_name="gpu-0"), deleted=True)
    await eventually(lambda: "mine" in bound(fake))


async def test_serving_default_scheduler_takes_pods_that_name_no_scheduler_and_leaves_gpuscheds(
    fake: FakeApiServer, client: k8s.Client
) -> None:
    # `gpusched run --scheduler-name default-scheduler`: the cluster's only scheduler, as Kubernetes' own scheduling
    # e2e tests run it (docs/conformance.md). A pod with no schedulerName is the API server's default-scheduler.
    op = Operator(client, k8s_config.parse({}), identity="test", scheduler_name="default-scheduler")
    await op.start()
    task = asyncio.create_task(op.run())
    try:
        op.set_leading(True)
        op.node_event(node("gpu-0", gpus=8))
        unnamed = pod("unnamed", 1)
        del unnamed["spec"]["schedulerName"]
        op.pod_event(unnamed)
        op.pod_event(pod("named", 1, scheduler="default-scheduler"))
        op.pod_event(pod("other", 1, scheduler="gpusched"))
        refused = pod("refused", 1, scheduler="default-scheduler")
        refused["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "gpu"}]
        op.pod_event(refused)
        op.listed()
        await eventually(lambda: {"unnamed", "named"} <= set(bound(fake)))
        await eventually(lambda: bool(fake.requests("PATCH", "/pods/refused/status")))
        await settled(op)
        # A gpusched pod is another scheduler's now: not taken at the watch, so never tried.
        assert "default/other" not in op.pending and op.loop.job_of("default/other") is None
        assert set(bound(fake)) == {"unnamed", "named"}
        condition = fake.requests("PATCH", "/pods/refused/status")[-1].body["status"]["conditions"][0]
        assert "resourceClaims" in condition["message"]
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await op.close()


async def test_a_gated_pod_is_left_alone_until_its_gates_are_removed(fake: FakeApiServer, operator: Operator) -> None:
    operator.set_leading(True)
    operator.node_event(node("gpu-0"))
    gated = pod("gated", 1)
    gated["spec"]["schedulingGates"] = [{"name": "example.com/wait"}]
    operator.pod_event(gated)
    operator.pod_event(pod("plain", 1))
    operator.listed()
    await eventually(lambda: "plain" in bound(fake))
    await flushed(operator)
    # kube-scheduler's SchedulingGates: no binding, no Event, no condition written over the API server's.
    assert "gated" not in bound(fake)
    assert [e for e in fake.events.values() if e["involvedObject"]["name"] == "gated"] == []
    assert fake.requests("PATCH", "/pods/gated/status") == []
    # Counted and told as waiting for admission, not as unschedulable.
    told = explain.answer(operator, "gated")
    assert "waits for admission: held by its scheduling gates" in told and "example.com/wait" in told
    operator.metrics.refresh_state(operator.loop, operator.pending, gated=operator.feed.gated.values())
    assert 'gpusched_pending_gated_pods{held_by="other"} 1.0' in operator.metrics.exposition().decode()
    del gated["spec"]["schedulingGates"]
    operator.pod_event(gated)
    await eventually(lambda: "gated" in bound(fake))
    assert "default/gated" not in operator.feed.gated


def test_the_services_that_select_a_pending_pod_reach_its_default_spreading(operator: Operator) -> None:
    def service(name: str, selector: dict[str, str] | None, namespace: str = "default") -> dict[str, Any]:
        return {"metadata": {"name": name, "namespace": namespace}, "spec": {"selector": selector}}

    operator.service_event(service("web", {"app": "web"}))
    operator.service_event(service("front", {"tier": "front"}))
    operator.service_event(service("elsewhere", {"app": "web"}, namespace="other"))
    operator.service_event(service("external", None))  # no selector: selects nothing
    operator.pod_event(pod("w0", 1, labels={"app": "web", "tier": "front"}))
    assert operator.pending["default/w0"].service_labels == (("app", "web"), ("tier", "front"))
    operator.service_event(service("front", {"tier": "front"}), deleted=True)
    operator.pod_event(pod("w1", 1, labels={"app": "web", "tier": "front"}))
    assert operator.pending["default/w1"].service_labels == (("app", "web"),)
    assert sorted(operator.service_keys()) == ["default/web", "other/elsewhere"]


async def test_a_malformed_pod_gets_an_event_naming_the_field_and_the_rest_goes_on(
    fake: FakeApiServer, operator: Operator
) -> None:
    operator.set_leading(True)
    operator.node_event(node("gpu-0"))
    bad = pod("bad", 1)
    bad["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    operator.pod_event(bad)
    operator.pod_event(pod("good", 1))
    operator.listed()
    await eventually(lambda: "good" in bound(fake))
    await flushed(operator)
    invalid = events(fake, "InvalidObject")
    assert len(invalid) == 1
    assert invalid[0]["involvedObject"]["name"] == "bad"
    assert "spec.containers[0].resources.requests.cpu" in invalid[0]["message"]
    assert "bad" not in bound(fake)


async def test_malformed_podgroup_and_queue_get_events(fake: FakeApiServer, operator: Operator) -> None:
    operator.set_leading(True)
    operator.podgroup_event(podgroup("gang", 0))
    operator.queue_event({"metadata": {"name": "q"}, "spec": {"weight": -1}})
    operator.listed()
    await flushed(operator)
    messages = sorted(e["message"] for e in events(fake, "InvalidObject"))
    assert messages == [
        "podgroup default/gang field spec.minMember: 0 is not an integer >= 1",
        "queue q field spec.weight: -1 is not a number > 0",
    ]


async def test_a_standby_keeps_a_warm_cache_and_decides_nothing_until_it_leads(
    fake: FakeApiServer, operator: Operator
) -> None:
    operator.node_event(node("gpu-0"))
    operator.pod_event(pod("train", 1))
    operator.listed()
    await settled(operator)
    await flushed(operator)
    assert operator.ready and not operator.leading
    assert operator.loop.job_of("default/train") is not None  # queued, and kept there
    assert bound(fake) == {} and operator.cache.pod("default/train") is None and fake.events == {}
    operator.set_leading(True)
    await eventually(lambda: "train" in bound(fake))


async def test_work_a_standby_held_for_a_missing_queue_is_told_once_it_leads(
    fake: FakeApiServer, operator: Operator
) -> None:
    # The fault test's seed 1 left a pod pending with no condition and no Event: it arrived while its replica was
    # a standby, the gate held it for its missing queue and "told" it then (the standby writes nothing), and after
    # the lease came nothing told it again. A pod the cycles never try must still be told why it waits.
    operator.node_event(node("gpu-0"))
    operator.podgroup_event({**podgroup("gang", 2), "spec": {"minMember": 2, "queue": "ghost"}})
    operator.pod_event(pod("single", 1, labels={"gpusched.io/queue": "ghost"}))
    for i in range(2):
        operator.pod_event(pod(f"gang-{i}", 1, labels={"gpusched.io/pod-group": "gang"}))
    operator.listed()
    await settled(operator)
    await flushed(operator)
    assert fake.events == {} and fake.requests("PATCH", "/status") == []
    operator.set_leading(True)
    await settled(operator)
    operator.publish_status()
    await flushed(operator)
    told = {e["involvedObject"]["name"] for e in events(fake, "QueueNotFound")}
    assert {"single", "gang-0", "gang-1"} <= told
    for name in ("single", "gang-0", "gang-1"):
        condition = fake.requests("PATCH", f"/pods/{name}/status")[-1].body["status"]["conditions"][0]
        assert (condition["type"], condition["status"]) == ("PodScheduled", "False")
        assert "ghost" in condition["message"], condition["message"]
    # Told once: another status round writes no second Event for the same wait.
    before = {k: e.get("count", 1) for k, e in fake.events.items()}
    operator.publish_status()
    await flushed(operator)
    assert {k: e.get("count", 1) for k, e in fake.events.items()} == before


async def test_an_unknown_bind_outcome_is_read_back_until_the_api_server_answers(
    fake: FakeApiServer, operator: Operator, monkeypatch: Any
) -> None:
    # A binding lost with the API server (5xx, or no answer) keeps the pod assumed until the watch or a read-back
    # says what happened. A read-back that found the API server still down (or refusing everyone while its RBAC
    # caches load after a restart) gave up for good: the pod stayed assumed, never tried again and never told
    # anything (a cause of the fault test's silent pending pod; under the shipped RBAC, 5 pods after a restart).
    monkeypatch.setattr(adapter_module, "RECHECK_S", 0.05)
    operator.set_leading(True)
    operator.node_event(node("gpu-0", gpus=2))
    operator.listed()
    fake.bind_answers["lost"] = Canned(503, status(503, "ServiceUnavailable", "the API server is shutting down"))
    down = Canned(503, status(503, "ServiceUnavailable", "the API server is starting"))
    # Just restarted, it refuses everyone until its RBAC caches load: a refusal says nothing of the pod either.
    loading = Canned(403, status(403, "Forbidden", 'clusterrole.rbac.authorization.k8s.io "gpusched" not found'))
    fake.get_pod_answers["lost"] = [down, loading, down]
    fake.pods["default/lost"] = {"metadata": {"uid": "uid-lost"}, "spec": {}}  # the binding never landed
    operator.pod_event(pod("lost", 1))
    await eventually(lambda: len(fake.requests("GET", "/pods/lost")) >= 4)
    del fake.bind_answers["lost"]
    await eventually(lambda: len(fake.requests("POST", "/pods/lost/binding")) == 2)
    await eventually(lambda: not operator.cache.is_assumed("default/lost") or "lost" in bound(fake))


async def test_losing_the_lease_stops_scheduling_at_once(fake: FakeApiServer, operator: Operator) -> None:
    operator.set_leading(True)
    operator.node_event(node("gpu-0", gpus=8))
    operator.listed()
    operator.pod_event(pod("first", 1))
    await eventually(lambda: "first" in bound(fake))
    operator.set_leading(False)
    operator.pod_event(pod("second", 1))
    await settled(operator)
    assert "second" not in bound(fake) and operator.cache.pod("default/second") is None


async def test_bind_outcomes_feed_back(fake: FakeApiServer, operator: Operator) -> None:
    operator.set_leading(True)
    operator.node_event(node("gpu-0", gpus=2))
    operator.listed()
    # 409: someone else bound it meanwhile; the read-back shows where.
    fake.bind_answers["taken"] = Canned(409, status(409, "Conflict", 'pod taken is already assigned to node "x"'))
    fake.pods["default/taken"] = {"metadata": {"uid": "uid-taken"}, "spec": {"nodeName": "x"}}
    operator.pod_event(pod("taken", 1))
    await eventually(lambda: "taken" in bound(fake))
    await eventually(lambda: operator.cache.pod("default/taken") is None)  # its GPUs released, not retried
    # 5xx: outcome unknown, the pod stays assumed until the watch shows it on its node.
    fake.bind_answers["unsure"] = Canned(500, status(500, "InternalError", "etcd timeout"))
    operator.pod_event(pod("unsure", 1))
    await eventually(lambda: "unsure" in bound(fake))
    await eventually(lambda: 'gpusched_binds_total{result="uncertain"} 1.0' in operator.metrics.exposition().decode())
    assert operator.cache.is_assumed("default/unsure")
    operator.pod_event(pod("unsure", 1, node_name="gpu-0"))
    assert not operator.cache.is_assumed("default/unsure")
    assert operator.cache.pod("default/unsure") is not None

    # A refusal (a webhook): released at once, tried again only after its backoff, with an Event.
    fake.bind_answers["refused"] = Canned(403, status(403, "Forbidden", "admission webhook denied the request"))
    operator.pod_event(pod("refused", 1))
    await eventually(lambda: len(fake.requests("POST", "/pods/refused/binding")) == 1)
    await eventually(lambda: 'gpusched_binds_total{result="refused"} 1.0' in operator.metrics.exposition().decode())
    # Released, and held in the queue's backoff until it ends (1 s for the first refusal).
    assert operator.cache.pod("default/refused") is None
    assert ("default/refused", "backoff") in operator.queue.pending()
    assert len(fake.requests("POST", "/pods/refused/binding")) == 1
    await eventually(lambda: len(fake.requests("POST", "/pods/refused/binding")) == 2, timeout=3)
    await flushed(operator)
    assert "admission webhook denied" in events(fake, "FailedBinding")[0]["message"]
    metrics = operator.metrics.exposition().decode()
    assert 'gpusched_binds_total{result="failed"} 1.0' in metrics
    assert 'gpusched_binds_total{result="uncertain"} 1.0' in metrics
    assert 'gpusched_binds_total{result="refused"} 2.0' in metrics


async def test_a_refused_binding_is_released_once_and_retried_once(
    fake: FakeApiServer, operator: Operator, monkeypatch: Any
) -> None:
    # One release path: the refusal releases the pod's place everywhere at once (its GPUs in the cache, its
    # queue's usage, its job's member) and the pod is tried again once, after the binder's backoff.
    released: list[str] = []
    forget = operator.scheduler.bind_failed

    def counted(key: str) -> None:
        released.append(key)
        forget(key)

    monkeypatch.setattr(operator.scheduler, "bind_failed", counted)
    operator.set_leading(True)
    operator.node_event(node("gpu-0", gpus=2))
    operator.listed()
    fake.bind_answers["refused"] = Canned(403, status(403, "Forbidden", "admission webhook denied the request"))
    operator.pod_event(pod("refused", 1))
    await eventually(lambda: len(fake.requests("POST", "/pods/refused/binding")) == 1)
    await eventually(lambda: operator.cache.pod("default/refused") is None)
    job = operator.loop.job_of("default/refused")
    assert job is not None and "default/refused" in job.pending and "default/refused" not in job.placed
    assert operator.loop.held(job.queue).get("nvidia.com/gpu", 0.0) == 0.0
    await flushed(operator)
    assert not events(fake, "Scheduled")  # as kube-scheduler: Scheduled only for a binding that succeeded
    del fake.bind_answers["refused"]
    await eventually(lambda: "default/refused" not in operator.pending, timeout=5)
    await operator.adapter.drain()
    assert len(fake.requests("POST", "/pods/refused/binding")) == 2
    assert released == ["default/refused"]
    await flushed(operator)
    assert len(events(fake, "FailedBinding")) == 1
    (scheduled,) = events(fake, "Scheduled")
    assert scheduled["count"] == 1, scheduled
    (told,) = [s for s in fake.requests("POST", "/events") if s.body["reason"] == "Scheduled"]
    assert fake.seen.index(told) > fake.seen.index(fake.requests("POST", "/pods/refused/binding")[1])


async def test_a_gang_is_bound_whole_and_its_status_written(
    fake: FakeApiServer, operator: Operator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(publisher_module, "MEMBERS_GRACE_S", 0.0)  # short members are told at the first round
    operator.set_leading(True)
    operator.node_event(node("gpu-0", gpus=4))
    operator.node_event(node("gpu-1", gpus=4))
    operator.podgroup_event(podgroup("job", 3))
    members = [pod(f"job-{i}", 2, labels={"gpusched.io/pod-group": "job"}) for i in range(3)]
    for member in members[:2]:
        operator.pod_event(member)
    operator.listed()
    # 2 of 3 members: the gang waits, and its members are told so.
    operator.publish_status()
    await flushed(operator)
    assert waiting_for_gang(fake) == {"job-0", "job-1"}
    assert bound(fake) == {} and all(operator.cache.pod(f"default/job-{i}") is None for i in range(2))
    operator.pod_event(members[2])
    await eventually(lambda: len(bound(fake)) == 3)
    for member in members:
        operator.pod_event(
            pod(
                member["metadata"]["name"],
                2,
                node_name=bound(fake)[member["metadata"]["name"]]["target"]["name"],
                labels={"gpusched.io/pod-group": "job"},
            )
        )
    operator.publish_status()
    await flushed(operator)
    written = fake.requests("PATCH", "/podgroups/job/status")[-1].body["status"]
    assert written["phase"] == "Running"
    assert written["running"] == 3
    assert "gpusched_gang_wait_seconds_count 1.0" in operator.metrics.exposition().decode()


async def test_an_elastic_gang_at_its_maximum_tells_its_other_members_why_they_wait(
    fake: FakeApiServer, operator: Operator
) -> None:
    operator.set_leading(True)
    operator.node_event(node("gpu-0", gpus=8))
    group = podgroup("job", 1)
    group["spec"]["maxMember"] = 2
    operator.podgroup_event(group)
    for i in range(3):
        operator.pod_event(pod(f"job-{i}", 2, labels={"gpusched.io/pod-group": "job"}))
    operator.listed()
    await eventually(lambda: len(bound(fake)) == 2)
    await settled(operator)
    operator.publish_status()
    await flushed(operator)
    waiting = {"job-0", "job-1", "job-2"} - set(bound(fake))
    told = [e for e in events(fake, "WaitingForGang") if e["involvedObject"]["name"] in waiting]
    assert len(told) == 1 and "maxMember of 2" in told[0]["message"], told
    written = fake.requests("PATCH", "/podgroups/job/status")[-1].body["status"]
    assert (written["minMember"], written["maxMember"]) == (1, 2)


async def test_preemption_deletes_the_victim_with_its_uid(fake: FakeApiServer, operator: Operator) -> None:
    victim = pod("victim", 1)
    fake.pods["default/victim"] = victim
    operator.evict([api_pod.parse_pod(victim)], "reclaim")
    await eventually(lambda: bool(fake.requests("DELETE", "/pods/victim")))
    assert fake.requests("DELETE", "/pods/victim")[0].body == {"preconditions": {"uid": "uid-victim"}}
    assert 'gpusched_preemptions_total{queue="default",reason="reclaim"} 1.0' in operator.metrics.exposition().decode()
    # Before the deletion, as kube-scheduler does: the DisruptionTarget condition says why the pod goes.
    (marked,) = fake.requests("PATCH", "/pods/victim/status")
    assert fake.seen.index(marked) < fake.seen.index(fake.requests("DELETE", "/pods/victim")[0])
    (condition,) = marked.body["status"]["conditions"]
    assert condition["type"] == "DisruptionTarget" and condition["status"] == "True"
    assert condition["reason"] == "PreemptionByScheduler"
    assert condition["message"] == "gpusched: preempting to accommodate a higher priority pod"


async def test_a_victim_whose_deletion_fails_is_reported_to_the_loop(fake: FakeApiServer, operator: Operator) -> None:
    # Its preemptor must not wait for a room that is not coming (the loop frees it to search again).
    failed: list[tuple[str, str]] = []
    operator.loop.eviction_failed = lambda key, why: failed.append((key, why))  # type: ignore[method-assign]
    for name in ("kept", "gone"):
        fake.pods[f"default/{name}"] = pod(name, 1)
    fake.delete_answers["kept"] = Canned(500, status(500, "InternalError", "etcdserver: request timed out"))
    operator.evict([api_pod.parse_pod(pod(name, 1)) for name in ("kept", "gone")], "reclaim")
    await eventually(lambda: len(fake.requests("DELETE")) == 2 and bool(failed))
    assert failed == [("default/kept", "etcdserver: request timed out")]


async def test_moves_are_evicted_in_order_through_the_eviction_api_and_a_refusal_stops_them(
    fake: FakeApiServer, operator: Operator
) -> None:
    moved = [api_pod.parse_pod(pod(name, 1)) for name in ("m0", "m1", "m2")]
    refused = []
    operator.loop.move_refused = lambda key, why: refused.append((key, why))  # type: ignore[method-assign]
    fake.eviction_answers["m1"] = Canned(
        429, status(429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget.")
    )
    # A replica that does not lead evicts nothing (its plans are dropped when it loses the lease; this is the last
    # guard).
    operator.adapter.move(moved, "consolidation")
    assert "gpusched_consolidation_moves_total 0.0" in operator.metrics.exposition().decode()
    operator.set_leading(True)
    operator.adapter.move(moved, "consolidation")
    await eventually(lambda: bool(refused))
    evicted = [r.path.split("/")[-2] for r in fake.seen if r.path.endswith("/eviction")]
    assert evicted == ["m0", "m1"]  # m2 stays where it is
    first = fake.requests("POST", "/pods/m0/eviction")[0].body
    assert first["kind"] == "Eviction" and first["deleteOptions"] == {"preconditions": {"uid": "uid-m0"}}
    assert refused == [("default/m1", "HTTP 429: Cannot evict pod as it would violate the pod's disruption budget.")]
    exposition = operator.metrics.exposition().decode()
    assert "gpusched_consolidation_moves_total 3.0" in exposition
    assert "gpusched_consolidation_refusals_total 1.0" in exposition


async def test_a_preemptors_nominated_node_is_written_and_cleared(fake: FakeApiServer, operator: Operator) -> None:
    preemptor = api_pod.parse_pod(pod("urgent", 1))

    def written() -> list[str | None]:
        return [r.body["status"]["nominatedNodeName"] for r in fake.requests("PATCH", "/pods/urgent/status")]

    operator.nominate(preemptor, "gpu-1")
    await eventually(lambda: len(written()) == 1)
    operator.nominate(preemptor, "")
    await eventually(lambda: len(written()) == 2)
    assert written() == ["gpu-1", None]

    # Wishes in quick succession: whatever is written, the last write is the last wish (never a stale node left).
    for node in ("gpu-2", "", "gpu-3", ""):
        operator.nominate(preemptor, node)
    await eventually(lambda: not operator.adapter._nominations)
    assert written()[-1] is None and set(written()[2:]) <= {"gpu-2", "gpu-3", None}


def test_pod_disruption_budgets_reach_preemption_and_bad_ones_are_reported(operator: Operator) -> None:
    budget = {
        "metadata": {"name": "db", "namespace": "shop"},
        "spec": {"selector": {"matchLabels": {"app": "db"}}},
        "status": {"disruptionsAllowed": 0},
    }
    operator.pdb_event(budget)
    assert operator.budget_keys() == ["shop/db"]
    operator.pdb_event({**budget, "status": {"disruptionsAllowed": "none"}})
    assert operator.budget_keys() == []
    assert operator.metrics.invalid_objects.labels("poddisruptionbudget")._value.get() == 1.0
    operator.pdb_event(budget)
    operator.pdb_event(budget, deleted=True)
    assert operator.budget_keys() == []


async def test_after_a_restart_a_running_gang_stays_running(fake: FakeApiServer, operator: Operator) -> None:
    operator.set_leading(True)
    operator.node_event(node("gpu-0", gpus=8))
    for i in range(2):
        operator.pod_event(pod(f"job-{i}", 2, node_name="gpu-0", labels={"gpusched.io/pod-group": "job"}))
    operator.podgroup_event(podgroup("job", 2))
    operator.listed()
    operator.publish_status()
    await flushed(operator)
    written = fake.requests("PATCH", "/podgroups/job/status")[-1].body["status"]
    assert (written["phase"], written["scheduled"], written["running"]) == ("Running", 2, 2)
    assert bound(fake) == {}


def test_kernels_are_warmed_on_a_private_cluster() -> None:
    # Both a whole-GPU and a shared-GPU pod are placed: every kernel of the profile has run once.
    assert operator_module.warm_kernels(k8s_config.parse({})) == 2


async def test_the_scheduling_task_ends_on_cancel_even_when_just_woken(client: k8s.Client) -> None:
    # asyncio.wait_for (Python 3.11) swallowed a cancel arriving when the awaited event was already set: the task
    # never ended, and a standby never exited on SIGTERM.
    op = Operator(client, k8s_config.parse({}), identity="test")
    await op.start()
    task = asyncio.create_task(op.run())
    await asyncio.sleep(0.05)  # idle, waiting to be woken
    op.set_leading(False)  # wakes it...
    task.cancel()  # ...and the cancel comes before it runs again
    done, _ = await asyncio.wait([task], timeout=2.0)
    assert task in done and task.cancelled()
    await op.close()


async def test_kube_schedulers_pods_hold_their_gpus_in_no_queue_and_are_never_evicted(
    fake: FakeApiServer, operator: Operator
) -> None:
    # Both schedulers on one node: kube-scheduler's pods (no queue label) hold 6 of its 8 GPUs. Queue default's
    # status counts only what gpusched bound there; the queues share the 2 GPUs left; nothing of theirs is evicted.
    operator.set_leading(True)
    operator.queue_event({"metadata": {"name": "default", "uid": "uid-q"}, "spec": {}})
    operator.node_event(node("gpu-0", gpus=8))
    for i in range(3):
        operator.pod_event(pod(f"theirs{i}", 2, scheduler="default-scheduler", node_name="gpu-0"))
    operator.pod_event(pod("mine", 2))
    urgent = pod("urgent", 4)
    urgent["spec"]["priority"] = 1000  # above theirs: only who bound them keeps them from being preempted
    operator.pod_event(urgent)
    operator.listed()
    await eventually(lambda: "mine" in bound(fake))
    operator.pod_event(pod("mine", 2, node_name="gpu-0"))

    def default_status() -> dict[str, Any]:
        patches = fake.requests("PATCH", "/queues/default/status")
        return patches[-1].body["status"] if patches else {}

    await eventually(lambda: default_status().get("allocated", {}).get(GPU) == "2")
    assert operator.loop.tenancy.capacity()[GPU] == 2.0
    theirs = api_pod.parse_bound_pod(pod("theirs0", 2, scheduler="default-scheduler", node_name="gpu-0"))[0]
    assert operator.loop.queue_of(theirs) == ""
    await settled(operator)
    assert "urgent" not in bound(fake)
    assert fake.requests("POST", "/eviction") == [] and fake.requests("DELETE", "/pods/theirs") == []


async def test_the_replacement_of_a_pod_the_kubelet_refused_for_its_numa_zones_goes_to_another_node(
    fake: FakeApiServer, operator: Operator
) -> None:
    # The kubelets run single-numa-node and no agent publishes their zones: nothing told the scheduler that web-1
    # could not be aligned on gpu-0, until its kubelet refused it.
    def replica(name: str, *, node_name: str = "", scheduler: str = "gpusched", owner: str = "web") -> dict[str, Any]:
        raw = pod(name, 4, node_name=node_name, scheduler=scheduler)
        raw["metadata"]["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": owner, "uid": f"uid-{owner}", "controller": True}
        ]
        return raw

    operator.set_leading(True)
    operator.node_event(node("gpu-0"))
    operator.node_event(node("gpu-1"))
    operator.listed()
    operator.pod_event(replica("web-1"))
    await eventually(lambda: "web-1" in bound(fake))
    assert bound(fake)["web-1"]["target"]["name"] == "gpu-0"  # the first node by name: both are empty
    refused = replica("web-1", node_name="gpu-0")
    refused["status"] = {
        "phase": "Failed",
        "reason": "TopologyAffinityError",
        "message": "Pod was rejected: Resources cannot be allocated with Topology locality",
    }
    operator.pod_event(refused)
    operator.pod_event(replica("web-2"))  # its ReplicaSet's replacement
    await eventually(lambda: "web-2" in bound(fake))
    assert bound(fake)["web-2"]["target"]["name"] == "gpu-1"
    await flushed(operator)
    (told,) = events(fake, "KubeletRefusedPod")
    assert told["involvedObject"]["kind"] == "Node" and told["involvedObject"]["name"] == "gpu-0"
    assert told["message"].startswith("the kubelet refused pod default/web-1 (TopologyAffinityError)"), told
    # The same failed pod seen again (a relist) is no news; another owner's pod may still use gpu-0.
    operator.pod_event(refused)
    operator.pod_event(pod("other", 4))
    await eventually(lambda: "other" in bound(fake))
    assert bound(fake)["other"]["target"]["name"] == "gpu-0"
    # kube-scheduler's pods are kube-scheduler's to place elsewhere: nothing remembered, nothing told.
    theirs = replica("theirs", node_name="gpu-1", scheduler="default-scheduler", owner="api")
    theirs["status"] = refused["status"]
    operator.pod_event(theirs)
    assert operator.cache.kubelet_refusals.nodes("uid-api") == []
    await flushed(operator)
    assert len(events(fake, "KubeletRefusedPod")) == 1


async def test_a_pod_of_ours_the_kubelet_refused_frees_its_gpus_and_is_not_bound_again(
    fake: FakeApiServer, operator: Operator
) -> None:
    # Both schedulers chose the last free GPUs of gpu-0 in the same moment; the kubelet admitted kube-scheduler's
    # pod and refused ours (docs/operator.md, "Running beside kube-scheduler").
    operator.set_leading(True)
    operator.queue_event({"metadata": {"name": "default", "uid": "uid-q"}, "spec": {}})
    operator.node_event(node("gpu-0", gpus=8))
    operator.pod_event(pod("mine", 8))
    operator.listed()
    await eventually(lambda: "mine" in bound(fake))
    operator.pod_event(pod("mine", 8, node_name="gpu-0"))
    operator.pod_event(pod("theirs", 8, scheduler="default-scheduler", node_name="gpu-0"))
    refused = pod("mine", 8, node_name="gpu-0")
    refused["status"] = {
        "phase": "Failed",
        "reason": "OutOfnvidia.com/gpu",
        "message": "Pod was rejected: Node didn't have enough resource: nvidia.com/gpu, requested: 8, used: 8, "
        "capacity: 8",
    }
    operator.pod_event(refused)
    assert operator.cache.pod("default/mine") is None
    assert operator.loop.held("default").get(GPU, 0.0) == 0.0

    def default_status() -> dict[str, Any]:
        patches = fake.requests("PATCH", "/queues/default/status")
        return patches[-1].body["status"] if patches else {}

    await eventually(lambda: default_status().get("allocated", {}).get(GPU, "0") == "0")
    # The GPUs kube-scheduler's pod holds stay taken: a new pod of ours waits, the refused one is not bound again.
    operator.pod_event(pod("next", 8))
    await eventually(lambda: bool(events(fake, "FailedScheduling")))
    await settled(operator)
    assert list(bound(fake)) == ["mine"] and len(fake.requests("POST", "/pods/mine/binding")) == 1


def reservation(name: str, *, gpus: Any = 4, **spec: Any) -> dict[str, Any]:
    template = {"spec": {"containers": [{"name": "c", "resources": {"requests": {GPU: gpus}}}]}}
    owners = [{"labelSelector": {"matchLabels": {"app": "train"}}}]
    return {"metadata": pod(name)["metadata"], "spec": {"template": template, "owners": owners, **spec}}


async def test_a_reservation_holds_its_node_for_its_owner_and_its_status_is_written(
    fake: FakeApiServer, operator: Operator
) -> None:
    operator.set_leading(True)
    operator.node_event(node("gpu-0", gpus=4))
    operator.node_event(node("gpu-1", gpus=4))
    operator.reservation_event(reservation("rsv"))
    operator.reservation_event(reservation("bad", gpus="lots"))
    operator.listed()
    operator.pod_event(pod("other", 4))
    operator.pod_event(pod("late", 4))
    operator.pod_event(pod("train", 4, labels={"app": "train"}))
    await eventually(lambda: len(bound(fake)) == 2)
    await settled(operator)
    operator.publish_status()
    for writer in (operator.recorder, operator.publisher.reservation_status):
        assert await writer.flush()
    written = fake.requests("PATCH", "/reservations/rsv/status")[-1].body["status"]
    assert written["phase"] == "Available"
    assert written["held"] == {GPU: "4"}
    (held,) = written["nodes"]
    assert bound(fake)["train"]["target"]["name"] == held
    assert "late" not in bound(fake) or "other" not in bound(fake)
    failed = fake.requests("PATCH", "/reservations/bad/status")[-1].body["status"]
    assert failed["phase"] == "Failed"
    assert "spec.template.spec.containers[0].resources.requests" in failed["conditions"][0]["message"]
    (invalid,) = events(fake, "InvalidObject")
    assert invalid["involvedObject"]["kind"] == "Reservation"
    assert [e["involvedObject"]["name"] for e in events(fake, "Reserved")] == ["rsv"]
