"""Indexes over the pods the cache holds, for filters that look at other pods rather than at free room.

:class:`PodIndex` selects the pods an inter-pod affinity term names, for every pod at once, and keeps the terms
the pods held carry, per node slot (``scheduler.plugins.interpod`` turns both into counts per topology domain).

:class:`PortIndex` answers "on which nodes does this pod's host port conflict?" for every node at once: per
(protocol, port) in use anywhere, per node slot the number of pods using it on every address (``0.0.0.0``),
and the number using it on each specific address. A pod without host ports costs nothing here; a pod with some
costs one array expression per port, however many nodes and pods there are.

The cache keeps it in step (:meth:`scheduler.cache.state.Cache._add` and ``remove_pod``); a what-if's own
placements are not in it (see ``Snapshot.what_if_pods``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
import numpy.typing as npt

from scheduler.api.objects.affinity import ALL_NAMESPACES, OWNER_KEY, AffinityTerm
from scheduler.api.objects.host_ports import ANY_IP, HostPort
from scheduler.api.objects.pod import PodRequest
from scheduler.cache.labels import LabelIndex

I32 = npt.NDArray[np.int32]
B = npt.NDArray[np.bool_]


class _PortUse:
    """Per node slot, how many pods use one (protocol, port): on every address, and on each specific one."""

    __slots__ = ("any_ip", "by_ip")

    def __init__(self, slots: int) -> None:
        self.any_ip: I32 = np.zeros(slots, dtype=np.int32)
        self.by_ip: dict[str, I32] = {}

    def add(self, slot: int, ip: str, sign: int) -> None:
        if ip == ANY_IP:
            self.any_ip = _fit(self.any_ip, slot)
            self.any_ip[slot] += sign
            return
        counts = self.by_ip.get(ip)
        counts = _fit(counts if counts is not None else np.zeros(slot + 1, dtype=np.int32), slot)
        counts[slot] += sign
        if counts.any():
            self.by_ip[ip] = counts
        else:
            self.by_ip.pop(ip, None)

    @property
    def empty(self) -> bool:
        return not self.by_ip and not self.any_ip.any()


def _fit(counts: I32, slot: int) -> I32:
    if slot < counts.shape[0]:
        return counts
    grown = np.zeros(max(slot + 1, 2 * counts.shape[0]), dtype=np.int32)
    grown[: counts.shape[0]] = counts
    return grown


def _at_least(mask: B, counts: I32) -> None:
    size = min(mask.shape[0], counts.shape[0])
    mask[:size] |= counts[:size] > 0


class PortIndex:
    """(protocol, port) -> per node slot, the pods using it; kept in step with the cache's pods."""

    def __init__(self) -> None:
        self._uses: dict[tuple[str, int], _PortUse] = {}

    def add(self, slot: int, ports: Iterable[HostPort], sign: int = 1) -> None:
        """Count (``sign`` = 1) or uncount (-1) a pod's host ports on node ``slot``."""
        for port in ports:
            key = (port.protocol, port.port)
            use = self._uses.get(key)
            if use is None:
                use = self._uses[key] = _PortUse(slot + 1)
            use.add(slot, port.ip, sign)
            if use.empty:
                del self._uses[key]

    def conflicts(self, ports: Iterable[HostPort], slots: int) -> B:
        """Per node slot (``slots`` of them), whether some pod there holds a port conflicting with ``ports``."""
        mask = np.zeros(slots, dtype=bool)
        for port in ports:
            use = self._uses.get((port.protocol, port.port))
            if use is None:
                continue
            _at_least(mask, use.any_ip)
            if port.ip == ANY_IP:
                for counts in use.by_ip.values():
                    _at_least(mask, counts)
            else:
                specific = use.by_ip.get(port.ip)
                if specific is not None:
                    _at_least(mask, specific)
        return mask

    def __len__(self) -> int:
        return len(self._uses)


class PodIndex:
    """The pods the cache holds, by a small integer id: each one's node slot, namespace and labels (inverted), so
    that the pods an affinity term selects are a boolean mask over ids built from a few set operations, and their
    count per topology domain one ``bincount``.

    Alongside, the affinity terms of the pods held (:attr:`terms`): per (kind, term, weight), per node slot the
    number of pods there carrying that term. Pods of one workload share their terms, so the distinct terms are
    few however many pods carry them.
    """

    def __init__(self) -> None:
        self._id: dict[str, int] = {}
        self._free: list[int] = []
        self.slot: npt.NDArray[np.int64] = np.full(64, -1, dtype=np.int64)
        self.labels = LabelIndex()
        self._namespace: dict[str, set[int]] = {}
        self._namespace_of: dict[int, str] = {}
        #: (kind, term, weight) -> per node slot, how many pods there carry it (kinds: ``TERM_KINDS``).
        self.terms: dict[tuple[str, AffinityTerm, int], I32] = {}
        #: kind -> how many distinct terms of that kind are held (so that "none" is one look-up).
        self._kinds: dict[str, int] = {}

    @property
    def size(self) -> int:
        return int(self.slot.shape[0])

    def add(self, pod: PodRequest, slot: int) -> None:
        pod_id = self._free.pop() if self._free else len(self._id)
        self._id[pod.key] = pod_id
        if pod_id >= self.slot.shape[0]:
            grown = np.full(2 * self.slot.shape[0], -1, dtype=np.int64)
            grown[: self.slot.shape[0]] = self.slot
            self.slot = grown
        self.slot[pod_id] = slot
        self._namespace.setdefault(pod.namespace, set()).add(pod_id)
        self._namespace_of[pod_id] = pod.namespace
        if pod.labels or pod.owner:
            self.labels.assign(pod_id, selection_labels(pod))
        if pod.pod_affinity:
            self._count_terms(pod, slot, 1)

    def remove(self, pod: PodRequest, slot: int) -> None:
        pod_id = self._id.pop(pod.key, None)
        if pod_id is None:
            return
        self.slot[pod_id] = -1
        namespace = self._namespace_of.pop(pod_id)
        members = self._namespace[namespace]
        members.discard(pod_id)
        if not members:
            del self._namespace[namespace]
        self.labels.clear(pod_id)
        self._free.append(pod_id)
        if pod.pod_affinity:
            self._count_terms(pod, slot, -1)

    def relabel(self, old: PodRequest, new: PodRequest, slot: int) -> None:
        """A held pod's labels or terms changed (labels are mutable; terms are not, but cost nothing to redo)."""
        if old.labels != new.labels or old.pod_affinity != new.pod_affinity:
            self.remove(old, slot)
            self.add(new, slot)

    def _count_terms(self, pod: PodRequest, slot: int, sign: int) -> None:
        for kind, term, weight in terms_of(pod):
            key = (kind, term, weight)
            counts = self.terms.get(key)
            if counts is None:
                self._kinds[kind] = self._kinds.get(kind, 0) + 1
                counts = np.zeros(slot + 1, dtype=np.int32)
            counts = _fit(counts, slot)
            counts[slot] += sign
            if counts.any():
                self.terms[key] = counts
            elif self.terms.pop(key, None) is not None:
                self._kinds[kind] -= 1
                if not self._kinds[kind]:
                    del self._kinds[kind]

    def has(self, kind: str) -> bool:
        return kind in self._kinds

    def select(self, term: AffinityTerm) -> B:
        """Per pod id, whether the pod is held and selected by ``term`` (its namespaces and label selector)."""
        size = self.size
        if term.selector.nothing:
            return np.zeros(size, dtype=bool)
        if term.namespaces == ALL_NAMESPACES:
            mask = self.slot >= 0
        else:
            ids: set[int] = set()
            for namespace in term.namespaces:
                ids |= self._namespace.get(namespace, set())
            mask = np.zeros(size, dtype=bool)
            if ids:
                mask[np.fromiter(ids, dtype=np.int64, count=len(ids))] = True
        for requirement in term.selector.requirements:
            if not mask.any():
                break
            mask &= self.labels.requirement(requirement, size)
        return mask


def selection_labels(pod: PodRequest) -> Mapping[str, str]:
    """The labels selectors see on a pod: its own, and its controller under ``OWNER_KEY`` (default spreading)."""
    return {**pod.labels, OWNER_KEY: pod.owner} if pod.owner else pod.labels


#: The kinds of affinity terms the index keeps, from the pods held.
ANTI_REQUIRED = "anti-required"
AFFINITY_REQUIRED = "affinity-required"
AFFINITY_PREFERRED = "affinity-preferred"
ANTI_PREFERRED = "anti-preferred"


def terms_of(pod: PodRequest) -> list[tuple[str, AffinityTerm, int]]:
    """A pod's affinity terms as (kind, term, weight); required terms weigh 1 (kube-scheduler's default
    ``hardPodAffinityWeight`` for the score)."""
    a = pod.pod_affinity
    found = [(ANTI_REQUIRED, t, 1) for t in a.anti_required]
    found += [(AFFINITY_REQUIRED, t, 1) for t in a.required]
    found += [(AFFINITY_PREFERRED, w.term, w.weight) for w in a.preferred]
    found += [(ANTI_PREFERRED, w.term, w.weight) for w in a.anti_preferred]
    return found
