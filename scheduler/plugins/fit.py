"""Filter: resources, GPUs (count, share, memory, model), node selectors, required affinity, taints.

A node whose GPU slots are MIG devices (the single MIG strategy, ``Cache.mig_slots``) holds whole-GPU pods by count
and no shared GPU: its device plugin gives every pod asking ``nvidia.com/gpu: 1`` a device of its own, so two pods
sharing a slot would take two devices.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from scheduler.api import resources, selectors
from scheduler.framework import args as plugin_args
from scheduler.framework.interface import I8, ROOM_FREED, ClusterEvent, CycleState
from scheduler.kernels import fit as fit_kernel
from scheduler.kernels import layout

#: A node's labels, taints or GPU model change only with the node (or a new node comes).
_NODE_CHANGED = frozenset({ClusterEvent.NODE_ADDED, ClusterEvent.NODE_UPDATED})
_WAKES = {
    layout.TAINT: _NODE_CHANGED,
    layout.SELECTOR: _NODE_CHANGED,
    layout.GPU_MODEL: _NODE_CHANGED,
    layout.GPU_COUNT: ROOM_FREED,
    layout.GPU_SHARE: ROOM_FREED,
    layout.GPU_MEMORY_SHORT: ROOM_FREED,
}


class Fit:
    name = "fit"

    def __init__(self, args: Mapping[str, Any]) -> None:
        plugin_args.check_keys(self.name, args, ())
        self._models_seen = -1
        self._model_cache: dict[tuple[str, ...], np.ndarray] = {}

    def _model_ok(self, allowed: tuple[str, ...], models: list[str]) -> np.ndarray:
        if self._models_seen != len(models):
            self._model_cache.clear()
            self._models_seen = len(models)
        mask = self._model_cache.get(allowed)
        if mask is None:
            mask = np.array([any(resources.model_matches(a, m) for a in allowed) for m in models] or [False])
            self._model_cache[allowed] = mask
        return mask

    def wakes(self, reason: int) -> frozenset[ClusterEvent] | None:
        if reason >= layout.RESOURCE:
            return ROOM_FREED  # Insufficient cpu, memory, ...
        return _WAKES.get(reason)

    def filter(self, state: CycleState, reasons: I8) -> None:
        pod, snap = state.pod, state.snapshot
        for slot, taints in snap.taints.items():
            if taints and reasons[slot] == layout.FIT and not selectors.tolerated(taints, pod.tolerations):
                reasons[slot] = layout.TAINT
        if pod.node_selector or pod.affinity:
            match = snap.select(pod.node_selector, pod.affinity)
            reasons[(reasons == layout.FIT) & ~match] = layout.SELECTOR
        a = snap.arrays
        gpu = pod.gpu
        any_model = not gpu.models
        model_ok = self._model_ok(gpu.models, snap.models) if not any_model else np.zeros(1, dtype=bool)
        fit_kernel.fit(
            a.cap,
            a.used,
            state.request,
            a.gpu_free,
            a.gpu_mem_free,
            a.gpu_count,
            a.node_model,
            model_ok,
            any_model,
            gpu.count,
            float(gpu.milli),
            float(gpu.memory),
            reasons.copy(),
            reasons,
            nodes=snap.node_count,
        )
        if gpu.shared:
            for slot in snap.mig_slots:
                if reasons[slot] == layout.FIT:
                    reasons[slot] = layout.GPU_SHARE
