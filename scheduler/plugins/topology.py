"""Topology: keep a job inside the domains chosen for it, and prefer nodes whose free GPUs form a tight set.

Filter:

- during a gang's cycle the core passes the slots of the domain it chose (``CycleContext.topology_slots``);
  every other node is marked :data:`OUTSIDE`;
- a plain pod with the annotation ``gpusched.io/topology-required`` goes only to nodes inside some domain of that
  level (a node without the level's label is outside every domain of it).

Score (0..100, higher is better), summed over what applies, then halved when both apply:

- a pod of whole GPUs on a node whose ``gpusched.io/gpu-topology`` is known: for 2+ GPUs, the tightness of the
  best set the node offers (NVLink 100, one PCIe switch 67, one NUMA node 33, across NUMA nodes 0); for one GPU,
  how little of the fully free tight groups it breaks (100 when it fits a group already broken). Nodes whose GPU
  topology is unknown score 0;
- a plain pod with a required or preferred level: nodes of the domain that it fits most tightly (fewest free GPUs
  left after it) score highest, so that large domains stay free for large jobs; nodes outside score 0.

Pre-filter: a plain pod naming a level the Topology does not have is unresolvable, with the annotation named.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from scheduler.api.basics.errors import InvalidObject
from scheduler.api.crds import topology as api_topology
from scheduler.api.devices import gputopo
from scheduler.api.devices.gputopo import GpuTopology
from scheduler.api.objects.pod import PodRequest
from scheduler.cache.state import Snapshot
from scheduler.framework import args as plugin_args
from scheduler.framework import reasons as framework_reasons
from scheduler.framework.interface import (
    F64,
    I8,
    I64,
    ROOM_FREED,
    ClusterEvent,
    Code,
    CycleState,
    Status,
)
from scheduler.framework.reasons import NeverFits, Reason
from scheduler.kernels import layout

#: The resolved (required, preferred) levels of a plain pod, kept in the cycle state by the pre-filter.
LEVELS = "topology.levels"
_MEMO_LIMIT = 100_000
#: Nodes of at most this many GPUs are scored from a table of every free-GPU mask (2**8 scores a topology and size).
_TABLE_BITS = 8
#: Tables kept (by pod size and set of distinct topologies); a change of either makes a new one.
_TABLES_KEPT = 16
_BIT_WEIGHTS = np.left_shift(1, np.arange(_TABLE_BITS)).astype(np.float64)


def _required_level(snapshot: Snapshot, pod: PodRequest) -> int | None:
    """The level a plain pod's ``gpusched.io/topology-required`` names (a gang's domains are the gang's)."""
    if pod.pod_group or not pod.topology.required:
        return None
    return snapshot.topology.find_level(pod.topology.required)


def _unlabelled(snapshot: Snapshot, pod: PodRequest, outside: np.ndarray) -> np.ndarray:
    """Of the nodes ``outside`` the pod's domain, those without the label of the level it requires: outside every
    domain of it, whatever runs."""
    level = _required_level(snapshot, pod)
    unlabelled = np.zeros(outside.shape[0], dtype=bool)
    if level is not None:
        ids = snapshot.domain_ids()
        size = min(ids.shape[0], unlabelled.shape[0])
        unlabelled[:size] = ids[:size, level] < 0
        unlabelled[size:] = True
    return outside & unlabelled


def _label_node(snapshot: Snapshot, pod: PodRequest, nodes: np.ndarray) -> str:
    level = _required_level(snapshot, pod)
    if level is None:
        return ""
    label, name = snapshot.topology.levels[level], snapshot.topology.level_label(level)
    labelled = bool((snapshot.domain_ids()[:, level] >= 0).any())
    return f"it runs on a node labelled {label} (level {name}{'' if labelled else '; no node has it'})"


#: Outside the job's domain: the domains change with the Topology and the nodes' labels, and which domain can hold
#: it with the room freed in them. Pods elsewhere (in the domain) may be what keeps the job out of it.
OUTSIDE = Reason(
    10,
    "node(s) outside the job's topology domain",
    eviction_helps=True,
    across_nodes=True,
    wakes=ROOM_FREED | {ClusterEvent.TOPOLOGY_CHANGED},
    never=NeverFits(change=_label_node, lasting=_unlabelled),
)


class Topology:
    name = "topology"
    reasons = (OUTSIDE,)

    def __init__(self, args: Mapping[str, Any]) -> None:
        plugin_args.check_keys(self.name, args, ())
        #: (id of a GPU topology, free GPUs as a bit mask, k) -> (the topology, score): nodes of one hardware model
        #: share scores. The topology is held so that its id cannot be reused by another while the entry lives.
        self._memo: dict[tuple[int, int, int], tuple[GpuTopology, float]] = {}
        #: By (pod size, the distinct topologies' ids): those topologies (kept, so that their ids stay theirs),
        #: each one's mask of its own GPUs, and the scores by (topology, free-GPU mask), NaN until first asked.
        self._tables: dict[tuple[int, tuple[int, ...]], tuple[list[GpuTopology], I64, F64]] = {}

    # --- pre-filter and filter ---------------------------------------------------------------------------------

    def pre_filter(self, state: CycleState) -> Status:
        pod = state.pod
        if not pod.topology or pod.pod_group:
            return Status.success()
        try:
            levels = api_topology.resolve(state.snapshot.topology, pod.topology, obj=f"pod {pod.key}")
        except InvalidObject as problem:
            return Status(Code.UNRESOLVABLE, str(problem), self.name)
        state.data[LEVELS] = levels
        return Status.success()

    def wakes(self, reason: int) -> frozenset[ClusterEvent] | None:
        return framework_reasons.wakes(self.reasons, reason)

    def filter(self, state: CycleState, reasons: I8) -> None:
        chosen: np.ndarray | None = state.context.topology_slots
        if chosen is not None:
            size = min(chosen.shape[0], reasons.shape[0])
            outside = np.ones(reasons.shape[0], dtype=bool)
            outside[:size] = ~chosen[:size]
            reasons[outside & (reasons == layout.FIT)] = OUTSIDE.code
        levels: tuple[int | None, int | None] | None = state.data.get(LEVELS)
        if levels is not None and levels[0] is not None:
            ids = state.snapshot.domain_ids()[:, levels[0]]
            size = min(ids.shape[0], reasons.shape[0])
            outside = np.ones(reasons.shape[0], dtype=bool)
            outside[:size] = ids[:size] < 0
            reasons[outside & (reasons == layout.FIT)] = OUTSIDE.code

    # --- score -------------------------------------------------------------------------------------------------

    def score(self, state: CycleState, nodes: I64, out: F64) -> None:
        out[:] = 0.0
        parts = 0
        k = state.whole_k
        if k:
            index, topologies = state.snapshot.gpu_topology_index()
            if topologies:
                self._device_scores(state, nodes, k, out, index, topologies)
                parts += 1
        levels: tuple[int | None, int | None] | None = state.data.get(LEVELS)
        if levels is not None:
            level = levels[0] if levels[0] is not None else levels[1]
            if level is not None:
                out += self._domain_score(state, nodes, level)
                parts += 1
        if parts > 1:
            out /= parts

    def _device_scores(
        self, state: CycleState, nodes: I64, k: int, out: F64, index: I64, topologies: list[GpuTopology]
    ) -> None:
        """``out[i]``: the device score of ``nodes[i]`` (left alone for nodes of unknown topology); ``index`` and
        ``topologies`` are the snapshot's ``gpu_topology_index()``.

        One cycle scores every feasible node (a thousand and more) but they hold few distinct (topology, free
        GPUs) pairs: the free-GPU bit masks are computed for all nodes at once, and a score per distinct pair,
        read from a table of every mask where nodes have at most :data:`_TABLE_BITS` GPUs.
        """
        gpu_free = state.snapshot.arrays.gpu_free
        width = gpu_free.shape[1]
        which = index[nodes] if index.shape[0] >= gpu_free.shape[0] else np.full(nodes.shape[0], -1, np.int64)
        rows = (which >= 0).nonzero()[0]
        if rows.size == 0 or width == 0:
            return
        if width <= _TABLE_BITS:
            kinds = which[rows]
            free = np.take(gpu_free, nodes[rows], axis=0) >= layout.WHOLE
            own, table = self._table(topologies, k)
            # The bits by a product with their weights: exact in floating point at this width, and BLAS's.
            masks = (free @ _BIT_WEIGHTS[:width]).astype(np.int64) & own[kinds]
            values = table[kinds, masks]
            missing = np.isnan(values).nonzero()[0]
            if missing.size:
                for kind, mask in set(zip(kinds[missing].tolist(), masks[missing].tolist(), strict=True)):
                    table[kind, mask] = self._device_score(topologies[kind], mask, k)
                values = table[kinds, masks]
            out[rows] = values
            return
        if width > 62:  # masks no longer fit an int64: one node at a time
            for i in rows.tolist():
                topo = topologies[int(which[i])]
                free = gpu_free[int(nodes[i]), : len(topo)] >= layout.WHOLE
                out[i] = self._device_score(topo, sum(1 << g for g in np.flatnonzero(free).tolist()), k)
            return
        weights = np.left_shift(np.int64(1), np.arange(width, dtype=np.int64))
        masks = (gpu_free[nodes[rows]] >= layout.WHOLE).astype(np.int64) @ weights
        sizes = np.array([len(topo) for topo in topologies], dtype=np.int64)
        masks &= np.left_shift(np.int64(1), sizes[which[rows]]) - 1
        pairs, inverse = np.unique(which[rows] * (np.int64(1) << width) + masks, return_inverse=True)
        scores = np.array(
            [self._device_score(topologies[pair >> width], pair & ((1 << width) - 1), k) for pair in pairs.tolist()]
        )
        out[rows] = scores[inverse.reshape(-1)]

    def _table(self, topologies: list[GpuTopology], k: int) -> tuple[I64, F64]:
        """The scores of every free-GPU mask of each of ``topologies`` for a pod of ``k`` GPUs, filled as asked, and
        each topology's mask of its own GPUs."""
        key = (k, tuple(id(topo) for topo in topologies))
        found = self._tables.get(key)
        if found is None:
            if len(self._tables) >= _TABLES_KEPT:
                self._tables.clear()
            own = np.array([(1 << len(topo)) - 1 for topo in topologies], dtype=np.int64)
            found = self._tables[key] = (list(topologies), own, np.full((len(topologies), 1 << _TABLE_BITS), np.nan))
        return found[1], found[2]

    def _device_score(self, topo: GpuTopology, mask: int, k: int) -> float:
        """The score of a node of topology ``topo`` whose free GPUs are the bits of ``mask``, memoised."""
        key = (id(topo), mask, k)
        found = self._memo.get(key)
        if found is not None and found[0] is topo:
            return found[1]
        pool = [g for g in range(len(topo)) if mask >> g & 1]
        if len(pool) < k:
            value = 0.0
        else:
            chosen = gputopo.tightest_set(topo, pool, k)
            if k > 1:
                link = gputopo.set_tightness(topo, chosen).min_link
                value = (
                    100.0 * (link - int(gputopo.Link.SYSTEM)) / (int(gputopo.Link.NVLINK) - int(gputopo.Link.SYSTEM))
                )
            else:
                cost = gputopo.fragmentation_cost(topo, pool, chosen)
                value = 100.0 * (1.0 - (cost[0] / len(topo) if cost else 0.0))
        if len(self._memo) >= _MEMO_LIMIT:
            self._memo.clear()
        self._memo[key] = (topo, value)
        return value

    def _domain_score(self, state: CycleState, nodes: I64, level: int) -> F64:
        """Best fit over domains: the fewer free GPUs a domain keeps after the pod, the higher its nodes score."""
        a = state.snapshot.arrays
        ids = state.snapshot.domain_ids()[:, level]
        size = min(ids.shape[0], a.slots)
        column = np.full(a.slots, -1, dtype=np.int64)
        column[:size] = ids[:size]
        usable = a.base_reason == layout.FIT
        free = np.where(usable, (a.gpu_free >= layout.WHOLE).sum(axis=1), 0).astype(np.int64)
        totals = api_topology.domain_free(column, free)
        domain = column[nodes]
        inside = domain >= 0
        scores = np.zeros(nodes.shape[0])
        if not inside.any():
            return scores
        left = totals[domain[inside]] - state.whole_k
        most = max(int(totals.max()), 1)
        scores[inside] = 100.0 * (1.0 - np.clip(left, 0, None) / most)
        return scores
