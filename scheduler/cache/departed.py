"""The GPUs of pods that left while their ResourceClaims still hold the devices.

A pod's claims keep its devices after the pod is gone: the resourceclaim controller deallocates or deletes a claim of
the pod's own moments later, and until then DRA gives those devices to no other claim. The cache counts a claim's
devices as the pod's GPUs (whole GPUs, or a MIG device's share of its GPU: ``scheduler.cache.dra_gpus``). Freed with
the pod, they showed room the DRA filter refuses: a MIG pod woken by the deletion was tried, refused by DRA and sent
back with a longer backoff, which it then waited out after the claim's release. The pod's CPU, memory and other
columns are freed when it leaves; its GPU part is held here until none of its claims holds a device for it any more
(deallocated, deleted, or reserved for another pod), and the cache frees it then (:meth:`Departed.settle`).

Invariants: each hold is applied to the cache's arrays exactly once while it is here; a node's row rebuilt from its
pods takes the holds on that slot again (:meth:`Departed.on_slot`), and a node removed drops them
(:meth:`Departed.drop_slot`); nothing is held across a restart (the claims then show only what the watch lists).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from scheduler.api.devices import dra as api_dra
from scheduler.api.objects.pod import PodRequest
from scheduler.cache.arrays import Placement
from scheduler.cache.device_store import DeviceStore
from scheduler.kernels import layout

#: The request columns that are the pod's GPUs (the rest is freed when the pod leaves).
_GPU_COLUMNS = (layout.GPU_MILLI, layout.GPU_MEMORY)


@dataclass(frozen=True, slots=True)
class _Hold:
    #: The GPU part of the departed pod's placement.
    placement: Placement
    #: The claims that held the pod's devices when it left.
    claims: tuple[str, ...]
    #: The departed pod's uid: a claim reserved for another pod no longer holds for it.
    uid: str


class Departed:
    """The GPU parts of departed pods' placements, until their claims let the devices go (a list: a pod of the same
    name may come and leave again before the first one's claims do)."""

    def __init__(self) -> None:
        self._held: list[_Hold] = []

    def __len__(self) -> int:
        return len(self._held)

    def holding(self, store: DeviceStore, pod: PodRequest) -> tuple[str, ...]:
        """The claims of ``pod``'s own that hold GPUs or MIG devices for it now (its GPUs stay taken while they do)."""
        if not pod.gpu.count:
            return ()
        keys = [api_dra.claim_key(pod.namespace, c) for c in pod.resource_claims if c.claim_name]
        extended = store.extended_claim(pod.uid) if pod.extended_asks else None
        if extended is not None:
            keys.append(extended.key)
        return tuple(k for k in keys if store.owns(k, pod) and _holds_gpus(store, k, pod.uid))

    def hold(self, placement: Placement, claims: tuple[str, ...]) -> Placement:
        """Hold the GPU part of a departed pod's ``placement`` until ``claims`` let go; the rest, to free now."""
        pod = placement.pod
        gpus = np.zeros_like(placement.request)
        rest = placement.request.copy()
        for column in _GPU_COLUMNS:
            gpus[column] = placement.request[column]
            rest[column] = 0.0
        held = Placement(placement.slot, gpus, placement.gpu_ids, placement.gpu_milli, placement.gpu_memory, pod)
        self._held.append(_Hold(held, claims, pod.uid if pod is not None else ""))
        return Placement(placement.slot, rest, pod=pod)

    def settle(self, store: DeviceStore) -> list[Placement]:
        """The holds none of whose claims holds a device for its pod any more, taken out: the caller frees them."""
        kept: list[_Hold] = []
        done: list[_Hold] = []
        for hold in self._held:
            (kept if any(_holds_gpus(store, claim, hold.uid) for claim in hold.claims) else done).append(hold)
        self._held = kept
        return [hold.placement for hold in done]

    def on_slot(self, slot: int) -> Iterator[Placement]:
        """The holds on node ``slot`` (its row is being rebuilt: they are applied again)."""
        return (h.placement for h in self._held if h.placement.slot == slot)

    def drop_slot(self, slot: int, gpus: int | None = None) -> None:
        """Forget the holds on node ``slot``: the node is gone (``gpus`` None), or has ``gpus`` devices now and the
        holds on devices it no longer has are dropped."""
        self._held = [
            h
            for h in self._held
            if h.placement.slot != slot or (gpus is not None and all(g < gpus for g in h.placement.gpu_ids))
        ]


def _holds_gpus(store: DeviceStore, key: str, uid: str) -> bool:
    """Whether claim ``key`` still holds GPUs or MIG devices for the pod ``uid`` (not reserved for another pod)."""
    claim = store.claims.get(key)
    if claim is None or claim.allocation is None:
        return False
    if any(c.uid != uid for c in claim.reserved_for):
        return False
    return bool(store.gpu_devices(claim.allocation) or store.mig_devices(claim.allocation))
