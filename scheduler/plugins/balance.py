"""Score: cross-dimensional balance, against stranded resources (formula in docs/scoring.md).

Args: ``weights`` per resource (which dimensions count), ``alignment``, ``evenness``, ``stranding``,
``headroom`` (the four terms' weights), ``high`` and ``low`` (the stranding thresholds).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from scheduler.api.basics.errors import InvalidObject
from scheduler.framework import args as plugin_args
from scheduler.framework.interface import F64, I64, CycleState
from scheduler.kernels import scores

DEFAULT_WEIGHTS = {"cpu": 1, "memory": 1, "nvidia.com/gpu": 1, "gpu-memory": 1}
TERMS = (("alignment", 0.4), ("evenness", 0.3), ("stranding", 0.2), ("headroom", 0.1))


class Balance:
    name = "balance"

    def __init__(self, args: Mapping[str, Any]) -> None:
        plugin_args.check_keys(self.name, args, ("weights", "high", "low", *(t for t, _ in TERMS)))
        self.weights = plugin_args.ColumnWeights(
            self.name, plugin_args.resource_map(self.name, args, "weights", DEFAULT_WEIGHTS)
        )
        self.coef = np.array([plugin_args.number(self.name, args, t, d) for t, d in TERMS])
        if self.coef.sum() <= 0:
            raise InvalidObject("at least one term needs a positive weight", obj=f"plugin {self.name}", field="args")
        self.high = plugin_args.number(self.name, args, "high", 0.9, high=1.0)
        self.low = plugin_args.number(self.name, args, "low", 0.2, high=1.0)
        if self.low >= self.high:
            raise InvalidObject("low must be below high", obj=f"plugin {self.name}", field="args.low")
        #: What the kernel computed per node that does not depend on the pod, kept across cycles (refreshed for
        #: the nodes that changed): remade when the cluster grows or gains a resource column.
        self._cache: scores.BalanceCache | None = None

    def score(self, state: CycleState, nodes: I64, out: F64) -> None:
        a = state.snapshot.arrays
        w = self.weights.vector(state.snapshot.columns)
        if self._cache is None or (self._cache.seen.shape[0], self._cache.inv.shape[1]) != a.cap.shape:
            self._cache = scores.BalanceCache(*a.cap.shape)
        scores.balance(
            nodes,
            a.cap,
            a.used,
            state.request,
            state.whole_k,
            a.gpu_mem_each,
            w,
            self.coef,
            self.high,
            self.low,
            a.gen,
            self._cache,
            out,
        )
