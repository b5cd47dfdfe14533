"""Score: pack pods onto the most allocated nodes, with per-resource weights (Volcano's binpack)."""

from __future__ import annotations

from scheduler.framework import resource_score
from scheduler.kernels import scores

DEFAULT_WEIGHTS = {"cpu": 1, "memory": 1, "nvidia.com/gpu": 5}


class Binpack(resource_score.WeightedResourceScore):
    name = "binpack"
    default_weights = DEFAULT_WEIGHTS
    kernel = staticmethod(scores.binpack)
