"""HAMi's device-plugin protocol: a node's register annotation in, a pod's allocation annotations out.

HAMi (CNCF, Project-HAMi/HAMi) ships a device plugin for NVIDIA GPUs that does not choose devices itself: when the
kubelet calls its ``Allocate``, it finds the pod being started on its node and hands the container the devices
that pod's annotations name, by UUID, with the memory and compute limits written there. gpusched writes those
annotations with the binding, so that with HAMi's device plugin on the node the GPUs gpusched chose are the ones
the container gets, whole or shared. This module is the protocol only (parsing and encoding, no I/O); the binder
(``scheduler.k8s.ports.binder``) writes what :func:`pod_annotations` returns.

The protocol as implemented here is HAMi v2.6.1 (chart appVersion 2.6.1, commit f23d1f5d of Project-HAMi/HAMi):

- Node: the device plugin publishes its devices in the node annotation ``hami.io/node-nvidia-register``
  (``pkg/device/nvidia/device.go``: ``RegisterAnnos``). Two encodings exist, both read here: a JSON list of
  ``DeviceInfo`` (``pkg/util/types.go``: keys ``id index count devmem devcore type numa mode health``, each left
  out when zero or false: ``MarshalNodeDevices`` in ``pkg/util/util.go``, what current device plugins write),
  and the older text form ``UUID,count,devmem,devcore,type,numa,health:`` per device, with ``,index,mode`` added
  in later versions (``EncodeNodeDevices`` / ``DecodeNodeDevices`` in ``pkg/util/util.go``). ``count`` is the
  split count (how many containers may share the device), ``devmem`` the device memory in MiB after HAMi's memory
  scaling, ``devcore`` the compute in percent (100 per device), ``type`` ``NVIDIA-`` and NVML's device name.
- Pod: ``hami.io/vgpu-devices-to-allocate`` and ``hami.io/vgpu-devices-allocated`` (``util.InRequestDevices`` and
  ``util.SupportDevices`` for type ``NVIDIA``, set in ``InitNvidiaDevice``) hold one entry per container of
  ``spec.containers`` in order, each ``;``-terminated, made of ``UUID,NVIDIA,memMiB,corePercent:`` per device
  (``EncodePodSingleDevice`` / ``EncodeContainerDevices`` in ``pkg/util/util.go``). The device plugin
  (``pkg/device-plugin/nvidiadevice/nvinternal/plugin/server.go``, ``Allocate``) takes the first non-empty
  entry of ``to-allocate`` for each container the kubelet asks about, requires as many devices there as the
  kubelet allocated ``nvidia.com/gpu``, exposes exactly those UUIDs (``NVIDIA_VISIBLE_DEVICES``) with
  ``CUDA_DEVICE_MEMORY_LIMIT_<i>`` and ``CUDA_DEVICE_SM_LIMIT``, and empties the entry; when all are empty it sets
  ``hami.io/bind-phase`` to ``success``.
- Which pod: ``util.GetPendingPod`` (``pkg/util/util.go``): the pod named by the node lock ``hami.io/mutex.lock``
  if there is one, else a ``Pending`` pod on the node with ``hami.io/bind-time``, ``hami.io/bind-phase:
  allocating`` and ``hami.io/vgpu-node`` naming the node. HAMi's scheduler (``pkg/scheduler/scheduler.go``) sets
  ``hami.io/vgpu-node`` and ``hami.io/vgpu-time`` with the devices in its filter, and ``hami.io/bind-phase`` and
  ``hami.io/bind-time`` (Unix seconds) in its bind.

Pods ask in HAMi's resource names (``nvidia.com/gpu`` devices, and per device ``nvidia.com/gpumem`` MiB,
``nvidia.com/gpumem-percentage``, ``nvidia.com/gpucores`` percent: ``InitDefaultDevices`` in
``pkg/device/devices.go``, read by ``GenerateResourceRequests`` in ``pkg/device/nvidia/device.go``, limits
first, then requests). How gpusched maps them onto its own requests is :func:`share_of` (docs/devices.md).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from scheduler.api.basics import fields
from scheduler.api.basics import resources as resources_mod
from scheduler.api.basics.errors import InvalidObject
from scheduler.api.basics.resources import GPU, MILLI_PER_GPU, GpuRequest

REGISTER = "hami.io/node-nvidia-register"
TO_ALLOCATE = "hami.io/vgpu-devices-to-allocate"
ALLOCATED = "hami.io/vgpu-devices-allocated"
ASSIGNED_NODE = "hami.io/vgpu-node"
ASSIGNED_TIME = "hami.io/vgpu-time"
BIND_TIME = "hami.io/bind-time"
BIND_PHASE = "hami.io/bind-phase"
BIND_ALLOCATING = "allocating"
#: The device type HAMi's NVIDIA backend encodes in a pod's devices (``NvidiaGPUDevice``).
NVIDIA = "NVIDIA"
#: A device HAMi runs in MIG mode is split by MIG templates, which gpusched does not model: it is left out.
MODE_MIG = "mig"

RESOURCE_MEMORY = "nvidia.com/gpumem"
RESOURCE_MEMORY_PERCENTAGE = "nvidia.com/gpumem-percentage"
RESOURCE_CORES = "nvidia.com/gpucores"
#: HAMi's per-device resources: no node advertises them (the kubelet leaves out extended resources its node does
#: not have), so gpusched reads them as part of the GPU request and never as node resources.
RESOURCES = (RESOURCE_MEMORY, RESOURCE_MEMORY_PERCENTAGE, RESOURCE_CORES)

_MIB = 2**20
#: HAMi's separators: between the devices of one container, and after each container's entry.
_DEVICE_END = ":"
_CONTAINER_END = ";"


@dataclass(frozen=True, slots=True)
class Device:
    """One device of a node's register annotation."""

    uuid: str
    index: int = 0
    #: The split count: how many containers HAMi lets share the device.
    count: int = 1
    #: Device memory in MiB as HAMi counts it (after its memory scaling).
    memory_mib: int = 0
    #: Compute in percent (100: the whole device, unless HAMi scales cores).
    cores: int = 100
    type: str = ""
    numa: int = 0
    health: bool = True
    mode: str = "hami-core"

    @property
    def usable(self) -> bool:
        return self.health and self.mode != MODE_MIG

    @property
    def model(self) -> str:
        """The model as GPU feature discovery labels it (``nvidia.com/gpu.product``): HAMi writes ``NVIDIA-`` and
        NVML's name (``NVIDIA-NVIDIA A100-SXM4-80GB``, ``NVIDIA-Tesla V100-PCIE-32GB``), the label has NVML's name
        with dashes for spaces (``NVIDIA-A100-SXM4-80GB``, ``Tesla-V100-PCIE-32GB``)."""
        return self.type.removeprefix(f"{NVIDIA}-").replace(" ", "-")


@dataclass(frozen=True, slots=True)
class ContainerDevice:
    """One device given to one container, as a pod's annotation names it."""

    uuid: str
    memory_mib: int
    cores: int
    type: str = NVIDIA


# --- the node's register annotation ------------------------------------------------------------------------------


def parse_register(raw: str, *, obj: str, field: str = f"metadata.annotations[{REGISTER}]") -> tuple[Device, ...]:
    """The devices of a register annotation, JSON or text form, in index order (listing order among equal indices).

    Raises :class:`InvalidObject` naming ``obj`` and ``field`` for anything HAMi's own decoders would refuse, and
    for a UUID twice (two containers would be given one device as two).
    """
    text = raw.strip()
    devices = (
        _parse_json(text, obj=obj, field=field) if text.startswith("[") else _parse_text(text, obj=obj, field=field)
    )
    seen: set[str] = set()
    for device in devices:
        if device.uuid in seen:
            raise InvalidObject(f"device {device.uuid} is listed twice", obj=obj, field=field)
        seen.add(device.uuid)
    order = sorted(range(len(devices)), key=lambda i: (devices[i].index, i))
    return tuple(devices[i] for i in order)


def _parse_json(text: str, *, obj: str, field: str) -> list[Device]:
    try:
        entries = json.loads(text)
    except ValueError as exc:
        raise InvalidObject(f"not a JSON list of devices: {exc}", obj=obj, field=field) from None
    if not isinstance(entries, list):
        raise InvalidObject("expected a JSON list of devices", obj=obj, field=field)
    devices = []
    for where, entry in fields.maps(entries, obj=obj, field=field, not_map="expected a device object"):
        uuid = entry.get("id")
        if not isinstance(uuid, str) or not uuid:
            raise InvalidObject("a device needs an id (its UUID)", obj=obj, field=f"{where}.id")
        type_ = entry.get("type", "")
        mode = entry.get("mode") or "hami-core"
        health = entry.get("health", False)  # omitted when false, as Go's omitempty writes it
        if not isinstance(type_, str) or not isinstance(mode, str) or not isinstance(health, bool):
            raise InvalidObject("type and mode must be strings, health a boolean", obj=obj, field=where)
        devices.append(
            Device(
                uuid=uuid,
                index=_whole(entry.get("index", 0), obj=obj, field=f"{where}.index"),
                count=_whole(entry.get("count", 0), obj=obj, field=f"{where}.count"),
                memory_mib=_whole(entry.get("devmem", 0), obj=obj, field=f"{where}.devmem"),
                cores=_whole(entry.get("devcore", 0), obj=obj, field=f"{where}.devcore"),
                type=type_,
                numa=_whole(entry.get("numa", 0), obj=obj, field=f"{where}.numa"),
                health=health,
                mode=mode,
            )
        )
    return devices


def _parse_text(text: str, *, obj: str, field: str) -> list[Device]:
    if _DEVICE_END not in text:
        raise InvalidObject(
            "neither a JSON list nor 'UUID,count,memory,cores,type,numa,health:' entries", obj=obj, field=field
        )
    devices = []
    for position, entry in enumerate(part for part in text.split(_DEVICE_END) if "," in part):
        items = entry.split(",")
        where = f"{field} device {position}"
        if len(items) not in (7, 9):
            raise InvalidObject(
                f"{entry!r} has {len(items)} fields, not 7 (UUID,count,memory,cores,type,numa,health) or 9 "
                "(and index,mode)",
                obj=obj,
                field=where,
            )
        if items[6] not in ("true", "false", "True", "False", "1", "0", "t", "f", "T", "F", "TRUE", "FALSE"):
            raise InvalidObject(f"{items[6]!r} is not a boolean", obj=obj, field=where)
        if not items[0]:
            raise InvalidObject("a device needs a UUID", obj=obj, field=where)
        devices.append(
            Device(
                uuid=items[0],
                index=_whole(items[7], obj=obj, field=where) if len(items) == 9 else position,
                count=_whole(items[1], obj=obj, field=where),
                memory_mib=_whole(items[2], obj=obj, field=where),
                cores=_whole(items[3], obj=obj, field=where),
                type=items[4],
                numa=_whole(items[5], obj=obj, field=where),
                health=items[6] in ("true", "True", "1", "t", "T", "TRUE"),
                mode=items[8] if len(items) == 9 and items[8] else "hami-core",
            )
        )
    if not devices:
        raise InvalidObject("no 'UUID,count,memory,cores,type,numa,health:' entry", obj=obj, field=field)
    return devices


def _whole(value: object, *, obj: str, field: str) -> int:
    """A non-negative integer of at most 32 bits (HAMi's fields are int32), from JSON or text."""
    if isinstance(value, bool):
        raise InvalidObject(f"{value!r} is not a whole number", obj=obj, field=field)
    if isinstance(value, str):
        try:
            value = int(value)
        except ValueError:
            raise InvalidObject(f"{value!r} is not a whole number", obj=obj, field=field) from None
    if not isinstance(value, int) or not 0 <= value < 2**31:
        raise InvalidObject(f"{value!r} is not a whole number below 2^31", obj=obj, field=field)
    return value


# --- the pod's allocation annotations ----------------------------------------------------------------------------


def encode_pod_devices(containers: Sequence[Sequence[ContainerDevice]]) -> str:
    """One ``;``-terminated entry per container, ``UUID,type,memMiB,cores:`` per device (HAMi's encoding)."""
    return "".join(
        "".join(f"{d.uuid},{d.type},{d.memory_mib},{d.cores}{_DEVICE_END}" for d in devices) + _CONTAINER_END
        for devices in containers
    )


def allocation(
    devices: Sequence[Device],
    gpu_ids: Sequence[int],
    per_container: Sequence[int],
    gpu: GpuRequest,
    *,
    obj: str,
) -> tuple[tuple[ContainerDevice, ...], ...]:
    """What each container of ``spec.containers`` is given: the chosen GPUs (indices into ``devices``) dealt out in
    order by the containers' ``nvidia.com/gpu`` counts (``per_container``).

    A whole GPU is given with all its memory and 100% of its compute. A shared GPU (``gpu.milli`` below 1000) with
    its share of compute in percent, rounded up, and the device memory the pod asked for (``gpu.memory``), rounded
    up to MiB; a pod asking no memory is given the whole device's, as gpusched places it: without a memory
    constraint. Raises :class:`InvalidObject` when the GPUs cannot be dealt out so (an index the node does not
    have, counts that do not add up to the GPUs chosen: GPUs in init containers, which HAMi does not serve).
    """
    if sum(per_container) != len(gpu_ids):
        raise InvalidObject(
            f"{len(gpu_ids)} GPUs chosen, but the containers ask for {sum(per_container)} {GPU} in all "
            "(HAMi's device plugin serves spec.containers only)",
            obj=obj,
            field="spec.containers",
        )
    chosen = []
    for i in gpu_ids:
        if not 0 <= i < len(devices):
            raise InvalidObject(f"GPU {i} is not one of the node's {len(devices)} HAMi devices", obj=obj)
        device = devices[i]
        if gpu.shared:
            memory = -(-gpu.memory // _MIB) if gpu.memory else device.memory_mib
            cores = min(100, math.ceil(gpu.milli * 100 / MILLI_PER_GPU))
        else:
            memory, cores = device.memory_mib, 100
        chosen.append(ContainerDevice(uuid=device.uuid, memory_mib=memory, cores=cores))
    containers = []
    start = 0
    for count in per_container:
        containers.append(tuple(chosen[start : start + count]))
        start += count
    return tuple(containers)


def pod_annotations(node: str, containers: Sequence[Sequence[ContainerDevice]], *, now: float) -> dict[str, str]:
    """The annotations HAMi's device plugin finds a pod by and allocates from, for a pod bound to ``node`` now."""
    encoded = encode_pod_devices(containers)
    seconds = str(int(now))
    return {
        TO_ALLOCATE: encoded,
        ALLOCATED: encoded,
        ASSIGNED_NODE: node,
        ASSIGNED_TIME: seconds,
        BIND_TIME: seconds,
        BIND_PHASE: BIND_ALLOCATING,
    }


# --- the pod's request in HAMi's resource names ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Share:
    """HAMi's per-device resources of the one container that asks for them."""

    #: Where: ``spec.containers[i]``.
    where: str
    #: The container's ``nvidia.com/gpu``.
    count: int
    memory_mib: int | None = None
    memory_percent: int | None = None
    cores: int | None = None
    #: How many containers ask for a share below whole devices (more than one is not honoured).
    containers: int = 1
    #: Where the memory resources were found (``...resources.limits.nvidia.com/gpumem``), for messages.
    fields: Mapping[str, str] = field(default_factory=dict)

    @property
    def exclusive(self) -> bool:
        """All of each device: HAMi's ``gpucores: 100``, or nothing below a whole device asked."""
        if self.cores == 100:
            return True
        return not self.cores and self.memory_mib is None and self.memory_percent in (None, 100)


def _amount(resources: object, name: str, *, obj: str, field: str) -> int | None:
    if not isinstance(resources, Mapping) or name not in resources:
        return None
    value = resources_mod.amount(name, resources[name], obj=obj, field=f"{field}.{name}")
    if value < 0:
        raise InvalidObject(f"{resources[name]!r} is negative", obj=obj, field=f"{field}.{name}")
    return value


def _container_amount(container: Mapping[str, object], name: str, *, obj: str, where: str) -> tuple[int, str] | None:
    """A resource as HAMi reads it, from limits, else from requests; with the field it was found in (named only
    where it is found: every GPU pod's containers are read so, most without HAMi's resources)."""
    res = container.get("resources")
    if not fields.is_map(res):
        return None
    for part in ("limits", "requests"):
        given = res.get(part)
        if fields.is_map(given) and name in given:
            field = f"{where}.resources.{part}"
            found = _amount(given, name, obj=obj, field=field)
            if found is not None:
                return found, f"{field}.{name}"
    return None


def gpus_per_container(spec: Mapping[str, object], *, obj: str) -> tuple[int, ...]:
    """The ``nvidia.com/gpu`` of each container of ``spec.containers``; empty when none asks for any."""
    containers = spec.get("containers")
    counts = tuple(
        (_container_amount(c, GPU, obj=obj, where=f"spec.containers[{i}]") or (0, ""))[0] if fields.is_map(c) else 0
        for i, c in enumerate(containers if isinstance(containers, list) else ())
    )
    return counts if any(counts) else ()


def share_of(spec: Mapping[str, object], *, obj: str) -> Share | None:
    """HAMi's per-device resources in the pod, None when it asks for none (in any container, init ones included).

    Raises :class:`InvalidObject` for values HAMi itself would not take (percentages above 100, per-device
    resources without ``nvidia.com/gpu`` in the same container, which only HAMi's admission webhook fills in).
    """
    found: list[Share] = []
    for kind in ("containers", "initContainers"):
        containers = spec.get(kind)
        for i, c in enumerate(containers if isinstance(containers, list) else ()):
            if not isinstance(c, Mapping):
                continue
            where = f"spec.{kind}[{i}]"
            memory = _container_amount(c, RESOURCE_MEMORY, obj=obj, where=where)
            percent = _container_amount(c, RESOURCE_MEMORY_PERCENTAGE, obj=obj, where=where)
            cores = _container_amount(c, RESOURCE_CORES, obj=obj, where=where)
            if memory is None and percent is None and cores is None:
                continue
            for found_at in (percent, cores):
                if found_at is not None and found_at[0] > 100:
                    raise InvalidObject(f"{found_at[0]} is above 100 (percent of a device)", obj=obj, field=found_at[1])
            count = (_container_amount(c, GPU, obj=obj, where=where) or (0, ""))[0]
            if not count:
                raise InvalidObject(
                    f"HAMi's per-device resources need {GPU} in the same container", obj=obj, field=f"{where}.resources"
                )
            fields = {
                name: at[1] for name, at in ((RESOURCE_MEMORY, memory), (RESOURCE_MEMORY_PERCENTAGE, percent)) if at
            }
            share = Share(
                where=where,
                count=count,
                memory_mib=memory[0] if memory else None,
                memory_percent=percent[0] if percent else None,
                cores=cores[0] if cores else None,
                fields=fields,
            )
            if not share.exclusive:  # all of each device: plain whole GPUs
                found.append(share)
    if not found:
        return None
    if len(found) == 1:
        return found[0]
    return Share(where=found[1].where, count=sum(s.count for s in found), cores=found[1].cores, containers=len(found))


def shared_gpu(share: Share, *, whole: int, milli: int | None) -> tuple[int, int] | None:
    """A HAMi share as gpusched's shared GPU, ``(milli, memory bytes)``; None when gpusched places it as whole GPUs.

    ``nvidia.com/gpucores: c`` (1..99) is ``c`` percent of one GPU, ``10 c`` milli; ``nvidia.com/gpumem: m`` is
    ``m`` MiB of that GPU's memory. A memory share without ``gpucores`` leaves compute unreserved in HAMi; gpusched
    needs a compute share to pack GPUs, so it takes ``milli`` (the ``gpusched.io/gpu-milli`` annotation) then, and
    without it places the pod as a whole GPU (and refuses it when it is its own to place: :func:`unsupported`).
    ``whole`` is the pod's ``nvidia.com/gpu`` in all: a share is one GPU for the whole pod.
    """
    if share.exclusive or share.containers != 1 or whole != 1 or share.memory_percent not in (None, 100):
        return None
    memory = share.memory_mib * _MIB if share.memory_mib else 0
    if share.cores:
        return share.cores * MILLI_PER_GPU // 100, memory
    if milli is None:
        return None
    return milli, memory


def unsupported(share: Share | None, *, whole: int, milli: int | None) -> list[tuple[str, str]]:
    """What of HAMi's resources gpusched does not honour, as (field, what) pairs
    (``scheduler.api.objects.pod.unsupported``).

    Each would be placed as whole GPUs, which is more than the pod asked: its own pods are refused instead.
    """
    if share is None or share.exclusive:
        return []
    if share.containers != 1:
        return [(f"{share.where}.resources", "shares of GPUs in more than one container (HAMi's per-device resources)")]
    if share.memory_percent not in (None, 100):
        where = share.fields.get(RESOURCE_MEMORY_PERCENTAGE, share.where)
        return [(where, f"{RESOURCE_MEMORY_PERCENTAGE} below 100 (ask for {RESOURCE_MEMORY} in MiB instead)")]
    if share.count != 1 or whole != 1:
        what = f"a share of more than one GPU per pod ({RESOURCE_MEMORY} or {RESOURCE_CORES} with {GPU} above 1)"
        return [(f"{share.where}.resources", what)]
    if not share.cores and milli is None:
        what = (
            f"{RESOURCE_MEMORY} without a compute share (add {RESOURCE_CORES} in percent, or the "
            "gpusched.io/gpu-milli annotation)"
        )
        return [(share.fields.get(RESOURCE_MEMORY, share.where), what)]
    return []
