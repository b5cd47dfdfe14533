"""Tenants sharing a cluster: four queues with different weights and guarantees, all asking for more than the
cluster holds, through the same scheduling loop as the operator.

The cluster is 32 nodes of 8 GPUs. ``batch``, ``research`` and ``dev`` submit jobs from the start; ``prod``,
whose guarantee the others borrow meanwhile, starts ``prod_start_s`` later, so the run shows how long a queue
below its guarantee waits to get it back (reclaim latency). Every queue offers more GPU-hours than the cluster
can serve. Reported, over the window when all four are saturated: each queue's GPUs against its weighted fair
share (water-filling: guarantees, then weights), Jain's index over those ratios, and GPU allocation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from scheduler.api.basics import resources
from scheduler.api.crds.queue import QueueSpec, QueueTree
from scheduler.framework.profile import ProfileConfig
from scheduler.queue import fairshare
from scheduler.sim import gangs
from scheduler.sim.trace import NodeSpec

QUEUES = (
    QueueSpec(name="prod", weight=2.0, guaranteed={resources.GPU: 96}),
    QueueSpec(name="research", weight=2.0, guaranteed={resources.GPU: 48}),
    QueueSpec(name="dev", weight=1.0, guaranteed={resources.GPU: 16}),
    QueueSpec(name="batch", weight=1.0),
)


def cluster(nodes: int = 32) -> list[NodeSpec]:
    return gangs.cluster(nodes)


def generate(
    *,
    queues: Sequence[QueueSpec] = QUEUES,
    cluster_gpus: int = 256,
    horizon_s: float = 12 * 3600.0,
    prod_start_s: float = 4 * 3600.0,
    load_per_queue: float = 0.7,
    mean_duration_s: float = 1800.0,
    max_job_fraction: float = 0.125,
    seed: int = 0,
) -> list[gangs.Job]:
    """Each queue offers ``load_per_queue`` x the cluster's GPU-hours while it submits (four queues: 2.8x).

    Jobs have 1 to 4 workers of 1 to 8 GPUs, at most ``max_job_fraction`` of the cluster's GPUs (32 of 256).
    """
    rng = np.random.default_rng(seed)
    jobs: list[gangs.Job] = []
    for q in queues:
        start = prod_start_s if q.name == "prod" else 0.0
        t = start
        while True:
            per_worker = int(rng.choice([1, 2, 4, 8]))
            workers = max(1, min(int(rng.choice([1, 1, 2, 4])), int(max_job_fraction * cluster_gpus) // per_worker))
            mean_gap = workers * per_worker * mean_duration_s / (load_per_queue * cluster_gpus)
            t += float(rng.exponential(mean_gap))
            if t >= horizon_s:
                break
            duration = float(rng.exponential(mean_duration_s))
            jobs.append(
                gangs.Job(
                    f"{q.name}-{len(jobs):05d}",
                    workers,
                    per_worker,
                    8000 * per_worker,
                    65536 * per_worker,
                    t,
                    duration,
                    q.name,
                )
            )
    return sorted(jobs, key=lambda j: (j.arrival, j.name))


@dataclass
class TenantRun:
    jain_index: float
    gpu_allocation: float
    reclaim_latency_s: float
    queues: dict[str, dict[str, float]]
    partial_gangs: int
    wall_s: float
    #: GPU-hours of work lost to preemption (a preempted job starts again from the beginning) and how many jobs.
    preempted_gpu_hours: float = 0.0
    preemptions: int = 0


def _held_over(
    timeline: list[tuple[float, dict[str, float]]], start: float, end: float, names: Sequence[str]
) -> dict[str, float]:
    """Time-weighted GPUs each queue held over [start, end]."""
    area = dict.fromkeys(names, 0.0)
    for (t, held), (t_next, _) in zip(timeline, [*timeline[1:], (end, {})], strict=True):
        a, b = max(t, start), min(t_next, end)
        if b > a:
            for name in names:
                area[name] += held.get(name, 0.0) * (b - a)
    span = max(end - start, 1e-9)
    return {name: value / span for name, value in area.items()}


def run(
    nodes: Sequence[NodeSpec],
    config: ProfileConfig,
    *,
    queues: Sequence[QueueSpec] = QUEUES,
    prod_start_s: float = 4 * 3600.0,
    horizon_s: float = 12 * 3600.0,
    seed: int = 0,
    reserve_after_s: float | None = None,
) -> TenantRun:
    capacity = float(sum(n.gpus for n in nodes))
    jobs = generate(
        queues=queues, cluster_gpus=int(capacity), horizon_s=horizon_s, prod_start_s=prod_start_s, seed=seed
    )
    # Reservations off, as in the operator by default: the fair-share gate keeps large jobs from being starved.
    result = gangs.run(nodes, jobs, config, queues=queues, reserve_after_s=reserve_after_s)
    names = [q.name for q in queues]
    # All four saturated: from an hour after prod starts to the last arrival.
    window = (prod_start_s + 3600.0, horizon_s)
    held = _held_over(result.timeline, *window, names)
    tree, _ = QueueTree.build(queues)
    demand = {name: {resources.GPU: capacity} for name in names}
    fair = fairshare.fair_shares(tree, capacity={resources.GPU: capacity}, demand=demand)
    ratios = [held[name] / fair[name].resources[resources.GPU] for name in names]
    # Reclaim latency: from prod's first job until prod holds its guarantee.
    guarantee = float(next(q for q in queues if q.name == "prod").guaranteed.get(resources.GPU, 0))
    reached = next((t for t, h in result.timeline if t >= prod_start_s and h.get("prod", 0.0) >= guarantee), math.nan)
    first = min((j.arrival for j in jobs if j.queue == "prod"), default=math.nan)
    return TenantRun(
        jain_index=fairshare.jain_index(ratios),
        gpu_allocation=100.0 * sum(held.values()) / capacity,
        reclaim_latency_s=reached - first,
        queues={
            name: {
                "weight": next(q.weight for q in queues if q.name == name),
                "gpus_held": held[name],
                "fair_share_gpus": fair[name].resources[resources.GPU],
                "share_over_fair": held[name] / fair[name].resources[resources.GPU],
            }
            for name in names
        },
        partial_gangs=result.partial_gangs,
        wall_s=result.wall_s,
        preempted_gpu_hours=result.preempted_gpu_hours,
        preemptions=result.preemptions,
    )
