"""Score: spread pods by preferring the least allocated nodes (kube-scheduler's LeastAllocated)."""

from __future__ import annotations

from scheduler.framework import resource_score
from scheduler.kernels import scores

DEFAULT_WEIGHTS = {"cpu": 1, "memory": 1, "nvidia.com/gpu": 1}


class Spread(resource_score.WeightedResourceScore):
    name = "spread"
    default_weights = DEFAULT_WEIGHTS
    kernel = staticmethod(scores.spread)
