"""Score: the FGD paper's DotProd baseline (CPU and summed GPU, max-normalised; a smaller dot product of the
node's free vector with the request is better)."""

from __future__ import annotations

from scheduler.framework import resource_score
from scheduler.kernels import scores


class DotProd(resource_score.MaxNormalisedScore):
    name = "dotprod"
    kernel = staticmethod(scores.dotprod)
