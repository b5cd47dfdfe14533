"""The binder, Events and status writers against a real kube-apiserver (LocalCluster: etcd + apiserver + kwok).

Decisions are made by hand here (no scheduling loop): what is under test is that the API server takes what the
writers send, and that the outcomes the binder reports match what the cluster then shows.

The cluster comes from conftest.py (skipped without the control-plane binaries unless ``GPUSCHED_E2E_REQUIRED=1``);
these tests use LocalCluster's helpers, so they skip on a cluster named by ``GPUSCHED_E2E_KUBECONFIG``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from scheduler.api.objects.pod import ANNOTATION_GPU_IDS, PodRequest, parse_pod
from scheduler.framework.interface import Decision
from scheduler.k8s import client as k8s
from scheduler.k8s.ports.binder import Binder, BinderSettings
from scheduler.k8s.ports.events import EventRecorder, EventSettings
from scheduler.k8s.status import CustomStatusWriter, PodConditionWriter, StatusSettings
from tests.e2e import kube as kube_mod
from tests.e2e.localcluster import GPU_RESOURCE, LocalCluster, wait_for

HERE = Path(__file__).resolve().parent

pytestmark = pytest.mark.e2e

NS = "e2e-binder"
NODE = "binder-node-0"
OTHER_NODE = "binder-node-1"


@pytest.fixture(scope="module")
def cluster(kube: kube_mod.Kube) -> Iterator[LocalCluster]:
    """The session's LocalCluster with two kwok GPU nodes of this module's own; removed at the end."""
    if kube.local is None:
        pytest.skip("these tests call LocalCluster helpers; they run on the suite's own control plane only")
    c = kube.local
    started = time.monotonic()
    kube.ensure_namespace(NS)
    c.create_fake_node(NODE, gpus=8)
    c.create_fake_node(OTHER_NODE, gpus=8)
    print(f"\n[e2e] two kwok GPU nodes ready in {time.monotonic() - started:.1f}s")
    try:
        yield c
    finally:
        c.request("DELETE", f"/api/v1/namespaces/{NS}/pods", query={"gracePeriodSeconds": "0"})
        c.request("DELETE", f"/apis/scheduling.gpusched.io/v1alpha1/namespaces/{NS}/podgroups")
        c.request("DELETE", f"/api/v1/namespaces/{NS}")
        for node in (NODE, OTHER_NODE):
            c.request("DELETE", f"/api/v1/nodes/{node}")


@pytest.fixture
async def client(cluster: LocalCluster) -> AsyncIterator[k8s.Client]:
    c = await k8s.connect(k8s.ClientSettings(kubeconfig=str(cluster.kubeconfig), qps=200, burst=200))
    yield c
    await c.close()


@dataclass
class Outcomes:
    bound: list[str] = field(default_factory=list)
    failed: list[tuple[str, str, bool, float]] = field(default_factory=list)
    uncertain: list[str] = field(default_factory=list)

    def on_bound(self, key: str) -> None:
        self.bound.append(key)

    def on_failed(self, pod: PodRequest, reason: str, retry: bool, backoff: float) -> None:
        self.failed.append((pod.key, reason, retry, backoff))

    def on_uncertain(self, key: str) -> None:
        self.uncertain.append(key)

    def binder(self, client: k8s.Client, **settings: Any) -> Binder:
        return Binder(
            client,
            on_bound=self.on_bound,
            on_failed=self.on_failed,
            on_uncertain=self.on_uncertain,
            settings=BinderSettings(**settings),
        )


def create_pod(c: LocalCluster, name: str, gpus: int, labels: dict[str, str] | None = None) -> PodRequest:
    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": labels or {}},
        "spec": {
            "schedulerName": "gpusched",
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/train:latest",
                    "resources": {"limits": {GPU_RESOURCE: str(gpus)}, "requests": {"cpu": "1"}},
                }
            ],
        },
    }
    return parse_pod(c.request("POST", f"/api/v1/namespaces/{NS}/pods", manifest))


async def test_bound_pods_go_running_with_their_gpus(cluster: LocalCluster, client: k8s.Client) -> None:
    pods = [create_pod(cluster, f"train-{i}", gpus=1) for i in range(8)]
    outcomes = Outcomes()
    binder = outcomes.binder(client, max_in_flight=4)
    started = time.monotonic()
    for i, pod in enumerate(pods):
        binder.bind(Decision(pod, NODE, (i,)))
    await binder.drain()
    bind_seconds = time.monotonic() - started
    assert sorted(outcomes.bound) == sorted(p.key for p in pods)
    assert outcomes.failed == [] and outcomes.uncertain == []

    for i, pod in enumerate(pods):
        running = await asyncio.to_thread(cluster.wait_pod_phase, NS, pod.name, "Running", 60.0)
        assert running["spec"]["nodeName"] == NODE
        assert running["metadata"]["annotations"][ANNOTATION_GPU_IDS] == str(i)
        scheduled = [c for c in running["status"]["conditions"] if c["type"] == "PodScheduled"]
        assert scheduled and scheduled[0]["status"] == "True"
        # What the watch will hand the core: the pod where we put it, with the GPUs we chose.
        seen = parse_pod(running)
        assert (seen.node_name, seen.gpu_ids) == (NODE, (i,))
    print(f"\n[e2e] 8 binds, 4 in flight: {bind_seconds * 1000:.0f} ms; all Running")


async def test_already_bound_gone_and_replaced_pods(cluster: LocalCluster, client: k8s.Client) -> None:
    pod = create_pod(cluster, "again", gpus=2)
    outcomes = Outcomes()
    binder = outcomes.binder(client)
    binder.bind(Decision(pod, NODE, (6, 7)))
    await binder.drain()
    assert outcomes.bound == [pod.key]

    # The same decision again (an answer we lost, say): the pod is there already, with our GPUs: bound.
    binder.bind(Decision(pod, NODE, (6, 7)))
    await binder.drain()
    assert outcomes.bound == [pod.key, pod.key]
    assert outcomes.failed == []

    # Another decision for a pod someone already placed: failed, not to be retried; the reason says where.
    binder.bind(Decision(pod, OTHER_NODE, (0, 1)))
    await binder.drain()
    ((key, reason, retry, _),) = outcomes.failed
    assert key == pod.key and retry is False
    assert NODE in reason and "6,7" in reason

    # A pod that does not exist, and a decision made for a pod since replaced under the same name.
    outcomes.failed.clear()
    binder.bind(Decision(PodRequest(NS, "no-such-pod", uid="00000000-0000-0000-0000-000000000000"), NODE, (0,)))
    old = create_pod(cluster, "replaced", gpus=1)
    cluster.request("DELETE", f"/api/v1/namespaces/{NS}/pods/replaced", query={"gracePeriodSeconds": "0"})
    await asyncio.to_thread(wait_for, lambda: _absent(cluster, "replaced"), 30.0, "pod replaced deleted", 0.1, 0.5)
    new = create_pod(cluster, "replaced", gpus=1)
    assert new.uid != old.uid
    binder.bind(Decision(old, NODE, (0,)))
    await binder.drain()
    assert sorted((k, retry) for k, _, retry, _ in outcomes.failed) == [
        (f"{NS}/no-such-pod", False),
        (f"{NS}/replaced", False),
    ]
    assert not cluster.get_pod(NS, "replaced")["spec"].get("nodeName")  # the new pod was not bound
    assert outcomes.uncertain == []


def _absent(cluster: LocalCluster, name: str) -> bool:
    try:
        cluster.get_pod(NS, name)
    except Exception as exc:
        return getattr(exc, "status", None) == 404
    return False


async def test_events_are_created_and_counted(cluster: LocalCluster, client: k8s.Client) -> None:
    pod = create_pod(cluster, "waiting", gpus=16)
    uids = {("pod", pod.key): pod.uid}
    recorder = EventRecorder(
        client,
        settings=EventSettings(patch_interval=0.2, instance="e2e"),
        uid_of=lambda word, key: uids.get((word, key), ""),
    )
    recorder.start()
    message = "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
    try:
        for _ in range(5):
            recorder.emit(obj=f"pod {pod.key}", kind="Warning", reason="FailedScheduling", message=message)
            await asyncio.sleep(0.05)
        recorder.emit(obj=f"podgroup {NS}/gang", kind="Normal", reason="Scheduled", message="4 members placed")
        assert await recorder.flush()
    finally:
        await recorder.close()

    events = cluster.request(
        "GET", f"/api/v1/namespaces/{NS}/events", query={"fieldSelector": "involvedObject.name=waiting"}
    )["items"]
    (event,) = events
    assert event["reason"] == "FailedScheduling" and event["type"] == "Warning"
    assert event["message"] == message
    assert event["count"] == 5
    assert event["involvedObject"]["uid"] == pod.uid
    assert event["reportingComponent"] == "gpusched" and event["action"] == "Scheduling"
    # kubectl describe finds it (by the pod's UID).
    described = cluster.kubectl("describe", "pod", "-n", NS, "waiting").stdout
    assert "FailedScheduling" in described and "Insufficient nvidia.com/gpu" in described
    gang = cluster.request(
        "GET", f"/api/v1/namespaces/{NS}/events", query={"fieldSelector": "involvedObject.kind=PodGroup"}
    )["items"]
    assert [e["reason"] for e in gang] == ["Scheduled"]
    assert recorder.stats["created"] == 2 and recorder.stats["aggregated"] == 4


async def test_unschedulable_condition_and_podgroup_status(cluster: LocalCluster, client: k8s.Client) -> None:
    pod = create_pod(cluster, "too-big", gpus=64)
    conditions = PodConditionWriter(client, settings=StatusSettings(interval=0.2))
    conditions.start()
    try:
        conditions.unschedulable(pod, "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.")
        assert await conditions.flush()
    finally:
        await conditions.close()
    assert conditions.coalescer.stats["written"] == 1
    status = cluster.get_pod(NS, "too-big")["status"]
    (cond,) = [c for c in status["conditions"] if c["type"] == "PodScheduled"]
    assert (cond["status"], cond["reason"]) == ("False", "Unschedulable")
    assert "Insufficient nvidia.com/gpu" in cond["message"]

    cluster.kubectl(
        "apply",
        "-f",
        "-",
        input=(
            "apiVersion: scheduling.gpusched.io/v1alpha1\nkind: PodGroup\n"
            f"metadata: {{name: gang, namespace: {NS}}}\nspec: {{minMember: 4}}\n"
        ),
    )
    groups = CustomStatusWriter(client, settings=StatusSettings(interval=0.2))
    groups.start()
    now = time.time()
    try:
        # The dict SchedulingLoop.group_status returns (times in Unix seconds).
        groups.update(
            f"{NS}/gang",
            {
                "phase": "Scheduling",
                "scheduled": 0,
                "running": 0,
                "lastScheduleTime": None,
                "conditions": [
                    {
                        "type": "Scheduled",
                        "status": "False",
                        "reason": "NotAllMembersFit",
                        "message": "3 of 4 members fit",
                        "lastTransitionTime": now,
                    }
                ],
            },
        )
        assert await groups.flush()
        groups.update(f"{NS}/gang", {"phase": "Scheduled", "scheduled": 4, "running": 0, "lastScheduleTime": now})
        assert await groups.flush()
    finally:
        await groups.close()
    group = cluster.request("GET", f"/apis/scheduling.gpusched.io/v1alpha1/namespaces/{NS}/podgroups/gang")
    assert group["status"]["phase"] == "Scheduled"
    assert group["status"]["scheduled"] == 4
    assert group["status"]["lastScheduleTime"] == time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))
    assert group["status"]["conditions"][0]["reason"] == "NotAllMembersFit"
    printed = cluster.kubectl("get", "gpg", "-n", NS, "gang").stdout
    assert "Scheduled" in printed
