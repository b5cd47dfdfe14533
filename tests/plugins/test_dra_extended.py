"""Extended resources backed by DRA: a pod asking ``nvidia.com/gpu`` (or a class's implicit name) where a DeviceClass
maps it and the node has it from no device plugin gets a claim of its own, allocated with the tightest GPUs, its
requests and mappings as kube-scheduler makes them; where a device plugin serves it, no claim; where no class maps
it, the DRA-only node does not fit. The GPUs count in the node's GPU slots like any."""

from __future__ import annotations

from scheduler.api.devices import dra as api_dra
from scheduler.api.devices.dra import ClaimAllocation
from scheduler.api.devices.extended_resources import IMPLICIT_PREFIX, RequestMapping
from scheduler.api.objects import node as api_node
from scheduler.api.objects import pod as api_pod
from scheduler.cache import dra_gpus
from scheduler.framework.interface import Decision
from tests.api import dra_objects as dra
from tests.api import objects
from tests.plugins.test_dra import DraCluster


def mapped_cluster(nodes: tuple[str, ...] = ("a",), **options: int) -> DraCluster:
    """DRA-only GPU nodes, and NVIDIA's class with ``extendedResourceName: nvidia.com/gpu`` (as its chart sets)."""
    cluster = DraCluster(nodes, **options)
    mapped = dra.gpu_class()
    mapped["spec"]["extendedResourceName"] = "nvidia.com/gpu"
    cluster.store.upsert_class(api_dra.parse_device_class(mapped))
    return cluster


def only_claim(decision: Decision) -> ClaimAllocation:
    (claim,) = decision.claims
    return claim


def test_a_pod_asking_the_mapped_resource_gets_a_claim_of_the_class_on_a_dra_only_node() -> None:
    cluster = mapped_cluster(("a",))
    result = cluster.schedule(objects.pod("p", cpu="1", gpus=2))
    assert result.decision is not None, result.status.message
    claim = only_claim(result.decision)
    assert claim.claim == api_dra.extended_claim_key("default", "p") == "default/<extended-resources>.p"
    assert claim.allocation is not None and claim.allocation.node == "a"
    # One request per container, named as kube-scheduler names it (nvidia.com/gpu is the 2nd of cpu, nvidia.com/gpu).
    assert [d.request for d in claim.devices] == ["container-0-request-1"] * 2
    assert [d.device for d in claim.devices] == ["gpu-0", "gpu-1"]
    assert claim.extended is not None
    (request,) = claim.extended.requests
    assert (request.choices[0].device_class, request.choices[0].count) == (dra.GPU_CLASS, 2)
    assert claim.extended.mappings == (RequestMapping("main", "nvidia.com/gpu", "container-0-request-1"),)
    # The devices are the pod's GPUs: its GPU ids, and the node's GPU slots count them.
    assert result.decision.gpu_ids == (0, 1)
    assert cluster.free_devices("a").count(1000.0) == 6
    # The next pod gets other devices (the first decision's are assumed until its claim is written).
    second = cluster.schedule(objects.pod("q", cpu="1", gpus=2))
    assert second.decision is not None
    assert [d.device for d in only_claim(second.decision).devices] == ["gpu-2", "gpu-3"]
    # A failed binding frees them.
    cluster.scheduler.bind_failed("default/q")
    again = cluster.schedule(objects.pod("r", cpu="1", gpus=2))
    assert again.decision is not None and [d.device for d in only_claim(again.decision).devices] == ["gpu-2", "gpu-3"]


def test_never_more_gpus_than_the_node_publishes() -> None:
    cluster = mapped_cluster(("a",), gpus=2)
    assert cluster.schedule(objects.pod("p", gpus=2)).decision is not None
    result = cluster.schedule(objects.pod("q", gpus=1))
    assert result.decision is None
    assert "Insufficient nvidia.com/gpu" in result.status.message


def test_without_a_class_mapping_the_dra_only_node_does_not_fit_and_a_device_plugin_node_needs_no_claim() -> None:
    cluster = DraCluster(("a",))
    result = cluster.schedule(objects.pod("bare", gpus=1))
    assert result.decision is None and "Insufficient nvidia.com/gpu" in result.status.message
    # A node whose device plugin serves nvidia.com/gpu takes the pod with no claim, mapped or not.
    mixed = mapped_cluster(())
    mixed.cache.upsert_node(api_node.parse_node(objects.node("b", gpus=8)))
    result = mixed.schedule(objects.pod("plugin", gpus=1))
    assert result.decision is not None and result.decision.node == "b"
    assert result.decision.claims == () and result.decision.gpu_ids == (0,)


def test_the_implicit_name_of_a_class_counts_as_gpus_and_is_allocated_through_a_claim() -> None:
    cluster = mapped_cluster(("a",))
    raw = objects.pod("p", cpu="1", extra={IMPLICIT_PREFIX + dra.GPU_CLASS: "3"})
    pod = dra_gpus.extended_gpu_request(cluster.store, api_pod.parse_pod(raw))
    assert pod.gpu.count == 3  # the operator's feed reads the pod so: queues, limits and FGD count them
    result = cluster.scheduler.schedule(pod)
    assert result.decision is not None, result.status.message
    claim = only_claim(result.decision)
    assert [d.device for d in claim.devices] == ["gpu-0", "gpu-1", "gpu-2"]
    assert claim.extended is not None and claim.extended.mappings == (
        RequestMapping("main", IMPLICIT_PREFIX + dra.GPU_CLASS, "container-0-request-1"),
    )
    assert result.decision.gpu_ids == (0, 1, 2)


def test_a_claim_made_by_an_earlier_decision_is_used_again() -> None:
    # The binding failed after the claim was written (or gpusched restarted between the two): the pod's own claim,
    # allocated and reserved for it, takes the pod back to its node with its devices.
    cluster = mapped_cluster(("a", "b"))
    raw = objects.pod("p", cpu="1", gpus=1)
    made = dra.claim(
        "p-extended-resources-x1", dra.request(count=1), owner="p", allocation=dra.allocation("b", "gpu-5")
    )
    made["metadata"]["annotations"] = {api_dra.EXTENDED_CLAIM_ANNOTATION: "true"}
    made["spec"]["devices"]["requests"][0]["name"] = "container-0-request-1"
    made["status"]["allocation"]["devices"]["results"][0]["request"] = "container-0-request-1"
    cluster.claim(made)
    result = cluster.schedule(raw)
    assert result.decision is not None and result.decision.node == "b"
    claim = only_claim(result.decision)
    assert claim.claim == "default/p-extended-resources-x1" and claim.allocation is None  # reserved only
    assert claim.extended is not None
    assert claim.extended.mappings == (RequestMapping("main", "nvidia.com/gpu", "container-0-request-1"),)
    assert result.decision.gpu_ids == (5,)


def test_of_two_classes_mapping_one_resource_the_newer_is_used_then_the_first_by_name() -> None:
    cluster = mapped_cluster(("a",))
    store = cluster.store
    mig = dra.mig_class()
    mig["spec"]["extendedResourceName"] = "nvidia.com/gpu"
    mig["metadata"]["creationTimestamp"] = "2026-11-28T10:00:00Z"
    store.upsert_class(api_dra.parse_device_class(mig))
    found = store.extended_resource_class("nvidia.com/gpu")
    assert found is not None and found.name == dra.MIG_CLASS  # the GPU class has no timestamp here: older
    same_time = dra.gpu_class("a-first")
    same_time["spec"]["extendedResourceName"] = "nvidia.com/gpu"
    same_time["metadata"]["creationTimestamp"] = "2026-11-28T10:00:00Z"
    store.upsert_class(api_dra.parse_device_class(same_time))
    found = store.extended_resource_class("nvidia.com/gpu")
    assert found is not None and found.name == "a-first"


def test_nvidia_com_gpu_mapped_to_a_mig_class_is_mig_devices_not_gpu_slots() -> None:
    # NVIDIA's demo class mig-1g-12gb.gpu.nvidia.com maps nvidia.com/gpu to 1g.12gb MIG devices: the pod takes one
    # from DRA on a node whose GPUs are in MIG mode (no whole GPU published, so no GPU slots there).
    cluster = DraCluster(("mig",), gpus=0)
    devices = [
        {
            "name": f"gpu-0-mig-{m}",
            "attributes": {"type": {"string": "mig"}, "profile": {"string": "1g.12gb"}},
            "capacity": {"memory": {"value": "12Gi"}},
        }
        for m in range(2)
    ]
    cluster.slice(dra.gpu_slice("mig", 0, extra=devices))
    mig = dra.mig_class()
    mig["spec"]["extendedResourceName"] = "nvidia.com/gpu"
    cluster.store.upsert_class(api_dra.parse_device_class(mig))
    pod = dra_gpus.extended_gpu_request(cluster.store, api_pod.parse_pod(objects.pod("p", gpus=1)))
    assert pod.gpu.count == 0  # not a whole GPU
    result = cluster.scheduler.schedule(pod)
    assert result.decision is not None, result.status.message
    assert [d.device for d in only_claim(result.decision).devices] == ["gpu-0-mig-0"]
    assert result.decision.gpu_ids == ()
    other = dra_gpus.extended_gpu_request(cluster.store, api_pod.parse_pod(objects.pod("q", gpus=2)))
    assert cluster.scheduler.schedule(other).decision is None  # one MIG device is left
