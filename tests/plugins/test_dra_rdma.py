"""A GPU and an RDMA NIC of another driver in one claim, under one PCIe root (GPUDirect RDMA, Koordinator v1.6's
joint allocation done the DRA way): a ``matchAttribute`` constraint on the standard ``resource.kubernetes.io/pcieRoot``
across the two requests. The NIC driver publishes its devices in a slice of its own (as google's dranet publishes
RDMA NICs), with the same standard attribute as NVIDIA's driver."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.api.crds import podgroup as api_podgroup
from scheduler.api.devices import dra as api_dra
from scheduler.api.devices import numa
from scheduler.core import gang
from tests.api import dra_objects as dra
from tests.plugins.test_dra import PLUGINS, DraCluster, pod_with

NIC_DRIVER = "dra.net"
NIC_CLASS = "rdma-nic"


def nic_slice(node: str, roots: int = 2) -> dict[str, Any]:
    """One RDMA NIC per PCIe root (``nic-<root>``), beside the node's GPUs."""
    devices = [
        {
            "name": f"nic-{r}",
            "attributes": {
                "rdma": {"bool": True},
                "ifName": {"string": f"eth{r + 1}"},
                dra.PCIE_ROOT: {"string": f"pci0000:{r:02x}"},
            },
        }
        for r in range(roots)
    ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{NIC_DRIVER}"},
        "spec": {
            "driver": NIC_DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def nic_class() -> dict[str, Any]:
    return dra.device_class(NIC_CLASS, f"device.driver == '{NIC_DRIVER}' && device.attributes['{NIC_DRIVER}'].rdma")


def rdma_cluster(nodes: tuple[str, ...] = ("a",), *, plugins: tuple[str, ...] = PLUGINS) -> DraCluster:
    cluster = DraCluster(nodes, plugins=plugins)
    cluster.store.upsert_class(api_dra.parse_device_class(nic_class()))
    for node in nodes:
        cluster.slice(nic_slice(node))
    return cluster


def gpu_and_nic(name: str, gpus: int) -> dict[str, Any]:
    raw = dra.claim(name)
    requests = (dra.request("gpu", gpus), dra.request("nic", 1, device_class=NIC_CLASS))
    raw["spec"] = dra.claim_spec(*requests, same=dra.PCIE_ROOT, same_for=("gpu", "nic"))
    return raw


def root(device: str) -> int:
    """The PCIe root of ``gpu-<i>`` (four a root) or ``nic-<r>``."""
    kind, number = device.split("-")
    return int(number) // 4 if kind == "gpu" else int(number)


def test_the_gpu_and_the_nic_come_from_one_pcie_root_and_the_claim_backtracks_to_find_one() -> None:
    cluster = rdma_cluster()
    # Three GPUs of the first root taken: best fit would give a GPU there; its NIC then goes with it.
    cluster.claim(dra.claim("three", dra.request(count=3)))
    cluster.devices(pod_with("p3", "three"))
    cluster.claim(gpu_and_nic("first", 1))
    node, devices, gpu_ids = cluster.devices(pod_with("p-first", "first"))
    assert node == "a" and devices == ["gpu-3", "nic-0"] and gpu_ids == (3,)
    # The three GPUs are free again: best fit for two GPUs is the first root (3 free against 4), but its NIC is
    # taken, so the claim goes back and takes the second root's GPUs and NIC, never a GPU of one root with a NIC of
    # the other.
    cluster.scheduler.bind_failed("default/p3")
    assert cluster.free_devices("a").count(1000.0) == 7
    cluster.claim(gpu_and_nic("second", 2))
    _, devices, _ = cluster.devices(pod_with("p-second", "second"))
    assert sorted(devices) == ["gpu-4", "gpu-5", "nic-1"]
    assert len({root(d) for d in devices}) == 1
    # No NIC left: a third GPU+NIC claim fits nowhere although GPUs are free.
    cluster.claim(gpu_and_nic("third", 1))
    result = cluster.schedule(pod_with("p-third", "third"))
    assert result.decision is None and "cannot allocate all claims" in result.status.message


def test_a_gang_of_gpu_and_nic_pods_is_placed_whole_one_root_each() -> None:
    cluster = rdma_cluster(("a", "b"), plugins=(*PLUGINS, "gang"))
    group = api_podgroup.parse_podgroup({"metadata": {"name": "g", "namespace": "default"}, "spec": {"minMember": 4}})
    for i in range(5):
        cluster.claim(gpu_and_nic(f"m-{i}", 4))
    members = [cluster.pod(pod_with(f"m-{i}", f"m-{i}")) for i in range(5)]
    # Five members of 4 GPUs and a NIC: two nodes of two roots hold four; all or nothing.
    result = gang.place_gang(cluster.scheduler, group, members)
    assert not result.status.ok
    assert not cluster.store.taken() and not cluster.cache.snapshot().device_picks
    result = gang.place_gang(cluster.scheduler, group, members[:4])
    assert result.status.ok, result.status.message
    seen: set[tuple[str, str]] = set()
    for decision in result.decisions:
        devices = [d.device for c in decision.claims for d in c.devices]
        assert len(devices) == 5 and len({root(d) for d in devices}) == 1, devices
        for device in devices:
            assert (decision.node, device) not in seen
            seen.add((decision.node, device))
    assert len(seen) == 20


def numa_nic_slice(node: str) -> dict[str, Any]:
    """The RDMA NICs of :func:`nic_slice`, each saying its NUMA node (NIC ``r`` under PCIe root ``r``, on NUMA node
    ``r``); the GPUs say only their PCIe root."""
    raw = nic_slice(node)
    for r, device in enumerate(raw["spec"]["devices"]):
        device["attributes"]["numaNode"] = {"int": r}
    return raw


def gpu_plus_nic(name: str) -> dict[str, Any]:
    """A GPU and an RDMA NIC, without a ``matchAttribute`` constraint (the user did not say they go together)."""
    raw = dra.claim(name)
    raw["spec"] = dra.claim_spec(dra.request("gpu", 1), dra.request("nic", 1, device_class=NIC_CLASS))
    return raw


@pytest.mark.parametrize("policy", [None, numa.Policy.SINGLE_NUMA_NODE])
def test_under_a_numa_policy_the_gpu_and_the_nic_come_from_one_zone(policy: numa.Policy | None) -> None:
    cluster = DraCluster(("a",))
    cluster.store.upsert_class(api_dra.parse_device_class(nic_class()))
    cluster.slice(numa_nic_slice("a"))
    if policy is not None:
        capacity = {"cpu": 32_000}
        zones = tuple(numa.Zone(f"node-{i}", i, capacity, capacity, capacity) for i in range(2))
        cluster.cache.numa.upsert(numa.NodeZones("a", policy, numa.Scope.CONTAINER, zones), now=0.0)
    # Another pod holds zone 0's NIC.
    cluster.claim(dra.claim("nic-only", dra.request("nic", 1, device_class=NIC_CLASS)))
    assert cluster.devices(pod_with("p-nic", "nic-only"))[1] == ["nic-0"]
    cluster.claim(gpu_plus_nic("both"))
    _, devices, gpu_ids = cluster.devices(pod_with("p-both", "both"))
    if policy is None:
        assert devices == ["gpu-0", "nic-1"]  # no NUMA rule on the node: the first GPU, the NIC that is left
    else:
        assert devices == ["gpu-4", "nic-1"] and gpu_ids == (4,)  # both under zone 1
