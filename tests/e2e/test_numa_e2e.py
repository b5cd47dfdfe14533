"""NUMA through ``gpusched run`` as shipped (its ServiceAccount and RBAC): NodeResourceTopology objects, as NFD's
topology-updater publishes them, decide where a pod whose node's kubelet runs ``single-numa-node`` may go.

The CRD comes from its own Go module (``fetch-workload-crds.sh``); this module plays the agent and publishes each
node's zones once, then never again (as kwok's nodes leave them): the scheduler's own count must keep a second pod
off a zone the frozen object still shows free.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import kube as kube_mod
from tests.e2e.kube import Kube, Scenario
from tests.e2e.test_workload_crds_e2e import _crds_dir

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


def _nrt(node: str, free: Sequence[int], *, policy: str = "single-numa-node") -> dict[str, Any]:
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
            {"name": "topologyManagerScope", "value": "container"},
        ],
        "zones": zones,
    }


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
