"""Score: the FGD paper's GpuClustering baseline: keep GPU pods of one class (shared, 1-GPU, 2-GPU, ...)
together on nodes that hold only that class.

The classes of the pods on each node are counted from the cache and refreshed for the nodes whose generation
changed since the last cycle.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from scheduler.api.objects.pod import PodRequest
from scheduler.framework import args as plugin_args
from scheduler.framework.interface import F64, I64, CycleState
from scheduler.kernels import scores

#: Class 0 is a shared GPU; class k is k whole GPUs.
CLASSES = 17


def pod_class(pod: PodRequest) -> int:
    gpu = pod.gpu
    if not gpu.count:
        return -1
    return 0 if gpu.shared else min(gpu.count, CLASSES - 1)


class GpuClustering:
    name = "gpu_clustering"

    def __init__(self, args: Mapping[str, Any]) -> None:
        plugin_args.check_keys(self.name, args, ("maxGpu",))
        self.max_gpu = plugin_args.number(self.name, args, "maxGpu", 8000.0, low=1.0)
        self._classes = np.zeros((0, CLASSES), dtype=np.int64)
        self._seen = np.zeros(0, dtype=np.int64)

    def _refresh(self, state: CycleState) -> None:
        snap = state.snapshot
        a = snap.arrays
        if self._classes.shape[0] != snap.slots:
            self._classes = np.zeros((snap.slots, CLASSES), dtype=np.int64)
            self._seen = np.full(snap.slots, -1, dtype=np.int64)
        for slot in np.flatnonzero(self._seen != a.gen):
            row = self._classes[slot]
            row[:] = 0
            for entry in snap.pods_on(int(slot)).values():
                c = pod_class(entry.pod)
                if c >= 0:
                    row[c] += 1
            self._seen[slot] = a.gen[slot]

    def score(self, state: CycleState, nodes: I64, out: F64) -> None:
        self._refresh(state)
        a = state.snapshot.arrays
        scores.gpu_clustering(nodes, a.cap, a.used, self._classes, pod_class(state.pod), self.max_gpu, out)
