"""The scheduler's view of the cluster: nodes and the pods that hold resources on them.

Every input enters through a handful of methods: :meth:`Cache.upsert_node`, :meth:`Cache.remove_node`,
:meth:`Cache.upsert_pod`, :meth:`Cache.remove_pod` for what the API server (or the simulator) says, and
:meth:`Cache.assume` / :meth:`Cache.confirm` / :meth:`Cache.forget` for the scheduler's own decisions before
the API server has seen them. A pod that is bound counts on its node whatever scheduler bound it.

Invariants: a node's usage is the sum of what its bound and assumed pods take; a pod is counted on at most
one node, once; a pod bound to a node the cache has not seen yet waits and is counted when the node arrives.

Topology: :meth:`Cache.domain_ids` gives each node slot's domain id at each level of the cluster's Topology (-1:
outside every domain of that level, or an empty slot), rebuilt when a node's labels or the Topology change;
:meth:`Cache.gpu_topology` gives a node's GPU topology from its ``gpusched.io/gpu-topology`` annotation. A bad
annotation is reported in :attr:`Cache.gpu_topology_problems` and the node's GPUs are treated as unknown.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from scheduler.api.basics import resources
from scheduler.api.basics.errors import InvalidObject
from scheduler.api.crds import topology as api_topology
from scheduler.api.devices import dra as api_dra
from scheduler.api.devices.gputopo import GpuTopology
from scheduler.api.objects import node as api_node
from scheduler.api.objects import volumes as api_volumes
from scheduler.api.objects.pod import PodRequest
from scheduler.api.objects.selectors import Taint
from scheduler.cache import arrays as arrays_mod
from scheduler.cache.arrays import ClusterArrays, Placement
from scheduler.cache.device_store import DeviceStore
from scheduler.cache.gpu_topologies import GpuTopologies
from scheduler.cache.kubelet_refusals import KubeletRefusals
from scheduler.cache.labels import LabelIndex
from scheduler.cache.numa_store import NumaStore
from scheduler.cache.pods_index import PodIndex, PortIndex
from scheduler.cache.snapshot import Snapshot, device_memory_column
from scheduler.cache.volume_store import VolumeStore
from scheduler.kernels import layout

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

_FIXED_COLUMNS = {
    resources.CPU: layout.CPU,
    resources.MEMORY: layout.MEMORY,
    resources.PODS: layout.PODS,
    resources.GPU_MILLI: layout.GPU_MILLI,
    resources.GPU_MEMORY: layout.GPU_MEMORY,
}

__all__ = ["Cache", "NodeEntry", "PodEntry", "Snapshot", "UnknownNode"]


@dataclass(slots=True)
class PodEntry:
    pod: PodRequest
    placement: Placement
    assumed: bool


@dataclass(slots=True)
class NodeEntry:
    info: api_node.NodeInfo
    pods: dict[str, PodEntry] = field(default_factory=dict)


class UnknownNode(KeyError):
    """A decision named a node the cache does not hold."""


class Cache:
    """Nodes and pods as arrays (see :class:`ClusterArrays`), plus the bookkeeping to keep them right."""

    def __init__(self) -> None:
        self.counter = itertools.count(1)
        self.arrays = ClusterArrays(self.counter)
        self.columns: list[str] = [
            resources.CPU,
            resources.MEMORY,
            resources.PODS,
            resources.GPU_MILLI,
            resources.GPU_MEMORY,
        ]
        self._column: dict[str, int] = dict(_FIXED_COLUMNS)
        self.models: list[str] = []
        self._model: dict[str, int] = {}
        self.names: list[str | None] = []
        self._slot: dict[str, int] = {}
        self._free_slots: list[int] = []
        self.nodes: dict[int, NodeEntry] = {}
        self.labels = LabelIndex()
        self.taints: dict[int, tuple[Taint, ...]] = {}
        #: (per slot: index into the list of distinct taint sets or -1, the sets), built on demand; None when stale.
        self._taint_index: tuple[I64, list[tuple[Taint, ...]]] | None = None
        #: Node slot -> its PreferNoSchedule taints (a score, not a filter); slots without them are not listed.
        self.soft_taints: dict[int, tuple[Taint, ...]] = {}
        self._pods: dict[str, PodEntry] = {}
        #: Node slot -> a number that changes whenever what the pods on it are changes (a pod comes or leaves, its
        #: object is replaced, an assumed one is confirmed, the node comes or goes), drawn from one counter so that no
        #: two states of a slot share one: a reader that kept what it found there knows cheaply whether it still holds
        #: (:meth:`pods_version`; the arrays' generation does not see a pod's object replaced or confirmed).
        self._pods_version: dict[int, int] = {}
        self._pods_versions = itertools.count(1)
        #: Bumped whenever a node is added, changed for scheduling, or removed (:attr:`nodes_version`).
        self._nodes_version = 0
        #: Bound pods whose devices are a guess (:meth:`_devices_for`: no ``gpusched.io/gpu-ids``, another
        #: scheduler's), given devices again when a pod leaves their over-committed node (:meth:`_guess_again`).
        self._guessed: set[str] = set()
        #: Host ports of the pods held (bound and assumed), per node slot.
        self.ports = PortIndex()
        #: The pods held (bound and assumed) by namespace and labels, and their affinity terms per node slot; built
        #: at the first question (:attr:`pod_index`), so that a cluster where no pod asks about others pays nothing.
        self._pod_index: PodIndex | None = None
        #: How many pods held carry inter-pod affinity terms (known without the index).
        self.pods_with_terms = 0
        #: Claims, volumes, storage classes, CSINodes, and the volume choices assumed
        #: (``scheduler.cache.volume_store``).
        self.volumes = VolumeStore()
        #: The nodes' NUMA zones and what the pods take of them (empty where no NodeResourceTopology is read).
        self.numa = NumaStore(pods_on=self._pods_on)
        #: The nodes whose kubelet refused a pod of an owner (``TopologyAffinityError``), avoided for a while.
        self.kubelet_refusals = KubeletRefusals()
        #: DeviceClasses, ResourceSlices' devices, ResourceClaims, the allocations assumed
        #: (``scheduler.cache.device_store``).
        self.devices = DeviceStore()
        self._waiting: dict[str, dict[str, PodRequest]] = {}
        #: Per node slot, the node's place in name order (None when nodes came or went since): ties between equal
        #: scores go to the first node by name, whatever order the nodes were seen in (a restart sees them in
        #: another order).
        self._name_rank: I64 | None = None
        self._snapshot: Snapshot | None = None
        self.topology: api_topology.TopologySpec = api_topology.DEFAULT_TOPOLOGY
        self._domains: api_topology.DomainIndex | None = None
        self._domain_ids: I64 = np.full((0, len(self.topology.levels)), -1, dtype=np.int64)
        self._gpu_topologies = GpuTopologies()
        #: Nodes whose ``gpusched.io/gpu-topology`` annotation was refused, by node name (their GPUs are treated
        #: as unknown until it is fixed).
        self.gpu_topology_problems: dict[str, InvalidObject] = self._gpu_topologies.problems
        #: Node slot -> the share of a GPU (milli) each of its GPU slots is, for the nodes whose GPU slots are MIG
        #: devices (NVIDIA's device plugin under the single MIG strategy, ``NodeInfo.mig_profile``); the others are
        #: not listed (a slot of theirs is a whole GPU).
        self.mig_slots: dict[int, int] = {}
        #: The lowest priority of any pod ever placed (inf before the first): no pod below it runs, so no
        #: preemption for a job at or under it has a victim (the queueing hints, ``scheduler.core.hints``).
        self.lowest_priority: float = math.inf

    # --- columns and models ------------------------------------------------------------------------------------

    def column(self, name: str) -> int:
        """The column of a resource, added (empty on every node) the first time it is seen."""
        index = self._column.get(name)
        if index is None:
            index = len(self.columns)
            self.columns.append(name)
            self._column[name] = index
            self.arrays.grow(resources=index + 1)
        return index

    def model_id(self, model: str) -> int:
        if not model:
            return -1
        index = self._model.get(model)
        if index is None:
            index = self._model[model] = len(self.models)
            self.models.append(model)
        return index

    def request_vector(self, pod: PodRequest) -> F64:
        """What the pod asks for, per column (a whole GPU's device memory is added per node, see kernels); not
        the extended resources DRA backs (the dra plugin's claims; ``nvidia.com/gpu`` is in the GPU slots)."""
        asked = pod.resources if not pod.extended_asks else self.devices.not_backed(pod.resources)
        for name in asked:
            self.column(name)
        vector = np.zeros(len(self.columns))
        for name, amount in asked.items():
            vector[self._column[name]] = amount
        vector[layout.GPU_MILLI] = pod.gpu.total_milli
        vector[layout.GPU_MEMORY] = pod.gpu.memory if pod.gpu.shared else 0.0
        return vector

    # --- nodes -------------------------------------------------------------------------------------------------

    def slot_of(self, name: str) -> int | None:
        return self._slot.get(name)

    def _pods_on(self, name: str) -> list[PodRequest]:
        """The pods held on node ``name`` (bound and assumed), for the zone store."""
        slot = self._slot.get(name)
        return [] if slot is None else [e.pod for e in self.nodes[slot].pods.values()]

    @property
    def node_count(self) -> int:
        return len(self.nodes)

    def upsert_node(self, info: api_node.NodeInfo) -> int:
        """Add a node or take its new state; its pods stay counted. Returns its slot."""
        self.numa.labelled(info.name, info.numa_policy)
        slot = self._slot.get(info.name)
        if slot is None:
            slot = self._free_slots.pop() if self._free_slots else len(self.names)
            if slot == len(self.names):
                self.names.append(None)
            self.arrays.grow(nodes=slot + 1)
            self.names[slot] = info.name
            self._slot[info.name] = slot
            self.nodes[slot] = NodeEntry(info)
            self._pods_changed(slot)
            self._domains = None
            self._name_rank = None
        else:
            entry = self.nodes[slot]
            if api_node.same_for_scheduling(entry.info, info):
                entry.info = info
                return slot
            if entry.info.labels != info.labels:
                self._domains = None
            entry.info = info
        self._gpu_topologies.read(slot, info)
        if info.mig_profile:
            self.mig_slots[slot] = info.mig_milli
        else:
            self.mig_slots.pop(slot, None)
        for name in info.allocatable:
            self.column(name)
        self.arrays.grow(gpus=info.gpus)
        self.labels.assign(slot, info.labels)
        # Only nodes with taints that filter are listed, so the filter loops over them alone.
        taints = tuple(t for t in info.taints if t.effect in ("NoSchedule", "NoExecute"))
        if taints != self.taints.get(slot, ()):
            self._taint_index = None
        if taints:
            self.taints[slot] = taints
        else:
            self.taints.pop(slot, None)
        soft = tuple(t for t in info.taints if t.effect == "PreferNoSchedule")
        if soft:
            self.soft_taints[slot] = soft
        else:
            self.soft_taints.pop(slot, None)
        self._rebuild(slot)
        for pod in self._waiting.pop(info.name, {}).values():
            self.upsert_pod(pod)
        return slot

    def _rebuild(self, slot: int) -> None:
        """Recompute a node's row from its info and the pods on it (their placements may change: a new version)."""
        a = self.arrays
        entry = self.nodes[slot]
        self._pods_changed(slot)
        self._nodes_version += 1
        info = entry.info
        a.touch(slot)
        a.cap[slot] = 0.0
        for name, amount in info.allocatable.items():
            a.cap[slot, self._column[name]] = amount
        a.cap[slot, layout.GPU_MILLI] = layout.WHOLE * info.gpus
        a.cap[slot, layout.GPU_MEMORY] = float(info.gpu_memory) * info.gpus
        a.used[slot] = 0.0
        a.gpu_count[slot] = info.gpus
        a.gpu_mem_each[slot] = float(info.gpu_memory)
        a.gpu_free[slot] = 0.0
        a.gpu_free[slot, : info.gpus] = layout.WHOLE
        a.gpu_mem_free[slot] = 0.0
        # Unknown device memory is no constraint: the per-device table says "unlimited", while the node's GPU-memory
        # column stays 0 so that scores leave that dimension out.
        a.gpu_mem_free[slot, : info.gpus] = float(info.gpu_memory) if info.gpu_memory else np.inf
        a.node_model[slot] = self.model_id(info.gpu_model)
        a.base_reason[slot] = layout.UNSCHEDULABLE if info.unschedulable else layout.FIT
        for key, pod_entry in list(entry.pods.items()):
            # The annotation is the truth when there is one: the recorded devices may be a guess made while the
            # node reported fewer GPUs (a device plugin restart), and must not outlive it.
            gpu_ids = pod_entry.pod.gpu_ids or pod_entry.placement.gpu_ids
            pod_entry.placement = self._placement(pod_entry.pod, slot, gpu_ids)
            a.apply(pod_entry.placement)
            entry.pods[key] = pod_entry

    def remove_node(self, name: str) -> None:
        """Forget a node. Its pods are kept waiting: if the node comes back they count again."""
        self.numa.labelled(name, None)
        slot = self._slot.pop(name, None)
        if slot is None:
            return
        entry = self.nodes.pop(slot)
        self._pods_changed(slot)
        self._nodes_version += 1
        for key, pod_entry in entry.pods.items():
            self._pods.pop(key, None)
            self._guessed.discard(key)
            if pod_entry.pod.host_ports:
                self.ports.add(slot, pod_entry.pod.host_ports, -1)
            self._unindex(pod_entry.pod, slot)
            if not pod_entry.assumed:
                self._waiting.setdefault(name, {})[key] = pod_entry.pod
        self.names[slot] = None
        self._domains = None
        self._name_rank = None
        self._gpu_topologies.forget(slot, name)
        self.mig_slots.pop(slot, None)
        self.labels.clear(slot)
        if self.taints.pop(slot, None) is not None:
            self._taint_index = None
        self.soft_taints.pop(slot, None)
        a = self.arrays
        a.touch(slot)
        for arr in (a.cap, a.used, a.gpu_free, a.gpu_mem_free, a.gpu_mem_each):
            arr[slot] = 0.0
        a.gpu_count[slot] = 0
        a.node_model[slot] = -1
        a.base_reason[slot] = layout.ABSENT
        self._free_slots.append(slot)

    # --- topology ----------------------------------------------------------------------------------------------

    def set_topology(self, spec: api_topology.TopologySpec) -> None:
        """Take the cluster's Topology (``DEFAULT_TOPOLOGY`` when it has none); domain ids follow its levels."""
        if spec != self.topology:
            self.topology = spec
            self._domains = None

    def domains(self) -> api_topology.DomainIndex:
        """The domain index of the present nodes, in slot order: its unlabelled nodes and problems are what to
        report (the per-slot ids are :meth:`domain_ids`)."""
        self._refresh_domains()
        assert self._domains is not None
        return self._domains

    def domain_ids(self) -> I64:
        """Node slots x Topology levels: each node's domain id at each level; -1 outside (no label) or no node."""
        self._refresh_domains()
        return self._domain_ids

    def _refresh_domains(self) -> None:
        if self._domains is not None and self._domain_ids.shape[0] == self.arrays.slots:
            return
        slots = sorted(self.nodes)
        index = api_topology.domains(
            self.topology.levels, [(self.nodes[slot].info.name, self.nodes[slot].info.labels) for slot in slots]
        )
        ids = np.full((self.arrays.slots, len(self.topology.levels)), -1, dtype=np.int64)
        if slots:
            ids[np.array(slots, dtype=np.int64)] = index.ids
        ids.setflags(write=False)
        self._domains = index
        self._domain_ids = ids

    def gpu_topology_index(self) -> tuple[I64, list[GpuTopology]]:
        """The known GPU topologies as an array: per slot an index into the returned list of distinct topologies,
        -1 where unknown (read-only; for scoring every node of a cycle without a Python loop over them)."""
        return self._gpu_topologies.index(self.arrays.slots)

    def gpu_topology(self, slot: int) -> GpuTopology | None:
        """The node's GPU topology from its annotation; None without one (or with a refused one)."""
        return self._gpu_topologies.get(slot)

    def taint_index(self) -> tuple[I64, list[tuple[Taint, ...]]]:
        """The nodes' filtering taints as an array: per slot an index into the returned list of distinct taint sets,
        -1 for a node without (read-only; nodes of one pool share a set, so a question about every tainted node is
        asked once per set, without a Python loop over the nodes)."""
        index = self._taint_index
        if index is None or index[0].shape[0] != self.arrays.slots:
            index = self._taint_index = arrays_mod.distinct_index(
                self.arrays.slots, self.taints, key=lambda taints: taints
            )
        return index

    def name_rank(self) -> I64:
        """Per node slot, the node's place in name order (slots without a node last); read-only."""
        rank = self._name_rank
        if rank is None or rank.shape[0] != self.arrays.slots:
            order = sorted(range(len(self.names)), key=lambda s: (self.names[s] is None, self.names[s] or ""))
            rank = np.full(self.arrays.slots, len(order), dtype=np.int64)
            rank[np.asarray(order, dtype=np.int64)] = np.arange(len(order), dtype=np.int64)
            rank.setflags(write=False)
            self._name_rank = rank
        return rank

    # --- pods --------------------------------------------------------------------------------------------------

    def _placement(self, pod: PodRequest, slot: int, gpu_ids: Sequence[int]) -> Placement:
        request = self.request_vector(pod)
        gpu = pod.gpu
        a = self.arrays
        if gpu.count:
            ids = [g for g in gpu_ids if g < a.gpu_count[slot]]
            if len(ids) != gpu.count:
                ids = self._devices_for(slot, pod)
            device_memory_column(request, a, slot, pod, len(ids))
            memory = a.device_memory(slot, ids, gpu.whole, float(gpu.memory))
            return Placement(slot, request, tuple(ids), float(gpu.milli), memory, pod)
        return Placement(slot, request, pod=pod)

    def _devices_for(self, slot: int, pod: PodRequest) -> list[int]:
        """Devices for a pod whose devices are not recorded: what a device plugin would most likely give.

        Whole GPUs: the lowest-index fully free devices. A shared GPU: the fitting device with the least free.
        If the pod does not fit (another scheduler over-committed the node), the devices with most free: the
        node's usage stays right and it simply shows no room.
        """
        a = self.arrays
        count = int(a.gpu_count[slot])
        free = a.gpu_free[slot, :count]
        gpu = pod.gpu
        if gpu.whole:
            ids = a.free_devices(slot, gpu.count, layout.WHOLE)
        else:
            fitting = [g for g in range(count) if free[g] >= gpu.milli]
            ids = [min(fitting, key=lambda g: (free[g], g))] if fitting else []
        if len(ids) < gpu.count:
            ids = sorted(np.argsort(-free, kind="stable")[: gpu.count].tolist())
        return ids

    def upsert_pod(self, pod: PodRequest) -> None:
        """Take what the API server says of a pod: bound pods count on their node, others are not held here."""
        key = pod.key
        old = self._pods.get(key)
        if pod.terminal:
            self.remove_pod(key)
            return
        if not pod.node_name:
            # Not bound yet: a pod we assumed keeps its place while its binding is in flight.
            for waiting in self._waiting.values():
                waiting.pop(key, None)
            if old is not None and old.assumed:
                self._reindex(old.pod, pod, old.placement.slot)
                old.pod = pod
                self._pods_changed(old.placement.slot)
            elif old is not None:
                self.remove_pod(key)
            return
        slot = self._slot.get(pod.node_name)
        gpu_ids: Sequence[int] = pod.gpu_ids
        if old is not None:
            same_node = old.placement.slot == slot
            if (
                same_node
                and old.pod.resources == pod.resources
                and old.pod.gpu == pod.gpu
                and (not pod.gpu_ids or tuple(pod.gpu_ids) == old.placement.gpu_ids)
            ):
                started = pod.phase == "Running" and old.pod.phase != "Running"
                self._reindex(old.pod, pod, old.placement.slot)
                old.pod = pod
                self._pods_changed(old.placement.slot)
                self._confirmed(old)  # the watch shows an assumed pod on its node: the binding went through
                if started and self.numa.nodes:
                    # Once, when it starts: each later update of a running pod changes nothing the zones read.
                    self.numa.pod_running(key, pod.node_name)
                return
            if same_node and not gpu_ids:
                gpu_ids = old.placement.gpu_ids
            self.remove_pod(key)
        if slot is None:
            self._waiting.setdefault(pod.node_name, {})[key] = pod
            return
        self._add(pod, slot, gpu_ids, assumed=False)

    def _add(self, pod: PodRequest, slot: int, gpu_ids: Sequence[int], *, assumed: bool) -> PodEntry:
        placement = self._placement(pod, slot, gpu_ids)
        self.arrays.apply(placement)
        entry = PodEntry(pod, placement, assumed)
        self._pods[pod.key] = entry
        self.lowest_priority = min(self.lowest_priority, pod.priority)
        if not assumed and pod.gpu.count:
            count = int(self.arrays.gpu_count[slot])
            if len([g for g in pod.gpu_ids if g < count]) != pod.gpu.count:
                self._guessed.add(pod.key)  # the devices are not the pod's own record: a guess
        self.nodes[slot].pods[pod.key] = entry
        self._pods_changed(slot)
        if pod.host_ports:
            self.ports.add(slot, pod.host_ports)
        if pod.pod_affinity:
            self.pods_with_terms += 1
        if self._pod_index is not None:
            self._pod_index.add(pod, slot)
        if pod.volumes:
            self.volumes.pod_added(pod, slot)
        if self.numa.nodes:
            self.numa.pod_placed(pod, self.nodes[slot].info.name)
        return entry

    def remove_pod(self, key: str) -> None:
        for waiting in self._waiting.values():
            waiting.pop(key, None)
        entry = self._pods.pop(key, None)
        if entry is None:
            return
        if entry.pod.volumes:
            self.volumes.release(key)  # only pods with claims have volume choices held
        if entry.pod.resource_claims or entry.pod.extended_asks:
            self.devices.release(key)
        node = self.nodes.get(entry.placement.slot)
        if self.numa.nodes:
            on_node = [e.pod for e in node.pods.values()] if node is not None else []
            self.numa.pod_left(entry.pod, node.info.name if node is not None else "", on_node)
        self.arrays.apply(entry.placement, sign=-1.0)
        if entry.pod.host_ports:
            self.ports.add(entry.placement.slot, entry.pod.host_ports, -1)
        self._unindex(entry.pod, entry.placement.slot)
        self._guessed.discard(key)
        self._pods_changed(entry.placement.slot)
        if node is not None:
            node.pods.pop(key, None)
            self._guess_again(entry.placement.slot)

    def _guess_again(self, slot: int) -> None:
        """A pod left node ``slot``: if some of its GPUs are still over-committed, the pods whose devices were
        guessed are given devices again, in the order they came.

        Over-commitment comes from two schedulers choosing the same free GPUs in the same moment: the pod that came
        second to the cache was guessed onto the devices with most free, already taken. The kubelet keeps one of
        the two and refuses the other, which then leaves; the one kept holds the devices the refused one had. Left
        as guessed, its node showed one GPU over-committed and another free, and every 1-GPU pod of gpusched went
        to that free GPU and was refused by the kubelet in turn."""
        a = self.arrays
        count = int(a.gpu_count[slot])
        if not self._guessed or count == 0 or a.in_what_if or float(a.gpu_free[slot, :count].min()) >= 0.0:
            return
        guessed = [entry for key, entry in self.nodes[slot].pods.items() if key in self._guessed]
        for entry in guessed:
            a.apply(entry.placement, sign=-1.0)
        for entry in guessed:
            entry.placement = self._placement(entry.pod, slot, ())
            a.apply(entry.placement)

    @property
    def pod_index(self) -> PodIndex:
        """The pods held, for selecting them by affinity term or spread selector (built here the first time)."""
        if self._pod_index is None:
            index = PodIndex()
            for entry in self._pods.values():
                index.add(entry.pod, entry.placement.slot)
            self._pod_index = index
        return self._pod_index

    def _unindex(self, pod: PodRequest, slot: int) -> None:
        if pod.pod_affinity:
            self.pods_with_terms -= 1
        if pod.volumes:
            self.volumes.pod_removed(pod)
        if self._pod_index is not None:
            self._pod_index.remove(pod, slot)

    def _reindex(self, old: PodRequest, new: PodRequest, slot: int) -> None:
        self.pods_with_terms += bool(new.pod_affinity) - bool(old.pod_affinity)
        if self._pod_index is not None:
            self._pod_index.relabel(old, new, slot)

    def assume(
        self,
        pod: PodRequest,
        node_name: str,
        gpu_ids: Sequence[int] = (),
        volumes: Sequence[api_volumes.ClaimBinding] = (),
        claims: Sequence[api_dra.ClaimAllocation] = (),
    ) -> Placement:
        """Count a pod on a node before the binding is confirmed, with the volumes chosen for its unbound claims and
        the devices allocated for its ResourceClaims (held for it until the binding completes or fails)."""
        slot = self._slot.get(node_name)
        if slot is None:
            raise UnknownNode(node_name)
        if pod.key in self._pods:
            self.remove_pod(pod.key)
        placement = self._add(pod, slot, gpu_ids, assumed=True).placement
        if volumes:
            self.volumes.assume(pod.key, volumes)
        if claims:
            self.devices.assume(pod.key, claims)
        return placement

    def confirm(self, key: str) -> None:
        """The binding went through (the simulator's binder says so; in a cluster the watch does, through
        :meth:`upsert_pod`: both end in :meth:`_confirmed`)."""
        entry = self._pods.get(key)
        if entry is not None:
            self._confirmed(entry)

    def _confirmed(self, entry: PodEntry) -> None:
        """The one confirm path: the pod holds its place for good, and the devices allocated for its ResourceClaims
        are the claims' own from now on (the pod leaving no longer frees them; the claims' watch does)."""
        entry.assumed = False
        self._pods_changed(entry.placement.slot)
        if entry.pod.resource_claims or entry.pod.extended_asks:
            self.devices.confirm(entry.pod.key)

    def forget(self, key: str) -> None:
        """The binding failed: release what the pod was assumed to take."""
        entry = self._pods.get(key)
        if entry is not None and entry.assumed:
            self.remove_pod(key)

    def is_assumed(self, key: str) -> bool:
        entry = self._pods.get(key)
        return entry is not None and entry.assumed

    def pod(self, key: str) -> PodEntry | None:
        return self._pods.get(key)

    def pods(self) -> Iterator[PodEntry]:
        return iter(self._pods.values())

    def pods_on(self, slot: int) -> Mapping[str, PodEntry]:
        node = self.nodes.get(slot)
        return node.pods if node is not None else {}

    @property
    def nodes_version(self) -> int:
        """A number that changes whenever a node is added, changed for scheduling or removed: while it stays the same,
        so do what the nodes offer (the arrays' capacities, GPU counts and presence, the columns, the MIG nodes)."""
        return self._nodes_version

    def pods_version(self, slot: int) -> int:
        """What the pods on node ``slot`` are, as a number: the same number, the same pods (the same entries and pod
        objects, in the same order, assumed or bound alike) as when it was read."""
        return self._pods_version.get(slot, 0)

    def _pods_changed(self, slot: int) -> None:
        self._pods_version[slot] = next(self._pods_versions)

    # --- snapshots ---------------------------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        """The cluster for one scheduling cycle, refreshed from the cache where rows changed since the last one."""
        snap = self._snapshot
        if snap is None or not snap.arrays.same_shape(self.arrays):
            snap = self._snapshot = Snapshot(self, self.arrays.clone())
        else:
            if snap.arrays._open:
                raise RuntimeError("a what-if on the previous snapshot is still open")
            rows = (snap.arrays.gen != self.arrays.gen).nonzero()[0]
            if rows.size:
                snap.arrays.copy_rows(self.arrays, rows)
        snap.columns = list(self.columns)
        return snap
