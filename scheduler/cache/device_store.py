"""The cluster's DRA devices as the scheduler knows them: DeviceClasses, the devices of the ResourceSlices drivers
publish, ResourceClaims and what they hold, and the allocations the scheduler made and has not seen written back.

Every input enters through the ``upsert_*`` / ``remove_*`` methods (the operator's watches); the scheduler's own
decisions through :meth:`DeviceStore.assume` / :meth:`release` (kube-scheduler's in-flight allocations).

Which devices exist: a pool (driver, pool name) counts at its highest ``generation`` only, and only once all
``resourceSliceCount`` slices of that generation are in (an incomplete pool is being rewritten by its driver;
kube-scheduler leaves it alone too).

Which devices are taken: every device in a claim's ``status.allocation`` (except admin access, which does not
take a device), plus the devices of allocations assumed for a pod until the watch shows the claim allocated, or
the pod's decision fails. So a device is never handed to two claims, whatever order the watch and the decisions
come in, and all of it is derived again from the cluster after a restart.

Partitionable devices (KEP 4815, how NVIDIA's driver publishes dynamic MIG): a pool's slices declare counter sets
(``sharedCounters``), and each device says what it consumes of them (a full GPU all of its set, a MIG placement its
memory slices and compute). A device is free only while every counter it consumes has that much left once the
devices taken are counted (:meth:`DeviceStore.budget`, :class:`CounterBudget`), so a full GPU and its partitions,
or two overlapping partitions, are never handed out together, inside a what-if as after a restart.

GPUs: the whole GPUs of NVIDIA's DRA driver (``nvidia_gpus.is_gpu``) on a node, in their order, are that node's GPUs for
the rest of the scheduler (:meth:`gpus`): the operator gives the node that many GPU slots, so fit, the scores,
gangs and queue accounting see DRA GPUs as they see the device plugin's. A GPU in static MIG mode, published only as
its MIG instances, is a slot too (its first instance stands for it). A MIG device is on its parent's slot
(:meth:`DeviceStore.slot_of`: the whole GPU that consumes the same counter set, or whose ``uuid`` is its
``parentUUID``), and a pod whose claims give it one MIG device and no whole GPU holds that share of the slot
(``nvidia_gpus.mig_milli``, ``scheduler.cache.dra_gpus``), as a pod with ``gpusched.io/gpu-milli`` holds a shared GPU:
queue usage, limits, FGD and fit count it so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass

import structlog

from scheduler.api.basics import resources as api_resources
from scheduler.api.devices import cel as api_cel
from scheduler.api.devices import consumable_capacity as api_capacity
from scheduler.api.devices import dra as api_dra
from scheduler.api.devices import nvidia_gpus
from scheduler.api.devices.dra import ClaimAllocation, Device, DeviceClass, ResourceClaim, ResourceSlice
from scheduler.api.objects.pod import PodRequest
from scheduler.cache import tables
from scheduler.cache.device_budgets import (
    CapacityUse,
    CounterBudget,
    CounterSetKey,
    DeviceKey,
    add_counters,
    count_capacity,
)

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class NodeDevices:
    """The devices a node can reach: its own, then those of slices for several nodes that select it."""

    local: tuple[Device, ...]
    gpus: tuple[Device, ...]
    #: Whole GPU or MIG device key -> its GPU slot (the index in ``gpus``).
    slot_of: Mapping[DeviceKey, int] = dataclasses.field(default_factory=dict)


class DeviceStore:
    def __init__(self) -> None:
        self.classes: dict[str, DeviceClass] = {}
        self.slices: dict[str, ResourceSlice] = {}
        self.claims: dict[str, ResourceClaim] = {}
        #: Whether the kinds have been listed (the operator's watches); until then a pod with claims waits. True where
        #: nothing watches (the simulator, tests).
        self.listed = True
        #: Why the cluster's devices cannot be known at all ("" when they can): the cluster does not serve the DRA API,
        #: so nothing watches them and a pod with claims waits with this reason instead of being placed without them.
        self.unavailable = ""
        #: Grows at every change (what the plugin memoises on).
        self.version = 0
        #: Grows at every change of a class or a slice (what devices exist and what they match), not of a claim.
        self.devices_version = 0
        #: Grows whenever a claim stops holding a device or a share of one (deallocated, deleted, its assumed
        #: allocation dropped): only then may a claim's change make room for another pod (the queueing hints).
        self.releases = 0
        #: claim key -> the allocation assumed for it, and the pod key it was made for.
        self.assumed: dict[str, tuple[ClaimAllocation, str]] = {}
        #: pod key -> the claims of its decision (allocated, or reserved only), until its binding completes or fails.
        self._pod_claims: dict[str, tuple[ClaimAllocation, ...]] = {}
        self._indexed_at = -1
        self._by_node: dict[str, NodeDevices] = {}
        self._shared: tuple[Device, ...] = ()
        self._by_key: dict[DeviceKey, Device] = {}
        #: The counter sets of the pools in force, and the devices that consume some.
        self._counter_sets: dict[CounterSetKey, dict[str, int]] = {}
        self._consuming: dict[DeviceKey, Device] = {}
        #: Device key -> the claims holding it (written or assumed allocations, admin access aside), kept as claims
        #: and decisions come and go; claim key -> the devices it holds.
        self._holders: dict[DeviceKey, set[str]] = {}
        self._holds: dict[str, tuple[DeviceKey, ...]] = {}
        self._taken: dict[DeviceKey, str] = {}
        #: Claim key -> its shares of devices that allow multiple allocations (device, consumed capacity); device
        #: key -> what all the shares consume (consumable capacity, ``scheduler.api.devices.consumable_capacity``).
        self._shares: dict[str, tuple[tuple[DeviceKey, api_capacity.Amounts], ...]] = {}
        self._consumed: dict[DeviceKey, dict[str, int]] = {}
        #: (expression source, device key) -> whether it matches (False also when it cannot be evaluated).
        self._matches: dict[tuple[str, DeviceKey], bool] = {}
        #: (class, request selectors) -> :meth:`mig_milli`, until the devices or classes change.
        self._mig_milli: dict[tuple[str, tuple[str, ...]], int] = {}
        #: Extended resource -> the DeviceClass mapping it (:meth:`extended_resource_class`), until the classes change.
        self._extended_class: dict[str, DeviceClass | None] = {}
        #: Expressions whose evaluation failed on some device, told in the log once each.
        self._told: set[str] = set()
        #: Nodes whose GPU slots are the GPUs they publish through DRA (no device plugin's ``nvidia.com/gpu``), as
        #: :func:`with_gpus` last read them: a pod asking ``nvidia.com/gpu`` without a claim cannot run there.
        self.dra_gpu_nodes: set[str] = set()
        #: Classes and claims the watches delivered but could not read (left out), by name or key: why not.
        self.unreadable: dict[str, str] = {}
        #: Pod uid -> the key of the claim made for its extended resources
        # (``scheduler.api.devices.extended_resources``).
        self._extended: dict[str, str] = {}

    # --- the watches -----------------------------------------------------------------------------------------

    def upsert_class(self, device_class: DeviceClass) -> bool:
        return tables.put(self.classes, device_class.name, device_class) and self._devices_changed(classes=True)

    def remove_class(self, name: str) -> bool:
        return tables.drop(self.classes, name) and self._devices_changed(classes=True)

    def upsert_slice(self, resource_slice: ResourceSlice) -> bool:
        return tables.put(self.slices, resource_slice.name, resource_slice) and self._devices_changed()

    def remove_slice(self, name: str) -> bool:
        return tables.drop(self.slices, name) and self._devices_changed()

    def _devices_changed(self, *, classes: bool = False) -> bool:
        """Count a change of the devices or (``classes``) of the classes; True, for the methods that return whether
        one was."""
        if classes:
            self._extended_class.clear()
        self.version += 1
        self.devices_version += 1
        return True

    def upsert_claim(self, claim: ResourceClaim) -> bool:
        """Take a claim from the watch or from our own write's answer. A version older than the one held is
        dropped, as kube-scheduler's assume cache drops it: the answer to our allocation's write comes before the
        watch's events of the versions before it, and one of those (say, the finalizer added) taken as it came
        showed the claim unallocated until the watch caught up: its devices free for another claim meanwhile."""
        held = self.claims.get(claim.key)
        if held == claim:
            return False
        if held is not None and held.uid == claim.uid and _older(claim.resource_version, held.resource_version):
            return False
        self.claims[claim.key] = claim
        if claim.extended and claim.owner_pod:
            self._extended[claim.owner_pod] = claim.key
        if claim.allocation is not None and claim.key in self.assumed:
            # The allocation is written: the claim speaks for itself now.
            del self.assumed[claim.key]
        self._refresh(claim.key)
        self.version += 1
        return True

    def remove_claim(self, key: str) -> bool:
        claim = self.claims.pop(key, None)
        if claim is None:
            return False
        if claim.extended and self._extended.get(claim.owner_pod) == key:
            del self._extended[claim.owner_pod]
        self.assumed.pop(key, None)
        self._refresh(key)
        self.version += 1
        return True

    # --- the scheduler's decisions -----------------------------------------------------------------------------

    def assume(self, pod_key: str, claims: Sequence[ClaimAllocation]) -> None:
        """A decision for ``pod_key`` allocates or reserves these claims: hold them until :meth:`release` or the
        watch shows them allocated."""
        self.release(pod_key)
        if not claims:
            return
        self._pod_claims[pod_key] = tuple(claims)
        for claim in claims:
            if claim.allocation is not None:
                self.assumed[claim.claim] = (claim, pod_key)
                self._refresh(claim.claim)
        self.version += 1

    def release(self, pod_key: str) -> None:
        """The pod's binding failed, or the pod is gone: what its decision allocated (and is not written) is free."""
        claims = self._pod_claims.pop(pod_key, ())
        for claim in claims:
            held = self.assumed.get(claim.claim)
            if held is not None and held[1] == pod_key:
                del self.assumed[claim.claim]
                self._refresh(claim.claim)
        if claims:
            self.version += 1

    def written_as(self, temporary: str) -> None:
        """A pod's extended resource claim was created and its allocation written under its real name (the store
        has it): the allocation assumed under the temporary key (``api_dra.extended_claim_key``) is dropped."""
        if self.assumed.pop(temporary, None) is not None:
            self._refresh(temporary)
            self.version += 1

    def confirm(self, pod_key: str) -> None:
        """The pod is bound: its claims' allocations are written (the watch will show them)."""
        self._pod_claims.pop(pod_key, None)

    # --- reading -------------------------------------------------------------------------------------------------

    def allocation_of(self, key: str) -> api_dra.Allocation | None:
        """A claim's allocation: written, or assumed by a decision in flight."""
        claim = self.claims.get(key)
        if claim is not None and claim.allocation is not None:
            return claim.allocation
        held = self.assumed.get(key)
        return held[0].allocation if held is not None else None

    def extended_claim(self, pod_uid: str) -> ResourceClaim | None:
        """The claim made for the pod's extended resources (by a decision for it that did not end in a binding,
        or before a restart), None if there is none."""
        key = self._extended.get(pod_uid)
        return self.claims.get(key) if key is not None else None

    def taken(self) -> Mapping[DeviceKey, str]:
        """Device key -> a claim holding it (written or assumed allocations; admin access does not hold)."""
        return self._taken

    def _refresh(self, key: str) -> None:
        """Take what claim ``key`` holds now (its written allocation, else the one assumed) into :meth:`taken`."""
        allocation = self.allocation_of(key)
        results = allocation.devices if allocation is not None else ()
        now = tuple(d.key for d in results if not d.admin_access and not d.share_id)
        held_shares = self._shares.pop(key, ())
        for device, consumed in held_shares:
            count_capacity(self._consumed, device, consumed, -1)
        shares = tuple((d.key, d.consumed) for d in results if d.share_id)
        if not set(self._holds.get(key, ())) <= set(now) or not set(held_shares) <= set(shares):
            self.releases += 1
        if shares:
            self._shares[key] = shares
        for device, consumed in shares:
            count_capacity(self._consumed, device, consumed, 1)
        before = self._holds.pop(key, ())
        if now:
            self._holds[key] = now
        for device in before:
            holders = self._holders.get(device)
            if holders is not None:
                holders.discard(key)
                if holders:
                    self._taken[device] = next(iter(holders))
                else:
                    del self._holders[device]
                    del self._taken[device]
        for device in now:
            self._holders.setdefault(device, set()).add(key)
            self._taken.setdefault(device, key)

    def consumed(self) -> Mapping[DeviceKey, Mapping[str, int]]:
        """Device key -> what the shares of it consume (written or assumed allocations)."""
        return self._consumed

    def capacity_use(self) -> CapacityUse:
        """What the shares of devices that allow multiple allocations consume (a copy, for one search)."""
        return CapacityUse({key: dict(amounts) for key, amounts in self._consumed.items()})

    def node_devices(self, node: str) -> NodeDevices:
        self._index()
        return self._by_node.get(node, _NONE)

    def shared_devices(self) -> tuple[Device, ...]:
        """Devices of slices for several nodes (``nodeSelector`` or ``allNodes``)."""
        self._index()
        return self._shared

    def device(self, key: DeviceKey) -> Device | None:
        self._index()
        return self._by_key.get(key)

    def extended_resource_class(self, resource: str) -> DeviceClass | None:
        """The DeviceClass that maps an extended resource to DRA: implicitly
        (``deviceclass.resource.kubernetes.io/<class>``), or by ``extendedResourceName``; of several, the newest,
        then the first by name (kube-scheduler's rule, for a migration from one class to another)."""
        if resource in self._extended_class:  # asked for every pod, every cycle: kept until the classes change
            return self._extended_class[resource]
        implicit = resource.removeprefix("deviceclass.resource.kubernetes.io/")
        if implicit != resource:
            found = self.classes.get(implicit)
        else:
            mapping = [c for c in self.classes.values() if c.extended_resource == resource]
            newest = max((c.created for c in mapping), default="")
            found = min((c for c in mapping if c.created == newest), key=lambda c: c.name, default=None)
        self._extended_class[resource] = found
        return found

    def from_dra(self, extended: Mapping[str, str], node: str, gpu_slots: bool) -> frozenset[str]:
        """Of the extended resources a DeviceClass maps to DRA (``extended``: resource -> class), those the node
        has from no device plugin, which kube-scheduler takes from DRA: ``nvidia.com/gpu`` where the node's GPU
        slots are DRA's or it has none; any other always (gpusched does not count them from a device plugin:
        :meth:`not_backed`)."""
        return frozenset(
            r
            for r in extended
            if r != api_resources.GPU
            or node in self.dra_gpu_nodes
            or not gpu_slots
            or not self.selects_gpus(extended[r])
        )

    def not_backed(self, asked: Mapping[str, int]) -> dict[str, int]:
        """``asked`` without the extended resources a DeviceClass maps to DRA."""
        return {name: amount for name, amount in asked.items() if self.extended_resource_class(name) is None}

    def gpus(self, node: str) -> tuple[Device, ...]:
        """The node's whole GPUs published through DRA, in GPU-index order."""
        return self.node_devices(node).gpus

    def selects_gpus(self, class_name: str) -> bool:
        """Whether the DeviceClass of that name selects whole GPUs (False for an unknown class)."""
        device_class = self.classes.get(class_name)
        if device_class is None:
            return False
        # A GPU some node publishes; before any, a bare one of NVIDIA's driver (its class selects it, a MIG class not).
        sample = self.sample_gpu() or _BARE_GPU
        return all(self.matches(e, sample) for e in device_class.selectors)

    def sample_gpu(self) -> Device | None:
        """A whole GPU some node publishes (the first node's first, in the index's order), None if none does."""
        self._index()
        return next((d for devices in self._by_node.values() for d in devices.gpus if nvidia_gpus.is_gpu(d)), None)

    def slot_of(self, node: str, key: DeviceKey) -> int | None:
        """The GPU slot on ``node`` of a whole GPU or MIG device (a MIG device's: its parent GPU's)."""
        return self.node_devices(node).slot_of.get(key)

    def mig_milli(self, device_class: str, expressions: Sequence[api_cel.Expression]) -> int:
        """The smallest share of a GPU (milli) among the MIG devices of the cluster that a request of this class with
        these selectors may get; 0 if it may get no MIG device."""
        self._index()
        key = (device_class, tuple(e.source for e in expressions))
        found = self._mig_milli.get(key)
        if found is None:
            klass = self.classes.get(device_class)
            shares = [
                nvidia_gpus.mig_milli(d)
                for d in self._by_key.values()
                if klass is not None
                and nvidia_gpus.mig_milli(d)
                and all(self.matches(e, d) for e in klass.selectors)
                and all(self.matches(e, d) for e in expressions)
            ]
            found = self._mig_milli[key] = min(shares, default=0)
        return found

    def gpu_nodes(self) -> dict[str, int]:
        """Node name -> how many whole GPUs it publishes through DRA (nodes with none are not listed)."""
        self._index()
        return {node: len(devices.gpus) for node, devices in self._by_node.items() if devices.gpus}

    def matches(self, expression: api_cel.Expression, device: Device) -> bool:
        """Whether ``device`` satisfies a selector expression (memoised). An expression that cannot be evaluated
        for the device (an attribute it lacks) does not match it, and the log says so once per expression;
        kube-scheduler fails the whole allocation on such a device instead (a CEL runtime error)."""
        key = (expression.source, device.key)
        found = self._matches.get(key)
        if found is None:
            try:
                found = api_cel.matches(expression, device.variable())
            except api_cel.CelError as exc:
                found = False
                if expression.source not in self._told:
                    self._told.add(expression.source)
                    log.warning(
                        "a device selector cannot be evaluated for a device: it does not match",
                        device=device.key,
                        error=str(exc),
                    )
            self._matches[key] = found
        return found

    def _index(self) -> None:
        if self._indexed_at == self.devices_version:
            return
        newest: dict[tuple[str, str], int] = {}
        for s in self.slices.values():
            pool = (s.driver, s.pool)
            newest[pool] = max(newest.get(pool, s.generation), s.generation)
        complete: dict[tuple[str, str], list[ResourceSlice]] = {}
        for s in self.slices.values():
            if s.generation == newest[(s.driver, s.pool)]:
                complete.setdefault((s.driver, s.pool), []).append(s)
        local: dict[str, list[Device]] = {}
        shared: list[Device] = []
        by_key: dict[DeviceKey, Device] = {}
        counter_sets: dict[CounterSetKey, dict[str, int]] = {}
        for slices in complete.values():
            if len(slices) < max(s.slice_count for s in slices):
                continue  # the driver is still writing this generation
            for s in sorted(slices, key=lambda s: s.name):
                for set_name, counters in s.counter_sets:
                    counter_sets.setdefault((s.driver, s.pool, set_name), dict(counters))
                for device in s.devices:
                    if device.key in by_key:
                        continue  # a device twice in one pool: the first slice by name wins, as a stable rule
                    by_key[device.key] = device
                    if s.node:
                        local.setdefault(s.node, []).append(device)
                    elif s.all_nodes or s.node_terms:
                        shared.append(device)
        old_keys = set(self._by_key)
        self._by_node = {node: _node_devices(devices) for node, devices in local.items()}
        self._shared = tuple(shared)
        self._counter_sets = counter_sets
        self._consuming = {key: d for key, d in by_key.items() if d.consumes}
        if old_keys != set(by_key) or any(self._by_key.get(k) != d for k, d in by_key.items()):
            self._matches.clear()
        self._by_key = by_key
        self._mig_milli.clear()
        self._indexed_at = self.devices_version

    def budget(self, taken: Set[DeviceKey]) -> CounterBudget:
        """What the counter sets have left once the devices ``taken`` are counted."""
        self._index()
        consumed: dict[CounterSetKey, dict[str, int]] = {}
        held = (
            (d for key, d in self._consuming.items() if key in taken)
            if len(self._consuming) <= len(taken)
            else (self._consuming[key] for key in taken if key in self._consuming)
        )
        for device in held:
            add_counters(consumed, device, 1)
        return CounterBudget(self._counter_sets, consumed)

    def owns(self, key: str, pod: PodRequest) -> bool:
        """Whether a claim is ``pod``'s own: made from its template, or used by it alone (reserved for it only, or
        allocated by a decision for it); its GPUs are then the pod's GPUs."""
        claim = self.claims.get(key)
        if claim is None:
            return False
        if claim.owner_pod and claim.owner_pod == pod.uid:
            return True
        held = self.assumed.get(key)
        if held is not None:
            return held[1] == pod.key
        users = {c.uid for c in claim.reserved_for}
        return users == {pod.uid}

    def gpu_devices(self, allocation: api_dra.Allocation) -> list[Device]:
        """The whole GPUs among an allocation's devices (admin access left out)."""
        found = (self.device(d.key) for d in allocation.devices if not d.admin_access)
        return [d for d in found if d is not None and nvidia_gpus.is_gpu(d)]

    def mig_devices(self, allocation: api_dra.Allocation) -> list[int]:
        """The shares of a GPU (milli) of the MIG devices among an allocation's devices (admin access left out)."""
        found = (self.device(d.key) for d in allocation.devices if not d.admin_access)
        return [nvidia_gpus.mig_milli(d) for d in found if d is not None and nvidia_gpus.mig_milli(d)]

    def gpu_slots(self, node: str, devices: Sequence[api_dra.AllocatedDevice]) -> list[int]:
        """The GPU slots on ``node`` that a pod given ``devices`` holds, as :func:`pod_gpus` counts them: its whole
        GPUs' slots; with none, the slot of its one MIG device's parent GPU."""
        found = [(d, self.device(d.key)) for d in devices if not d.admin_access]
        whole = [d.key for d, dev in found if dev is not None and nvidia_gpus.is_gpu(dev)]
        mig = [d.key for d, dev in found if dev is not None and nvidia_gpus.mig_milli(dev)]
        keys = whole if whole else mig if len(mig) == 1 else []
        slots = (self.slot_of(node, key) for key in keys)
        return [slot for slot in slots if slot is not None]


_NONE = NodeDevices((), ())


def _older(version: str, than: str) -> bool:
    """Whether resourceVersion ``version`` comes before ``than`` (both integers, as kube-scheduler's assume cache
    reads them; a version that is not one is never older)."""
    try:
        return int(version) < int(than)
    except ValueError:
        return False


def _node_devices(devices: list[Device]) -> NodeDevices:
    """A node's devices with its GPU slots: its whole GPUs, and a GPU in static MIG mode (only its MIG instances
    published) through its first instance; each MIG device on its parent's slot."""
    gpus = [d for d in devices if nvidia_gpus.is_gpu(d)]
    by_set = {(d.driver, d.pool, name): d for d in gpus for name, _c in d.consumes}
    by_uuid = {d.attribute("uuid"): d for d in gpus if d.attribute("uuid") is not None}
    parent: dict[DeviceKey, Device] = {}
    for d in sorted((d for d in devices if nvidia_gpus.is_mig(d)), key=nvidia_gpus.gpu_order):
        of = next((by_set[(d.driver, d.pool, n)] for n, _c in d.consumes if (d.driver, d.pool, n) in by_set), None)
        uuid = d.attribute("parentUUID")
        if of is None and uuid is not None:
            of = by_uuid.get(uuid)
            if of is None:
                of = by_uuid[uuid] = d  # a GPU in static MIG mode: its first instance stands for it
                gpus.append(d)
        if of is not None:
            parent[d.key] = of
    ordered = tuple(sorted(gpus, key=nvidia_gpus.gpu_order))
    slot_of = {d.key: i for i, d in enumerate(ordered)}
    slot_of.update({key: slot_of[of.key] for key, of in parent.items()})
    return NodeDevices(tuple(devices), ordered, slot_of)


_BARE_GPU = Device(api_dra.GPU_DRIVER, "", "", {f"{api_dra.GPU_DRIVER}/type": "gpu"})
