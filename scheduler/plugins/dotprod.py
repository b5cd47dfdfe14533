"""Score: the FGD paper's DotProd baseline (CPU and summed GPU, max-normalised; a smaller dot product of the
node's free vector with the request is better)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler.framework import args as plugin_args
from scheduler.framework.interface import F64, I64, CycleState
from scheduler.kernels import scores


class DotProd:
    name = "dotprod"

    def __init__(self, args: Mapping[str, Any]) -> None:
        plugin_args.check_keys(self.name, args, ("maxCpu", "maxGpu"))
        self.max_cpu = plugin_args.number(self.name, args, "maxCpu", 128000.0, low=1.0)
        self.max_gpu = plugin_args.number(self.name, args, "maxGpu", 8000.0, low=1.0)

    def score(self, state: CycleState, nodes: I64, out: F64) -> None:
        a = state.snapshot.arrays
        scores.dotprod(nodes, a.cap, a.used, state.request, self.max_cpu, self.max_gpu, out)
