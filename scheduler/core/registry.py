"""Plugin names as profiles spell them, the classes behind them, and the reason codes their filters declare."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from scheduler.framework import reasons
from scheduler.framework.interface import Plugin
from scheduler.plugins import (
    balance,
    bestfit,
    binpack,
    dotprod,
    dra,
    fgd,
    fit,
    gang,
    gpu,
    gpu_clustering,
    gpu_packing,
    host_ports,
    interpod,
    node_rules,
    numa,
    resource_strategy,
    scarce_avoidance,
    spread,
    spread_constraints,
    topology,
    volumes,
)

Factory = Callable[[Mapping[str, Any]], Plugin]

PLUGINS: dict[str, Factory] = {
    "fit": fit.Fit,
    "gpu": gpu.Gpu,
    "spread": spread.Spread,
    "binpack": binpack.Binpack,
    "balance": balance.Balance,
    "resource_strategy": resource_strategy.ResourceStrategy,
    "scarce_avoidance": scarce_avoidance.ScarceAvoidance,
    "bestfit": bestfit.BestFit,
    "dotprod": dotprod.DotProd,
    "fgd": fgd.Fgd,
    "gpu_packing": gpu_packing.GpuPacking,
    "gpu_clustering": gpu_clustering.GpuClustering,
    "gang": gang.Gang,
    "topology": topology.Topology,
    "node_rules": node_rules.NodeRules,
    "ports": host_ports.NodePorts,
    "interpod": interpod.InterPodAffinity,
    "topology_spread": spread_constraints.TopologySpread,
    "volumes": volumes.Volumes,
    "dra": dra.DynamicResources,
    "numa": numa.Numa,
}

#: Every reason code the core and the registered filters declare (``scheduler.framework.reasons``): what the
#: diagnosis, preemption, reclaim, the never-fits sentence and explain read about a refused node.
REASONS = reasons.Table(
    [
        *(("core", reason) for reason in reasons.CORE),
        *((name, reason) for name, factory in PLUGINS.items() for reason in getattr(factory, "reasons", ())),
    ]
)
