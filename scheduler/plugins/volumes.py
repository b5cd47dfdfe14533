"""Pre-filter, filter and reserve: a pod's PersistentVolumeClaims (kube-scheduler's VolumeRestrictions,
NodeVolumeLimits, VolumeBinding and VolumeZone, in that order).

Pre-filter (the pod fits nowhere; the message is the whole of ``0/N nodes are available: ...``):

- a claim that does not exist: ``persistentvolumeclaim "x" not found``; one being deleted; a generic ephemeral
  volume's claim not owned by the pod (its controller has not created it yet, or someone else's has the name);
- a ``ReadWriteOncePod`` claim another pod holds (bound or assumed, on any node): "node has pod using
  PersistentVolumeClaim with the same name and ReadWriteOncePod access mode";
- an unbound claim whose class binds at once (``Immediate``, or no class): the PV controller binds it, the pod
  waits for that: "pod has unbound immediate PersistentVolumeClaims"; a class that does not exist.

Filter, every node at once, first failing rule per node:

1. CSI attach limits: the unique volumes of the pods on the node per CSI driver, plus the pod's new ones, above
   the node's CSINode ``allocatable.count`` for that driver: ``LIMIT``. A bound claim counts with
   its volume's driver and handle, an unbound one with its class's provisioner (as kube-scheduler counts it);
2. a bound claim (or one the scheduler chose a volume for and has not seen bound yet): its volume's
   ``spec.nodeAffinity.required`` (a node selector) must match: ``NODE_CONFLICT``; a volume that
   does not exist: ``MISSING``; a claim already asked to be provisioned for a node
   (``volume.kubernetes.io/selected-node``) fits that node only;
3. an unbound ``WaitForFirstConsumer`` claim: a node passes when an Available static volume of the claim's class
   matches it (access modes, capacity at least the request, volume mode, the claim's selector, the volume's node
   affinity, not chosen for another claim), the smallest first as kube's binder picks; else when the class can
   provision there (a provisioner other than ``kubernetes.io/no-provisioner``, the node inside its
   ``allowedTopologies``); else ``BIND_CONFLICT``. A pod's several claims get distinct volumes;
4. a bound volume's zone and region labels must be the node's (kube-scheduler's VolumeZone):
   ``ZONE``.

Reserve: the choice for the chosen node (which volume for which claim, or provisioning there) goes into the cycle
state (``interface.VOLUME_BINDINGS``), from there into the Decision; the cache holds it until the binding
completes or fails, and the binder makes it real before it binds the pod (``scheduler.k8s.ports.volume_binding``).
Inside a
what-if (a gang) the choice is recorded on the snapshot, so the next member tried there does not get the same
volume.

A pod without claims costs one attribute test per extension point.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from scheduler.api.objects import selectors
from scheduler.api.objects import volumes as api_volumes
from scheduler.api.objects.volumes import Claim, ClaimBinding, StorageClass, Volume
from scheduler.cache.state import Snapshot
from scheduler.cache.volume_store import VolumeStore
from scheduler.framework import args as plugin_args
from scheduler.framework import interface
from scheduler.framework import reasons as framework_reasons
from scheduler.framework.interface import I8, ClusterEvent, Code, CycleState, Status
from scheduler.framework.reasons import Reason
from scheduler.kernels import layout

B = npt.NDArray[np.bool_]

#: Where the pre-filter leaves what it resolved for the filter and reserve.
PLAN = "volumes.plan"
RWOP_CONFLICT = "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode"
UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"

#: A volume, claim or class changing may free or bring a volume; a node coming or changing may match one; a pod
#: leaving frees its attachments.
_WAKES = frozenset(
    {ClusterEvent.VOLUME_CHANGED, ClusterEvent.NODE_ADDED, ClusterEvent.NODE_UPDATED, ClusterEvent.POD_DELETED}
)
# Only the attach limit is cleared by evicting pods from the node: the others are where the volumes are.
NODE_CONFLICT = Reason(-3, "node(s) had volume node affinity conflict", eviction_helps=False, wakes=_WAKES)
BIND_CONFLICT = Reason(
    -4, "node(s) didn't find available persistent volumes to bind", eviction_helps=False, wakes=_WAKES
)
MISSING = Reason(
    -5, "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)", eviction_helps=False, wakes=_WAKES
)
ZONE = Reason(-6, "node(s) had no available volume zone", eviction_helps=False, wakes=_WAKES)
LIMIT = Reason(-7, "node(s) exceed max volume count", eviction_helps=True, wakes=_WAKES)


@dataclass(slots=True)
class _ToBind:
    """An unbound WaitForFirstConsumer claim, its class, and its candidate static volumes (smallest first)."""

    claim: Claim
    storage_class: StorageClass
    candidates: list[Volume]
    #: A volume pre-bound to the claim (its claimRef names it): the only one it may get.
    prebound: Volume | None = None


@dataclass(slots=True)
class _Plan:
    #: Volumes of the claims bound (or chosen and not seen bound yet).
    bound: list[str] = field(default_factory=list)
    #: Nodes the claims asked to be provisioned on are pinned to.
    pinned: list[str] = field(default_factory=list)
    to_bind: list[_ToBind] = field(default_factory=list)
    #: Per claim of ``to_bind``, per node slot: the index of the candidate chosen, -1 for provisioning, -2 none.
    chosen: list[npt.NDArray[np.int64]] = field(default_factory=list)
    #: CSI driver -> the handles of the pod's volumes that count against its attach limit.
    handles: dict[str, set[str]] = field(default_factory=dict)


class Volumes:
    name = "volumes"
    reasons = (NODE_CONFLICT, BIND_CONFLICT, MISSING, ZONE, LIMIT)

    def __init__(self, args: Mapping[str, Any]) -> None:
        plugin_args.check_keys(self.name, args, ())

    def wakes(self, reason: int) -> frozenset[ClusterEvent] | None:
        return framework_reasons.wakes(self.reasons, reason)

    # --- pre-filter ------------------------------------------------------------------------------------------

    def pre_filter(self, state: CycleState) -> Status:
        pod = state.pod
        if not pod.volumes:
            return Status.success()
        snap = state.snapshot
        store = snap.volumes
        if not store.listed:
            return Status(Code.ERROR, "PersistentVolumeClaims and PersistentVolumes are not listed yet", self.name)
        picked = {b.claim: b for b in snap.volume_picks}
        taken = {b.volume: b.claim for b in snap.volume_picks if b.volume}
        plan = _Plan()
        immediate = False
        for pod_claim in pod.volumes:
            key = api_volumes.claim_key(pod.namespace, pod_claim)
            claim = store.claims.get(key)
            if claim is None:
                return self._refuse(snap, Code.UNRESOLVABLE, f'persistentvolumeclaim "{pod_claim.name}" not found')
            if claim.deleting:
                return self._refuse(
                    snap, Code.UNRESOLVABLE, f'persistentvolumeclaim "{pod_claim.name}" is being deleted'
                )
            if pod_claim.ephemeral and claim.owner != pod.uid:
                return self._refuse(
                    snap,
                    Code.UNRESOLVABLE,
                    f"PVC {key} was not created for pod {pod.key} (pod is not owner)",
                )
            if api_volumes.READ_WRITE_ONCE_POD in claim.access_modes and _other_users(snap, store, key, pod.key):
                return self._refuse(snap, Code.UNSCHEDULABLE, RWOP_CONFLICT)
            choice = picked.get(key) or store.assumed_claims.get(key)
            if claim.bound:
                plan.bound.append(claim.volume_name)
            elif choice is not None:
                if choice.volume:
                    plan.bound.append(choice.volume)
                else:
                    plan.pinned.append(choice.node)
            elif claim.selected_node:
                plan.pinned.append(claim.selected_node)
            elif not claim.storage_class:
                immediate = True
            else:
                storage_class = store.classes.get(claim.storage_class)
                if storage_class is None:
                    return self._refuse(
                        snap, Code.UNRESOLVABLE, f'storageclass.storage.k8s.io "{claim.storage_class}" not found'
                    )
                if not storage_class.wait_for_first_consumer:
                    immediate = True
                else:
                    plan.to_bind.append(_candidates(store, claim, storage_class, taken))
            _count_handles(plan.handles, store, claim, choice)
        if immediate:
            return self._refuse(snap, Code.UNRESOLVABLE, UNBOUND_IMMEDIATE)
        # As kube's binder: the smallest requests first, each taking the smallest volume that fits it.
        plan.to_bind.sort(key=lambda t: (t.claim.request, t.claim.name))
        state.data[PLAN] = plan
        return Status.success()

    def _refuse(self, snap: Snapshot, code: Code, reason: str) -> Status:
        return interface.refused_everywhere(snap, code, reason, self.name)

    # --- filter ----------------------------------------------------------------------------------------------

    def filter(self, state: CycleState, reasons: I8) -> None:
        if not state.pod.volumes:
            return
        plan: _Plan | None = state.data.get(PLAN)
        if plan is None:
            return
        snap = state.snapshot
        store = snap.volumes
        size = reasons.shape[0]
        masks: dict[tuple[selectors.NodeSelectorTerm, ...], B] = {}

        def select(terms: tuple[selectors.NodeSelectorTerm, ...]) -> B:
            mask = masks.get(terms)
            if mask is None:
                mask = masks[terms] = _fit(snap.select({}, terms), size)
            return mask

        def mark(bad: B, code: int) -> None:
            reasons[(reasons == layout.FIT) & bad] = code

        if plan.handles and store.csi_nodes:
            mark(_over_limit(snap, store, plan.handles, state.pod.key, size), code=LIMIT.code)
        for name in plan.bound:
            volume = store.volumes.get(name)
            if volume is None:
                mark(np.ones(size, dtype=bool), MISSING.code)
            elif volume.node_affinity:
                mark(~select(volume.node_affinity), NODE_CONFLICT.code)
        for node in plan.pinned:
            mark(_only(snap, node, size), BIND_CONFLICT.code)
        plan.chosen = []
        for to_bind in plan.to_bind:
            chosen = _choose(to_bind, plan, select, size)
            plan.chosen.append(chosen)
            mark(chosen == -2, BIND_CONFLICT.code)
        for name in plan.bound:
            volume = store.volumes.get(name)
            zone = api_volumes.zone_terms(volume) if volume is not None else ()
            if zone:
                mark(~select(zone), ZONE.code)

    # --- reserve ---------------------------------------------------------------------------------------------

    def reserve(self, state: CycleState, slot: int) -> Status:
        plan: _Plan | None = state.data.get(PLAN) if state.pod.volumes else None
        if plan is None or not plan.to_bind:
            return Status.success()
        node = state.snapshot.names[slot]
        assert node is not None
        bindings = []
        for to_bind, chosen in zip(plan.to_bind, plan.chosen, strict=True):
            pick = int(chosen[slot]) if slot < chosen.shape[0] else -2
            if pick == -2:
                return Status(Code.ERROR, f"no volume chosen for {to_bind.claim.key} on {node}", self.name)
            volume = _candidate(to_bind, pick)
            bindings.append(ClaimBinding(to_bind.claim.key, node, volume.name if volume is not None else ""))
        state.data[interface.VOLUME_BINDINGS] = tuple(bindings)
        if state.snapshot.in_what_if:
            state.snapshot.pick_volumes(bindings)
        return Status.success()

    def unreserve(self, state: CycleState, slot: int) -> None:
        bindings = state.data.pop(interface.VOLUME_BINDINGS, ())
        if bindings and state.snapshot.in_what_if:
            state.snapshot.unpick_volumes(bindings)


# --- helpers ------------------------------------------------------------------------------------------------------


def _fit(mask: B, size: int) -> B:
    out = np.zeros(size, dtype=bool)
    n = min(size, mask.shape[0])
    out[:n] = mask[:n]
    return out


def _only(snap: Snapshot, node: str, size: int) -> B:
    """True on every node but ``node``."""
    others = np.ones(size, dtype=bool)
    slot = snap.slot_of(node)
    if slot is not None and slot < size:
        others[slot] = False
    return others


def _other_users(snap: Snapshot, store: VolumeStore, claim_key: str, pod_key: str) -> bool:
    """Whether a pod other than ``pod_key`` holds the claim: bound or assumed and not removed by an open what-if (a
    preemption's victim), or placed by one."""
    net: dict[str, int] = {}
    for sign, pod, _ in snap.what_if_pods:
        if pod.key != pod_key and any(api_volumes.claim_key(pod.namespace, c) == claim_key for c in pod.volumes):
            net[pod.key] = net.get(pod.key, 0) + sign
    users = store.users.get(claim_key, {})
    if any(key != pod_key and net.get(key, 0) >= 0 for key in users):
        return True
    return any(n > 0 for key, n in net.items() if key not in users)


def _candidates(store: VolumeStore, claim: Claim, storage_class: StorageClass, taken: Mapping[str, str]) -> _ToBind:
    """The static volumes that may be bound to ``claim`` (kube's FindMatchingVolume, but for the node), smallest
    first; a volume pre-bound to the claim is the only candidate."""
    candidates = []
    for volume in store.volumes_of_class(storage_class.name):
        if volume.deleting or volume.capacity < claim.request or volume.volume_mode != claim.volume_mode:
            continue
        holder = taken.get(volume.name) or store.assumed_volumes.get(volume.name)
        if holder is not None and holder != claim.key:
            continue
        if volume.bound_to(claim):
            return _ToBind(claim, storage_class, [volume], prebound=volume)
        if volume.claim_ref is not None or volume.phase != "Available":
            continue
        if claim.selector is not None and not claim.selector.matches(volume.labels):
            continue
        if not claim.access_modes <= volume.access_modes:
            continue
        candidates.append(volume)
    return _ToBind(claim, storage_class, candidates)


def _choose(to_bind: _ToBind, plan: _Plan, select: Any, size: int) -> npt.NDArray[np.int64]:
    """Per node slot, the candidate chosen for the claim (smallest first, not one an earlier claim of the pod took
    on that node), -1 to provision one there, -2 when neither can be done."""
    chosen = np.full(size, -2, dtype=np.int64)
    remaining = np.ones(size, dtype=bool)
    for index, volume in enumerate(to_bind.candidates):
        if not remaining.any():
            break
        fits = remaining & (select(volume.node_affinity) if volume.node_affinity else True)
        for earlier, picks in zip(plan.to_bind, plan.chosen, strict=False):
            for j, other in enumerate(earlier.candidates):
                if other.name == volume.name:
                    fits &= picks != j
        chosen[fits] = index
        remaining &= ~fits
    storage_class = to_bind.storage_class
    if storage_class.provisioner and storage_class.provisioner != api_volumes.NO_PROVISIONER and remaining.any():
        # Like kube's binder, a pre-bound volume that does not fit the node leaves the claim to provisioning.
        allowed = select(storage_class.allowed_topologies) if storage_class.allowed_topologies else True
        chosen[remaining & allowed] = -1
    return chosen


def _candidate(to_bind: _ToBind, pick: int) -> Volume | None:
    return to_bind.candidates[pick] if pick >= 0 else None


def _handle(store: VolumeStore, claim: Claim, choice: ClaimBinding | None) -> tuple[str, str] | None:
    """(CSI driver, volume handle) a claim counts as against attach limits, or None when it counts for no driver:
    its volume's when it has one (bound or chosen), else its class's provisioner with the claim as the handle."""
    name = claim.volume_name or (choice.volume if choice is not None else "")
    if name:
        volume = store.volumes.get(name)
        if volume is not None and volume.csi_driver:
            return volume.csi_driver, volume.csi_handle or volume.name
        return None
    storage_class = store.classes.get(claim.storage_class)
    if storage_class is not None and storage_class.provisioner:
        return storage_class.provisioner, claim.key
    return None


def _count_handles(handles: dict[str, set[str]], store: VolumeStore, claim: Claim, choice: ClaimBinding | None) -> None:
    found = _handle(store, claim, choice)
    if found is not None:
        handles.setdefault(found[0], set()).add(found[1])


def _over_limit(snap: Snapshot, store: VolumeStore, handles: Mapping[str, set[str]], pod_key: str, size: int) -> B:
    """Per node slot, whether the pod's new volumes would take a CSI driver above the node's attach limit."""
    over = np.zeros(size, dtype=bool)
    limited = {driver for node in store.csi_nodes.values() for driver in node.limits} & set(handles)
    if not limited:
        return over
    # (driver, handle) -> the slots where a pod held (or placed by an open what-if) has it attached.
    attached: dict[tuple[str, str], set[int]] = {}
    for claim_key, users in store.users.items():
        claim = store.claims.get(claim_key)
        found = _handle(store, claim, store.assumed_claims.get(claim_key)) if claim is not None else None
        if found is None or found[0] not in limited:
            continue
        for user, slot in users.items():
            if user != pod_key:
                attached.setdefault(found, set()).add(slot)
    for sign, pod, slot in snap.what_if_pods:
        if sign > 0 and pod.volumes and pod.key != pod_key:
            for pod_claim in pod.volumes:
                claim = store.claims.get(api_volumes.claim_key(pod.namespace, pod_claim))
                found = _handle(store, claim, None) if claim is not None else None
                if found is not None and found[0] in limited:
                    attached.setdefault(found, set()).add(slot)
    for driver in limited:
        limit = np.full(size, -1, dtype=np.int64)
        for node in store.csi_nodes.values():
            at = snap.slot_of(node.name)
            if at is not None and at < size and driver in node.limits:
                limit[at] = node.limits[driver]
        in_use = np.zeros(size, dtype=np.int64)
        for (d, _), slots in attached.items():
            if d == driver:
                in_use[[s for s in slots if s < size]] += 1
        new = np.full(size, len(handles[driver]), dtype=np.int64)
        for handle in handles[driver]:
            for s in attached.get((driver, handle), ()):
                if s < size:
                    new[s] -= 1
        over |= (limit >= 0) & (in_use + new > limit)
    return over
