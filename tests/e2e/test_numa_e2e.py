"""NUMA through ``gpusched run`` as shipped (its ServiceAccount and RBAC): NodeResourceTopology objects, as NFD's
topology-updater publishes them, decide where a pod whose node's kubelet runs the Topology Manager may go, one test
per rule of issue 42: ``single-numa-node``, ``restricted``, ``best-effort``, scope ``pod`` and ``container``, the
scheduler's own count while the objects are stale, a node without an object, a gang, the never-fits message, and a
pod the kubelet refused anyway (``TopologyAffinityError``).

The CRD comes from its own Go module (``fetch-workload-crds.sh``); this module plays the agent and publishes each
node's zones once, then never again (as kwok's nodes leave them): the scheduler's own count must keep a second pod
off a zone the frozen object still shows free. Each test starts its ``gpusched run`` after publishing, so that the
first listing has the zones (a replica shared between tests could see a pod before the zones published with it).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from scheduler.api.devices import numa
from scheduler.cache import numa_store
from scheduler.core import capacity
from tests.api import objects as api_objects
from tests.e2e import kube as kube_mod
from tests.e2e.kube import APIError, Kube, Scenario
from tests.e2e.test_workload_crds_e2e import _crds_dir
from tests.plugins import test_numa as numa_units

pytestmark = pytest.mark.e2e

NRT = "/apis/topology.node.k8s.io/v1alpha2/noderesourcetopologies"


@pytest.fixture(scope="module")
def nrt_crd(kube: Kube) -> Iterator[Path]:
    """The NodeResourceTopology CRD installed and established (before any ``gpusched run`` of this module starts:
    it asks once at start whether the cluster serves it)."""
    crd = _crds_dir() / "crds" / "crd.yaml"
    kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crd))
    kube.kubectl("wait", "--for=condition=established", "--timeout=60s", "-f", str(crd))
    yield crd


def _nrt(
    node: str, free: Sequence[int], *, policy: str = "single-numa-node", scope: str = "container"
) -> dict[str, Any]:
    """A node's zones as the topology-updater publishes them: 4 GPUs and 32 CPUs per zone, ``free`` GPUs left."""
    zones = [
        {
            "name": f"node-{i}",
            "type": "Node",
            "costs": [{"name": f"node-{j}", "value": 10 if i == j else 20} for j in range(len(free))],
            "resources": [
                {"name": "cpu", "capacity": "32", "allocatable": "32", "available": "32"},
                {"name": "nvidia.com/gpu", "capacity": "4", "allocatable": "4", "available": str(left)},
            ],
        }
        for i, left in enumerate(free)
    ]
    return {
        "apiVersion": "topology.node.k8s.io/v1alpha2",
        "kind": "NodeResourceTopology",
        "metadata": {"name": node},
        "attributes": [
            {"name": "topologyManagerPolicy", "value": policy},
            {"name": "topologyManagerScope", "value": scope},
        ],
        "zones": zones,
    }


@pytest.fixture
def publish(kube: Kube, nrt_crd: Path) -> Iterator[Callable[..., None]]:
    """Publish NodeResourceTopology objects (made by :func:`_nrt`) for this test; deleted when it ends."""
    names: list[str] = []

    def post(*bodies: dict[str, Any]) -> None:
        for body in bodies:
            kube.request("POST", NRT, body)
            names.append(body["metadata"]["name"])

    yield post
    for name in names:
        with contextlib.suppress(APIError):
            kube.request("DELETE", f"{NRT}/{name}")


def _failed_scheduling(sched: Scenario, pod: str) -> str:
    """The message of the pod's FailedScheduling Event."""
    return str(sched.wait_event(pod, "FailedScheduling")["message"])


def test_restricted_binds_over_the_fewest_zones_and_refuses_a_pod_spread_wider(
    sched: Scenario, publish: Callable[..., None]
) -> None:
    node = "numa-restricted-0"
    sched.add_nodes([kube_mod.gpu_node(node, gpus=8)])
    publish(_nrt(node, [2, 3], policy="restricted"))
    sched.start_gpusched()
    # 4 GPUs fit one zone of 4 once it is free: over two zones now is more than the fewest, and the kubelet refuses.
    sched.create_pod(kube_mod.pod("four", gpus=4))
    message = _failed_scheduling(sched, "four")
    assert "1 no NUMA zones hold 4 nvidia.com/gpu in as few zones as they need (restricted)" in message, message
    # 5 GPUs never fit one zone: two zones are the fewest, and the 2 + 3 left hold them.
    sched.create_pod(kube_mod.pod("five", gpus=5))
    (five,) = sched.wait_bound(["five"])
    assert kube_mod.node_of(five) == node and not kube_mod.node_of(sched.pod("four"))


def test_best_effort_never_refuses_a_pod(sched: Scenario, publish: Callable[..., None]) -> None:
    strict, lenient = "numa-effort-a", "numa-effort-b"  # a NUMA-blind choice takes the first by name
    sched.add_nodes([kube_mod.gpu_node(strict, gpus=8), kube_mod.gpu_node(lenient, gpus=8)])
    publish(_nrt(strict, [2, 3]), _nrt(lenient, [2, 3], policy="best-effort"))
    sched.start_gpusched()
    sched.create_pod(kube_mod.pod("four", gpus=4))
    (four,) = sched.wait_bound(["four"])
    assert kube_mod.node_of(four) == lenient  # its kubelet admits it over two zones, only less well placed


def test_scope_pod_aligns_the_containers_together_and_scope_container_each_alone(
    sched: Scenario, publish: Callable[..., None]
) -> None:
    pod_scope, container_scope = "numa-scope-a", "numa-scope-b"
    sched.add_nodes([kube_mod.gpu_node(pod_scope, gpus=8), kube_mod.gpu_node(container_scope, gpus=8)])
    publish(_nrt(pod_scope, [3, 3], scope="pod"), _nrt(container_scope, [3, 3], scope="container"))
    sched.start_gpusched()

    def pair(name: str) -> dict[str, Any]:
        """A pod of two containers of 2 GPUs each: each fits a zone of 3, the two together fit none."""
        manifest = kube_mod.pod(name, gpus=2)
        second = json.loads(json.dumps(manifest["spec"]["containers"][0]))
        second["name"] = "second"
        manifest["spec"]["containers"].append(second)
        return manifest

    sched.create_pod(pair("pair"))
    (placed,) = sched.wait_bound(["pair"])
    assert kube_mod.node_of(placed) == container_scope
    # The scheduler counts the first pair as 2 GPUs in each zone of numa-scope-b: one left in each.
    sched.create_pod(pair("pair-2"))
    message = _failed_scheduling(sched, "pair-2")
    assert "1 no NUMA zone has 4 nvidia.com/gpu (single-numa-node)" in message, message  # numa-scope-a: the pod's 4
    assert "1 no NUMA zone has 2 nvidia.com/gpu (single-numa-node)" in message, message  # numa-scope-b: a container's 2


def test_the_own_count_sends_the_next_pod_elsewhere_while_the_object_still_shows_its_zone_free(
    sched: Scenario, publish: Callable[..., None]
) -> None:
    nodes = ["numa-stale-a", "numa-stale-b"]
    sched.add_nodes([kube_mod.gpu_node(n, gpus=8) for n in nodes])
    publish(_nrt(nodes[0], [4, 0]), _nrt(nodes[1], [0, 4]))  # one zone of 4 free on each
    sched.start_gpusched()
    sched.create_pod(kube_mod.pod("first", gpus=4))
    (first,) = sched.wait_bound(["first"])
    taken = kube_mod.node_of(first)
    published = sched.kube.request("GET", f"{NRT}/{taken}")
    free = [int(r["available"]) for z in published["zones"] for r in z["resources"] if r["name"] == "nvidia.com/gpu"]
    assert sorted(free) == [0, 4], published  # the frozen object still shows the zone the first pod took as free
    # The node still has 4 GPUs free, and a packing score would pick it; its zones have none left.
    sched.create_pod(kube_mod.pod("second", gpus=4))
    (second,) = sched.wait_bound(["second"])
    assert kube_mod.node_of(second) == next(n for n in nodes if n != taken)


def test_the_pods_an_objects_fingerprint_shows_are_not_counted_again_though_it_is_never_published_again(
    sched: Scenario, publish: Callable[..., None]
) -> None:
    """Another scheduler's pod runs on 3 GPUs of zone 0; the node's object shows it (1 GPU left in zone 0, 4 in zone
    1) with the fingerprint of the pods it counted, and is never published again (no agent on kwok). gpusched is up
    before the pod starts, so it sees the zones first and the pod after: counted on top of the object, the pod would
    go to zone 1 and leave no zone for a 4-GPU pod; matched to the fingerprint, it is not counted again."""
    node = "numa-fingerprint-0"
    sched.add_nodes([kube_mod.gpu_node(node, gpus=8, nvlink_groups=2)])  # GPUs 0-3 on zone 0, 4-7 on zone 1
    body = _nrt(node, [1, 4])
    fingerprint = numa_store.pods_fingerprint([(sched.namespace, "theirs")])
    body["attributes"].append({"name": numa.FINGERPRINT, "value": fingerprint})
    publish(body)
    sched.start_gpusched()
    theirs = kube_mod.pod("theirs", gpus=3, scheduler_name="default-scheduler")
    theirs["spec"]["nodeName"] = node
    theirs["metadata"].setdefault("annotations", {})[kube_mod.ANNOTATION_GPU_IDS] = "0,1,2"
    sched.create_pod(theirs)
    kube_mod.wait_until(lambda: kube_mod.phase_of(sched.pod("theirs")) == "Running", timeout=60, what="theirs Running")
    sched.create_pod(kube_mod.pod("four", gpus=4, node_selector={"kubernetes.io/hostname": node}))
    (four,) = sched.wait_bound(["four"])
    assert kube_mod.node_of(four) == node
    assert sorted(kube_mod.gpu_ids_of(four)) == [4, 5, 6, 7]  # zone 1's, where the kubelet aligns it


def test_a_node_without_an_object_takes_a_pod_no_zone_could_hold(sched: Scenario, publish: Callable[..., None]) -> None:
    zoned, plain = "numa-plain-a", "numa-plain-b"
    sched.add_nodes([kube_mod.gpu_node(zoned, gpus=8), kube_mod.gpu_node(plain, gpus=8)])
    publish(_nrt(zoned, [4, 4]))
    sched.start_gpusched()
    sched.create_pod(kube_mod.pod("six", gpus=6))
    (six,) = sched.wait_bound(["six"])
    assert kube_mod.node_of(six) == plain  # no object, no NUMA rule: today's rules alone


def test_a_gangs_members_take_their_zones_in_one_what_if(sched: Scenario, publish: Callable[..., None]) -> None:
    node = "numa-gang-0"
    sched.add_nodes([kube_mod.gpu_node(node, gpus=12)])
    publish(_nrt(node, [4, 4, 1]))  # 9 GPUs free, 12 on the node: three zones of 4
    sched.start_gpusched()
    # Three members of 3 GPUs: the node has room for 9, but once two members took a zone each, no zone holds the
    # third. The gang is placed whole or not at all.
    sched.create_podgroup(kube_mod.podgroup("trio", min_member=3))
    trio = [f"trio-{i}" for i in range(3)]
    for name in trio:
        sched.create_pod(kube_mod.pod(name, gpus=3, group="trio"))
    event = sched.wait_event("trio", "FailedScheduling", kind="PodGroup")
    assert "no NUMA zone has 3 nvidia.com/gpu (single-numa-node)" in event["message"], event["message"]
    # Two members fit only zone by zone: 6 GPUs, no zone holds more than 4.
    sched.create_podgroup(kube_mod.podgroup("duo", min_member=2))
    for i in range(2):
        sched.create_pod(kube_mod.pod(f"duo-{i}", gpus=3, group="duo"))
    assert {kube_mod.node_of(p) for p in sched.wait_bound(["duo-0", "duo-1"])} == {node}
    assert not any(kube_mod.node_of(sched.pod(name)) for name in trio)


def test_a_pod_no_zone_anywhere_holds_is_told_it_never_fits(sched: Scenario, publish: Callable[..., None]) -> None:
    nodes = ["numa-never-a", "numa-never-b"]
    sched.add_nodes([kube_mod.gpu_node(n, gpus=8) for n in nodes])
    publish(*(_nrt(n, [4, 4]) for n in nodes))
    sched.start_gpusched()
    sched.create_pod(kube_mod.pod("six", gpus=6))
    # What the numa filter says of the same zones in the unit tests (tests/plugins/test_numa.py), word for word;
    # ``gpusched run`` adds between its two sentences what its preemption found (as kube-scheduler does): nothing.
    expected = (
        numa_units.cluster(*(numa_units.zones(n, [4, 4]) for n in nodes))
        .schedule(api_objects.pod("six", gpus=6))
        .status.message
    )
    head, _, never = expected.partition(f" {capacity.NEVER}")
    assert never and "once a node whose NUMA zones can hold it joins" in never, expected

    def says_never(message: str) -> bool:
        return message.startswith(head) and message.endswith(f"{capacity.NEVER}{never}")

    message = _failed_scheduling(sched, "six")
    assert says_never(message), message

    def unschedulable() -> dict[str, Any] | None:
        cond = kube_mod.condition(sched.pod("six"), "PodScheduled")
        return cond if cond and cond["status"] == "False" else None

    cond = kube_mod.wait_until(unschedulable, timeout=30, what="PodScheduled=False on six", describe=sched.describe)
    assert says_never(str(cond["message"])), cond


def test_the_replacement_of_a_pod_the_kubelet_refused_goes_to_another_node_and_says_why(
    sched: Scenario, nrt_crd: Path
) -> None:
    # No object on either node: their kubelets enforce single-numa-node and no agent says so. The kubelet refuses
    # the first pod of a ReplicaSet as it does (status Failed, reason TopologyAffinityError); its replacement must
    # not be sent to the same node by the same rule.
    nodes = ["numa-refused-a", "numa-refused-b"]
    sched.add_nodes([kube_mod.gpu_node(n, gpus=8) for n in nodes])
    sched.start_gpusched()
    template = kube_mod.pod("web", gpus=4, labels={"app": "web"})
    del template["metadata"]["name"]
    replica_sets = f"/apis/apps/v1/namespaces/{sched.namespace}/replicasets"
    spec = {"replicas": 1, "selector": {"matchLabels": {"app": "web"}}, "template": template}
    sched.kube.request(
        "POST", replica_sets, {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web"}, "spec": spec}
    )

    def running(exclude: set[str]) -> list[dict[str, Any]] | None:
        pods = [p for p in sched.pods("app=web") if p["metadata"]["name"] not in exclude]
        ok = pods and all(kube_mod.phase_of(p) == "Running" for p in pods)
        return pods if ok else None

    (first,) = kube_mod.wait_until(
        lambda: running(set()), timeout=60, what="web's pod Running", describe=sched.describe
    )
    refused_on = kube_mod.node_of(first)
    name = first["metadata"]["name"]
    sched.kube.request(
        "PATCH",
        Kube.pods_path(sched.namespace, name) + "/status",
        {
            "status": {
                "phase": "Failed",
                "reason": "TopologyAffinityError",
                "message": "Pod was rejected: Resources cannot be allocated with Topology locality",
            }
        },
        content_type="application/merge-patch+json",
    )
    (replacement,) = kube_mod.wait_until(
        lambda: running({name}), timeout=60, what="web's replacement Running", describe=sched.describe
    )
    assert kube_mod.node_of(replacement) == next(n for n in nodes if n != refused_on)
    told = kube_mod.wait_until(
        lambda: sched.kube.events("default", name=refused_on, kind="Node"),
        timeout=30,
        what=f"an Event on {refused_on}",
        describe=sched.describe,
    )
    assert any(
        e["reason"] == "KubeletRefusedPod" and f"pod {sched.namespace}/{name} (TopologyAffinityError)" in e["message"]
        for e in told
    ), told
    # Two more replicas: one fills the other node, the last is told why the refused node is not for it.
    sched.kube.request(
        "PATCH", f"{replica_sets}/web", {"spec": {"replicas": 3}}, content_type="application/merge-patch+json"
    )

    def third_waiting() -> dict[str, Any] | None:
        # Both new replicas start Pending without a node: the one left waiting is known only once the other is bound.
        new = [p for p in sched.pods("app=web") if p["metadata"]["name"] not in {name, replacement["metadata"]["name"]}]
        bound = [p for p in new if kube_mod.node_of(p)]
        unbound = [p for p in new if not kube_mod.node_of(p) and kube_mod.phase_of(p) == "Pending"]
        return unbound[0] if len(new) == 2 and len(bound) == 1 and len(unbound) == 1 else None

    waiting = kube_mod.wait_until(third_waiting, timeout=60, what="a third replica waiting", describe=sched.describe)
    message = _failed_scheduling(sched, waiting["metadata"]["name"])
    assert "1 node(s) whose kubelet refused a pod of the same owner (TopologyAffinityError)" in message, message


def test_single_numa_node_pods_go_only_where_one_zone_holds_them(sched: Scenario, nrt_crd: Path) -> None:
    ns = sched.namespace
    split, whole = f"{ns}-split"[-40:], f"{ns}-whole"[-40:]
    sched.add_nodes([kube_mod.gpu_node(split, gpus=8), kube_mod.gpu_node(whole, gpus=8)])
    # split: 5 GPUs left, 2 + 3 (small pods of another scheduler fragmented both sockets); whole: 4 left, in zone 0.
    published = [_nrt(split, [2, 3]), _nrt(whole, [4, 0])]
    for body in published:
        sched.kube.request("POST", NRT, body)
    try:
        replica = sched.start_gpusched()
        assert 'gpusched_api_available{group_version="topology.node.k8s.io/v1alpha2"} 1.0' in replica.metrics()
        started = time.monotonic()
        sched.create_pod(kube_mod.pod("four", gpus=4))
        (four,) = sched.wait_bound(["four"])
        print(f"\n[e2e] 4-GPU pod bound in {time.monotonic() - started:.2f}s on {four['spec']['nodeName']}")
        assert four["spec"]["nodeName"] == whole  # not the node with the most GPUs free: no zone there holds 4
        # The objects are never published again: the scheduler's own count says whole's zone 0 is taken.
        sched.create_pod(kube_mod.pod("three", gpus=3))
        (three,) = sched.wait_bound(["three"])
        assert three["spec"]["nodeName"] == split
        sched.create_pod(kube_mod.pod("again", gpus=4))
        event = sched.wait_event("again", "FailedScheduling")
        assert "no NUMA zone has 4 nvidia.com/gpu (single-numa-node)" in event["message"], event["message"]
        sched.stays_unbound(["again"], 2.0)
    finally:
        for body in published:
            sched.kube.request("DELETE", f"{NRT}/{body['metadata']['name']}")


def test_a_preemption_frees_a_zone_not_only_the_node(sched: Scenario, nrt_crd: Path) -> None:
    """Four pods of 2 GPUs fill both zones of a ``single-numa-node`` node, the cheapest one in each zone. A pod that
    may evict only those two is refused: evicting them frees 4 GPUs on the node but 2 in each zone, and the message
    says so; nothing is evicted. A pod that may evict all four evicts the two of one zone, and binds there."""
    classes = "/apis/scheduling.k8s.io/v1/priorityclasses"
    ns = sched.namespace
    node = f"{ns}-zones"[-40:]
    levels = {"low": 10, "mid": 20, "blocked": 15, "urgent": 1000}
    names = {level: f"{sched.name}-{level}"[-60:] for level in levels}
    made: list[str] = []
    pinned = {"kubernetes.io/hostname": node}
    sched.add_nodes([kube_mod.gpu_node(node, gpus=8)])
    sched.kube.request("POST", NRT, _nrt(node, [4, 4]))
    try:
        for level, value in levels.items():
            body = {"apiVersion": "scheduling.k8s.io/v1", "metadata": {"name": names[level]}, "value": value}
            sched.kube.request("POST", classes, body)
            made.append(names[level])
        sched.start_gpusched()
        # One after another: s0 and s1 take zone 0 in gpusched's own count (the object is never published again),
        # s2 and s3 zone 1; s0 and s2 are the cheapest victims.
        for i, level in enumerate(["low", "mid", "low", "mid"]):
            sched.create_pod(kube_mod.pod(f"s{i}", gpus=2, priority_class=names[level], node_selector=pinned))
            sched.wait_bound([f"s{i}"])
        sched.create_pod(kube_mod.pod("blocked", gpus=4, priority_class=names["blocked"], node_selector=pinned))
        event = sched.wait_event("blocked", "FailedScheduling")
        assert "preemption: 0/" in event["message"], event["message"]
        assert "1 no NUMA zone has 4 nvidia.com/gpu (single-numa-node)." in event["message"], event["message"]
        sched.stays_unbound(["blocked"], 2.0)
        assert all(not sched.pod(f"s{i}")["metadata"].get("deletionTimestamp") for i in range(4))
        sched.delete_pod("blocked")

        sched.create_pod(kube_mod.pod("urgent", gpus=4, priority_class=names["urgent"], node_selector=pinned))
        preempting = sched.wait_event("urgent", "Preempting")
        assert f"on node {node}" in preempting["message"], preempting["message"]
        (urgent,) = sched.wait_bound(["urgent"], timeout=90)
        assert urgent["spec"]["nodeName"] == node
        left = sorted(
            p["metadata"]["name"]
            for p in sched.pods()
            if p["metadata"]["name"].startswith("s") and not p["metadata"].get("deletionTimestamp")
        )
        assert left in (["s0", "s1"], ["s2", "s3"]), f"the victims were not the pods of one zone: {left} stayed"
    finally:
        sched.kube.request("DELETE", f"{NRT}/{node}")
        for name in made:
            sched.kube.request("DELETE", f"{classes}/{name}")
