"""Score: Fragmentation Gradient Descent: prefer the node (and, for a shared pod, the device) whose expected
fragmentation over the typical pods drops most. Also suggests the device to the ``gpu`` plugin.

Typical pods come from the ``typical`` argument (the simulator passes the trace's), or are learnt every
``refreshCycles`` cycles from the pods the cluster holds and the pods waiting in the scheduling queue (the demand
to look ahead at: ``CycleContext.pending``), a generic set until there are ``minPods`` to learn from.
The waiting pods matter most when a cluster starts: without them, pods that take any GPU model fill the only A100
node first when it happens to come first, and the pod waiting for an A100 finds none (found by the e2e suite).

MIG devices are not GPUs to FGD: their partition is fixed on the node and the device plugin picks them. The mixed
strategy's (``nvidia.com/mig-1g.10gb``) are extended resources, which FGD does not read; a node whose GPU slots are
MIG devices (the single strategy) gets FGD's lowest score for a GPU pod and no device hint, so that a pod asking
``nvidia.com/gpu`` is not steered to a MIG device as if its node were a large pool of idle whole GPUs.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import numpy as np

from scheduler.api.basics import resources
from scheduler.api.basics.errors import InvalidObject
from scheduler.framework import args as plugin_args
from scheduler.framework import fragmentation, typical
from scheduler.framework.interface import F64, I64, CycleState, Demand
from scheduler.kernels import fgd as fgd_kernel
from scheduler.kernels import layout


class Fgd:
    name = "fgd"

    def __init__(self, args: Mapping[str, Any]) -> None:
        plugin_args.check_keys(self.name, args, ("typical", "coverage", "refreshCycles", "minPods", "exact", "scale"))
        self.scale = plugin_args.number(self.name, args, "scale", 1000.0, low=1.0)
        exact = args.get("exact", False)
        if not isinstance(exact, bool):
            raise InvalidObject(f"{exact!r} is not true or false", obj=f"plugin {self.name}", field="args.exact")
        self.exact = exact
        self.coverage = plugin_args.number(self.name, args, "coverage", 0.95, low=0.01, high=1.0)
        self.refresh = int(plugin_args.number(self.name, args, "refreshCycles", 1000, low=1))
        self.min_pods = int(plugin_args.number(self.name, args, "minPods", 1, low=1))
        self.fixed = "typical" in args
        self.shapes: list[typical.Shape] = (
            typical.parse_shapes(args["typical"], obj=f"plugin {self.name}", field="args.typical")
            if self.fixed
            else list(typical.GENERIC)
        )
        self._typical: fgd_kernel.TypicalPods | None = None
        self._models = -1
        self._cache: fgd_kernel.FragCache | None = None
        self._cycles = 0
        #: (the demand's version, how many pods) when the typical pods were last learnt.
        self._learnt_from = (0, 0)

    def _learn(self, state: CycleState) -> None:
        demand: Demand | None = state.context.pending
        held = (e.pod for e in state.snapshot.pods())
        pods = [
            (float(p.resources.get(resources.CPU, 0)), float(p.gpu.milli), p.gpu.count, p.gpu.models)
            for p in itertools.chain(held, demand.pods() if demand is not None else ())
        ]
        self._learnt_from = (demand.version if demand is not None else 0, len(pods))
        if len(pods) >= self.min_pods:
            self.shapes = typical.typical_shapes(pods, self.coverage)
            self._typical = None

    def _demand_moved(self, state: CycleState) -> bool:
        """Whether the pods held or waiting changed by a tenth since the typical pods were learnt (by one while
        there are few): a cluster that starts, or a burst of new work, is learnt from at once."""
        demand: Demand | None = state.context.pending
        if demand is None:
            return False
        version, size = self._learnt_from
        return demand.version - version >= max(1, size // 10)

    def _prepare(self, state: CycleState) -> tuple[fgd_kernel.TypicalPods, fgd_kernel.FragCache]:
        if not self.fixed and (self._cycles % self.refresh == 0 or self._demand_moved(state)):
            self._learn(state)
        self._cycles += 1
        snap = state.snapshot
        if self._typical is None or self._models != len(snap.models):
            self._typical = fragmentation.typical_arrays(self.shapes, snap.models)
            self._models = len(snap.models)
            self._cache = None
        if self._cache is None or self._cache.seen.shape[0] != snap.slots:
            self._cache = fgd_kernel.FragCache(snap.slots, len(self.shapes))
        return self._typical, self._cache

    def score(self, state: CycleState, nodes: I64, out: F64) -> None:
        typical_pods, cache = self._prepare(state)
        a = state.snapshot.arrays
        gpu = state.pod.gpu
        delta = np.empty(nodes.shape[0])
        hints = np.empty(nodes.shape[0], dtype=np.int64)
        fgd_kernel.fgd(
            nodes,
            a.cap,
            a.used,
            a.gpu_free,
            a.gpu_mem_free,
            a.gpu_count,
            a.node_model,
            a.gen,
            typical_pods,
            cache,
            float(state.request[layout.CPU]),
            gpu.count,
            float(gpu.milli),
            float(gpu.memory),
            out,
            delta,
            hints,
            exact=self.exact,
            scale=self.scale,
        )
        if gpu.count and state.snapshot.mig_slots:
            mig = np.isin(nodes, np.fromiter(state.snapshot.mig_slots, dtype=np.int64))
            out[mig] = 0.0
            hints[mig] = -1
        state.device_hints[self.name] = hints
        state.data[f"{self.name}.delta"] = delta
