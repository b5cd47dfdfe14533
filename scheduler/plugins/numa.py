"""Filter: NUMA zones (issue 42): a node only where its kubelet's Topology Manager will admit the pod.

On a node whose NodeResourceTopology says its kubelet runs the Topology Manager with ``single-numa-node`` or
``restricted`` (or where the pod asks for one of them itself, by Koordinator's annotation, and the kubelet enforces
none), the pod's aligned resources (devices for any pod, whole CPUs and memory for a Guaranteed one) must fit the
node's zones as the kubelet would fit them (``scheduler.api.devices.topology_manager``); else the kubelet refuses the
pod
with ``TopologyAffinityError`` and its controller makes another, which a NUMA-blind scheduler sends to the same node.
What the zones have left is the cache's own count (``scheduler.cache.numa_store``: the published figures lag behind
the pods just bound), less what the pods placed earlier in the same what-if take (a gang's members, in order).

Two reasons: zones too full now (an eviction or a pod leaving may clear it), and zones too small for the pod ever
(only another node can hold it: the never-fits sentence says so). A node without an object, or with policy ``none``
or ``best-effort``, is never refused; a cluster without objects pays one test of an empty dict per pod.

A third, for what the replay got wrong: a node whose kubelet refused a pod of the same owner lately
(``TopologyAffinityError``, ``scheduler.cache.kubelet_refusals``) is refused to the owner's next pods for a while,
object or not, so that the replacement its controller makes tries another node instead of the same refusal again.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

import numpy as np

from scheduler.api.devices import numa, topology_manager
from scheduler.api.objects.pod import PodRequest
from scheduler.cache.state import Snapshot
from scheduler.framework import args as plugin_args
from scheduler.framework import reasons as framework_reasons
from scheduler.framework.interface import I8, ROOM_FREED, ClusterEvent, CycleState
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


class Numa:
    name = "numa"
    reasons = (FULL, TOO_SMALL, KUBELET_REFUSED)

    def __init__(self, args: Mapping[str, Any]) -> None:
        plugin_args.check_keys(self.name, args, ())

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
        for node, zones in store.nodes.items():
            if topology_manager.policy_for(zones, pod.numa) not in numa.ENFORCED or not zones.zones:
                continue
            slot = snapshot.slot_of(node)
            if slot is None or slot >= reasons.shape[0] or reasons[slot] != layout.FIT:
                continue
            if topology_manager.admit_pod(zones, pod, available=snapshot.numa_available(node)).admitted:
                continue
            empty = [z.capacity for z in zones.zones]
            ever = topology_manager.admit_pod(zones, pod, available=empty).admitted
            reasons[slot] = FULL.code if ever else TOO_SMALL.code
