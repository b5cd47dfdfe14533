"""A node as the scheduler sees it: allocatable resources, GPU devices, labels and taints.

GPUs come from the ``nvidia.com/gpu`` allocatable count, each with 1000 milli of compute; their memory from the
label ``nvidia.com/gpu.memory`` (MiB, as NVIDIA's GPU feature discovery writes it) and their model from
``nvidia.com/gpu.product``. A node with odd GPU labels is still usable: the odd label is ignored (memory
unknown means no memory constraint on its GPUs) and reported in :attr:`NodeInfo.problems`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from scheduler.api import resources, selectors
from scheduler.api.errors import InvalidObject
from scheduler.api.resources import ResourceList

LABEL_GPU_PRODUCT = "nvidia.com/gpu.product"
LABEL_GPU_MEMORY = "nvidia.com/gpu.memory"
MIB = 2**20


@dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    #: Allocatable resources in scheduler units, without ``nvidia.com/gpu`` (see ``gpus``).
    allocatable: ResourceList = field(default_factory=dict)
    gpus: int = 0
    #: Device memory of each GPU in bytes (0: unknown).
    gpu_memory: int = 0
    gpu_model: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[selectors.Taint, ...] = ()
    unschedulable: bool = False
    problems: tuple[InvalidObject, ...] = ()


def parse_node(raw: Mapping[str, object]) -> NodeInfo:
    """Parse a Kubernetes node dict. Raises :class:`InvalidObject` only when the node cannot be used at all."""
    meta = raw.get("metadata") or {}
    spec = raw.get("spec") or {}
    status = raw.get("status") or {}
    if not isinstance(meta, Mapping) or not isinstance(spec, Mapping) or not isinstance(status, Mapping):
        raise InvalidObject("metadata, spec and status must be maps", obj="node")
    name = str(meta.get("name") or "")
    obj = f"node {name}"
    if not name:
        raise InvalidObject("a node needs a name", obj=obj, field="metadata.name")
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    annotations = {str(k): str(v) for k, v in (meta.get("annotations") or {}).items()}
    raw_alloc = status.get("allocatable")
    if raw_alloc is None:
        raw_alloc = status.get("capacity")
    allocatable = resources.parse_resource_list(raw_alloc, obj=obj, field="status.allocatable")
    gpus = allocatable.pop(resources.GPU, 0)
    problems: list[InvalidObject] = []
    gpu_memory = 0
    raw_memory = labels.get(LABEL_GPU_MEMORY)
    if raw_memory is not None:
        try:
            gpu_memory = int(raw_memory) * MIB
            if gpu_memory < 0:
                raise ValueError
        except ValueError:
            problems.append(
                InvalidObject(
                    f"{raw_memory!r} is not a whole number of MiB; GPU memory is treated as unknown",
                    obj=obj,
                    field=f"metadata.labels[{LABEL_GPU_MEMORY}]",
                )
            )
            gpu_memory = 0
    return NodeInfo(
        name=name,
        allocatable=allocatable,
        gpus=gpus,
        gpu_memory=gpu_memory,
        gpu_model=labels.get(LABEL_GPU_PRODUCT, ""),
        labels=labels,
        annotations=annotations,
        taints=selectors.parse_taints(spec.get("taints"), obj=obj),
        unschedulable=bool(spec.get("unschedulable")),
        problems=tuple(problems),
    )
