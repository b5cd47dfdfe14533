"""A simulated cluster driving the real core: pods arrive one at a time (and, in replays, leave); the binder
confirms every binding at once, or, on nodes with NUMA zones (``--numa``), as their kubelets admit it
(``scheduler.sim.numa``). Records what the metrics need after every pod."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from scheduler.cache.state import Cache
from scheduler.core import root
from scheduler.core.cycle import Scheduler
from scheduler.framework import fragmentation, typical
from scheduler.framework.interface import Decision
from scheduler.framework.profile import ProfileConfig
from scheduler.kernels import fgd as fgd_kernel
from scheduler.kernels import layout
from scheduler.sim import numa as sim_numa
from scheduler.sim.trace import NodeSpec, PodSpec

F64 = npt.NDArray[np.float64]


class InstantBinder:
    """Every binding succeeds at once, as in the FGD paper's simulator."""

    def __init__(self) -> None:
        self.confirm: Callable[[str], None] = lambda key: None

    def bind(self, decision: Decision) -> None:
        self.confirm(decision.pod.key)


@dataclass
class SimCluster:
    """A cache filled with the nodes, and a scheduler with one profile over it."""

    cache: Cache
    scheduler: Scheduler
    gpu_capacity: float
    #: The binder that replays the kubelets' NUMA admission (None: every binding succeeds).
    kubelets: sim_numa.KubeletBinder | None = None

    @classmethod
    def build(
        cls, nodes: Sequence[NodeSpec], config: ProfileConfig, *, numa: sim_numa.Kubelets | None = None
    ) -> SimCluster:
        """The cluster of ``nodes`` scheduled with ``config``; with ``numa``, the nodes have its zones (in the
        cache, for the filter) and its kubelets admit the bindings."""
        capacity = float(sum(n.gpus for n in nodes)) * layout.WHOLE
        if numa is None:
            binder = InstantBinder()
            scheduler = root.build_scheduler(config, binder=binder, nodes=[node.info() for node in nodes])
            binder.confirm = scheduler.bound
            return cls(scheduler.cache, scheduler, capacity)
        kubelets = sim_numa.KubeletBinder(numa)
        scheduler = root.build_scheduler(config, binder=kubelets, nodes=[node.info() for node in nodes])
        kubelets.confirm, kubelets.fail = scheduler.bound, scheduler.bind_failed
        for zones in numa.zones.values():
            scheduler.cache.numa.upsert(zones, now=0.0)
        return cls(scheduler.cache, scheduler, capacity, kubelets)


def cluster_fragmentation(cache: Cache, shapes: Sequence[typical.Shape]) -> float:
    """The FGD paper's cluster fragmentation: summed over nodes, in GPU-milli."""
    a = cache.arrays
    out = np.zeros(a.slots)
    fgd_kernel.fragmentation(
        a.cap, a.used, a.gpu_free, a.gpu_count, a.node_model, fragmentation.typical_arrays(shapes, cache.models), out
    )
    return float(out.sum())


@dataclass
class ArrivalRun:
    """What happened as the pods arrived: per pod, the arrived and allocated GPU-milli so far."""

    arrived: F64
    allocated: F64
    placed: npt.NDArray[np.bool_]
    gpu_capacity: float
    frag_at: dict[int, float] = field(default_factory=dict)
    wall_s: float = 0.0
    cache: Cache | None = None
    #: Per pod, whether its node's kubelet refused it (``--numa``; all False without).
    refused: npt.NDArray[np.bool_] | None = None


def run_arrivals(
    nodes: Sequence[NodeSpec],
    pods: Sequence[PodSpec],
    config: ProfileConfig,
    *,
    shapes: Sequence[typical.Shape],
    frag_points: Sequence[int] = (90,),
    progress: Callable[[int], None] | None = None,
    numa: sim_numa.Kubelets | None = None,
) -> ArrivalRun:
    """Schedule ``pods`` in order on a fresh cluster; pods that fit nowhere fail and stay failed, and so do pods
    the kubelet refuses (``numa``: the nodes' zones and kubelets)."""
    sim = SimCluster.build(nodes, config, numa=numa)
    kubelets = sim.kubelets
    count = len(pods)
    arrived = np.zeros(count)
    allocated = np.zeros(count)
    placed = np.zeros(count, dtype=bool)
    refused = np.zeros(count, dtype=bool)
    frag_at: dict[int, float] = {}
    pending_points = sorted(frag_points)
    total_arrived = 0.0
    total_alloc = 0.0
    schedule = sim.scheduler.schedule
    start = time.perf_counter()
    for i, spec in enumerate(pods):
        total_arrived += spec.gpu_total
        request = spec.request(f"{spec.name}#{i}")
        if kubelets is not None:
            request = sim_numa.ask(request)
        result = schedule(request)
        if result.decision is not None and kubelets is not None and kubelets.refused:
            refused[i] = True
        elif result.decision is not None:
            total_alloc += spec.gpu_total
            placed[i] = True
        arrived[i] = total_arrived
        allocated[i] = total_alloc
        while pending_points and total_arrived >= pending_points[0] / 100.0 * sim.gpu_capacity:
            frag_at[pending_points.pop(0)] = 100.0 * cluster_fragmentation(sim.cache, shapes) / sim.gpu_capacity
        if progress is not None and i % 500 == 0:
            progress(i)
    wall = time.perf_counter() - start
    return ArrivalRun(arrived, allocated, placed, sim.gpu_capacity, frag_at, wall, sim.cache, refused)
