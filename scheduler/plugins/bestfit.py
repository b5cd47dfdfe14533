"""Score: the FGD paper's BestFit baseline: least CPU and GPU left over, min-max normalised in integers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from scheduler.framework import args as plugin_args
from scheduler.framework.interface import F64, I64, CycleState
from scheduler.kernels import scores


class BestFit:
    name = "bestfit"

    def __init__(self, args: Mapping[str, Any]) -> None:
        plugin_args.check_keys(self.name, args, ("maxCpu", "maxGpu"))
        self.max_cpu = plugin_args.number(self.name, args, "maxCpu", 128000.0, low=1.0)
        self.max_gpu = plugin_args.number(self.name, args, "maxGpu", 8000.0, low=1.0)

    def score(self, state: CycleState, nodes: I64, out: F64) -> None:
        a = state.snapshot.arrays
        scores.bestfit(nodes, a.cap, a.used, state.request, self.max_cpu, self.max_gpu, out)

    def normalize(self, state: CycleState, values: F64) -> None:
        if values.size == 0:
            return
        low, high = int(values.min()), int(values.max())
        if high == low:
            values[:] = 0.0
            return
        values[:] = np.floor_divide((values.astype(np.int64) - low) * 100, high - low)
