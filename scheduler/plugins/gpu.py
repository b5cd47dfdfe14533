"""Reserve: choose the GPU devices on the chosen node.

Whole GPUs go to the tightest set of fully free devices when the node's GPU topology is known (the
``gpusched.io/gpu-topology`` annotation: all NVLink, then one PCIe switch, then one NUMA node, breaking as few
fully free tight groups as possible; ``gputopo.tightest_set``), else to the lowest-index fully free devices.
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

from scheduler.api.devices import gputopo
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
            if topo is None:
                ids = a.free_devices(slot, gpu.count, 1000.0)
            else:
                free = a.free_devices(slot, len(topo), 1000.0)
                ids = list(gputopo.tightest_set(topo, free, gpu.count)) if len(free) >= gpu.count else free
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
