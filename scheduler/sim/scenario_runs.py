"""The built-in scenarios of ``gpusched simulate --scenario`` run over seeds: gangs, elastic against rigid,
tenants, topology on and off; each returns its summary per policy or variant, means over the seeds.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from scheduler.api.objects.node import NodeInfo
from scheduler.sim import (
    elastic,
    gangs,
    policies,
    tenants,
    trace,
)
from scheduler.sim import topology as sim_topology

#: Seconds a seed of a scenario takes on the project's 2-core machine, for the progress line and the help (the
#: tenants scenario's measurement is in docs/queues.md, "The tenants scenario").
SECONDS_PER_SEED = {"tenants": 70, "topology": 30, "elastic": 60}


def _seed_started(quiet: bool, scenario: str, name: str, seed: int, step: int, steps: int) -> None:
    """A line before each seed of a slow scenario, so that a long quiet stretch is not taken for a hang."""
    if quiet or scenario not in SECONDS_PER_SEED:
        return
    sys.stderr.write(
        f"{scenario}: {name} seed {seed} ({step} of {steps}) running, about {SECONDS_PER_SEED[scenario]} s\n"
    )
    sys.stderr.flush()


def _seed_done(quiet: bool, name: str, seed: int, wall_s: float) -> None:
    if not quiet:
        sys.stderr.write(f"{name} seed {seed:<8} done in {wall_s:.2f}s\n")
        sys.stderr.flush()


def run_gangs(args: argparse.Namespace, names: Sequence[str], seeds: Sequence[int]) -> dict[str, dict[str, Any]]:
    nodes = trace.load_nodes(args.nodes) if args.nodes else gangs.cluster()
    capacity = sum(n.gpus for n in nodes)
    loaded = gangs.load_jobs(args.jobs) if args.jobs else None  # a bad file is refused before any run
    results: dict[str, dict[str, Any]] = {}
    for name in names:
        runs = []
        for seed in seeds:
            jobs = loaded if loaded is not None else gangs.generate(cluster_gpus=capacity, seed=seed)
            runs.append(gangs.run(nodes, jobs, policies.build(name, shapes=[], seed=seed)))
            _seed_done(args.quiet, name, seed, runs[-1].wall_s)
        results[name] = {
            "partial_gangs": sum(r.partial_gangs for r in runs),
            "deadlocks": sum(r.deadlocks for r in runs),
            "gang_wait_mean_s": float(np.mean([r.gang_wait_mean_s for r in runs])),
            "gang_wait_p99_s": float(np.mean([r.gang_wait_p99_s for r in runs])),
            "gpu_allocation": float(np.mean([r.gpu_allocation for r in runs])),
            "placed_gangs": float(np.mean([r.placed_gangs for r in runs])),
            "waiting_gangs_at_end": float(np.mean([r.waiting_gangs for r in runs])),
            "cycles": float(np.mean([r.cycles for r in runs])),
            "wall_s": float(np.mean([r.wall_s for r in runs])),
        }
    return results


def run_elastic(seeds: Sequence[int], quiet: bool) -> dict[str, dict[str, Any]]:
    """The same jobs of each seed rigid, then elastic (``scheduler.sim.elastic``), with the default profile."""
    nodes = gangs.cluster()
    capacity = sum(n.gpus for n in nodes)
    runs: dict[str, list[elastic.ElasticRun]] = {"rigid": [], "elastic": []}
    for j, seed in enumerate(seeds):
        jobs = elastic.jobs(capacity, seed)
        config = policies.build("default", shapes=[], seed=seed)
        for name, made in runs.items():
            _seed_started(quiet, "elastic", name, seed, j + 1, len(seeds))
            made.append(elastic.run(nodes, jobs, config, elastic=name == "elastic"))
            _seed_done(quiet, name, seed, made[-1].wall_s)
    return {name: elastic.summary(made) for name, made in runs.items()}


def run_tenants(names: Sequence[str], seeds: Sequence[int], quiet: bool) -> dict[str, dict[str, Any]]:
    results: dict[str, dict[str, Any]] = {}
    steps = len(names) * len(seeds)
    for i, name in enumerate(names):
        runs = []
        for j, seed in enumerate(seeds):
            _seed_started(quiet, "tenants", name, seed, i * len(seeds) + j + 1, steps)
            runs.append(tenants.run(tenants.cluster(), policies.build(name, shapes=[], seed=seed), seed=seed))
            _seed_done(quiet, name, seed, runs[-1].wall_s)
        results[name] = {
            "jain_index": float(np.mean([r.jain_index for r in runs])),
            "gpu_allocation": float(np.mean([r.gpu_allocation for r in runs])),
            "reclaim_latency_s": float(np.mean([r.reclaim_latency_s for r in runs])),
            "preempted_gpu_hours": float(np.mean([r.preempted_gpu_hours for r in runs])),
            "preemptions": float(np.mean([r.preemptions for r in runs])),
            "partial_gangs": sum(r.partial_gangs for r in runs),
            "queues": {
                q: {k: float(np.mean([r.queues[q][k] for r in runs])) for k in runs[0].queues[q]}
                for q in runs[0].queues
            },
            "wall_s": float(np.mean([r.wall_s for r in runs])),
        }
    return results


def run_topology(
    seeds: Sequence[int], quiet: bool, *, nodes: Sequence[NodeInfo] | None = None, jobs_per_seed: int = 400
) -> dict[str, dict[str, Any]]:
    """The same workloads with topology and with every constraint dropped, on a labelled cluster (by default
    the built-in one)."""
    nodes = nodes if nodes is not None else sim_topology.cluster()
    config = policies.build("default", shapes=[], seed=0)
    capacity = sum(n.gpus for n in nodes)
    runs: dict[str, list[sim_topology.TopologyRun]] = {"topology": [], "ignored": []}
    for j, seed in enumerate(seeds):
        jobs = sim_topology.generate(jobs_per_seed, cluster_gpus=capacity, seed=seed)
        _seed_started(quiet, "topology", "with topology and ignored", seed, j + 1, len(seeds))
        for name in runs:
            runs[name].append(sim_topology.run(nodes, jobs, config, ignore=name == "ignored"))
            _seed_done(quiet, name, seed, runs[name][-1].wall_s)
    return {name: sim_topology.summary(r) for name, r in runs.items()}
