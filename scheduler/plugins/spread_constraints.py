"""Filter and score: pod topology spread constraints (kube-scheduler's PodTopologySpread).

For each constraint, the pods its selector names in the pod's namespace are counted per domain of its topology
key, over the nodes the constraint counts: nodes with every topology key of the pod's constraints (of the kind
at hand), matching the pod's node selector and required node affinity unless ``nodeAffinityPolicy: Ignore``,
with their taints tolerated when ``nodeTaintsPolicy: Honor``. One mask over pod ids (the cache's ``PodIndex``),
one ``bincount`` per constraint; what an open what-if placed or removed (a gang's earlier members) is added from
the snapshot.

Filter (``DoNotSchedule`` constraints), per constraint in order, first failing rule per node:

- the node lacks the topology key: ``MISSING_LABEL``, "node(s) didn't match pod topology spread
  constraints (missing required label)";
- placing the pod there would make its domain's count (plus one if the pod matches its own selector) exceed the
  smallest count of any counted domain by more than ``maxSkew``: ``SKEW``, "node(s) didn't match pod
  topology spread constraints". With fewer counted domains than ``minDomains``, the smallest count is 0.

Score (``ScheduleAnyway`` constraints; for a pod with no constraints at all, kube-scheduler's cluster defaults:
hostname with maxSkew 3 and zone with maxSkew 5 over the pods of the same controller, except for a gang's
members, which the gang's own score keeps together): per constraint
``count × log(domains + 2) + maxSkew - 1``, summed, then turned so that the node with the fewest matching pods
scores 100 (kube-scheduler's normalisation); nodes missing a key of the pod's own constraints score 0.

A pod without constraints and without a controller costs nothing (the simulator's pods have neither).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from scheduler.api.objects import affinity as api_affinity
from scheduler.api.objects import selectors
from scheduler.api.objects.affinity import AffinityTerm, SpreadConstraint
from scheduler.api.objects.pod import PodRequest
from scheduler.cache import pods_index
from scheduler.cache.state import Snapshot
from scheduler.framework import args as plugin_args
from scheduler.framework import reasons as framework_reasons
from scheduler.framework.interface import F64, I8, I64, ClusterEvent, CycleState
from scheduler.framework.reasons import Reason
from scheduler.kernels import layout

B = npt.NDArray[np.bool_]
HOSTNAME = "kubernetes.io/hostname"

#: A skew shrinks when a counted pod leaves (or, for a domain short of pods, when one arrives: not an event the
#: loop is told of yet) or when nodes change (domains, labels, taints).
_SKEW_CLEARED = frozenset({ClusterEvent.POD_DELETED, ClusterEvent.NODE_ADDED, ClusterEvent.NODE_UPDATED})
_LABEL_CLEARED = frozenset({ClusterEvent.NODE_ADDED, ClusterEvent.NODE_UPDATED})
#: The skew: evicting selected pods (in this node's domain, or in others) may even it.
SKEW = Reason(
    15,
    "node(s) didn't match pod topology spread constraints",
    eviction_helps=True,
    across_nodes=True,
    wakes=_SKEW_CLEARED,
)
MISSING_LABEL = Reason(
    -2,
    "node(s) didn't match pod topology spread constraints (missing required label)",
    eviction_helps=False,
    wakes=_LABEL_CLEARED,
)


def _term(pod: PodRequest, c: SpreadConstraint) -> AffinityTerm:
    return AffinityTerm(c.selector, frozenset({pod.namespace}), c.topology_key)


def _pods_per_slot(snap: Snapshot, term: AffinityTerm) -> npt.NDArray[np.int64]:
    """How many pods ``term`` selects on each node slot (cache and open what-ifs)."""
    index = snap.pod_index
    slots = index.slot[index.select(term)]
    size = snap.slots
    counts = np.bincount(slots[slots < size], minlength=size).astype(np.int64)
    for sign, pod, slot in snap.what_if_pods:
        if slot < size and term.matches(pod.namespace, pods_index.selection_labels(pod)):
            counts[slot] += sign
    return counts


def _tolerated(snap: Snapshot, pod: PodRequest) -> B:
    ok = np.ones(snap.slots, dtype=bool)
    for slot, taints in snap.taints.items():
        if slot < ok.shape[0] and not selectors.tolerated(taints, pod.tolerations):
            ok[slot] = False
    return ok


class _Nodes:
    """The node masks a cycle's constraints share, computed once."""

    def __init__(self, snap: Snapshot, pod: PodRequest, constraints: Sequence[SpreadConstraint]) -> None:
        self.snap, self.pod = snap, pod
        size = snap.slots
        self.has_keys = np.ones(size, dtype=bool)
        for c in constraints:
            self.has_keys &= snap.topology_domains(c.topology_key)[0][:size] >= 0
        self.has_keys &= snap.arrays.base_reason[:size] != layout.ABSENT
        self._affinity: B | None = None
        self._taints: B | None = None

    def counted(self, c: SpreadConstraint) -> B:
        mask = self.has_keys.copy()
        if c.honor_affinity and (self.pod.node_selector or self.pod.affinity):
            if self._affinity is None:
                self._affinity = self.snap.select(self.pod.node_selector, self.pod.affinity)[: mask.shape[0]]
            mask &= self._affinity
        if c.honor_taints:
            if self._taints is None:
                self._taints = _tolerated(self.snap, self.pod)
            mask &= self._taints
        return mask


class TopologySpread:
    name = "topology_spread"
    reasons = (SKEW, MISSING_LABEL)

    def __init__(self, args: Mapping[str, Any]) -> None:
        plugin_args.check_keys(self.name, args, ())

    def wakes(self, reason: int) -> frozenset[ClusterEvent] | None:
        return framework_reasons.wakes(self.reasons, reason)

    # --- filter ----------------------------------------------------------------------------------------------

    def filter(self, state: CycleState, reasons: I8) -> None:
        pod, snap = state.pod, state.snapshot
        if not pod.spread:
            return
        constraints = [c for c in pod.spread if c.hard]
        if not constraints:
            return
        nodes = _Nodes(snap, pod, constraints)
        size = min(reasons.shape[0], snap.slots)
        head = reasons[:size]
        for c in constraints:
            domains, count = snap.topology_domains(c.topology_key)
            domains = domains[:size]
            counted = nodes.counted(c)[:size]
            per_slot = _pods_per_slot(snap, _term(pod, c))[:size]
            inside = counted & (domains >= 0)
            # One spare entry, so that nodes without the key read a 0 even when no node has it.
            per_domain = np.bincount(domains[inside], weights=per_slot[inside], minlength=count + 1)
            present = np.bincount(domains[inside], minlength=count + 1) > 0
            smallest = float(per_domain[present].min()) if present.any() else 0.0
            if int(present.sum()) < c.min_domains:
                smallest = 0.0
            own = 1.0 if c.selector.matches(pods_index.selection_labels(pod)) else 0.0
            missing = domains < 0
            head[(head == layout.FIT) & missing] = MISSING_LABEL.code
            at = np.where(missing, 0.0, per_domain[np.where(missing, count, domains)])
            head[(head == layout.FIT) & ~missing & (at + own - smallest > c.max_skew)] = SKEW.code

    # --- score -----------------------------------------------------------------------------------------------

    def score(self, state: CycleState, nodes: I64, out: F64) -> bool:
        pod, snap = state.pod, state.snapshot
        if not pod.spread and ((not pod.owner and not pod.service_labels) or pod.pod_group):
            return False
        own = [c for c in pod.spread if not c.hard]
        constraints: Sequence[SpreadConstraint] = own
        defaulted = not pod.spread
        if defaulted and not pod.pod_group:
            # A gang member is placed by the gang's own rules (the gang score packs it with its peers).
            constraints = api_affinity.default_spread(pod.owner, pod.service_labels)
        if not constraints:
            return False
        require_all = not defaulted
        masks = _Nodes(snap, pod, constraints if require_all else ())
        size = snap.slots
        scored = np.zeros(size, dtype=bool)
        scored[nodes] = True
        ignored = scored & ~masks.has_keys if require_all else np.zeros(size, dtype=bool)
        candidates = scored & ~ignored
        total = np.zeros(size)
        for c in constraints:
            domains, count = snap.topology_domains(c.topology_key)
            domains = domains[:size]
            per_slot = _pods_per_slot(snap, _term(pod, c))[:size].astype(np.float64)
            has_key = domains >= 0
            if c.topology_key == HOSTNAME:
                domains_scored = int(candidates.sum())
                at = per_slot
            else:
                # Domains of the nodes scored; pods counted over the nodes the constraint counts, in those domains.
                wanted = np.zeros(count + 1, dtype=bool)  # one spare entry, read by nodes without the key
                wanted[domains[candidates & has_key]] = True
                domains_scored = int(wanted.sum())
                at_domain = np.where(has_key, domains, count)
                counted = masks.counted(c) & has_key & wanted[at_domain]
                per_domain = np.bincount(domains[counted], weights=per_slot[counted], minlength=count + 1)
                at = np.where(has_key, per_domain[at_domain], 0.0)
            weight = math.log(domains_scored + 2)
            total += np.where(has_key, at * weight + (c.max_skew - 1), 0.0)
        raw = np.round(total[nodes])
        keep = ~ignored[nodes]
        if not keep.any():
            return False
        low, high = float(raw[keep].min()), float(raw[keep].max())
        if high == 0.0:
            out[:] = np.where(keep, 100.0, 0.0)
            return True
        out[:] = np.where(keep, np.floor(100.0 * (high + low - raw) / high), 0.0)
        return True
