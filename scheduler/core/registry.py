"""Plugin names as profiles spell them, and the classes behind them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

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
}
