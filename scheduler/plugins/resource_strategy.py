"""Score: each resource Least or Most allocated with its own weight (Koordinator's NodeResourcesFitPlus).

Args: ``resources: {nvidia.com/gpu: {type: MostAllocated, weight: 3}, cpu: {type: LeastAllocated, weight: 1}}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from scheduler.api.basics.errors import InvalidObject
from scheduler.framework import args as plugin_args
from scheduler.framework.interface import F64, I64, CycleState
from scheduler.kernels import scores

TYPES = ("LeastAllocated", "MostAllocated")
DEFAULT = {
    "nvidia.com/gpu": {"type": "MostAllocated", "weight": 3},
    "cpu": {"type": "LeastAllocated", "weight": 1},
    "memory": {"type": "LeastAllocated", "weight": 1},
}


class ResourceStrategy:
    name = "resource_strategy"

    def __init__(self, args: Mapping[str, Any]) -> None:
        plugin_args.check_keys(self.name, args, ("resources",))
        raw = plugin_args.resource_map(self.name, args, "resources", DEFAULT)
        weights: dict[str, float] = {}
        self._most: dict[str, bool] = {}
        for res, spec in raw.items():
            where = f"args.resources.{res}"
            if not isinstance(spec, Mapping) or spec.get("type") not in TYPES:
                raise InvalidObject(f"needs type one of {TYPES}", obj=f"plugin {self.name}", field=f"{where}.type")
            try:
                weights[res] = plugin_args.number(self.name, spec, "weight", 1.0)
            except InvalidObject as exc:
                # Name the weight where the user wrote it, not as a top-level argument.
                raise InvalidObject(exc.reason, obj=exc.obj, field=f"{where}.weight") from None
            self._most[res] = spec["type"] == "MostAllocated"
        self.weights = plugin_args.ColumnWeights(self.name, weights)
        self._most_vector = np.zeros(0, dtype=bool)

    def score(self, state: CycleState, nodes: I64, out: F64) -> None:
        a = state.snapshot.arrays
        columns = state.snapshot.columns
        if self._most_vector.shape[0] != len(columns):
            self._most_vector = np.array([self._most.get(c, False) for c in columns], dtype=bool)
        w = self.weights.vector(columns)
        scores.resource_strategy(
            nodes, a.cap, a.used, state.request, state.whole_k, a.gpu_mem_each, w, self._most_vector, out
        )
