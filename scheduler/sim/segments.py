"""Segments on NVL72-shaped racks: a 64-worker job in segments of 16, each required inside one NVLink clique,
against the same job without segments.

The cluster is ``racks`` racks of 18 nodes x 4 GPUs, one NVLink clique (``nvidia.com/gpu.clique``) per rack, as a
GB200 NVL72 rack is. Background pods of 1, 2 or 4 GPUs fill ``fill`` of the GPUs through the default profile, then
a random ``leave`` share of them ends (the cluster as a day of work leaves it). Then the job asks for 64 workers x
4 GPUs, placed whole: once with ``segments: {size: 16, required: nvidia.com/gpu.clique}`` and once without, on the
same background. Measured: whether it was placed, how many of its segments (workers 16s to 16s+15 by index) sit
inside one clique, how many cliques it touches, and how many cliques are left partly used (some GPUs taken, some
free: room that a job wanting a whole clique cannot use), before the job and after it, against the fewest any
placement of the job could leave (:func:`fewest_partly_used`: each segment inside one clique, or with no segments
its workers on any empty nodes), so that the figure says what the placement chose and what the cluster allowed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from scheduler.api.basics import resources
from scheduler.api.basics.resources import GpuRequest
from scheduler.api.crds import topology as api_topology
from scheduler.api.crds.podgroup import PodGroup
from scheduler.api.crds.topology import TopologyConstraint
from scheduler.api.objects.node import MIB, NodeInfo
from scheduler.api.objects.pod import LABEL_POD_GROUP, PodRequest
from scheduler.core import gang, root
from scheduler.sim import jobsim, policies

NAMESPACE = "seg"
NODES_PER_RACK = 18
GPUS_PER_NODE = 4
WORKERS = 64
SEGMENT = 16
INDEX_LABEL = "batch.kubernetes.io/job-completion-index"


def cluster(racks: int = 8) -> list[NodeInfo]:
    """``racks`` NVL72-shaped racks: 18 nodes of 4 GPUs, one clique each."""
    out = []
    for r in range(racks):
        for n in range(NODES_PER_RACK):
            name = f"nvl{r}-n{n:02d}"
            labels = {
                api_topology.LABEL_RACK: f"rack-{r}",
                api_topology.LABEL_CLIQUE: f"fabric.{r}",
                api_topology.LABEL_HOSTNAME: name,
            }
            out.append(
                NodeInfo(
                    name=name,
                    allocatable={resources.CPU: 144_000, resources.MEMORY: 960 * 1024 * MIB, resources.PODS: 110},
                    gpus=GPUS_PER_NODE,
                    gpu_model="GB200",
                    labels=labels,
                )
            )
    return out


def _pod(name: str, gpus: int, labels: Mapping[str, str] | None = None) -> PodRequest:
    return PodRequest(
        namespace=NAMESPACE,
        name=name,
        resources={resources.CPU: 8_000 * gpus, resources.MEMORY: 64 * 1024 * MIB * gpus, resources.PODS: 1},
        gpu=GpuRequest(count=gpus, milli=1000),
        labels=dict(labels or {}),
    )


@dataclass
class SegmentRun:
    placed: bool
    #: Segments (workers 16s..16s+15 by index) inside one clique.
    segments_in_one_clique: int
    cliques_touched: int
    cliques_partly_used: int
    background_gpus: int
    #: Cliques partly used by the background alone, before the job.
    partly_used_before: int = 0
    #: The fewest cliques any placement of the job (as asked: in segments or not) could leave partly used.
    fewest_partly_used: int = 0


def run(seed: int, *, segments: bool, racks: int = 8, fill: float = 0.3, leave: float = 0.6) -> SegmentRun:
    nodes = cluster(racks)
    binder = jobsim.Binder()
    scheduler = root.build_scheduler(policies.build("default", shapes=[], seed=seed), binder=binder, nodes=nodes)
    cache = scheduler.cache
    rng = np.random.default_rng(seed)
    capacity = len(nodes) * GPUS_PER_NODE
    background: list[str] = []
    used = 0
    while used < fill * capacity:
        gpus = int(rng.choice([1, 2, 4], p=[0.4, 0.3, 0.3]))
        pod = _pod(f"bg-{len(background):04d}", gpus)
        if scheduler.schedule(pod).decision is None:
            break
        background.append(pod.key)
        used += gpus
    for key in rng.permutation(background)[: int(leave * len(background))]:
        cache.remove_pod(str(key))
    left = sum(d.pod.gpu.count for d in binder.bound if cache.pod(d.pod.key) is not None)
    clique_of = {info.name: info.labels[api_topology.LABEL_CLIQUE] for info in nodes}
    taken: dict[str, int] = {clique: 0 for clique in clique_of.values()}
    empty: dict[str, int] = {clique: 0 for clique in clique_of.values()}
    for info in nodes:
        slot = cache.slot_of(info.name)
        assert slot is not None
        free = int((cache.arrays.gpu_free[slot] >= 1000).sum())
        taken[clique_of[info.name]] += GPUS_PER_NODE - free
        empty[clique_of[info.name]] += free == GPUS_PER_NODE
    whole = NODES_PER_RACK * GPUS_PER_NODE
    cliques = sorted(taken)
    per_unit = SEGMENT if segments else 1
    fewest = fewest_partly_used(
        [taken[c] for c in cliques], [empty[c] for c in cliques], whole, per_unit, WORKERS // per_unit
    )
    members = [
        _pod(f"job-{i:02d}", GPUS_PER_NODE, {LABEL_POD_GROUP: "job", INDEX_LABEL: str(i)}) for i in range(WORKERS)
    ]
    level = TopologyConstraint(required=api_topology.LABEL_CLIQUE) if segments else api_topology.NO_CONSTRAINT
    group = PodGroup(
        NAMESPACE, "job", min_member=WORKERS, segment_size=SEGMENT if segments else 0, segment_topology=level
    )
    result = gang.place_gang(scheduler, group, members)
    where = {int(d.pod.labels[INDEX_LABEL]): clique_of[d.node] for d in result.decisions}
    held: dict[str, int] = {}
    for decision in binder.bound:
        if cache.pod(decision.pod.key) is not None:
            clique = clique_of[decision.node]
            held[clique] = held.get(clique, 0) + decision.pod.gpu.count
    return SegmentRun(
        placed=result.status.ok,
        segments_in_one_clique=sum(
            1
            for s in range(WORKERS // SEGMENT)
            if where and len({where[i] for i in range(s * SEGMENT, (s + 1) * SEGMENT)}) == 1
        ),
        cliques_touched=len(set(where.values())),
        cliques_partly_used=sum(1 for gpus in held.values() if 0 < gpus < whole),
        background_gpus=left,
        partly_used_before=sum(1 for gpus in taken.values() if 0 < gpus < whole),
        fewest_partly_used=fewest,
    )


def fewest_partly_used(used: Sequence[int], empty: Sequence[int], whole: int, per_unit: int, units: int) -> int:
    """The fewest cliques left partly used (some of their ``whole`` GPUs taken, some free) once ``units`` units of
    ``per_unit`` empty nodes (of :data:`GPUS_PER_NODE` GPUs) each are placed, each unit inside one clique; clique
    ``i`` has ``used[i]`` GPUs taken and ``empty[i]`` empty nodes. Exact (a knapsack over the cliques); -1 if the
    units do not fit at all. A segment is a unit of 16 nodes; a job without segments, 64 units of one node."""
    impossible = len(used) + 1
    # best[k]: the fewest partly used cliques among those seen so far, with k units placed in them.
    best = [0] + [impossible] * units
    for taken, free_nodes in zip(used, empty, strict=True):
        step = [impossible] * (units + 1)
        for placed, count in enumerate(best):
            if count >= impossible:
                continue
            for more in range(min(free_nodes // per_unit, units - placed) + 1):
                after = taken + more * per_unit * GPUS_PER_NODE
                step[placed + more] = min(step[placed + more], count + (0 < after < whole))
        best = step
    return best[units] if best[units] < impossible else -1


def summary(runs: Sequence[SegmentRun]) -> dict[str, Any]:
    return {
        "placed": sum(r.placed for r in runs),
        "segments_in_one_clique": float(np.mean([r.segments_in_one_clique for r in runs])),
        "cliques_touched": float(np.mean([r.cliques_touched for r in runs])),
        "cliques_partly_used": float(np.mean([r.cliques_partly_used for r in runs])),
        "background_gpus": float(np.mean([r.background_gpus for r in runs])),
        "partly_used_before": float(np.mean([r.partly_used_before for r in runs])),
        "fewest_partly_used": float(np.mean([r.fewest_partly_used for r in runs])),
    }


def table(results: Mapping[str, Mapping[str, Any]], seeds: int) -> str:
    head = f"{'job':<18}{'placed':>8}{'segments in 1 clique':>22}{'cliques touched':>17}{'partly used':>13}"
    head += f"{'fewest':>8}{'before':>8}{'background':>12}"
    lines = [head, "-" * len(head)]
    for name, r in results.items():
        lines.append(
            f"{name:<18}{r['placed']:>5}/{seeds:<2}{r['segments_in_one_clique']:>19.2f} /4{r['cliques_touched']:>17.2f}"
            f"{r['cliques_partly_used']:>13.2f}{r['fewest_partly_used']:>8.2f}{r['partly_used_before']:>8.2f}"
            f"{r['background_gpus']:>12.1f}"
        )
    lines += [
        "",
        "segments in 1 clique  of the job's 4 segments (workers 16s..16s+15), how many sit inside one clique (mean)",
        "cliques touched       cliques the job's workers are on; partly used: cliques left with some GPUs taken and",
        "                      some free after the job; fewest: the fewest any placement of the job as asked (each",
        "                      segment in one clique, or the workers anywhere) could leave; before: partly used by the",
        "                      background alone; background: GPUs the background pods hold (means per seed)",
    ]
    return "\n".join(lines)
