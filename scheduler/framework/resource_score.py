"""What score plugins of one family share, where only their kernel (``scheduler.kernels.scores``) differs:
spread (kube-scheduler's LeastAllocated) and binpack (Volcano's binpack) take per-resource ``weights``
(:class:`WeightedResourceScore`); the FGD paper's BestFit and DotProd baselines take ``maxCpu`` and ``maxGpu``,
what they normalise by (:class:`MaxNormalisedScore`).

Plugins do not import each other, so the shared part lives here: each plugin module names its kernel (and
defaults) and derives from one of these classes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, TypeAlias

from scheduler.framework import args as plugin_args
from scheduler.framework.interface import F64, I64, CycleState

#: ``kernel(nodes, cap, used, request, whole_k, gpu_mem_each, weights, out)``, as ``scores.spread``.
Kernel: TypeAlias = "staticmethod[[I64, F64, F64, F64, int, F64, F64, F64], F64]"
#: ``kernel(nodes, cap, used, request, max_cpu, max_gpu, out)``, as ``scores.bestfit``.
MaxNormalisedKernel: TypeAlias = "staticmethod[[I64, F64, F64, F64, float, float, F64], F64]"


class WeightedResourceScore:
    """A score plugin whose one argument is ``weights`` (resource name -> weight, ``nvidia.com/gpu`` the GPU
    compute column) and whose score is ``kernel``'s."""

    name: str
    #: The weights of a profile that gives none.
    default_weights: ClassVar[Mapping[str, float]]
    kernel: ClassVar[Kernel]

    def __init__(self, args: Mapping[str, Any]) -> None:
        plugin_args.check_keys(self.name, args, ("weights",))
        self.weights = plugin_args.ColumnWeights(
            self.name, plugin_args.resource_map(self.name, args, "weights", self.default_weights)
        )

    def score(self, state: CycleState, nodes: I64, out: F64) -> None:
        a = state.snapshot.arrays
        w = self.weights.vector(state.snapshot.columns)
        self.kernel(nodes, a.cap, a.used, state.request, state.whole_k, a.gpu_mem_each, w, out)


class MaxNormalisedScore:
    """A score plugin whose arguments are ``maxCpu`` and ``maxGpu`` (milli; the FGD paper normalises by the largest
    node's) and whose score is ``kernel``'s."""

    name: str
    kernel: ClassVar[MaxNormalisedKernel]

    def __init__(self, args: Mapping[str, Any]) -> None:
        plugin_args.check_keys(self.name, args, ("maxCpu", "maxGpu"))
        self.max_cpu = plugin_args.number(self.name, args, "maxCpu", 128000.0, low=1.0)
        self.max_gpu = plugin_args.number(self.name, args, "maxGpu", 8000.0, low=1.0)

    def score(self, state: CycleState, nodes: I64, out: F64) -> None:
        a = state.snapshot.arrays
        self.kernel(nodes, a.cap, a.used, state.request, self.max_cpu, self.max_gpu, out)
