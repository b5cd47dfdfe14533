"""Loaders for the Alibaba GPU cluster trace format (cluster-trace-gpu-v2023, "openb").

Nodes: ``sn,cpu_milli,memory_mib,gpu,model`` and optionally ``numa_zones`` (the node's NUMA zones, read only by
``gpusched simulate --numa``: ``scheduler.sim.numa``). Pods: ``name,cpu_milli,memory_mib,num_gpu,gpu_milli`` and
optionally ``gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time``. A bad row is an
:class:`InvalidObject` naming the file, the line and the column.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from scheduler.api.basics import resources
from scheduler.api.basics.errors import InvalidObject
from scheduler.api.basics.resources import GpuRequest
from scheduler.api.objects.node import LABEL_GPU_PRODUCT, MIB, NodeInfo
from scheduler.api.objects.pod import PodRequest

#: Pods per node: the trace does not limit them (the FGD simulator allows 1001).
PODS_PER_NODE = 1001
NAMESPACE = "trace"
#: The most NUMA zones a node may have (the ``numa_zones`` column): the kubelet's Topology Manager handles no more.
MAX_NUMA_ZONES = 8


@dataclass(frozen=True, slots=True)
class NodeSpec:
    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str = ""
    #: NUMA zones (the nodes CSV's ``numa_zones``; None: not given, ``scheduler.sim.numa.default_zones``).
    numa_zones: int | None = None

    def info(self) -> NodeInfo:
        return NodeInfo(
            name=self.name,
            allocatable={
                resources.CPU: self.cpu_milli,
                resources.MEMORY: self.memory_mib * MIB,
                resources.PODS: PODS_PER_NODE,
            },
            gpus=self.gpus,
            gpu_model=self.model,
            labels={LABEL_GPU_PRODUCT: self.model} if self.model else {},
        )


@dataclass(frozen=True, slots=True)
class PodSpec:
    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    gpu_spec: tuple[str, ...] = ()
    creation: float | None = None
    deletion: float | None = None
    scheduled: float | None = None

    @property
    def gpu_total(self) -> int:
        """GPU-milli the pod asks for in all."""
        return self.num_gpu * self.gpu_milli

    @property
    def shape(self) -> tuple[float, float, int, tuple[str, ...]]:
        return (float(self.cpu_milli), float(self.gpu_milli), self.num_gpu, self.gpu_spec)

    def request(self, name: str | None = None) -> PodRequest:
        gpu = (
            GpuRequest(count=self.num_gpu, milli=self.gpu_milli, models=self.gpu_spec)
            if self.num_gpu
            else resources.NO_GPU
        )
        return PodRequest(
            namespace=NAMESPACE,
            name=name or self.name,
            resources={resources.CPU: self.cpu_milli, resources.MEMORY: self.memory_mib * MIB, resources.PODS: 1},
            gpu=gpu,
        )


def _rows(path: Path, required: Sequence[str]) -> Iterator[tuple[int, dict[str, str]]]:
    try:
        handle = path.open(newline="")
    except OSError as exc:
        raise InvalidObject(f"cannot read: {exc.strerror}", obj=f"file {path}") from None
    with handle:
        reader = csv.DictReader(handle)
        try:
            header = reader.fieldnames or []
            missing = [c for c in required if c not in header]
            if missing:
                raise InvalidObject(f"missing columns {missing} (found {header})", obj=f"file {path} line 1")
            for row in reader:
                if None in row:
                    raise InvalidObject("more fields than the header names", obj=f"file {path} line {reader.line_num}")
                yield reader.line_num, row
        except UnicodeDecodeError:
            # Decoding runs ahead of the rows, so the line is not known.
            raise InvalidObject("not UTF-8 text", obj=f"file {path}") from None
        except csv.Error as exc:
            raise InvalidObject(f"not CSV: {exc}", obj=f"file {path} line {reader.line_num + 1}") from None


def _int(row: dict[str, str], column: str, where: str, *, low: int = 0, high: int | None = None) -> int:
    raw = (row.get(column) or "").strip()
    try:
        value = int(raw)
    except ValueError:
        raise InvalidObject(f"{raw!r} is not an integer", obj=where, field=column) from None
    if value < low or (high is not None and value > high):
        bound = f"{low}..{high}" if high is not None else f">= {low}"
        raise InvalidObject(f"{value} is outside {bound}", obj=where, field=column)
    return value


def _time(row: dict[str, str], column: str, where: str) -> float | None:
    raw = (row.get(column) or "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise InvalidObject(f"{raw!r} is not a time in seconds", obj=where, field=column) from None
    if value < 0:
        raise InvalidObject(f"{value} is negative", obj=where, field=column)
    return value


def load_nodes(path: str | Path) -> list[NodeSpec]:
    """Nodes in file order (ties go to the first by name; `--tune` renames them first, see protocol.tie_order)."""
    path = Path(path)
    nodes = []
    names = set()
    for line, row in _rows(path, ("sn", "cpu_milli", "memory_mib", "gpu", "model")):
        where = f"file {path} line {line}"
        name = (row["sn"] or "").strip()
        if not name:
            raise InvalidObject("empty node name", obj=where, field="sn")
        if name in names:
            raise InvalidObject(f"node {name!r} appears twice", obj=where, field="sn")
        names.add(name)
        gpus = _int(row, "gpu", where, high=64)
        model = (row["model"] or "").strip()
        zones = (
            _int(row, "numa_zones", where, low=1, high=MAX_NUMA_ZONES)
            if (row.get("numa_zones") or "").strip()
            else None
        )
        nodes.append(NodeSpec(name, _int(row, "cpu_milli", where), _int(row, "memory_mib", where), gpus, model, zones))
    if not nodes:
        raise InvalidObject("no nodes", obj=f"file {path}")
    return nodes


def load_pods(path: str | Path) -> list[PodSpec]:
    """Pods in file order."""
    path = Path(path)
    pods = []
    for line, row in _rows(path, ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")):
        where = f"file {path} line {line}"
        name = (row["name"] or "").strip()
        if not name:
            raise InvalidObject("empty pod name", obj=where, field="name")
        num_gpu = _int(row, "num_gpu", where, high=64)
        gpu_milli = _int(row, "gpu_milli", where, high=1000)
        if num_gpu == 0 and gpu_milli:
            raise InvalidObject(f"gpu_milli {gpu_milli} without num_gpu", obj=where, field="gpu_milli")
        if num_gpu and not gpu_milli:
            raise InvalidObject("a GPU pod needs gpu_milli 1..1000", obj=where, field="gpu_milli")
        if num_gpu > 1 and gpu_milli != 1000:
            raise InvalidObject("a multi-GPU pod takes whole GPUs (gpu_milli 1000)", obj=where, field="gpu_milli")
        spec = tuple(dict.fromkeys(m.strip() for m in (row.get("gpu_spec") or "").split("|") if m.strip()))
        pods.append(
            PodSpec(
                name,
                _int(row, "cpu_milli", where),
                _int(row, "memory_mib", where),
                num_gpu,
                gpu_milli,
                spec,
                _time(row, "creation_time", where),
                _time(row, "deletion_time", where),
                _time(row, "scheduled_time", where),
            )
        )
    if not pods:
        raise InvalidObject("no pods", obj=f"file {path}")
    return pods
