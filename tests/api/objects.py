"""Raw Kubernetes objects, as the API server returns them, for the tests to parse and schedule."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def pod(
    name: str,
    *,
    cpu: str | None = "1",
    memory: str | None = None,
    gpus: int = 0,
    milli: int | None = None,
    gpu_memory: str | None = None,
    models: str | None = None,
    extra: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    node_name: str = "",
    node_selector: Mapping[str, str] | None = None,
    affinity: list[dict[str, Any]] | None = None,
    tolerations: list[dict[str, Any]] | None = None,
    scheduler_name: str = "gpusched",
    phase: str = "",
    namespace: str = "default",
) -> dict[str, Any]:
    """A one-container pod; ``gpus`` whole GPUs in limits, ``milli`` a shared GPU by annotation."""
    requests: dict[str, str] = {}
    if cpu is not None:
        requests["cpu"] = cpu
    if memory is not None:
        requests["memory"] = memory
    requests.update(extra or {})
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    notes = dict(annotations or {})
    if milli is not None:
        notes["gpusched.io/gpu-milli"] = str(milli)
    if gpu_memory is not None:
        notes["gpusched.io/gpu-memory"] = gpu_memory
    if models is not None:
        notes["gpusched.io/gpu-model"] = models
    spec: dict[str, Any] = {
        "schedulerName": scheduler_name,
        "containers": [{"name": "main", "resources": {"requests": requests, "limits": limits}}],
    }
    if node_name:
        spec["nodeName"] = node_name
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if affinity is not None:
        spec["affinity"] = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": affinity}}
        }
    if tolerations is not None:
        spec["tolerations"] = tolerations
    raw: dict[str, Any] = {
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}", "annotations": notes},
        "spec": spec,
    }
    if labels:
        raw["metadata"]["labels"] = dict(labels)
    if phase:
        raw["status"] = {"phase": phase}
    return raw


def node(
    name: str,
    *,
    cpu: str = "32",
    memory: str = "256Gi",
    pods: str = "110",
    gpus: int = 0,
    gpu_memory_mib: str | None = None,
    product: str | None = None,
    extra: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    unschedulable: bool = False,
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A node with ``gpus`` devices; GPU memory (MiB) and model as NVIDIA's GPU feature discovery labels them."""
    all_labels = {"kubernetes.io/hostname": name, **(labels or {})}
    if gpu_memory_mib is not None:
        all_labels["nvidia.com/gpu.memory"] = gpu_memory_mib
    if product is not None:
        all_labels["nvidia.com/gpu.product"] = product
    allocatable = {"cpu": cpu, "memory": memory, "pods": pods, **(extra or {})}
    if gpus:
        allocatable["nvidia.com/gpu"] = str(gpus)
    spec: dict[str, Any] = {"taints": taints or []}
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "metadata": {"name": name, "labels": all_labels, "annotations": dict(annotations or {})},
        "spec": spec,
        "status": {"allocatable": allocatable, "capacity": dict(allocatable)},
    }
