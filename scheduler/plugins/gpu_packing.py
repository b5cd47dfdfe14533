"""Score: the FGD paper's GpuPacking baseline: fill partly used devices first, then partly used nodes, and
open a fully free node last."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler.framework import args as plugin_args
from scheduler.framework.interface import F64, I64, CycleState
from scheduler.kernels import scores


class GpuPacking:
    name = "gpu_packing"

    def __init__(self, args: Mapping[str, Any]) -> None:
        plugin_args.check_keys(self.name, args, ())

    def score(self, state: CycleState, nodes: I64, out: F64) -> None:
        a = state.snapshot.arrays
        gpu = state.pod.gpu
        scores.gpu_packing(nodes, a.gpu_free, a.gpu_count, gpu.count, float(gpu.milli), out)
