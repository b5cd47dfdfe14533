"""Pre-filter, filter and reserve: a pod's ResourceClaims (Dynamic Resource Allocation, kube-scheduler's
``DynamicResources`` plugin), with gpusched's choice of devices.

Pre-filter (the pod fits nowhere; the message is the whole of ``0/N nodes are available: ...``): a claim made from
a template that the resourceclaim controller has not made yet, a claim that does not exist, is being deleted, was
made for another pod, is reserved for as many pods as it may be, or asks for a DeviceClass that does not exist.
An allocated claim (or one allocated by a gang member placed earlier in the same what-if) pins the pod to the node
its devices are on.

Filter, per node still in the running: the claims not allocated yet must all be allocatable from the devices the
node reaches (its own slices, and slices for several nodes that select it) that no claim holds: every request in
order, each alternative of ``firstAvailable`` in order, the DeviceClass's and the request's CEL selectors, the
count (``ExactCount``) or every matching device (``All``, which fails when one of them is taken), admin access
(a device in use may be given; it stays free for others), and ``matchAttribute`` constraints (every device of the
requests named has the same value of the attribute). A node that cannot: ``cannot allocate all claims``.

Which devices, when several sets would do (``scheduler.cache.device_allocator``): the tightest (docs/devices.md):
by PCIe root (``resource.kubernetes.io/pcieRoot``), the group with the fewest free devices that still has enough,
else the largest groups first; under a ``matchAttribute`` constraint each value is a group, with backtracking. A device
allowing multiple allocations is shared up to its capacity (``scheduler.api.devices.consumable_capacity``). The node is
chosen by the score plugins: the whole GPUs the claims ask for are the pod's GPUs (``scheduler.cache.dra_gpus``),
so FGD, binpack, gangs and queue accounting see them.

NUMA (issue 42): on a node whose kubelet enforces a Topology Manager policy (its NodeResourceTopology says
``single-numa-node`` or ``restricted``, or the pod asks for one by Koordinator's annotation), the devices of all the
pod's claims are taken from one NUMA zone where one zone can hold them, as Koordinator's joint allocation puts a GPU
and an RDMA NIC together: a device's zone is its driver's ``numa`` or ``numaNode`` attribute, or that of a device under
the same PCIe root (``device_allocator.numa_nodes``); the zones the kubelet gives the pod's CPUs and memory are tried
first. The kubelet does not align DRA devices itself, so where no zone holds them all they are taken across zones as
before (never refused for it). Elsewhere nothing changes.

The answer for a node is remembered by the claims' shape (requests, selectors, constraints: the same for every pod
of one template) and the node's devices taken, until a device or class changes: a backlog of one template costs
one allocation per node and change, not one per node and pod.

Reserve: the allocation for the chosen node goes into the cycle state (``interface.DEVICE_CLAIMS``), from there into
the Decision; the whole GPUs among the devices become the decision's GPU indices (their order on the node), which
the cache counts as it counts the device plugin's. Inside a what-if (a gang), the allocation is recorded on the
snapshot so the next member tried does not get the same devices. The binder writes it into the claims
(``scheduler.k8s.ports.device_claims``) before it binds the pod.

Extended resources backed by DRA (``scheduler.api.devices.extended_resources``): a pod asking one a DeviceClass maps
(``nvidia.com/gpu: 2``) gets, on each node that has it from no device plugin, a claim of its own for it (as
kube-scheduler makes one: ``container-<i>-request-<j>`` of the class), allocated with its other claims; the binder
creates it, and a claim made by an earlier decision for the pod is used again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from scheduler.api.basics import resources
from scheduler.api.devices import dra as api_dra
from scheduler.api.devices import extended_resources as api_extended
from scheduler.api.devices import numa as api_numa
from scheduler.api.devices import topology_manager
from scheduler.api.devices.dra import AllocatedDevice, Allocation, ClaimAllocation, Device, ResourceClaim
from scheduler.api.objects.pod import PodRequest
from scheduler.cache import device_allocator, dra_gpus
from scheduler.cache.device_budgets import CapacityUse, DeviceKey
from scheduler.cache.device_store import DeviceStore
from scheduler.cache.state import Snapshot
from scheduler.framework import args as plugin_args
from scheduler.framework import interface
from scheduler.framework import reasons as framework_reasons
from scheduler.framework.interface import I8, ClusterEvent, Code, CycleState, Status
from scheduler.framework.reasons import Reason
from scheduler.kernels import layout

PLAN = "dra.plan"
#: Filter answers remembered (see ``DynamicResources.filter``); all are forgotten beyond this.
MEMO_MAX = 200_000
#: Not a pod's deletion, as kube-scheduler's DynamicResources registers none: devices are held by claims, and a pod
#: that leaves frees its devices only when its claim lets them go (the resourceclaim controller deallocates it, a
#: claim event, moments later). A pod woken by the deletion was tried while they were still held, refused, and its
#: backoff grew before the release woke it (on the MIG stream, half the refused attempts). A pod's deletion that
#: drops an allocation assumed for it counts as a device change (``scheduler.core.hints``).
_WAKES = frozenset({ClusterEvent.DEVICE_CHANGED, ClusterEvent.NODE_ADDED, ClusterEvent.NODE_UPDATED})
#: The claims cannot all be allocated from the node's free devices (claims letting devices go free them).
CANNOT_ALLOCATE = Reason(-8, "cannot allocate all claims", eviction_helps=True, wakes=_WAKES)
#: An allocated claim's devices are on another node: no eviction here changes that.
CLAIM_NODE = Reason(
    -9, "node(s) did not match the node of an allocated ResourceClaim", eviction_helps=False, wakes=_WAKES
)


@dataclass(slots=True)
class _Plan:
    #: Claims to allocate, in the pod's order.
    to_allocate: list[ResourceClaim] = field(default_factory=list)
    #: The node allocated claims pin the pod to ("" none).
    pinned: str = ""
    #: Claims already allocated: only reserved for the pod.
    reserve_only: list[str] = field(default_factory=list)
    #: The pod's claim keys in its order.
    order: list[str] = field(default_factory=list)
    #: Per node slot that passed: the allocations found there (claim key -> devices).
    found: dict[int, dict[str, tuple[AllocatedDevice, ...]]] = field(default_factory=dict)
    #: Extended resources the pod asks that a DeviceClass maps to DRA: resource -> class.
    extended: dict[str, str] = field(default_factory=dict)
    #: The claim made for them by an earlier decision, used again as one of the pod's claims (None: none).
    made: tuple[str, api_extended.ExtendedClaim] | None = None
    #: Per set of them a node has from DRA only: the claim to make for them, and the pod's mappings to it.
    claims_for: dict[frozenset[str], tuple[ResourceClaim, api_extended.ExtendedClaim]] = field(default_factory=dict)
    #: Per node slot that passed with a claim to make: which (a key of ``claims_for``).
    lacking: dict[int, frozenset[str]] = field(default_factory=dict)


class DynamicResources:
    name = "dra"
    reasons = (CANNOT_ALLOCATE, CLAIM_NODE)

    def __init__(self, args: Mapping[str, Any]) -> None:
        plugin_args.check_keys(self.name, args, ())
        #: (the claims' shape, node, the node's devices taken) -> the devices per claim, or None: cannot.
        self._memo: dict[tuple[Any, ...], tuple[tuple[AllocatedDevice, ...], ...] | None] = {}
        self._memo_version = -1

    def wakes(self, reason: int) -> frozenset[ClusterEvent] | None:
        return framework_reasons.wakes(self.reasons, reason)

    # --- pre-filter ------------------------------------------------------------------------------------------

    def pre_filter(self, state: CycleState) -> Status:
        pod = state.pod
        if not pod.resource_claims and not pod.extended_asks:
            return Status.success()
        snap = state.snapshot
        store = snap.devices
        extended = {
            r: c.name for a in pod.extended_asks for r, _ in a.amounts if (c := store.extended_resource_class(r))
        }
        if not pod.resource_claims and not extended:
            return Status.success()
        if store.unavailable:
            # The API is looked up once, at the scheduler's start: no cluster event can help, only its restart.
            return self._refuse(snap, Code.UNRESOLVABLE, store.unavailable)
        if not store.listed:
            return Status(Code.ERROR, "DeviceClasses, ResourceSlices and ResourceClaims are not listed yet", self.name)
        picked = {c.claim: c for c in snap.device_picks if c.allocation is not None}
        plan = _Plan(extended=extended)
        made = store.extended_claim(pod.uid) if extended else None
        for pod_claim in (
            *pod.resource_claims,
            *([api_dra.PodClaim(api_dra.EXTENDED_CLAIM, made.name)] if made else []),
        ):
            if not pod_claim.claim_name:
                return self._refuse(
                    snap,
                    Code.UNSCHEDULABLE,
                    f'waiting for the resourceclaim controller to create the ResourceClaim for "{pod_claim.name}"',
                    gated=True,
                )
            key = api_dra.claim_key(pod.namespace, pod_claim)
            claim = store.claims.get(key)
            if claim is None:
                unreadable = store.unreadable.get(f"resourceclaim {key}")
                if unreadable:
                    return self._refuse(
                        snap,
                        Code.UNSCHEDULABLE,
                        f'resourceclaim "{pod_claim.claim_name}" cannot be read ({unreadable})',
                    )
                return self._refuse(
                    snap, Code.UNSCHEDULABLE, f'resourceclaim "{pod_claim.claim_name}" not found', gated=True
                )
            if claim.deleting:
                return self._refuse(snap, Code.UNSCHEDULABLE, f'resourceclaim "{claim.name}" is being deleted')
            if claim is made:
                plan.made = (key, api_extended.reused(made, pod.extended_asks, extended))
            if pod_claim.template and claim.owner_pod != pod.uid:
                return self._refuse(
                    snap, Code.UNRESOLVABLE, f"ResourceClaim {claim.name} was not created for pod {pod.name}"
                )
            plan.order.append(key)
            allocation = store.allocation_of(key)
            if allocation is None and key in picked:
                allocation = picked[key].allocation
            if allocation is not None:
                if len(claim.reserved_for) >= api_dra.RESERVED_FOR_MAX and not any(
                    c.uid == pod.uid for c in claim.reserved_for
                ):
                    return self._refuse(snap, Code.UNSCHEDULABLE, f'resourceclaim "{claim.name}" is in use')
                if allocation.node:
                    if plan.pinned and plan.pinned != allocation.node:
                        return self._refuse(
                            snap, Code.UNRESOLVABLE, "the pod's allocated ResourceClaims are on different nodes"
                        )
                    plan.pinned = allocation.node
                plan.reserve_only.append(key)
                continue
            for request in claim.requests:
                missing = [c.device_class for c in request.choices if c.device_class not in store.classes]
                if len(missing) == len(request.choices):
                    unreadable = store.unreadable.get(f"deviceclass {missing[0]}")
                    why = f"cannot be read ({unreadable})" if unreadable else "does not exist"
                    return self._refuse(
                        snap,
                        Code.UNSCHEDULABLE,
                        f'resourceclaim "{claim.name}", request "{request.name}": device class "{missing[0]}" {why}',
                    )
            plan.to_allocate.append(claim)
        gpus = None if snap.in_what_if or not pod.resource_claims else dra_gpus.claim_gpu_request(store, pod)
        if gpus is not None and (gpus.count, gpus.milli) != (pod.gpu.count, pod.gpu.milli):
            # A claim changed since the pod was read (a shared claim someone else allocated meanwhile): the pod is
            # read again with the GPUs it now gets, so that it is not charged for GPUs it will not hold.
            got = f"{gpus.count} whole GPUs" if gpus.whole or not gpus.count else f"{gpus.milli} milli-GPU"
            return Status(Code.ERROR, f"the pod's claims changed: it gets {got} from them now", self.name)
        state.data[PLAN] = plan
        return Status.success()

    def _refuse(self, snap: Snapshot, code: Code, reason: str, *, gated: bool = False) -> Status:
        # gated: a claim that does not exist yet, as kube-scheduler's PreEnqueue refuses it (no attempt counted).
        status = interface.refused_everywhere(snap, code, reason, self.name)
        return dataclasses.replace(status, gated=True) if gated else status

    # --- filter ----------------------------------------------------------------------------------------------

    def filter(self, state: CycleState, reasons: I8) -> None:
        plan: _Plan | None = state.data.get(PLAN)
        if resources.GPU not in (plan.extended if plan is not None else ()):
            self._device_plugin_gpus(state, reasons)
        if plan is None:
            return
        snap = state.snapshot
        store, names, taken, capacity = snap.devices, snap.names, snap.devices_taken(), snap.capacity_use()
        shared = store.shared_devices()
        reach: dict[tuple[Any, ...], np.ndarray] = {}
        if self._memo_version != store.devices_version:
            self._memo.clear()  # devices or classes changed: what matched may not
            self._memo_version = store.devices_version
        shapes: dict[frozenset[str], tuple[Any, ...]] = {}
        for slot in np.flatnonzero(reasons == layout.FIT).tolist():
            node = names[slot]
            if node is None:
                continue
            if plan.pinned and node != plan.pinned:
                reasons[slot] = CLAIM_NODE.code
                continue
            lacking = store.from_dra({} if plan.made else plan.extended, node, bool(snap.arrays.gpu_count[slot]))
            claims = plan.to_allocate
            if lacking:
                plan.lacking[slot] = lacking
                if lacking not in plan.claims_for:
                    pod = state.pod
                    classes = {r: plan.extended[r] for r in lacking}
                    made = api_extended.claim_for(pod.namespace, pod.name, pod.uid, pod.extended_asks, classes)
                    plan.claims_for[lacking] = made
                claims = [*claims, plan.claims_for[lacking][0]]
            if not claims:
                continue
            shape = shapes.get(lacking)
            if shape is None:
                shape = shapes[lacking] = tuple(claim.shape() for claim in claims)
            keys = [claim.key for claim in claims]
            zones = _zone_order(snap, node, state.pod)
            local = store.node_devices(node).local
            devices = list(local)
            for device in shared:
                if device.all_nodes:
                    devices.append(device)
                elif device.node_terms:
                    mask = reach.get(device.node_terms)
                    if mask is None:
                        mask = reach[device.node_terms] = snap.select({}, device.node_terms)
                    if slot < mask.shape[0] and mask[slot]:
                        devices.append(device)
            if len(devices) == len(local):
                # Only the node's own devices: the answer depends on the claims' shape and which of them are taken
                # here, so the pods of one template share it until a device of this node is taken or freed.
                held = frozenset(d.key for d in local if d.key in taken)
                memo_key = (shape, node, held, capacity.of(local) if capacity else None, zones)
                if memo_key in self._memo:
                    known = self._memo[memo_key]
                    found = None if known is None else dict(zip(keys, known, strict=True))
                else:
                    found = _allocate(claims, devices, taken, store, capacity, zones)
                    if len(self._memo) >= MEMO_MAX:
                        self._memo.clear()
                    self._memo[memo_key] = None if found is None else tuple(found[k] for k in keys)
            else:
                found = _allocate(claims, devices, taken, store, capacity, zones)
            if found is None:
                reasons[slot] = CANNOT_ALLOCATE.code
            else:
                plan.found[slot] = found

    def _device_plugin_gpus(self, state: CycleState, reasons: I8) -> None:
        """A pod asking GPUs of the device plugin (``nvidia.com/gpu``) that no DeviceClass maps to DRA does not fit
        a node whose GPU slots are DRA's: no device plugin serves the resource there, and the kubelet would refuse
        it (``Insufficient nvidia.com/gpu``, as kube-scheduler says)."""
        pod = state.pod
        store = state.snapshot.devices
        if not (pod.gpu.count and store.dra_gpu_nodes) or pod.resource_claims or dra_gpus.extended_gpus(store, pod):
            return
        names = state.snapshot.names
        for slot in np.flatnonzero(reasons == layout.FIT).tolist():
            if names[slot] in store.dra_gpu_nodes:
                reasons[slot] = layout.GPU_COUNT

    # --- reserve ---------------------------------------------------------------------------------------------

    def reserve(self, state: CycleState, slot: int) -> Status:
        plan: _Plan | None = state.data.get(PLAN)
        if plan is None or not (plan.order or slot in plan.lacking):
            return Status.success()  # extended resources all from the node's device plugin
        snap = state.snapshot
        node = snap.names[slot]
        assert node is not None
        found = plan.found.get(slot, {})
        if (plan.to_allocate or slot in plan.lacking) and not found:
            return Status(Code.ERROR, f"no devices chosen for {state.pod.key} on {node}", self.name)
        store = snap.devices
        claims: list[ClaimAllocation] = []
        held: list[AllocatedDevice] = []
        order, (made_key, made) = plan.order, plan.made or ("", None)
        if slot in plan.lacking:
            claim, made = plan.claims_for[plan.lacking[slot]]
            order, made_key = [*order, claim.key], claim.key
        for key in order:
            extended = made if key == made_key else None
            if key in found:
                devices = found[key]
                local = any(store.device(d.key) is not None and store.device(d.key).node for d in devices)  # type: ignore[union-attr]
                claims.append(ClaimAllocation(key, Allocation(devices, node if local else ""), extended))
                held.extend(devices)
            else:
                claims.append(ClaimAllocation(key, None, extended))
                allocation = store.allocation_of(key)
                if allocation is not None and store.owns(key, state.pod):
                    # Its own claim, allocated before the pod was bound (a restart between the two): its GPUs are
                    # the pod's, recorded with the binding like any.
                    held.extend(allocation.devices)
        state.data[interface.DEVICE_CLAIMS] = tuple(claims)
        if held or state.pod.resource_claims:
            # The pod's GPUs are its claims' (a pod with claims asks for none of the device plugin's): what the gpu
            # plugin chose from the GPU slots is replaced, even by none; a MIG device's is its parent GPU's slot.
            state.data[interface.GPU_IDS] = tuple(sorted(store.gpu_slots(node, held)))
        if snap.in_what_if:
            snap.pick_devices(claims)
        return Status.success()

    def unreserve(self, state: CycleState, slot: int) -> None:
        claims = state.data.pop(interface.DEVICE_CLAIMS, ())
        if claims and state.snapshot.in_what_if:
            state.snapshot.unpick_devices(claims)


def _zone_order(snap: Snapshot, node: str, pod: PodRequest) -> tuple[int, ...]:
    """The NUMA nodes to try the pod's devices in, on a node whose kubelet enforces a Topology Manager policy (or
    where the pod asks for one): first the zones the kubelet gives the pod's CPUs, memory and device-plugin
    resources (so that they and the DRA devices share a zone), then the others in order; () elsewhere."""
    if not snap.numa.nodes:
        return ()
    zones = snap.numa.nodes.get(node)
    if zones is None or not zones.zones or topology_manager.policy_for(zones, pod.numa) not in api_numa.ENFORCED:
        return ()
    taken = topology_manager.admit_pod(zones, pod, available=snap.numa_available(node)).taken
    first = [z.number for z, t in zip(zones.zones, taken, strict=True) if t]
    return (*first, *(z.number for z in zones.zones if z.number not in first))


def _allocate(
    claims: list[ResourceClaim],
    devices: list[Device],
    taken: set[DeviceKey],
    store: DeviceStore,
    capacity: CapacityUse,
    zones: tuple[int, ...],
) -> dict[str, tuple[AllocatedDevice, ...]] | None:
    if zones:
        return device_allocator.allocate_in_one_zone(claims, devices, taken, store, capacity, zones=zones)
    return device_allocator.allocate(claims, devices, taken, store, capacity)
