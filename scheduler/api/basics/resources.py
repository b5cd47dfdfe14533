"""Resource names and resource lists in the units the scheduler counts in.

CPU is counted in milli-cores, memory and storage in bytes, everything else in whole units. A GPU is not a
plain counter here: whole GPUs (``nvidia.com/gpu``) and shared fractions (``gpusched.io/gpu-milli``) are
placed on individual devices, so they are kept apart from the resource list, in :class:`GpuRequest`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from scheduler.api.basics import fields, quantity
from scheduler.api.basics.errors import InvalidObject

CPU = "cpu"
MEMORY = "memory"
PODS = "pods"
GPU = "nvidia.com/gpu"
#: Scoring dimensions derived from the GPU table: compute in milli-GPUs and device memory in bytes.
GPU_MILLI = "gpusched.io/gpu-milli"
GPU_MEMORY = "gpusched.io/gpu-memory"
#: One whole GPU in milli-GPUs.
MILLI_PER_GPU = 1000

ResourceList = dict[str, int]


#: (resource name, quantity text) -> the amount in scheduler units, for the texts read so far (a cluster's pods repeat
#: a few entries, ``"cpu": "1"``, ``"memory": "16Gi"``, by the ten thousand); emptied when it holds
#: :data:`_UNITS_LIMIT`. Only valid entries are kept: a bad one is parsed, and refused, every time.
_UNITS: dict[tuple[str, str], int] = {}
_UNITS_LIMIT = 16_384


def parse_resource_list(raw: object, *, obj: str = "", field: str = "") -> ResourceList:
    """Parse a Kubernetes resource list (``{"cpu": "500m", "memory": "1Gi"}``) into scheduler units."""
    if raw is None:
        return {}
    if not fields.is_map(raw):
        raise InvalidObject(f"expected a map of resource names to quantities, got {raw!r}", obj=obj, field=field)
    parsed: ResourceList = {}
    for name, value in raw.items():
        if not isinstance(name, str) or not name:
            raise InvalidObject(f"bad resource name {name!r}", obj=obj, field=field)
        parsed[name] = amount(name, value, obj=obj, field=f"{field}.{name}" if field else name)
    return parsed


def amount(name: str, value: object, *, obj: str = "", field: str = "") -> int:
    """One entry of a resource list in scheduler units: milli-cores for ``cpu``, whole units (bytes) else."""
    known = _UNITS.get((name, value)) if type(value) is str else None
    if known is not None:
        return known
    parsed = quantity.parse_quantity(value, obj=obj, field=field)
    units = quantity.to_milli(parsed) if name == CPU else quantity.to_units(parsed)
    if type(value) is str:
        if len(_UNITS) >= _UNITS_LIMIT:
            _UNITS.clear()
        _UNITS[(name, value)] = units
    return units


def container_requests(container: Mapping[str, object], *, obj: str, where: str) -> ResourceList:
    """A container's requests, a missing request defaulted to the limit (as Kubernetes does)."""
    res = container.get("resources") or {}
    if not fields.is_map(res):
        raise InvalidObject("expected a map", obj=obj, field=f"{where}.resources")
    requests = parse_resource_list(res.get("requests"), obj=obj, field=f"{where}.resources.requests")
    for name, amount in parse_resource_list(res.get("limits"), obj=obj, field=f"{where}.resources.limits").items():
        requests.setdefault(name, amount)
    return requests


@dataclass(frozen=True, slots=True)
class ContainerRequests:
    """One container of a pod spec with its requests (:func:`container_requests`), read once for every reader of
    them (the pod's effective requests, its extended resources)."""

    #: ``spec.initContainers[i]`` or ``spec.containers[i]``.
    where: str
    container: Mapping[str, object]
    requests: ResourceList


def read_containers(
    spec: Mapping[str, object], *, obj: str
) -> tuple[tuple[ContainerRequests, ...], tuple[ContainerRequests, ...]]:
    """The init containers and the containers of ``spec``, each with its requests.

    The containers are read first, then the init containers, so that the first malformed one found is the one
    kube-scheduler's order names (the error names the object and the field)."""
    regular = spec.get("containers") or []
    init = spec.get("initContainers") or []
    if not isinstance(regular, list) or not isinstance(init, list):
        raise InvalidObject("expected a list of containers", obj=obj, field="spec.containers")
    read = []
    for part, containers in (("containers", regular), ("initContainers", init)):
        out = []
        for i, c in enumerate(containers):
            where = f"spec.{part}[{i}]"
            if not fields.is_map(c):
                raise InvalidObject("expected a container", obj=obj, field=where)
            out.append(ContainerRequests(where, c, container_requests(c, obj=obj, where=where)))
        read.append(tuple(out))
    return read[1], read[0]


def add(into: ResourceList, other: Mapping[str, int]) -> None:
    """Add ``other`` into ``into`` in place."""
    for name, amount in other.items():
        into[name] = into.get(name, 0) + amount


def maximum(into: ResourceList, other: Mapping[str, int]) -> None:
    """Raise each entry of ``into`` to at least ``other``'s, in place."""
    for name, amount in other.items():
        into[name] = max(into.get(name, 0), amount)


@dataclass(frozen=True, slots=True)
class GpuRequest:
    """What a pod needs of GPUs: ``count`` devices with ``milli`` of each (1000 for whole GPUs).

    ``memory`` is device memory in bytes needed on each shared GPU (0: no constraint); a whole GPU takes all
    of its device's memory. ``models`` lists the allowed GPU models (empty: any).
    """

    count: int = 0
    milli: int = 0
    memory: int = 0
    models: tuple[str, ...] = ()

    @property
    def whole(self) -> bool:
        return self.count > 0 and self.milli >= MILLI_PER_GPU

    @property
    def shared(self) -> bool:
        return self.count == 1 and 0 < self.milli < MILLI_PER_GPU

    @property
    def total_milli(self) -> int:
        return self.count * self.milli


NO_GPU = GpuRequest()


def model_matches(allowed: str, product: str) -> bool:
    """Whether an allowed model name matches a node's GPU product label.

    Exact match, or the name is a run of whole dash-separated parts of the product
    (``A100`` and ``A100-SXM4`` match ``NVIDIA-A100-SXM4-80GB``; ``A10`` does not).
    """
    if allowed == product:
        return True
    return f"-{allowed}-" in f"-{product}-"
