"""What the least- and most-allocated scores share: spread (kube-scheduler's LeastAllocated) and binpack (Volcano's
binpack) take one argument, ``weights`` per resource, and score with their kernel over the snapshot's arrays.

Plugins do not import each other, so the shared part lives here: each of the two plugin modules names its kernel
(``scheduler.kernels.scores``) and its default weights, and derives from :class:`WeightedResourceScore`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, TypeAlias

from scheduler.framework import args as plugin_args
from scheduler.framework.interface import F64, I64, CycleState

#: ``kernel(nodes, cap, used, request, whole_k, gpu_mem_each, weights, out)``, as ``scores.spread``.
Kernel: TypeAlias = "staticmethod[[I64, F64, F64, F64, int, F64, F64, F64], F64]"


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
