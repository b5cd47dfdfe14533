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
