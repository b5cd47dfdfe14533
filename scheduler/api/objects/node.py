"""A node as the scheduler sees it: allocatable resources, GPU devices, labels and taints.

GPUs come from the ``nvidia.com/gpu`` allocatable count, each with 1000 milli of compute; their memory from the
label ``nvidia.com/gpu.memory`` (MiB, as NVIDIA's GPU feature discovery writes it) and their model from
``nvidia.com/gpu.product``. A node with odd GPU labels is still usable: the odd label is ignored (memory
unknown means no memory constraint on its GPUs) and reported in :attr:`NodeInfo.problems`.

A node whose HAMi device plugin registered its devices (``hami.io/node-nvidia-register``,
``scheduler.api.devices.hami``)
has those instead: HAMi advertises devices x split count as ``nvidia.com/gpu``, so its GPUs are the healthy devices
of the annotation in index order, their memory the smallest device's, their model the label's or else HAMi's. An
unreadable register leaves the node without GPUs (and a problem) rather than with the split count as GPUs.

A node whose device plugin publishes MIG devices as ``nvidia.com/gpu`` (the GPU Operator's single MIG strategy:
label ``nvidia.com/mig.strategy=single``, product ``NVIDIA-A100-SXM4-40GB-MIG-1g.5gb``) has those devices as its
GPU slots, one slot a device, so that pods asking ``nvidia.com/gpu`` are placed on it by count as kube-scheduler
places them; :attr:`NodeInfo.mig_profile` says the slots are MIG devices, each :attr:`NodeInfo.mig_milli` of a GPU
(queues count that), which the device plugin, not gpusched, picks for a pod. Under the mixed strategy the MIG devices
are extended resources (``nvidia.com/mig-1g.10gb``) in ``allocatable``, as any.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from scheduler.api.basics import fields, resources
from scheduler.api.basics.errors import InvalidObject
from scheduler.api.basics.resources import ResourceList
from scheduler.api.devices import gputopo, nvidia_gpus
from scheduler.api.devices import hami as api_hami
from scheduler.api.devices import numa as api_numa
from scheduler.api.objects import selectors

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
    #: The devices HAMi's device plugin registered, GPU ``i`` being ``hami_devices[i]``; empty: no HAMi on the node.
    hami_devices: tuple[api_hami.Device, ...] = ()
    #: The MIG profile (``1g.5gb``) of the devices the node's device plugin publishes as ``nvidia.com/gpu`` (the
    #: single MIG strategy): its GPU slots are those devices; empty: its slots are GPUs.
    mig_profile: str = ""
    #: The NUMA policy Koordinator's node label gives its pods (``scheduler.api.devices.numa``); None: no label.
    numa_policy: api_numa.Policy | None = None

    @property
    def mig_milli(self) -> int:
        """The share of a GPU one of its GPU slots is: 1000, or a MIG device's (``mig_profile``)."""
        if not self.mig_profile:
            return resources.MILLI_PER_GPU
        return nvidia_gpus.profile_milli(self.mig_profile, product=self.gpu_model) or resources.MILLI_PER_GPU


def parse_node(raw: Mapping[str, object]) -> NodeInfo:
    """Parse a Kubernetes node dict. Raises :class:`InvalidObject` only when the node cannot be used at all."""
    meta, spec, status, _, name, obj = fields.object_parts(raw, word="node", kind="node", namespaced=False)
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
    gpu_model = labels.get(LABEL_GPU_PRODUCT, "")
    numa_policy: api_numa.Policy | None = None
    raw_policy = labels.get(api_numa.KOORDINATOR_NODE_POLICY)
    if raw_policy is not None:
        try:
            numa_policy = api_numa.koordinator_policy(
                raw_policy, obj=obj, field=f"metadata.labels[{api_numa.KOORDINATOR_NODE_POLICY}]"
            )
        except InvalidObject as err:
            problems.append(err)  # the node is used, without a NUMA rule of its own
    hami_devices: tuple[api_hami.Device, ...] = ()
    if api_hami.REGISTER in annotations:
        gpus, gpu_memory, gpu_model, hami_devices = _hami(
            annotations[api_hami.REGISTER], gpus, gpu_model, problems, obj
        )
    return NodeInfo(
        name=name,
        allocatable=allocatable,
        gpus=gpus,
        gpu_memory=gpu_memory,
        gpu_model=gpu_model,
        labels=labels,
        annotations=annotations,
        taints=selectors.parse_taints(spec.get("taints"), obj=obj),
        unschedulable=bool(spec.get("unschedulable")),
        problems=tuple(problems),
        hami_devices=hami_devices,
        mig_profile="" if hami_devices else nvidia_gpus.single_strategy_profile(labels),
        numa_policy=numa_policy,
    )


def _hami(
    register: str, advertised: int, label_model: str, problems: list[InvalidObject], obj: str
) -> tuple[int, int, str, tuple[api_hami.Device, ...]]:
    """GPUs, memory each, model and devices from HAMi's register; no GPUs while none is advertised (the device
    plugin is not serving) or the register cannot be read."""
    try:
        devices = api_hami.parse_register(register, obj=obj)
    except InvalidObject as exc:
        problems.append(InvalidObject(f"{exc.reason}; the node's GPUs are not used", obj=obj, field=exc.field))
        return 0, 0, label_model, ()
    usable = tuple(d for d in devices if d.usable)
    left_out = [f"{d.uuid} ({'MIG mode' if d.health else 'unhealthy'})" for d in devices if not d.usable]
    if left_out:
        problems.append(
            InvalidObject(
                f"left out: {', '.join(left_out)}", obj=obj, field=f"metadata.annotations[{api_hami.REGISTER}]"
            )
        )
    if not usable or not advertised:
        return 0, 0, label_model, ()
    return len(usable), min(d.memory_mib for d in usable) * MIB, label_model or usable[0].model, usable


def same_for_scheduling(a: NodeInfo, b: NodeInfo) -> bool:
    """Whether two readings of a node differ in nothing a scheduling decision reads (a heartbeat's status update
    changes none of it: the cache keeps the node's row as it is)."""
    return (
        a.allocatable == b.allocatable
        and a.gpus == b.gpus
        and a.gpu_memory == b.gpu_memory
        and a.gpu_model == b.gpu_model
        and a.labels == b.labels
        and a.annotations.get(gputopo.ANNOTATION) == b.annotations.get(gputopo.ANNOTATION)
        and a.taints == b.taints
        and a.unschedulable == b.unschedulable
    )
