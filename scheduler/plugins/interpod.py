"""Filter and score: inter-pod affinity and anti-affinity (kube-scheduler's InterPodAffinity).

Everything is counted per topology domain, for every node at once: the cache gives, per node slot, the domain of
a topology key (``Snapshot.topology_domains``) and the pods a term selects (``PodIndex.select``, a mask over pod
ids); their count per domain is one ``bincount``, and a node's verdict that count read at its domain. Pods placed
or removed by an open what-if (a gang's members placed earlier in the same what-if, a reclaim's victims) are
added to the counts from the snapshot, so a member's anti-affinity holds inside its gang.

Filter, in kube-scheduler's order, first failing rule per node:

1. the pod's required affinity: every term's topology key is on the node, and in the node's domain of each key
   some pod matches a term with that key (``POD_AFFINITY``, "node(s) didn't match pod affinity rules").
   When no pod anywhere matches any term and the pod matches all its own terms, it may go to any node with all
   the keys (the first of a set of pods with affinity to each other);
2. the pod's required anti-affinity: no pod selected by a term in the node's domain of its key
   (``POD_ANTI_AFFINITY``, "node(s) didn't match pod anti-affinity rules");
3. existing pods' required anti-affinity: no pod whose anti-affinity term selects this pod in the node's domain
   of that term's key (``EXISTING_ANTI_AFFINITY``, "node(s) didn't satisfy existing pods anti-affinity
   rules").

Score (kube-scheduler's, normalised to 0..100 over the nodes scored, 0 everywhere when all are equal): per
domain, + weight for each pod a preferred affinity term selects, - weight for each a preferred anti-affinity
term selects; and the other way round, + weight (1 for a required affinity term) for each pod whose affinity
term selects this pod, - weight for each whose preferred anti-affinity term does. A node sums the scores of its
domains over every topology key.

A pod without affinity terms, in a cluster where no pod held carries any, costs two dictionary look-ups.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from scheduler.api.objects.affinity import AffinityTerm
from scheduler.api.objects.pod import PodRequest
from scheduler.cache import pods_index
from scheduler.cache.state import Snapshot
from scheduler.framework import args as plugin_args
from scheduler.framework import reasons as framework_reasons
from scheduler.framework.interface import F64, I8, I64, ClusterEvent, CycleState
from scheduler.framework.reasons import Reason
from scheduler.kernels import layout

B = npt.NDArray[np.bool_]

#: Anti-affinity is cleared by a selected pod leaving, or by a node's labels changing (its domain); a node added
#: may be in a free domain.
_ANTI_CLEARED = frozenset({ClusterEvent.POD_DELETED, ClusterEvent.NODE_ADDED, ClusterEvent.NODE_UPDATED})
#: No pod leaving makes a node meet the pod's affinity; it is met when a selected pod arrives, an event the loop is
#: not told of yet: any event may help.
POD_AFFINITY = Reason(12, "node(s) didn't match pod affinity rules", eviction_helps=False)
#: Pods the pod's anti-affinity selects, or pods whose anti-affinity selects it, in the node's domain: evicting them
#: (on this node or another of the domain) clears it.
POD_ANTI_AFFINITY = Reason(
    13, "node(s) didn't match pod anti-affinity rules", eviction_helps=True, across_nodes=True, wakes=_ANTI_CLEARED
)
EXISTING_ANTI_AFFINITY = Reason(
    14,
    "node(s) didn't satisfy existing pods anti-affinity rules",
    eviction_helps=True,
    across_nodes=True,
    wakes=_ANTI_CLEARED,
)


def _domain_counts(snap: Snapshot, term: AffinityTerm, domains: I64, count: int) -> npt.NDArray[np.int64]:
    """How many pods ``term`` selects in each domain of ``domains`` (cache and open what-ifs)."""
    index = snap.pod_index
    selected = index.select(term)
    slots = index.slot[selected]
    slots = slots[slots < domains.shape[0]]
    at = domains[slots]
    counts = np.bincount(at[at >= 0], minlength=count).astype(np.int64)
    for sign, pod, slot in snap.what_if_pods:
        if slot < domains.shape[0] and domains[slot] >= 0 and term.matches(pod.namespace, pod.labels):
            counts[domains[slot]] += sign
    return counts


def _term_slots(snap: Snapshot, kind: str, pod: PodRequest) -> list[tuple[AffinityTerm, int, npt.NDArray[np.int64]]]:
    """The terms of ``kind`` that select ``pod``, carried by the pods held (and by what open what-ifs placed or
    removed): (term, weight, per node slot the number of pods there carrying it)."""
    found: dict[tuple[AffinityTerm, int], npt.NDArray[np.int64]] = {}
    for (k, term, weight), held in snap.pod_index.terms.items():
        if k == kind and term.matches(pod.namespace, pod.labels):
            found[(term, weight)] = held.astype(np.int64)
    for sign, placed, slot in snap.what_if_pods:
        if not placed.pod_affinity:
            continue
        for k, term, weight in pods_index.terms_of(placed):
            if k != kind or not term.matches(pod.namespace, pod.labels):
                continue
            counts = found.get((term, weight))
            if counts is None or counts.shape[0] <= slot:
                grown = np.zeros(max(slot + 1, snap.slots), dtype=np.int64)
                if counts is not None:
                    grown[: counts.shape[0]] = counts
                counts = grown
            counts[slot] += sign
            found[(term, weight)] = counts
    return [(term, weight, counts) for (term, weight), counts in found.items()]


def _carried(snap: Snapshot, kind: str) -> bool:
    """Whether a pod held, or placed by an open what-if, carries a term of ``kind`` (without building the pod index
    when no pod held carries any)."""
    return (snap.pods_with_terms > 0 and snap.pod_index.has(kind)) or any(
        p.pod_affinity and any(k == kind for k, _, _ in pods_index.terms_of(p)) for _, p, _ in snap.what_if_pods
    )


def _at(values: npt.NDArray[Any], domains: I64, size: int) -> npt.NDArray[Any]:
    """``values`` read at each slot's domain (the first ``size`` slots); 0 where a slot has none."""
    out = np.zeros(size, dtype=values.dtype)
    d = domains[:size]
    inside = d >= 0
    out[: d.shape[0]][inside] = values[d[inside]]
    return out


class InterPodAffinity:
    name = "interpod"
    reasons = (POD_AFFINITY, POD_ANTI_AFFINITY, EXISTING_ANTI_AFFINITY)

    def __init__(self, args: Mapping[str, Any]) -> None:
        plugin_args.check_keys(self.name, args, ())

    def wakes(self, reason: int) -> frozenset[ClusterEvent] | None:
        return framework_reasons.wakes(self.reasons, reason)

    # --- filter ----------------------------------------------------------------------------------------------

    def filter(self, state: CycleState, reasons: I8) -> None:
        pod, snap = state.pod, state.snapshot
        affinity = pod.pod_affinity
        if not affinity and not snap.pods_with_terms and not snap.what_if_pods:
            return
        existing = _carried(snap, pods_index.ANTI_REQUIRED)
        if not affinity.required and not affinity.anti_required and not existing:
            return
        size = reasons.shape[0]
        if affinity.required:
            ok = self._affinity_ok(snap, pod, size)
            reasons[(reasons == layout.FIT) & ~ok] = POD_AFFINITY.code
        if affinity.anti_required:
            blocked = np.zeros(size, dtype=bool)
            for term in affinity.anti_required:
                domains, count = snap.topology_domains(term.topology_key)
                blocked |= _at(_domain_counts(snap, term, domains, count) > 0, domains, size)
            reasons[(reasons == layout.FIT) & blocked] = POD_ANTI_AFFINITY.code
        if existing:
            blocked = np.zeros(size, dtype=bool)
            for term, _, counts in _term_slots(snap, pods_index.ANTI_REQUIRED, pod):
                domains, count = snap.topology_domains(term.topology_key)
                blocked |= _at(self._per_domain(counts, domains, count) > 0, domains, size)
            reasons[(reasons == layout.FIT) & blocked] = EXISTING_ANTI_AFFINITY.code

    @staticmethod
    def _per_domain(per_slot: npt.NDArray[np.int64], domains: I64, count: int) -> npt.NDArray[np.int64]:
        n = min(per_slot.shape[0], domains.shape[0])
        d = domains[:n]
        inside = d >= 0
        return np.bincount(d[inside], weights=per_slot[:n][inside], minlength=count).astype(np.int64)

    def _affinity_ok(self, snap: Snapshot, pod: PodRequest, size: int) -> B:
        by_key: dict[str, npt.NDArray[np.int64]] = {}
        domains_of: dict[str, I64] = {}
        for term in pod.pod_affinity.required:
            key = term.topology_key
            domains, count = snap.topology_domains(key)
            domains_of[key] = domains
            counts = _domain_counts(snap, term, domains, count)
            # As kube-scheduler, counts are kept per (topology key, value), summed over the terms with that key.
            by_key[key] = by_key[key] + counts if key in by_key else counts
        has_keys = np.ones(size, dtype=bool)
        pods_exist = np.ones(size, dtype=bool)
        for key, counts in by_key.items():
            domains = domains_of[key]
            present = np.zeros(size, dtype=bool)
            present[: min(size, domains.shape[0])] = domains[:size] >= 0
            has_keys &= present
            pods_exist &= _at(counts > 0, domains, size)
        if not any(int(c.sum()) > 0 for c in by_key.values()) and all(
            t.matches(pod.namespace, pod.labels) for t in pod.pod_affinity.required
        ):
            return has_keys  # the first of a set of pods with affinity to each other
        return has_keys & pods_exist

    # --- score -----------------------------------------------------------------------------------------------

    def score(self, state: CycleState, nodes: I64, out: F64) -> bool:
        pod, snap = state.pod, state.snapshot
        affinity = pod.pod_affinity
        if not affinity and not snap.pods_with_terms and not snap.what_if_pods:
            return False
        kinds = (pods_index.AFFINITY_REQUIRED, pods_index.AFFINITY_PREFERRED, pods_index.ANTI_PREFERRED)
        carried = [kind for kind in kinds if _carried(snap, kind)]
        if not affinity.preferred and not affinity.anti_preferred and not carried:
            return False
        size = snap.slots
        total = np.zeros(size)
        for weighted, sign in ((affinity.preferred, 1.0), (affinity.anti_preferred, -1.0)):
            for w in weighted:
                domains, count = snap.topology_domains(w.term.topology_key)
                counts = _domain_counts(snap, w.term, domains, count)
                total += sign * w.weight * _at(counts.astype(np.float64), domains, size)
        for kind in carried:
            sign = -1.0 if kind == pods_index.ANTI_PREFERRED else 1.0
            for term, weight, per_slot in _term_slots(snap, kind, pod):
                domains, count = snap.topology_domains(term.topology_key)
                per_domain = self._per_domain(per_slot, domains, count).astype(np.float64)
                total += sign * weight * _at(per_domain, domains, size)
        scores = total[nodes]
        low, high = (float(scores.min()), float(scores.max())) if scores.shape[0] else (0.0, 0.0)
        # kube-scheduler truncates the normalised score to an integer.
        out[:] = np.floor(100.0 * (scores - low) / (high - low)) if high > low else 0.0
        return True
