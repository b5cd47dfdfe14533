"""Reserve: choose the GPU devices on the chosen node.

Whole GPUs go to the tightest set of fully free devices when the node's GPU topology is known (the
``gpusched.io/gpu-topology`` annotation: all NVLink, then one PCIe switch, then one NUMA node, breaking as few
fully free tight groups as possible; ``gputopo.tightest_set``), else to the lowest-index fully free devices. On a
node that publishes NUMA zones under a Topology Manager policy, they are taken among the GPUs of the zones its
kubelet will give the pod (``topology_manager.admit_pod`` on the cache's count; a GPU's zone from the annotation's
``numa``, else GPUs numbered in zone order): the kubelet's device manager allocates from those zones, and devices
named elsewhere would disagree with it and with the zone the cache counts the pod in.
A shared GPU goes to the device suggested by a score plugin (``device: hint``, e.g. FGD's least-fragmenting
device), else the fitting device with the least free milli (``bestfit``: keeps emptier devices whole), the first
fitting one (``first``) or a seeded random one.

On a node whose GPU slots are MIG devices (the single MIG strategy) no device is chosen: the device plugin picks
which MIG devices a pod gets, so ``gpusched.io/gpu-ids`` would name nothing; the cache counts the pod on the first
free slots, by count as kube-scheduler does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from scheduler.api.basics import resources
from scheduler.api.devices import gputopo, numa, topology_manager
from scheduler.framework import args as plugin_args
from scheduler.framework.interface import GPU_IDS, Code, CycleState, Status

CHOICES = ("hint", "bestfit", "first", "random")


class Gpu:
    name = "gpu"

    def __init__(self, args: Mapping[str, Any]) -> None:
        plugin_args.check_keys(self.name, args, ("device", "seed"))
        self.device = plugin_args.choice(self.name, args, "device", CHOICES, "hint")
        self._rng = np.random.default_rng(int(plugin_args.number(self.name, args, "seed", 0)))

    def reserve(self, state: CycleState, slot: int) -> Status:
        gpu = state.pod.gpu
        if not gpu.count:
            state.data[GPU_IDS] = ()
            return Status.success()
        a = state.snapshot.arrays
        if slot in state.snapshot.mig_slots:
            state.data[GPU_IDS] = ()
            return Status.success()
        if gpu.whole:
            topo = state.snapshot.gpu_topology(slot)
            in_zones = _in_zones(state, slot, topo)
            if in_zones is not None:
                ids = in_zones
            elif topo is None:
                ids = a.free_devices(slot, gpu.count, 1000.0)
            else:
                ids = _tightest(topo, a.free_devices(slot, len(topo), 1000.0), gpu.count)
        else:
            ids = self._shared(state, slot)
        if len(ids) < gpu.count:
            return Status(Code.ERROR, f"no free GPU device left on the chosen node for {state.pod.key}", self.name)
        state.data[GPU_IDS] = tuple(ids)
        return Status.success()

    def _shared(self, state: CycleState, slot: int) -> list[int]:
        a = state.snapshot.arrays
        gpu = state.pod.gpu
        if self.device == "hint":
            at = np.searchsorted(state.feasible, slot)
            for hints in state.device_hints.values():
                if at < hints.shape[0] and hints[at] >= 0:
                    return [int(hints[at])]
        count = int(a.gpu_count[slot])
        fitting = [
            g
            for g in range(count)
            if a.gpu_free[slot, g] >= gpu.milli and (gpu.memory <= 0 or a.gpu_mem_free[slot, g] >= gpu.memory)
        ]
        if not fitting:
            return []
        if self.device == "first":
            return [fitting[0]]
        if self.device == "random":
            return [int(self._rng.choice(fitting))]
        return [min(fitting, key=lambda g: (a.gpu_free[slot, g], g))]

    def unreserve(self, state: CycleState, slot: int) -> None:
        state.data.pop(GPU_IDS, None)


def _tightest(topo: gputopo.GpuTopology, free: list[int], count: int) -> list[int]:
    return list(gputopo.tightest_set(topo, free, count)) if len(free) >= count else free


def _in_zones(state: CycleState, slot: int, topo: gputopo.GpuTopology | None) -> list[int] | None:
    """The whole GPUs of the NUMA zones the node's kubelet will give the pod (its Topology Manager replayed on the
    cache's count of the zones), so that the devices named agree with the zone the ``numa`` filter admitted the pod
    to; None where no zone rule applies (no NodeResourceTopology, policy ``none``) or the zones' GPUs free in the
    cache are too few for what the replay takes of them (the published figures and the cache disagree: the plain
    choice then)."""
    snapshot = state.snapshot
    if not snapshot.numa.nodes:
        return None
    node = snapshot.names[slot] if slot < len(snapshot.names) else None
    zones = snapshot.numa.nodes.get(node) if node is not None else None
    if zones is None or not zones.zones or topology_manager.policy_for(zones, state.pod.numa) == numa.Policy.NONE:
        return None
    taken = topology_manager.admit_pod(zones, state.pod, available=snapshot.numa_available(zones.node)).taken
    a = snapshot.arrays
    count = int(a.gpu_count[slot])
    free = set(a.free_devices(slot, count, 1000.0))
    ids: list[int] = []
    for want, members in zip(taken, topology_manager.zone_gpus(zones, topo, count), strict=True):
        k = want.get(resources.GPU, 0)
        if not k:
            continue
        here = [g for g in members if g in free]
        if len(here) < k:
            return None
        ids.extend(_tightest(topo, here, k) if topo is not None else here[:k])
    return sorted(ids) if len(ids) == state.pod.gpu.count else None
