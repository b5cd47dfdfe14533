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
    tolerations: Sequence[dict[str, str]] = (),
) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": device_class}
    if tolerations:
        exactly["tolerations"] = list(tolerations)
    if mode == "All":
        exactly["allocationMode"] = "All"
    else:
        exactly["count"] = count
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    if admin:
        exactly["adminAccess"] = True
    return {"name": name, "exactly": exactly}


def claim_spec(
    *requests: dict[str, Any], same: str = "", same_for: Sequence[str] = (), distinct: str = ""
) -> dict[str, Any]:
    devices: dict[str, Any] = {"requests": list(requests) or [request()]}
    if same:
        devices["constraints"] = [{"matchAttribute": same, **({"requests": list(same_for)} if same_for else {})}]
    if distinct:
        devices.setdefault("constraints", []).append({"distinctAttribute": distinct})
    return {"devices": devices}


def claim(
    name: str,
    *requests: dict[str, Any],
    namespace: str = "default",
    same: str = "",
    distinct: str = "",
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
        "spec": claim_spec(*requests, same=same, distinct=distinct),
        "status": status,
    }


def first_available(name: str, *alternatives: tuple[str, int], **options: Any) -> dict[str, Any]:
    """A claim of one request ``gpus`` with ``firstAvailable`` alternatives (name, GPUs), tried in order."""
    raw = claim(name, **options)
    raw["spec"]["devices"]["requests"] = [
        {
            "name": "gpus",
            "firstAvailable": [{"name": n, "deviceClassName": GPU_CLASS, "count": c} for n, c in alternatives],
        }
    ]
    return raw


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


MIG_CLASS = "mig.nvidia.com"
#: H100 MIG profiles: name -> (memory slices, compute slices, the memory slices a placement may start at).
MIG_PROFILES: dict[str, tuple[int, int, tuple[int, ...]]] = {
    "1g.10gb": (1, 1, (0, 1, 2, 3, 4, 5, 6)),
    "2g.20gb": (2, 2, (0, 2, 4)),
    "3g.40gb": (4, 3, (0, 4)),
    "4g.40gb": (4, 4, (0,)),
    "7g.80gb": (8, 7, (0,)),
}


def device_class(name: str, expression: str) -> dict[str, Any]:
    """A DeviceClass selecting devices by one CEL expression."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def mig_class() -> dict[str, Any]:
    """NVIDIA's ``mig.nvidia.com`` DeviceClass (MIG devices of its driver)."""
    expression = f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'mig'"
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": MIG_CLASS},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def mig_slices(node: str, gpus: int = 8) -> list[dict[str, Any]]:
    """A node's H100s (at most 8) as NVIDIA's driver publishes dynamic MIG (partitionable devices, KEP 4815): a slice
    of counter sets, one per GPU (eight memory slices and seven compute slices), and slices of devices: each full
    GPU, which consumes its whole set, and every MIG placement, which consumes its memory slices and compute
    slices."""
    counter_sets = []
    devices: list[dict[str, Any]] = []
    for i in range(gpus):
        counters = {f"memory-slice-{m}": {"value": "1"} for m in range(8)}
        counters["compute-slices"] = {"value": "7"}
        counter_sets.append({"name": f"gpu-{i}-counters", "counters": counters})
        base = {"uuid": {"string": f"GPU-{node}-{i:04d}"}, "productName": {"string": "NVIDIA H100 80GB HBM3"}}
        root = {PCIE_ROOT: {"string": f"pci0000:{i // 4:02x}"}}
        devices.append(
            {
                "name": f"gpu-{i}",
                "attributes": {"type": {"string": "gpu"}, "index": {"int": i}, **base, **root},
                "capacity": {"memory": {"value": "80Gi"}},
                "consumesCounters": [{"counterSet": f"gpu-{i}-counters", "counters": counters}],
            }
        )
        for profile, (memory, compute, starts) in MIG_PROFILES.items():
            for start in starts:
                used = {f"memory-slice-{m}": {"value": "1"} for m in range(start, start + memory)}
                used["compute-slices"] = {"value": str(compute)}
                devices.append(
                    {
                        "name": f"gpu-{i}-mig-{profile.replace('.', '-')}-{start}",
                        "attributes": {
                            "type": {"string": "mig"},
                            "profile": {"string": profile},
                            "parentIndex": {"int": i},
                            **base,
                            **root,
                        },
                        "capacity": {"memory": {"value": f"{10 * memory}Gi"}},
                        "consumesCounters": [{"counterSet": f"gpu-{i}-counters", "counters": used}],
                    }
                )
    # The API server takes at most 64 devices a slice when they consume counters, and 8 counter sets: the counter
    # sets go in one slice, the devices in slices of four GPUs (15 devices each).
    per_gpu = 1 + sum(len(starts) for _m, _c, starts in MIG_PROFILES.values())
    groups = [devices[i : i + 4 * per_gpu] for i in range(0, len(devices), 4 * per_gpu)]
    pool = {"name": node, "generation": 1, "resourceSliceCount": 1 + len(groups)}
    head = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice"}
    spec = {"driver": DRIVER, "nodeName": node, "pool": pool}
    return [
        {**head, "metadata": {"name": f"{node}-counters"}, "spec": {**spec, "sharedCounters": counter_sets}},
        *(
            {**head, "metadata": {"name": f"{node}-devices-{i}"}, "spec": {**spec, "devices": group}}
            for i, group in enumerate(groups)
        ),
    ]


def mig_request(profile: str, name: str = "mig") -> dict[str, Any]:
    return request(name, device_class=MIG_CLASS, selectors=[f"device.attributes['{DRIVER}'].profile == '{profile}'"])
