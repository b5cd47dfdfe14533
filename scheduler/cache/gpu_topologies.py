"""The nodes' GPU topologies, from their ``gpusched.io/gpu-topology`` annotations, by node slot.

A bad annotation is kept in :attr:`GpuTopologies.problems` (by node name) and the node's GPUs are treated as
unknown until it is fixed. Nodes of one hardware model carry the same annotation text: it is parsed once and the
nodes share one (immutable) object, so that what is memoised per topology (the topology plugin's scores) is
memoised per model, not per node.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from scheduler.api.basics.errors import InvalidObject
from scheduler.api.devices import gputopo
from scheduler.api.devices.gputopo import GpuTopology
from scheduler.api.objects import node as api_node
from scheduler.cache import arrays as arrays_mod

I64 = npt.NDArray[np.int64]

#: Distinct GPU topology annotations kept parsed (a cluster has a handful of hardware models).
_TOPOLOGIES_KEPT = 256


class GpuTopologies:
    """The accepted GPU topologies by node slot, the refused annotations by node name."""

    def __init__(self) -> None:
        self._by_slot: dict[int, GpuTopology] = {}
        #: Annotation text -> its parsed topology.
        self._parsed: dict[str, GpuTopology] = {}
        #: (per slot: index into the list or -1, the distinct topologies), built on demand; None when stale.
        self._index: tuple[I64, list[GpuTopology]] | None = None
        #: Nodes whose annotation was refused, by node name, with why.
        self.problems: dict[str, InvalidObject] = {}

    @property
    def by_slot(self) -> Mapping[int, GpuTopology]:
        return self._by_slot

    def get(self, slot: int) -> GpuTopology | None:
        return self._by_slot.get(slot)

    def index(self, slots: int) -> tuple[I64, list[GpuTopology]]:
        """Per slot (of ``slots``) an index into the returned list of distinct topologies, -1 where unknown."""
        index = self._index
        if index is None or index[0].shape[0] != slots:
            index = self._index = arrays_mod.distinct_index(slots, self._by_slot, key=id)
        return index

    def forget(self, slot: int, name: str) -> None:
        """The node of ``slot`` (named ``name``) is gone, or its annotation is about to be read again."""
        self._by_slot.pop(slot, None)
        self._index = None
        self.problems.pop(name, None)

    def read(self, slot: int, info: api_node.NodeInfo) -> None:
        """The node's topology from its annotation, or its problem."""
        self.forget(slot, info.name)
        raw = info.annotations.get(gputopo.ANNOTATION)
        if raw is None:
            return
        topo = self._parsed.get(raw)
        if topo is None:
            try:
                topo = gputopo.parse_gpu_topology(raw, node=info.name)
            except InvalidObject as problem:
                self.problems[info.name] = problem
                return
            if len(self._parsed) >= _TOPOLOGIES_KEPT:
                self._parsed.clear()
            self._parsed[raw] = topo
        if len(topo) != info.gpus:
            self.problems[info.name] = InvalidObject(
                f"describes {len(topo)} GPUs but the node has {info.gpus}; its GPUs are treated as unknown",
                obj=f"node {info.name}",
                field=f"metadata.annotations[{gputopo.ANNOTATION}]",
            )
            return
        self._by_slot[slot] = topo
