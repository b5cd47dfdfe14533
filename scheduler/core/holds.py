"""Holds: node slots kept for one job while it waits, which every other job's cycle must leave alone.

Two kinds, both applied by the core to every cycle (``Scheduler.place`` treats ``Context.reserved`` as
unavailable, and counts ``Context.nominated`` on their nodes), whatever plugins the profile names:

- a *nomination*: the room a job's preemption is freeing (like kube-scheduler's nominated node). Without it the
  capacity goes to whoever comes first and the preemptor preempts again. Kept, with the pods it evicted, until the
  job is placed or gone; once every victim is gone and the job still does not fit, it is dropped. A single pod
  nominated by within-queue preemption is counted as kube-scheduler counts it: placed on its node in the cycles
  (and victim searches) of pods of its priority or lower only (``Context.nominated``), so that a pod of equal
  priority does not take its room but still fits beside it where the node holds both. Its GPUs and its claims'
  devices are chosen there as its own cycle would choose them with its victims gone
  (``Scheduler.add_nominated``): whole GPUs are only to be had whole, so counting its milli on the node would not
  keep the devices it needs free. The pod as its latest update shows it is counted (:meth:`Holds.pod_updated`).
  Every other nomination (a gang's, reclaim's) holds the whole nodes its victims free. A gang's or a reclaim's
  victim search sees these nodes as the job's cycles will once its own victims free room (:meth:`Holds.in_search`):
  on a node held for a job of its priority or lower only what its own victims free counts (the room already free
  there is the holder's), and a node held for a job of higher priority not at all.
- a *reservation* against starvation (off unless ``reserve_after_s`` is set): the best-ranked job of 2+ whole GPUs
  that has waited that long without room holds the nodes with the most free GPUs until their GPUs cover it; other
  jobs backfill only elsewhere. Off by default: without run-time estimates a reservation idles GPUs while its nodes
  drain (on the built-in gang scenario it cost 15 points of GPU allocation), so it is for fairness-first clusters.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from scheduler.api.pod import PodRequest
from scheduler.cache.state import Cache
from scheduler.core.cycle import NominatedPod
from scheduler.core.jobs import Attempt
from scheduler.core.tenancy import Tenancy
from scheduler.kernels import layout


class Holds:
    def __init__(
        self, cache: Cache, tenancy: Tenancy, *, clock: Callable[[], float], reserve_after_s: float | None
    ) -> None:
        self.cache = cache
        self.tenancy = tenancy
        self.clock = clock
        self.reserve_after_s = reserve_after_s
        #: Job key -> the node slots its preemption is freeing.
        self.nominated: dict[str, np.ndarray] = {}
        #: Job key -> the pods its preemption evicted (while any is there, the job waits instead of preempting).
        self.evicting: dict[str, list[str]] = {}
        #: Job key -> (the pod, its node, its request vector) for a single pod counted by its requests (the module
        #: notes); such a job has no entry in :attr:`nominated`.
        self.pods: dict[str, tuple[PodRequest, str, np.ndarray]] = {}
        #: Job key -> the priority of a job with a nomination.
        self.priority: dict[str, int] = {}
        #: (job key, its leaf queue, reserved node slots) for the job held against starvation.
        self.reservation: tuple[str, str, np.ndarray] | None = None

    def reserved(self, key: str) -> np.ndarray | None:
        """The node slots job ``key``'s cycles must leave alone (None: none): the reservation and the nominations,
        unless they are its own.
        A job with a nomination of its own ignores the others' of its priority or lower (preemptors whose victims
        share a node would otherwise keep each other off it; their victims are disjoint and freed room for all of
        them), not those of higher priority: as kube-scheduler counts a nominated pod against pods of its priority
        or lower, the room a higher-priority preemptor waits for is its own first."""
        if key in self.nominated:
            own = self.priority.get(key, 0)
            masks = [m for owner, m in self.nominated.items() if owner != key and self.priority.get(owner, 0) > own]
        else:
            masks = [mask for owner, mask in self.nominated.items() if owner != key]
        if self.reservation is not None and self.reservation[0] != key:
            masks.append(self.reservation[2])
        return union(masks)

    def in_search(self, key: str, priority: int) -> tuple[np.ndarray | None, np.ndarray | None]:
        """How job ``key``'s victim search (at ``priority``) sees the nodes held for others, as its cycles will once
        its victims free room for it (:meth:`context`, with a nomination of its own): ``(kept, shared)``. ``kept``:
        the nodes those cycles still leave alone (nominations of higher priority, the reservation), left out of the
        search. ``shared``: the other nominations' nodes, of its priority or lower, which those cycles may use; of
        their room only what its own victims free is the job's, the rest is freed for their holders (None: none)."""
        masks = [m for owner, m in self.nominated.items() if owner != key and self.priority.get(owner, 0) > priority]
        if self.reservation is not None and self.reservation[0] != key:
            masks.append(self.reservation[2])
        kept = union(masks)
        shared = union(
            [m for owner, m in self.nominated.items() if owner != key and self.priority.get(owner, 0) <= priority]
        )
        if shared is not None and kept is not None:
            size = min(shared.shape[0], kept.shape[0])
            shared[:size] &= ~kept[:size]
        return kept, shared if shared is not None and shared.any() else None

    def nominated_for_others(self, key: str, priority: int) -> np.ndarray | None:
        """The node slots nominated for jobs other than ``key`` of ``priority`` or higher (None: none), which a
        single pod's victim search leaves out: kube-scheduler adds such a nominated pod to its node before it looks
        for victims there, and a hold here is the whole node."""
        return union(
            [m for owner, m in self.nominated.items() if owner != key and self.priority.get(owner, 0) >= priority]
        )

    def nominated_pods(self, key: str, priority: int) -> list[NominatedPod]:
        """The single pods nominated for jobs other than ``key`` of ``priority`` or higher, which a pod of
        ``priority`` counts on their nodes (kube-scheduler's addNominatedPods), the higher priority first (placed in
        that order, the devices a node holds go to them in that order)."""
        found: list[tuple[int, NominatedPod]] = []
        for owner, (pod, node, request) in self.pods.items():
            own = self.priority.get(owner, 0)
            if owner == key or own < priority:
                continue
            slot = self.cache.slot_of(node)
            if slot is not None:
                found.append((own, NominatedPod(pod, slot, request, tuple(self.evicting.get(owner, ())))))
        found.sort(key=lambda entry: -entry[0])
        return [nominated for _, nominated in found]

    def pod_updated(self, pod: PodRequest) -> None:
        """Pod ``pod`` changed (an update from the watch): if it is nominated and counted by its requests, it is
        counted as it is now."""
        held = self.pods.get(pod.key)
        if held is not None and held[0] != pod:
            self.pods[pod.key] = (pod, held[1], self._request(pod))

    def _request(self, pod: PodRequest) -> np.ndarray:
        return self.cache.request_vector(pod)[: self.cache.arrays.cap.shape[1]]

    def nominate(
        self, key: str, victims: list[PodRequest], priority: int = 0, *, pod: PodRequest | None = None, node: str = ""
    ) -> None:
        """Job ``key`` (of ``priority``) evicts ``victims``: the room they free is its own until it is placed or
        gone. ``pod`` on ``node``: a single pod nominated there, counted by its requests (and the devices it will
        take there); without, for a job, the nodes its victims free are held whole."""
        self.priority[key] = priority
        self.evicting[key] = [victim.key for victim in victims]
        self.nominated.pop(key, None)
        self.pods.pop(key, None)
        if pod is not None:
            self.pods[key] = (pod, node, self._request(pod))
            return
        freed = np.zeros(self.cache.arrays.slots, dtype=bool)
        for victim in victims:
            entry = self.cache.pod(victim.key)
            if entry is not None:
                freed[entry.placement.slot] = True
        self.nominated[key] = freed

    def evicting_for(self, pod_key: str) -> list[str]:
        """The jobs that evicted pod ``pod_key`` and hold the room it frees."""
        return [key for key, victims in self.evicting.items() if pod_key in victims]

    def still_evicting(self, key: str) -> bool | None:
        """None without a nomination; True while a victim of job ``key`` is still there; False once all are gone
        (the nomination is dropped then: the job preempts again if it still does not fit)."""
        evicting = self.evicting.get(key)
        if evicting is None:
            return None
        if any(self.cache.pod(k) is not None for k in evicting):
            return True
        self.release(key)
        return False

    def reserve(self, attempt: Attempt) -> None:
        """Reserve nodes for ``attempt``'s job if it is the best-ranked job left without room for long enough.

        Only jobs of two or more whole GPUs reserve: any GPU that frees fits a one-GPU job, so backfill cannot
        starve it, and the fair order gives it the next one.
        """
        first_attempt = attempt.item.first_attempt
        gpus = sum(p.gpu.count for p in attempt.members if p.gpu.whole)
        if gpus < 2 or self.reserve_after_s is None or first_attempt is None:
            return
        if self.clock() - first_attempt < self.reserve_after_s:
            return
        current = self.reservation
        if current is not None:
            if current[0] == attempt.key:
                return  # keep the nodes it has: they are draining for it
            if self.tenancy.rank(current[1]) <= self.tenancy.rank(attempt.queue):
                return
        a = self.cache.arrays
        usable = (a.base_reason == layout.FIT) & (a.gpu_count > 0)
        slots = np.flatnonzero(usable)
        free = (a.gpu_free[slots] >= layout.WHOLE).sum(axis=1)
        order = slots[np.lexsort((slots, -free))]
        covered = np.cumsum(a.gpu_count[order])
        take = order[: int(np.searchsorted(covered, gpus)) + 1]
        mask = np.zeros(a.slots, dtype=bool)
        mask[take] = True
        self.reservation = (attempt.key, attempt.queue, mask)

    def release(self, key: str) -> None:
        """Job ``key`` is placed or gone: whatever it held is free for others."""
        self.nominated.pop(key, None)
        self.pods.pop(key, None)
        self.evicting.pop(key, None)
        self.priority.pop(key, None)
        if self.reservation is not None and self.reservation[0] == key:
            self.reservation = None


def union(masks: list[np.ndarray]) -> np.ndarray | None:
    """A new mask of the node slots any of ``masks`` holds (masks of different lengths: as long as the longest);
    None: no mask."""
    if not masks:
        return None
    held = np.zeros(max(m.shape[0] for m in masks), dtype=bool)
    for mask in masks:
        held[: mask.shape[0]] |= mask
    return held
