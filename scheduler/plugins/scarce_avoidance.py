"""Score: keep pods that need no GPU (or other scarce resource) off the nodes that have them
(Koordinator's ScarceResourceAvoidance)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from scheduler.api.basics import resources
from scheduler.api.basics.errors import InvalidObject
from scheduler.framework import args as plugin_args
from scheduler.framework.interface import F64, I64, CycleState
from scheduler.kernels import scores


class ScarceAvoidance:
    name = "scarce_avoidance"

    def __init__(self, args: Mapping[str, Any]) -> None:
        plugin_args.check_keys(self.name, args, ("resources",))
        raw = args.get("resources", [resources.GPU])
        if not isinstance(raw, list) or not all(isinstance(r, str) for r in raw):
            raise InvalidObject("must be a list of resource names", obj=f"plugin {self.name}", field="args.resources")
        self._scarce = {plugin_args.ALIASES.get(r, r) for r in raw}
        if resources.GPU_MILLI in self._scarce:
            self._scarce.add(resources.GPU_MEMORY)
        self._vector = np.zeros(0, dtype=bool)

    def score(self, state: CycleState, nodes: I64, out: F64) -> None:
        columns = state.snapshot.columns
        if self._vector.shape[0] != len(columns):
            self._vector = np.array([c in self._scarce for c in columns], dtype=bool)
        scores.scarce_avoidance(nodes, state.snapshot.arrays.cap, state.request, self._vector, out)
