"""NVIDIA's own DRA examples as a user applies them, for the side-by-side test (test_nvidia_specs_e2e.py).

Source: NVIDIA/k8s-dra-driver-gpu (Apache-2.0), read through the project's search tool and written out again here
as the same objects (names, classes, counts, containers, tolerations), not copied:

- ``demo/specs/quickstart/gpu-test-count.yaml`` (commit 4066752a1c843deef5b6afa97df3f4526e8f32eb): one pod, one
  container, a claim template of two ``gpu.nvidia.com`` GPUs;
- ``demo/specs/quickstart/gpu-test7.yaml`` (same commit): one pod, two containers, each its own claim from a
  one-GPU template;
- ``demo/specs/extended-resources/gpu-full.yaml`` (commit c9ccbbeedb75ec5ff426e92125692d64f350113b): a pod asking
  ``nvidia.com/gpu: 1`` with no claim, served by the chart's ``gpu.nvidia.com`` class, which that file says the
  chart ships with ``extendedResourceName: nvidia.com/gpu``;
- ``demo/specs/extended-resources/mig-1g-12gb.yaml`` (commit 5b4e8b1b6ac478505ebfb991236127ae1e01f421): the class
  ``mig-1g-12gb.gpu.nvidia.com`` (MIG devices of profile 1g.12gb, ``extendedResourceName: nvidia.com/gpu``) and a
  pod asking ``nvidia.com/gpu: 1``, on two GH200s split into seven 1g.12gb instances each.

The chart's DeviceClasses (``gpu.nvidia.com``: whole GPUs, ``mig.nvidia.com``: MIG devices) are those of
tests/api/dra_objects.py. Changed: ``schedulerName``; the namespaces (``gpu-test1`` of both quickstart files is
``gpu-test-count`` and ``gpu-test7`` here, so that they can be applied together, and each ends in the scheduler's
name, so that both schedulers' pods can be told apart); the v1beta1 templates are written in ``resource.k8s.io/v1``
(``exactly``), as the API server serves them today; the containers' commands are left out (kwok runs nothing).
"""

from __future__ import annotations

from typing import Any

from tests.api import dra_objects as dra

UBUNTU = "ubuntu:22.04"
CUDA_SAMPLE = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0"
TOLERATE_GPU = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
MIG_1G_CLASS = "mig-1g-12gb.gpu.nvidia.com"


def chart_classes() -> list[dict[str, Any]]:
    """The DeviceClasses the driver's Helm chart installs, ``gpu.nvidia.com`` mapping ``nvidia.com/gpu``."""
    gpu = dra.gpu_class()
    gpu["spec"]["extendedResourceName"] = "nvidia.com/gpu"
    return [gpu, dra.mig_class()]


def mig_1g_class() -> dict[str, Any]:
    """The class of demo/specs/extended-resources/mig-1g-12gb.yaml."""
    expression = (
        f"device.driver == '{dra.DRIVER}' && device.attributes['{dra.DRIVER}'].type == 'mig' && "
        f"device.attributes['{dra.DRIVER}'].profile == '1g.12gb'"
    )
    mig = dra.device_class(MIG_1G_CLASS, expression)
    mig["spec"]["extendedResourceName"] = "nvidia.com/gpu"
    return mig


def static_mig_slice(node: str, gpus: int = 2, per_gpu: int = 7) -> dict[str, Any]:
    """A node whose GPUs are in MIG mode (static MIG, as mig-parted leaves them), published as the driver publishes
    MIG devices: ``type: mig``, the profile, the parent GPU; the parents are not published as whole GPUs."""
    devices = [
        {
            "name": f"gpu-{g}-mig-1g12gb-{m}",
            "attributes": {
                "type": {"string": "mig"},
                "profile": {"string": "1g.12gb"},
                "parentIndex": {"int": g},
                "index": {"int": m},
                "uuid": {"string": f"MIG-{node}-{g}-{m:04d}"},
                "productName": {"string": "NVIDIA GH200 96GB HBM3"},
                dra.PCIE_ROOT: {"string": f"pci0000:{g:02x}"},
            },
            "capacity": {"memory": {"value": "12Gi"}},
        }
        for g in range(gpus)
        for m in range(per_gpu)
    ]
    return dra.gpu_slice(node, 0, name=f"{node}-mig", extra=devices)


def _pod(namespace: str, name: str, scheduler: str, containers: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"namespace": namespace, "name": name, "labels": {"app": "pod"}},
        "spec": {"schedulerName": scheduler, "containers": containers, "tolerations": TOLERATE_GPU, **spec},
    }


def _template(namespace: str, name: str, count: int = 1) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": dra.GPU_CLASS}
    if count != 1:
        exactly["count"] = count
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"namespace": namespace, "name": name},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}},
    }


def workloads(scheduler: str) -> dict[str, list[dict[str, Any]]]:
    """Namespace -> its objects in the order they are applied, for pods of ``scheduler``."""
    count, seven = f"gpu-test-count-{scheduler}", f"gpu-test7-{scheduler}"
    full, mig = f"extended-resource-gpu-full-{scheduler}", f"extended-resource-mig-1g12gb-{scheduler}"
    return {
        count: [
            _template(count, "double-gpu", 2),
            _pod(
                count,
                "gpu-pod",
                scheduler,
                [{"name": "ctr0", "image": UBUNTU, "resources": {"claims": [{"name": "twogpus"}]}}],
                resourceClaims=[{"name": "twogpus", "resourceClaimTemplateName": "double-gpu"}],
            ),
        ],
        seven: [
            _template(seven, "single-gpu"),
            _pod(
                seven,
                "gpu-pod",
                scheduler,
                [
                    {"name": "ctr0", "image": UBUNTU, "resources": {"claims": [{"name": "gpu0"}]}},
                    {"name": "ctr1", "image": UBUNTU, "resources": {"claims": [{"name": "gpu1"}]}},
                ],
                resourceClaims=[
                    {"name": "gpu0", "resourceClaimTemplateName": "single-gpu"},
                    {"name": "gpu1", "resourceClaimTemplateName": "single-gpu"},
                ],
            ),
        ],
        full: [
            _pod(
                full,
                "gpu-full-pod",
                scheduler,
                [{"name": "cuda-container", "image": CUDA_SAMPLE, "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
                restartPolicy="Never",
            )
        ],
        mig: [
            _pod(
                mig,
                "mig-1g12gb-pod",
                scheduler,
                [{"name": "cuda-container", "image": CUDA_SAMPLE, "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
                restartPolicy="Never",
            )
        ],
    }
