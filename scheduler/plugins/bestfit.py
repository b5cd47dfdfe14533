"""Score: the FGD paper's BestFit baseline: least CPU and GPU left over, min-max normalised in integers."""

from __future__ import annotations

import numpy as np

from scheduler.framework import resource_score
from scheduler.framework.interface import F64, CycleState
from scheduler.kernels import scores


class BestFit(resource_score.MaxNormalisedScore):
    name = "bestfit"
    kernel = staticmethod(scores.bestfit)

    def normalize(self, state: CycleState, values: F64) -> None:
        if values.size == 0:
            return
        low, high = int(values.min()), int(values.max())
        if high == low:
            values[:] = 0.0
            return
        values[:] = np.floor_divide((values.astype(np.int64) - low) * 100, high - low)
