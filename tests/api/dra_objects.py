"""Raw DRA objects (``resource.k8s.io/v1``) as the API server returns them, for the tests: a GPU node's
ResourceSlice as NVIDIA's DRA driver publishes it, the driver's DeviceClass, claims and claim templates."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

GPU_CLASS = "gpu.nvidia.com"
DRIVER = "gpu.nvidia.com"
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"


def gpu_class(name: str = GPU_CLASS, expression: str = "") -> dict[str, Any]:
    """NVIDIA's ``gpu.nvidia.com`` DeviceClass (whole GPUs of its driver), or another with ``expression`` too."""
    selectors = [{"cel": {"expression": f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'gpu'"}}]
    if expression:
        selectors.append({"cel": {"expression": expression}})
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": selectors},
    }


def gpu_slice(
    node: str,
    gpus: int = 8,
    *,
    per_root: int = 4,
    product: str = "NVIDIA H100 80GB HBM3",
    memory: str = "80Gi",
    generation: int = 1,
    name: str = "",
    extra: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """A node's GPUs as NVIDIA's DRA driver publishes them: ``gpu-<minor>``, PCIe roots of ``per_root`` GPUs."""
    devices = [
        {
            "name": f"gpu-{i}",
            "attributes": {
                "type": {"string": "gpu"},
                "uuid": {"string": f"GPU-{node}-{i:04d}"},
                "productName": {"string": product},
                "architecture": {"string": "Hopper"},
                "driverVersion": {"version": "570.86.15"},
                "cudaComputeCapability": {"version": "9.0.0"},
                "pcieBusID": {"string": f"0000:{0x18 + i:02x}:00.0"},
                PCIE_ROOT: {"string": f"pci0000:{i // per_root:02x}"},
            },
            "capacity": {"memory": {"value": memory}},
        }
        for i in range(gpus)
    ]
    devices.extend(extra)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name or f"{node}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def request(
    name: str = "gpus",
    count: int = 1,
    *,
    device_class: str = GPU_CLASS,
    selectors: Sequence[str] = (),
    mode: str = "",
    admin: bool = False,
) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": device_class}
    if mode == "All":
        exactly["allocationMode"] = "All"
    else:
        exactly["count"] = count
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    if admin:
        exactly["adminAccess"] = True
    return {"name": name, "exactly": exactly}


def claim_spec(*requests: dict[str, Any], same: str = "", same_for: Sequence[str] = ()) -> dict[str, Any]:
    devices: dict[str, Any] = {"requests": list(requests) or [request()]}
    if same:
        devices["constraints"] = [{"matchAttribute": same, **({"requests": list(same_for)} if same_for else {})}]
    return {"devices": devices}


def claim(
    name: str,
    *requests: dict[str, Any],
    namespace: str = "default",
    same: str = "",
    owner: str = "",
    allocation: dict[str, Any] | None = None,
    reserved_for: Sequence[str] = (),
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"uid-claim-{name}", "resourceVersion": "1"}
    if owner:
        meta["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Pod", "name": owner, "uid": f"uid-{owner}", "controller": True}
        ]
    status: dict[str, Any] = {}
    if allocation is not None:
        status["allocation"] = allocation
    if reserved_for:
        status["reservedFor"] = [{"resource": "pods", "name": p, "uid": f"uid-{p}"} for p in reserved_for]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": meta,
        "spec": claim_spec(*requests, same=same),
        "status": status,
    }


def allocation(node: str, *devices: str, request_name: str = "gpus") -> dict[str, Any]:
    return {
        "devices": {
            "results": [{"request": request_name, "driver": DRIVER, "pool": node, "device": d} for d in devices]
        },
        "nodeSelector": {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
        },
    }


def with_claims(raw: dict[str, Any], *claims: str, templates: dict[str, str] | None = None) -> dict[str, Any]:
    """A pod naming existing claims (``claims``) and claims made from templates (entry name -> the claim made)."""
    entries: list[dict[str, Any]] = [{"name": f"c{i}", "resourceClaimName": c} for i, c in enumerate(claims)]
    statuses = []
    for entry, made in (templates or {}).items():
        entries.append({"name": entry, "resourceClaimTemplateName": f"{entry}-template"})
        if made:
            statuses.append({"name": entry, "resourceClaimName": made})
    raw["spec"]["resourceClaims"] = entries
    raw["metadata"].setdefault("uid", f"uid-{raw['metadata']['name']}")
    if statuses:
        raw.setdefault("status", {})["resourceClaimStatuses"] = statuses
    return raw
