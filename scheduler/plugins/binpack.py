"""Score: pack pods onto the most allocated nodes, with per-resource weights (Volcano's binpack)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler.framework import args as plugin_args
from scheduler.framework.interface import F64, I64, CycleState
from scheduler.kernels import scores

DEFAULT_WEIGHTS = {"cpu": 1, "memory": 1, "nvidia.com/gpu": 5}


class Binpack:
    name = "binpack"

    def __init__(self, args: Mapping[str, Any]) -> None:
        plugin_args.check_keys(self.name, args, ("weights",))
        self.weights = plugin_args.ColumnWeights(
            self.name, plugin_args.resource_map(self.name, args, "weights", DEFAULT_WEIGHTS)
        )

    def score(self, state: CycleState, nodes: I64, out: F64) -> None:
        a = state.snapshot.arrays
        w = self.weights.vector(state.snapshot.columns)
        scores.binpack(nodes, a.cap, a.used, state.request, state.whole_k, a.gpu_mem_each, w, out)
