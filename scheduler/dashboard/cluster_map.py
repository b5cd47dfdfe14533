"""The cluster map from the cache: every node's GPUs as cells, by queue, shared or whole, idle or stranded.

Read-only: it reads the cache's arrays, its pods and its topology domains, and computes each node's fragmentation
with the FGD kernel (``scheduler.kernels.fgd.fragmentation``, the same measure the fgd plugin lowers and the
simulator reports) into its own scratch arrays. A node's idle GPUs are *stranded* when at least half of its idle
GPU capacity is fragment for the typical pods (they cannot use it: too little CPU or memory left beside it, the
wrong model, too few GPUs for the shapes that ask for several).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from scheduler.api.basics import quantity, resources
from scheduler.api.crds import topology as api_topology
from scheduler.api.devices import numa
from scheduler.api.devices.gputopo import Link
from scheduler.api.objects.pod import PodRequest
from scheduler.cache.state import Cache, NodeEntry
from scheduler.dashboard import view
from scheduler.dashboard.view import NodeView
from scheduler.framework import fragmentation, typical
from scheduler.kernels import fgd as fgd_kernel
from scheduler.kernels import layout

#: The share of a node's idle GPU capacity that must be fragment for its idle GPUs to show as stranded.
STRANDED_SHARE = 0.5


def build(
    cache: Cache,
    *,
    queue_of: Callable[[PodRequest], str],
    shapes: Sequence[typical.Shape] = typical.GENERIC,
) -> view.ClusterMap:
    """The map of every node the cache holds, in name order (a builder of its own: see :class:`MapBuilder`)."""
    return MapBuilder(cache).build(queue_of=queue_of, shapes=shapes)


class MapBuilder:
    """Builds the map again and again, re-reading only the nodes whose row of the cache changed since the last map.

    A node's cells are rebuilt when its row's generation moved (a pod placed or gone, the node updated), or for all
    nodes when the topology's domains or the typical pods changed; the fragmentation of every node is recomputed
    each time (one kernel call over the arrays). At 5,000 nodes the first map takes about half a second, the next
    ones after one binding tens of milliseconds (benchmarks/dashboard_map.py).
    """

    def __init__(self, cache: Cache) -> None:
        self.cache = cache
        #: slot -> (the row's generation, the node's view) at the last map.
        self._kept: dict[int, tuple[int, NodeView]] = {}
        self._domains: object = None
        self._shapes: tuple[typical.Shape, ...] = ()

    def build(
        self,
        *,
        queue_of: Callable[[PodRequest], str],
        shapes: Sequence[typical.Shape] = typical.GENERIC,
    ) -> view.ClusterMap:
        """``queue_of`` names the queue a placed pod counts against (the loop's); ``shapes`` are the typical pods
        fragmentation is measured against."""
        cache = self.cache
        a = cache.arrays
        frag = np.zeros(a.cap.shape[0])
        if cache.nodes:
            fgd_kernel.fragmentation(
                a.cap,
                a.used,
                a.gpu_free,
                a.gpu_count,
                a.node_model,
                fragmentation.typical_arrays(list(shapes), cache.models),
                frag,
            )
        domains = cache.domains()
        if domains is not self._domains or tuple(shapes) != self._shapes:
            self._kept.clear()
            self._domains, self._shapes = domains, tuple(shapes)
        row_of = {name: i for i, name in enumerate(domains.nodes)}
        # The levels that group nodes (the hostname level is the node itself), by the Topology's short names.
        grouping = [i for i, label in enumerate(domains.levels) if label != api_topology.LABEL_HOSTNAME]
        nodes: list[view.NodeView] = []
        kept: dict[int, tuple[int, NodeView]] = {}
        for slot, entry in cache.nodes.items():
            generation = int(a.gen[slot])
            old = self._kept.get(slot)
            if old is not None and old[0] == generation and old[1].name == entry.info.name:
                node = old[1]
            else:
                node = _node(
                    cache, slot, entry, float(frag[slot]), queue_of, domains, row_of.get(entry.info.name), grouping
                )
            kept[slot] = (generation, node)
            if cache.numa.nodes:
                # Not in the kept view: a NodeResourceTopology update moves no row's generation.
                node = _with_zones(cache, node)
            nodes.append(node)
        self._kept = kept
        nodes.sort(key=lambda n: n.name)
        levels = tuple(cache.topology.level_label(i) for i in grouping)
        return view.ClusterMap(levels=levels, nodes=tuple(nodes))


def _node(
    cache: Cache,
    slot: int,
    entry: NodeEntry,
    frag: float,
    queue_of: Callable[[PodRequest], str],
    domains: api_topology.DomainIndex,
    row: int | None,
    grouping: Sequence[int],
) -> NodeView:
    a = cache.arrays
    info = entry.info
    count = int(a.gpu_count[slot])
    holders: list[list[PodRequest]] = [[] for _ in range(count)]
    for held in entry.pods.values():
        for gpu in held.placement.gpu_ids:
            if 0 <= gpu < count:
                holders[gpu].append(held.pod)
    free = a.gpu_free[slot, :count].tolist()
    idle_milli = float(sum(free))
    stranded = idle_milli > 0 and frag >= STRANDED_SHARE * idle_milli
    cliques = _cliques(cache, slot, count)
    cells = []
    for gpu in range(count):
        left = free[gpu]
        pods = holders[gpu]
        if left >= layout.WHOLE and not pods:
            state = view.STRANDED if stranded else view.IDLE
        elif left <= 0 and len(pods) <= 1:
            state = view.WHOLE
        else:
            state = view.SHARED
        cells.append(
            view.GpuCell(
                state=state,
                queue=queue_of(pods[0]) if pods else "",
                pods=tuple(sorted(p.key for p in pods)),
                used_milli=round(layout.WHOLE - min(layout.WHOLE, max(0.0, left))),
                clique=cliques[gpu],
            )
        )
    node_domains = tuple(
        domains.values[level][int(domains.ids[row, level])] if row is not None and domains.ids[row, level] >= 0 else ""
        for level in grouping
    )
    return NodeView(
        name=info.name,
        labels=dict(info.labels),
        domains=node_domains,
        cells=tuple(cells),
        fragmentation_milli=frag,
        schedulable=not info.unschedulable,
    )


#: The resources a zone shows, in this order (those it lists).
ZONE_RESOURCES = (resources.CPU, resources.MEMORY, resources.GPU)


def _with_zones(cache: Cache, node: NodeView) -> NodeView:
    """``node`` with its NUMA zones as the cache counts them (what is left: the published figures less the pods the
    object does not show yet), or as it is on a node without a NodeResourceTopology."""
    zones = cache.numa.nodes.get(node.name)
    left = cache.numa.available(node.name)
    if zones is None or left is None:
        return node if not node.zones else dataclasses.replace(node, zones=(), numa_policy="")
    shown = tuple(
        view.ZoneView(
            name=zone.name,
            amounts=tuple(
                view.ZoneAmount(
                    name, quantity.text(name, free.get(name, 0)), quantity.text(name, zone.allocatable.get(name, 0))
                )
                for name in ZONE_RESOURCES
                if name in zone.allocatable
            ),
        )
        for zone, free in zip(zones.zones, left, strict=True)
    )
    policy = f"{zones.policy} ({zones.scope} scope)"
    if zones.policy == numa.Policy.NONE and zones.label_policy not in (None, numa.Policy.NONE):
        policy = f"{zones.label_policy} (the node's label, kept by gpusched)"
    return dataclasses.replace(node, zones=shown, numa_policy=policy)


def _cliques(cache: Cache, slot: int, count: int) -> list[int]:
    """Each GPU's NVLink clique on the node (its first maximal NVLink group), -1 where none is known."""
    out = [-1] * count
    topology = cache.gpu_topology(slot)
    if topology is None:
        return out
    nvlink = [group for group in topology.groups if group.link == Link.NVLINK]
    for index, group in enumerate(nvlink):
        for gpu in group.gpus:
            if 0 <= gpu < count and out[gpu] < 0:
                out[gpu] = index
    return out
