"""HAMi's device-plugin protocol on a real API server: pods bound by ``gpusched run`` to a node whose HAMi device
plugin registered its GPUs carry the annotations HAMi's ``Allocate`` reads, naming the UUIDs of the GPUs gpusched
chose (docs/devices.md).

The node is a kwok node with ``hami.io/node-nvidia-register`` as HAMi v2.6's device plugin writes it (JSON, four
GPUs split ten ways, so ``nvidia.com/gpu`` is 40); the pods ask in HAMi's resource names and in gpusched's.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from scheduler.api.devices import hami
from tests.api import hami_annotations
from tests.e2e import kube as kube_mod
from tests.e2e.kube import Scenario, gpu_ids_of, node_of

pytestmark = pytest.mark.e2e

NODE = "hami-0"
UUIDS = [f"GPU-{i}d1f3a2b-5c87-89ac-b1a6-7b53aa24b0ec" for i in range(4)]
MEMORY_MIB = 81920


def hami_node() -> dict[str, Any]:
    node = kube_mod.gpu_node(NODE, gpus=40, product="NVIDIA-A100-SXM4-80GB")
    # A node HAMi serves: no gpusched topology annotation nor memory label, only what the device plugin writes.
    del node["metadata"]["annotations"][kube_mod.ANNOTATION_GPU_TOPOLOGY]
    del node["metadata"]["labels"][kube_mod.LABEL_GPU_MEMORY]
    register = [
        {"id": uuid, **({"index": i} if i else {}), "count": 10, "devmem": MEMORY_MIB, "devcore": 100}
        | {"type": "NVIDIA-NVIDIA A100-SXM4-80GB", "mode": "hami-core", "health": True}
        for i, uuid in enumerate(UUIDS)
    ]
    node["metadata"]["annotations"][hami.REGISTER] = json.dumps(register, separators=(",", ":"))
    return node


def with_hami_resources(manifest: dict[str, Any], **per_gpu: str) -> dict[str, Any]:
    resources = manifest["spec"]["containers"][0]["resources"]
    for name, value in per_gpu.items():
        # Extended resources: the API server wants the request equal to the limit.
        resources["requests"][name] = resources["limits"][name] = value
    return manifest


def allocated(p: dict[str, Any]) -> tuple[tuple[hami.ContainerDevice, ...], ...]:
    annotations = p["metadata"].get("annotations") or {}
    assert annotations.get(hami.TO_ALLOCATE) == annotations.get(hami.ALLOCATED), annotations
    return hami_annotations.decode_pod_devices(annotations.get(hami.ALLOCATED, ""))


def test_bound_pods_name_the_uuids_of_the_gpus_gpusched_chose(sched: Scenario) -> None:
    sched.add_node(hami_node())
    sched.start_gpusched()
    pods = {
        "whole-2": kube_mod.pod("whole-2", gpus=2),
        "whole-1": kube_mod.pod("whole-1", gpus=1),
        "cores-30": with_hami_resources(
            kube_mod.pod("cores-30", gpus=1), **{hami.RESOURCE_CORES: "30", hami.RESOURCE_MEMORY: "3000"}
        ),
        "milli-250": kube_mod.pod("milli-250", gpus=1, gpu_milli=250, gpu_memory="4Gi"),
    }
    for manifest in pods.values():
        sched.create_pod(manifest)
    bound = {p["metadata"]["name"]: p for p in sched.wait_bound(pods, timeout=90)}

    want = {"whole-2": (2, MEMORY_MIB, 100), "whole-1": (1, MEMORY_MIB, 100)}
    want |= {"cores-30": (1, 3000, 30), "milli-250": (1, 4096, 25)}
    for name, (count, memory, cores) in want.items():
        p = bound[name]
        assert node_of(p) == NODE
        annotations = p["metadata"]["annotations"]
        assert annotations[hami.ASSIGNED_NODE] == NODE
        assert annotations[hami.BIND_PHASE] == hami.BIND_ALLOCATING
        assert annotations[hami.BIND_TIME].isdigit() and annotations[hami.ASSIGNED_TIME] == annotations[hami.BIND_TIME]
        (devices,) = allocated(p)  # one container
        ids = gpu_ids_of(p)
        assert len(ids) == count, f"{name}: gpu-ids {ids}"
        # gpusched's GPU i is the register's i-th device: the same GPUs, by UUID, as gpusched.io/gpu-ids says.
        assert [d.uuid for d in devices] == [UUIDS[i] for i in ids], f"{name}: {devices} vs gpu-ids {ids}"
        assert all((d.type, d.memory_mib, d.cores) == ("NVIDIA", memory, cores) for d in devices), (name, devices)

    # Whole GPUs are nobody else's: no UUID of a whole-GPU pod is given to another pod.
    whole = [d.uuid for name in ("whole-2", "whole-1") for (devs,) in [allocated(bound[name])] for d in devs]
    shared = [d.uuid for name in ("cores-30", "milli-250") for (devs,) in [allocated(bound[name])] for d in devs]
    assert len(set(whole)) == 3 and not set(whole) & set(shared), (whole, shared)


def test_a_share_gpusched_does_not_honour_is_refused_not_misplaced(sched: Scenario) -> None:
    sched.add_node(hami_node())
    sched.start_gpusched()
    # A memory share without a compute share: HAMi leaves compute unreserved; gpusched needs one to pack GPUs.
    sched.create_pod(with_hami_resources(kube_mod.pod("mem-only", gpus=1), **{hami.RESOURCE_MEMORY: "3000"}))
    sched.create_pod(kube_mod.pod("fine", gpus=1))
    sched.wait_bound(["fine"], timeout=60)
    event = sched.wait_event("mem-only", reason="InvalidObject")
    assert hami.RESOURCE_MEMORY in event["message"], event["message"]
    sched.stays_unbound(["mem-only"], seconds=3)
