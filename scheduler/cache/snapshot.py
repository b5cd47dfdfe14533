"""The cluster as one scheduling cycle sees it (:class:`Snapshot`): copies of the cache's arrays that what-ifs change
and roll back, and read-only views of the cache's node metadata and pods.

A what-if (:meth:`Snapshot.checkpoint`, then :meth:`Snapshot.rollback` or :meth:`Snapshot.keep`; they nest) may
place and remove pods (the arrays keep their own undo of each row they change) and record the volume and device
choices of the pods it placed; every change of the snapshot's own lists goes into one operation log, which a
rollback undoes newest first back to its checkpoint, whatever list each entry changed.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from scheduler.api.crds import topology as api_topology
from scheduler.api.devices import dra as api_dra
from scheduler.api.devices import topology_manager
from scheduler.api.devices.gputopo import GpuTopology
from scheduler.api.objects import host_ports, selectors
from scheduler.api.objects import volumes as api_volumes
from scheduler.api.objects.host_ports import HostPort
from scheduler.api.objects.pod import PodRequest
from scheduler.api.objects.selectors import Taint
from scheduler.cache.arrays import ClusterArrays, Placement
from scheduler.cache.device_budgets import CapacityUse, DeviceKey
from scheduler.cache.device_store import DeviceStore
from scheduler.cache.kubelet_refusals import KubeletRefusals
from scheduler.cache.numa_store import NumaStore
from scheduler.cache.pods_index import PodIndex, PortIndex
from scheduler.cache.volume_store import VolumeStore
from scheduler.kernels import layout

if TYPE_CHECKING:
    from scheduler.cache.state import Cache, PodEntry

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


def device_memory_column(request: F64, a: ClusterArrays, slot: int, pod: PodRequest, devices: int) -> None:
    """What a GPU pod adds to the node's GPU-memory column: whole devices take all their memory; on a node whose
    device memory is unknown nothing is counted there (the column has no capacity)."""
    if pod.gpu.whole:
        request[layout.GPU_MEMORY] = a.gpu_mem_each[slot] * devices
    elif a.gpu_mem_each[slot] <= 0:
        request[layout.GPU_MEMORY] = 0.0


class Snapshot:
    """The cluster as one scheduling cycle sees it: array copies, and read-only views of the cache's node metadata.

    The arrays change only through :meth:`place` and :meth:`unplace` inside a checkpoint (what-ifs); the
    metadata is valid until the caller next yields to the event loop. Plugins read the cluster only through a
    snapshot: it never hands out the cache itself, so nothing in a cycle can change what the cache holds.
    """

    def __init__(self, cache: Cache, arrays: ClusterArrays) -> None:
        self._cache = cache
        self.arrays = arrays
        self.columns = list(cache.columns)
        #: Pods placed (+1) or removed (-1) by the open what-ifs, in order: filters that look at other pods add
        #: these to the cache's indexes.
        self._what_if: list[tuple[int, PodRequest, int]] = []
        #: Volume choices made by the open what-ifs (a gang's members placed earlier).
        self._volume_picks: list[api_volumes.ClaimBinding] = []
        #: The same for the ResourceClaims the open what-ifs allocated or reserved.
        self._device_picks: list[api_dra.ClaimAllocation] = []
        #: Every change the open what-ifs made to the three lists above, in order, as what undoes it: (the list,
        #: -1) for an item appended, (the list, index, item) for an item taken out at that index. A rollback undoes
        #: the entries after its checkpoint's mark, newest first, whatever list each changed.
        self._log: list[tuple[list[Any], int, Any]] = []
        #: Where each open what-if began in the log (innermost last).
        self._marks: list[int] = []

    # --- node metadata, read-only ---------------------------------------------------------------------------

    @property
    def node_count(self) -> int:
        """How many nodes the cluster has (the arrays have more slots: they grow by doubling)."""
        return self._cache.node_count

    @property
    def taints(self) -> Mapping[int, tuple[Taint, ...]]:
        """Node slot -> its taints (slots without taints are not listed)."""
        return MappingProxyType(self._cache.taints)

    @property
    def soft_taints(self) -> Mapping[int, tuple[Taint, ...]]:
        """Node slot -> its PreferNoSchedule taints (slots without them are not listed)."""
        return MappingProxyType(self._cache.soft_taints)

    def taint_index(self) -> tuple[I64, list[tuple[Taint, ...]]]:
        """Per slot, an index into the distinct taint sets (-1: none), and the sets (``Cache.taint_index``)."""
        return self._cache.taint_index()

    def select(
        self, node_selector: Mapping[str, str], affinity: tuple[selectors.NodeSelectorTerm, ...]
    ) -> npt.NDArray[np.bool_]:
        """Per node slot, whether the node matches ``node_selector`` and the required node affinity."""
        names = self.names + [None] * (self.slots - len(self.names))
        return self._cache.labels.select(self.slots, node_selector, affinity, names)

    def slot_of(self, name: str) -> int | None:
        return self._cache.slot_of(name)

    @property
    def mig_slots(self) -> Mapping[int, int]:
        """Node slot -> the share of a GPU each of its GPU slots is, for nodes whose slots are MIG devices
        (``Cache.mig_slots``)."""
        return MappingProxyType(self._cache.mig_slots)

    def name_rank(self) -> I64:
        """Per node slot, the node's place in name order."""
        return self._cache.name_rank()

    @property
    def topology(self) -> api_topology.TopologySpec:
        """The cluster's Topology levels in use."""
        return self._cache.topology

    def domain_ids(self) -> I64:
        """Node slots x Topology levels: each node's domain id at each level (read-only)."""
        return self._cache.domain_ids()

    def gpu_topology_index(self) -> tuple[I64, list[GpuTopology]]:
        return self._cache.gpu_topology_index()

    def gpu_topology(self, slot: int) -> GpuTopology | None:
        return self._cache.gpu_topology(slot)

    def pods(self) -> Iterator[PodEntry]:
        """The pods the cache holds (bound and assumed; not a what-if's placements)."""
        return self._cache.pods()

    def pods_on(self, slot: int) -> Mapping[str, PodEntry]:
        return MappingProxyType(dict(self._cache.pods_on(slot)))

    @property
    def slots(self) -> int:
        return self.arrays.slots

    @property
    def names(self) -> list[str | None]:
        return self._cache.names

    @property
    def models(self) -> list[str]:
        return self._cache.models

    def request_vector(self, pod: PodRequest) -> F64:
        vector = self._cache.request_vector(pod)
        if vector.shape[0] > self.arrays.cap.shape[1]:
            # The pod asks for a resource no node has: it fits nowhere, but the vector must match the arrays.
            extra = vector[self.arrays.cap.shape[1] :]
            if extra.any():
                self.arrays.grow(resources=vector.shape[0])
                # Name the new columns too, so that "Insufficient example.com/foo" says which resource.
                self.columns = list(self._cache.columns)
            else:
                vector = vector[: self.arrays.cap.shape[1]]
        return vector

    def placement(self, pod: PodRequest, slot: int, gpu_ids: Sequence[int]) -> Placement:
        request = self.request_vector(pod)
        a = self.arrays
        if pod.gpu.count:
            device_memory_column(request, a, slot, pod, len(gpu_ids))
        memory = a.device_memory(slot, gpu_ids, pod.gpu.whole, float(pod.gpu.memory))
        return Placement(slot, request, tuple(gpu_ids), float(pod.gpu.milli), memory, pod)

    def checkpoint(self) -> int:
        """Open a what-if (they nest); every change from here on is undone by :meth:`rollback` with the token."""
        self._marks.append(len(self._log))
        return self.arrays.checkpoint()

    def rollback(self, token: int) -> None:
        """Undo every change since the checkpoint ``token`` and close it."""
        self.arrays.rollback(token)
        mark = self._marks.pop()
        while len(self._log) > mark:
            changed, index, item = self._log.pop()
            if index < 0:
                changed.pop()
            else:
                changed.insert(index, item)

    def keep(self, token: int) -> None:
        """Keep the changes since the checkpoint ``token`` and close it (an outer what-if can still undo them)."""
        self.arrays.keep(token)
        self._marks.pop()
        if not self._marks:
            # The outermost what-if is closed: what it kept is the caller's to make real in the cache.
            self._log.clear()
            self._what_if.clear()
            self._volume_picks.clear()
            self._device_picks.clear()

    def _append(self, changed: list[Any], items: Sequence[Any]) -> None:
        for item in items:
            changed.append(item)
            self._log.append((changed, -1, None))

    def _take_out(self, changed: list[Any], items: Sequence[Any]) -> None:
        for item in items:
            if item in changed:
                index = changed.index(item)
                del changed[index]
                self._log.append((changed, index, item))

    @property
    def in_what_if(self) -> bool:
        """Whether a checkpoint is open (what the cycle decides is tried, not assumed)."""
        return bool(self._marks)

    @property
    def volumes(self) -> VolumeStore:
        """Claims, volumes, classes and CSINodes, and the choices assumed (read it, never change it)."""
        return self._cache.volumes

    @property
    def volume_picks(self) -> Sequence[api_volumes.ClaimBinding]:
        """The volume choices of the pods the open what-ifs placed (empty outside what-ifs)."""
        return self._volume_picks

    def pick_volumes(self, bindings: Sequence[api_volumes.ClaimBinding]) -> None:
        """Record the volume choices of a pod placed inside the open what-if, so the next pod tried there does not
        get the same volume (undone with the what-if)."""
        if not self._marks:
            raise RuntimeError("volume choices are recorded only inside a checkpoint")
        self._append(self._volume_picks, bindings)

    @property
    def devices(self) -> DeviceStore:
        """DeviceClasses, devices, ResourceClaims and the allocations assumed (read it, never change it)."""
        return self._cache.devices

    @property
    def kubelet_refusals(self) -> KubeletRefusals:
        """The nodes whose kubelet refused a pod of an owner lately (read it, never change it)."""
        return self._cache.kubelet_refusals

    @property
    def device_picks(self) -> Sequence[api_dra.ClaimAllocation]:
        """What the pods the open what-ifs placed do with their ResourceClaims (empty outside what-ifs)."""
        return self._device_picks

    def pick_devices(self, claims: Sequence[api_dra.ClaimAllocation]) -> None:
        """Record the claims a pod placed inside the open what-if allocates or reserves, so the next pod tried there
        neither gets the same devices nor allocates a shared claim again (undone with the what-if)."""
        if not self._marks:
            raise RuntimeError("device choices are recorded only inside a checkpoint")
        self._append(self._device_picks, claims)

    def devices_taken(self) -> set[DeviceKey]:
        """The devices held: by written or assumed allocations, less those of claims used only by pods a what-if
        took off the cluster (preemption's victims: their claims are released when they go), plus the open
        what-ifs' picks. Shares of devices that allow multiple allocations are not: :meth:`capacity_use`."""
        store = self.devices
        held = store.taken()
        removed = {p.uid for sign, p, _ in self.what_if_pods if sign < 0 and (p.resource_claims or p.extended_asks)}
        if removed:
            freed: dict[str, bool] = {}
            for claim_key in set(held.values()):
                claim = store.claims.get(claim_key)
                users = {c.uid for c in claim.reserved_for} if claim is not None else set()
                freed[claim_key] = bool(users) and users <= removed
            taken = {key for key, claim_key in held.items() if not freed[claim_key]}
        else:
            taken = set(held)
        for pick in self.device_picks:
            taken.update(d.key for d in pick.devices if not d.admin_access and not d.share_id)
        return taken

    def capacity_use(self) -> CapacityUse:
        """What the shares of devices that allow multiple allocations consume, the open what-ifs' picks too."""
        use = self.devices.capacity_use()
        for pick in self.device_picks:
            for d in pick.devices:
                if d.share_id:
                    use.take(d.key, dict(d.consumed))
        return use

    def unpick_devices(self, claims: Sequence[api_dra.ClaimAllocation]) -> None:
        self._take_out(self._device_picks, claims)

    def unpick_volumes(self, bindings: Sequence[api_volumes.ClaimBinding]) -> None:
        self._take_out(self._volume_picks, bindings)

    def place(self, placement: Placement) -> None:
        if not self.arrays._open:
            raise RuntimeError("a snapshot changes only inside a checkpoint")
        self.arrays.apply(placement)
        if placement.pod is not None:
            self._what_if.append((1, placement.pod, placement.slot))
            self._log.append((self._what_if, -1, None))

    def unplace(self, placement: Placement) -> None:
        if not self.arrays._open:
            raise RuntimeError("a snapshot changes only inside a checkpoint")
        self.arrays.apply(placement, sign=-1.0)
        if placement.pod is not None:
            self._what_if.append((-1, placement.pod, placement.slot))
            self._log.append((self._what_if, -1, None))

    @property
    def pod_index(self) -> PodIndex:
        """The pods the cache holds, for selecting them by affinity term (read it, never change it)."""
        return self._cache.pod_index

    @property
    def pods_with_terms(self) -> int:
        """How many pods the cache holds carry inter-pod affinity terms (without building the index)."""
        return self._cache.pods_with_terms

    def topology_domains(self, key: str) -> tuple[I64, int]:
        """Per node slot the domain of a topology key (the index of its value of that label, -1 without it), and
        the number of domains (read-only)."""
        return self._cache.labels.domain_ids(key, self.slots)

    @property
    def what_if_pods(self) -> Sequence[tuple[int, PodRequest, int]]:
        """(+1 placed / -1 removed, pod, node slot) for each change the open what-ifs made, in order (read it,
        never change it: it is the snapshot's own list, empty outside what-ifs)."""
        return self._what_if

    @property
    def numa(self) -> NumaStore:
        """The nodes' NUMA zones and the cache's count of what the pods take of them (read it, never change it)."""
        return self._cache.numa

    def numa_available(self, node: str) -> list[dict[str, int]] | None:
        """What each NUMA zone of ``node`` has left (None: the node publishes no zones): the cache's count, less what
        the pods the open what-ifs placed there take (a gang's members placed earlier, in order), plus what the pods
        they removed took (a victim search): its predicted zones, or for a pod the object shows already, the zones
        the Topology Manager replayed gives it (``NumaStore.shown``). A removed pod put back (a victim spared) takes
        the very zones it gave back, not the ones a new pod would get."""
        store = self._cache.numa
        zones, left = store.nodes.get(node), store.available(node)
        if zones is None or left is None or not self._what_if:
            return left
        slot = self._cache.slot_of(node)
        placed: dict[str, tuple[Mapping[str, int], ...]] = {}
        removed: dict[str, tuple[Mapping[str, int], ...]] = {}
        shown: dict[str, tuple[Mapping[str, int], ...]] | None = None
        for sign, pod, at in self._what_if:
            if at != slot:
                continue
            if sign > 0:
                if pod.key in removed:
                    taken = removed.pop(pod.key)  # a victim put back: what it gave back, no more (nothing if unknown)
                else:
                    taken = topology_manager.admit_pod(zones, pod, available=left).taken
                placed[pod.key] = taken
            elif pod.key in placed:
                taken = placed.pop(pod.key)  # placed by the what-if itself, then taken off again
            else:
                taken = store.predicted(pod.key) or ()
                if not taken and slot is not None:
                    shown = shown if shown is not None else self._numa_shown(node, slot)
                    taken = shown.get(pod.key, ())
                removed[pod.key] = taken
            for zone, amounts in zip(left, taken, strict=False):
                for name, amount in amounts.items():
                    zone[name] = max(0, zone.get(name, 0) - sign * amount)
        return left

    def numa_free(self, node: str) -> Sequence[Mapping[str, int]] | None:
        """:meth:`numa_available` to read only (never change it): outside what-ifs the store's count as it keeps it,
        without a copy per node and pod."""
        if not self._what_if:
            return self._cache.numa.free(node)
        return self.numa_available(node)

    def _numa_shown(self, node: str, slot: int) -> dict[str, tuple[Mapping[str, int], ...]]:
        """``NumaStore.shown`` for the pods the cache holds on ``node`` (slot ``slot``) without a prediction."""
        store = self._cache.numa
        return store.shown(
            node, [e.pod for e in self._cache.pods_on(slot).values() if store.predicted(e.pod.key) is None]
        )

    def numa_taken(self, pod_key: str, slot: int) -> tuple[Mapping[str, int], ...]:
        """What pod ``pod_key``, held by the cache on node ``slot``, takes of each NUMA zone there, as a what-if that
        removes it gives it back (:meth:`numa_available`); () on a node without zones, or where none is known."""
        node = self.names[slot] if slot < len(self.names) else None
        if node is None or node not in self._cache.numa.nodes:
            return ()
        return self._cache.numa.predicted(pod_key) or self._numa_shown(node, slot).get(pod_key, ())

    def host_port_conflicts(self, ports: tuple[HostPort, ...]) -> npt.NDArray[np.bool_]:
        """Per node slot, whether a pod there (bound, assumed, or placed by an open what-if and not removed by
        one) holds a host port that conflicts with ``ports``."""
        mask = self._cache.ports.conflicts(ports, self.slots)
        if not self._what_if:
            return mask
        net: dict[tuple[str, int], tuple[PodRequest, int]] = {}
        for sign, pod, slot in self._what_if:
            if pod.host_ports:
                _, count = net.get((pod.key, slot), (pod, 0))
                net[(pod.key, slot)] = (pod, count + sign)
        placed = PortIndex()
        gone: dict[int, set[str]] = {}
        for (key, slot), (pod, count) in net.items():
            if count > 0:
                placed.add(slot, pod.host_ports)
            elif count < 0:
                gone.setdefault(slot, set()).add(key)
        for slot, keys in gone.items():
            # A pod a what-if removed (a victim) frees its ports unless another pod there holds them too.
            if slot < mask.shape[0] and mask[slot]:
                held = (e.pod.host_ports for k, e in self._cache.pods_on(slot).items() if k not in keys)
                mask[slot] = any(host_ports.conflicting(ports, h) for h in held)
        return mask | placed.conflicts(ports, self.slots)
