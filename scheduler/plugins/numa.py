"""Filter and score: NUMA zones (issue 42): a node only where its kubelet's Topology Manager will admit the pod, and
among those the one where the pod breaks the fewest zones a bigger pod needs.

On a node whose NodeResourceTopology says its kubelet runs the Topology Manager with ``single-numa-node`` or
``restricted`` (or where the pod asks for one of them itself, by Koordinator's annotation, and the kubelet enforces
none), the pod's aligned resources (devices for any pod, whole CPUs and memory for a Guaranteed one) must fit the
node's zones as the kubelet would fit them (``scheduler.api.devices.topology_manager``); else the kubelet refuses the
pod with ``TopologyAffinityError`` and its controller makes another, which a NUMA-blind scheduler sends to the same
node.
What the zones have left is the cache's own count (``scheduler.cache.numa_store``: the published figures lag behind
the pods just bound), less what the pods placed earlier in the same what-if take (a gang's members, in order).

Two reasons: zones too full now (an eviction or a pod leaving may clear it), and zones too small for the pod ever
(only another node can hold it: the never-fits sentence says so). A node without an object, or with policy ``none``
or ``best-effort``, is never refused; a cluster without objects pays one test of an empty dict per pod.

A third, for what the replay got wrong: a node whose kubelet refused a pod of the same owner lately
(``TopologyAffinityError``, ``scheduler.cache.kubelet_refusals``) is refused to the owner's next pods for a while,
object or not, so that the replacement its controller makes tries another node instead of the same refusal again.

The score keeps zones whole as FGD keeps GPUs whole. The scheduler picks only the node: inside it the kubelet picks the
zones (the narrowest that hold the pod, the lowest numbered first), so each node is scored on the zones the replay gives
the pod there, by how the placement changes the zones' fragmentation: per resource aligned (GPUs, whole CPUs, memory,
devices the zones list), what of each zone's free amount pods of one zone each could not use, summed over sizes in equal
steps up to a zone's capacity, eight at most (for 4-GPU zones, pods of 1, 2, 3 and 4 GPUs; a zone with 3 GPUs free
wastes 1 for a pod of 2 and 3 for a pod of 4). A 1-GPU pod on a node with 1 + 4 GPUs free takes the lone GPU and leaves
a whole zone (fragmentation drops); on a node with 4 + 1 free the kubelet gives it zone 0 and breaks the only zone a
4-GPU pod could use (it rises); a partly used zone is preferred to an empty one the same way. Lower is better, turned
into 0..100 with :data:`NEUTRAL` for no change. On a ``best-effort`` node the kubelet admits anything, so a placement it
cannot align scores 0. A node without zones or without a rule changes no zone and scores :data:`NEUTRAL`; a pod with
nothing aligned, or a cluster without objects, is not scored at all (the cycle skips the plugin), so nodes without
NodeResourceTopology keep today's choices. scheduler-plugins' NodeResourceTopologyMatch scores how full the zones are
(MostAllocated, BalancedAllocation per zone) or how few zones the pod takes (LeastNUMANodes); this one scores what the
placement leaves to the pods that come after it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import numpy as np

from scheduler.api.devices import numa, topology_manager
from scheduler.api.objects.pod import PodRequest
from scheduler.cache.state import Snapshot
from scheduler.framework import args as plugin_args
from scheduler.framework import reasons as framework_reasons
from scheduler.framework.interface import F64, I8, I64, ROOM_FREED, ClusterEvent, CycleState
from scheduler.framework.reasons import NeverFits, Reason
from scheduler.kernels import layout


def _refusals(snapshot: Snapshot, pod: PodRequest, slots: np.ndarray, *, ever: bool) -> Counter[str]:
    """The kubelet's reason on each node of ``slots``, counted (``ever``: on its zones empty)."""
    out: Counter[str] = Counter()
    names = snapshot.names
    for slot in slots.tolist():
        node = names[slot] if slot < len(names) else None
        zones = snapshot.numa.nodes.get(node) if node is not None else None
        if node is None or zones is None:
            continue
        available = [z.capacity for z in zones.zones] if ever else snapshot.numa_available(node)
        out[topology_manager.admit_pod(zones, pod, available=available).why or "NUMA zones"] += 1
    return out


def _too_small(snapshot: Snapshot, pod: PodRequest, nodes: np.ndarray) -> str:
    return "a node whose NUMA zones can hold it joins, its kubelet's policy lets it span zones, or it asks for less"


#: The zones have not enough left now: a pod leaving there, or the node's object showing that one did, may clear it.
FULL = Reason(
    -10,
    "node(s) had no NUMA zones with room for the pod",
    eviction_helps=True,
    short_of_room=True,
    wakes=ROOM_FREED,
    texts=lambda snapshot, pod, slots: _refusals(snapshot, pod, slots, ever=False),
)
#: The zones could not hold the pod even empty: only another node (or the kubelet's policy changed) can.
TOO_SMALL = Reason(
    -11,
    "node(s) had NUMA zones too small for the pod",
    eviction_helps=False,
    wakes=frozenset({ClusterEvent.NODE_ADDED, ClusterEvent.NODE_UPDATED}),
    texts=lambda snapshot, pod, slots: _refusals(snapshot, pod, slots, ever=True),
    never=NeverFits(change=_too_small),
)
#: The node's kubelet refused a pod of the same owner lately: its next pods try other nodes for a while (no event
#: clears it: the unschedulable pool's own timeout tries the pod again, after the memory's time is up).
KUBELET_REFUSED = Reason(
    -16,
    "node(s) whose kubelet refused a pod of the same owner (TopologyAffinityError)",
    eviction_helps=False,
    wakes=frozenset(),
)


#: How many pod shapes the filter remembers its answer for on one unchanged node.
_SHAPES_KEPT = 256


class Numa:
    name = "numa"
    reasons = (FULL, TOO_SMALL, KUBELET_REFUSED)

    def __init__(self, args: Mapping[str, Any]) -> None:
        plugin_args.check_keys(self.name, args, ())
        #: Node -> its zones and free amounts as the filter last read them (the very objects: the store makes new ones
        #: when the node changes), and the reason code it gave each pod shape there: the same shape on an unchanged
        #: node gets the same answer, without a replay.
        self._judged: dict[str, tuple[numa.NodeZones, Sequence[Mapping[str, int]], dict[Hashable, int]]] = {}

    def wakes(self, reason: int) -> frozenset[ClusterEvent] | None:
        return framework_reasons.wakes(self.reasons, reason)

    def filter(self, state: CycleState, reasons: I8) -> None:
        snapshot = state.snapshot
        pod = state.pod
        if pod.owner:
            for node in snapshot.kubelet_refusals.nodes(pod.owner):
                slot = snapshot.slot_of(node)
                if slot is not None and slot < reasons.shape[0] and reasons[slot] == layout.FIT:
                    reasons[slot] = KUBELET_REFUSED.code
        store = snapshot.numa
        if not store.nodes:
            return
        replay = topology_manager.PodReplay(pod)
        # Inside a what-if the free amounts are counted afresh for each node: nothing to remember them by.
        remember = not snapshot.what_if_pods
        names = snapshot.names
        for slot in np.flatnonzero(reasons == layout.FIT).tolist():
            name = names[slot] if slot < len(names) else None
            zones = store.nodes.get(name) if name is not None else None
            if zones is None or not zones.zones or replay.policy(zones) not in numa.ENFORCED:
                continue
            code = self._judge(zones, snapshot.numa_free(zones.node), replay, remember=remember)
            if code != layout.FIT:
                reasons[slot] = code

    def _judge(
        self,
        zones: numa.NodeZones,
        free: Sequence[Mapping[str, int]] | None,
        replay: topology_manager.PodReplay,
        *,
        remember: bool,
    ) -> int:
        """The filter's code for the pod of ``replay`` on the node of ``zones`` with ``free`` left."""
        known: dict[Hashable, int] | None = None
        shape: Hashable = None
        if remember and free is not None:
            memo = self._judged.get(zones.node)
            if memo is None or memo[0] is not zones or memo[1] is not free:
                memo = (zones, free, {})
                self._judged[zones.node] = memo
            known, shape = memo[2], replay.shape(zones)
            code = known.get(shape)
            if code is not None:
                return code
        if replay.admit(zones, available=free).admitted:
            code = layout.FIT
        elif replay.admit(zones, available=[z.capacity for z in zones.zones]).admitted:
            code = FULL.code
        else:
            code = TOO_SMALL.code
        if known is not None:
            if len(known) >= _SHAPES_KEPT:
                known.clear()  # a node whose object never changes (frozen) meets every shape: keep the memo small
            known[shape] = code
        return code

    def score(self, state: CycleState, nodes: I64, out: F64) -> bool:
        snapshot = state.snapshot
        store = snapshot.numa
        if not store.nodes:
            return False
        pod = state.pod
        names = snapshot.names
        scores = np.full(nodes.shape[0], NEUTRAL)
        said = False
        replay = topology_manager.PodReplay(pod)
        for at, slot in enumerate(nodes.tolist()):
            node = names[slot] if slot < len(names) else None
            zones = store.nodes.get(node) if node is not None else None
            if zones is None or not zones.zones:
                continue
            kept = zone_keeping(zones, pod, available=snapshot.numa_free(zones.node), replay=replay)
            if kept is not None:
                scores[at] = kept
                said = True
        if said:
            out[:] = scores
        return said


#: A node the score has nothing to say about (no zones, no rule there): the score of a placement that leaves the
#: zones' fragmentation as it was.
NEUTRAL = 50.0

#: How many pod sizes (an equal step up to the largest zone's capacity) the fragmentation is measured against.
_SIZES = 8


def _fragments(free: int, sizes: range) -> int:
    """What of ``free`` in one zone no pod of each size can use (summed over the sizes)."""
    return sum(free % size for size in sizes)


def zone_keeping(
    zones: numa.NodeZones,
    pod: PodRequest,
    *,
    available: Sequence[Mapping[str, int]] | None,
    replay: topology_manager.PodReplay | None = None,
) -> float | None:
    """The score (0..100, :data:`NEUTRAL` for a placement that changes nothing) of placing ``pod`` on the node of
    ``zones`` with ``available`` left in each zone (see the module's notes); None: no rule there, or nothing of the
    pod is aligned (it takes nothing of a zone). ``replay``: the pod's, when the caller scores it on many nodes."""
    replay = replay if replay is not None else topology_manager.PodReplay(pod)
    policy = replay.policy(zones)
    if policy == numa.Policy.NONE:
        return None
    left = available if available is not None else [dict(z.available) for z in zones.zones]
    taken = replay.admit(zones, available=left).taken
    if not any(taken):
        return None
    if policy == numa.Policy.BEST_EFFORT:
        strict = numa.NodeZones(zones.node, numa.Policy.RESTRICTED, zones.scope, zones.zones)
        if not replay.admit(strict, available=left).admitted:
            return 0.0  # the kubelet admits it spread over more zones than it needs
    per_resource: list[float] = []
    for name in sorted({name for t in taken for name in t}):
        largest = max(z.capacity.get(name, 0) for z in zones.zones)
        if largest <= 0:
            continue
        step = max(1, largest // _SIZES)
        sizes = range(step, largest + 1, step)
        before = sum(_fragments(a.get(name, 0), sizes) for a in left)
        after = sum(
            _fragments(max(0, a.get(name, 0) - t.get(name, 0)), sizes) for a, t in zip(left, taken, strict=True)
        )
        worst = sum(size - 1 for size in sizes) or 1  # one zone's fragments at most, about
        per_resource.append(min(1.0, max(-1.0, (after - before) / worst)))
    if not per_resource:
        return None
    return NEUTRAL * (1.0 - sum(per_resource) / len(per_resource))
