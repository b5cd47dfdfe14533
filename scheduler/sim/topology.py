"""The topology scenario: gangs with required and preferred levels on a labelled cluster, with and without topology.

The cluster is built in blocks, racks and NVLink cliques (by default 4 blocks x 4 racks x 2 cliques x 4 nodes of
8 GPUs, 1,024 GPUs), every node labelled as docs/topology.md says and annotated with an 8-GPU NVSwitch topology.
The workload mixes gangs that require one clique, gangs that require one rack (and prefer one clique inside it),
gangs that prefer one block, and plain pods of 1 to 8 GPUs, with Poisson arrivals and log-normal run times. The
same workload runs twice through the same loop and profile: once as written, once with every topology constraint
removed ("ignored"), so that the difference is what topology awareness does.

Measured for each run: the share of gangs with a preferred level placed in one domain of it, the gangs whose
members do not share one domain of their required level (must be 0 with topology), the mean number of fully free
cliques over time (room for the next large job), and the GPU allocation over the arrival span.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from scheduler.api.basics import resources
from scheduler.api.basics.resources import GpuRequest
from scheduler.api.crds import topology as api_topology
from scheduler.api.crds.podgroup import PodGroup
from scheduler.api.crds.topology import NO_CONSTRAINT, TopologyConstraint
from scheduler.api.devices import gputopo
from scheduler.api.objects.node import MIB, NodeInfo
from scheduler.api.objects.pod import ANNOTATION_TOPOLOGY_PREFERRED, LABEL_POD_GROUP, PodRequest
from scheduler.framework.interface import Decision
from scheduler.framework.profile import ProfileConfig
from scheduler.kernels import layout
from scheduler.sim import jobsim

NAMESPACE = "topo"
GPUS_PER_NODE = 8
#: The levels of the built-in cluster, as the default Topology names them.
BLOCK, RACK, CLIQUE = (api_topology.DEFAULT_TOPOLOGY.find_level(n) for n in ("block", "rack", "clique"))


@dataclass(frozen=True, slots=True)
class Job:
    name: str
    workers: int
    gpus_per_worker: int
    arrival: float
    duration: float
    #: The job's constraint; a plain pod (``workers`` 1, ``gang`` False) carries it as annotations.
    topology: TopologyConstraint = NO_CONSTRAINT
    gang: bool = True

    @property
    def gpus(self) -> int:
        return self.workers * self.gpus_per_worker


def nvswitch_annotation(gpus: int = GPUS_PER_NODE) -> str:
    """An NVSwitch node: every GPU joined to every other by 18 NVLinks, half the GPUs on each NUMA node."""
    half = gpus // 2
    return gputopo.to_annotation(
        gputopo.GpuTopology.of(
            gputopo.Gpu(i, numa=i // half, nvlink=tuple((j, 18) for j in range(gpus) if j != i)) for i in range(gpus)
        )
    )


def cluster(blocks: int = 4, racks: int = 4, cliques: int = 2, nodes: int = 4) -> list[NodeInfo]:
    """Labelled nodes: ``blocks`` x ``racks`` per block x ``cliques`` per rack x ``nodes`` per clique."""
    annotation = nvswitch_annotation()
    out = []
    for b, r, c, n in np.ndindex(blocks, racks, cliques, nodes):
        name = f"b{b}-r{r}-c{c}-n{n}"
        labels = {
            api_topology.LABEL_BLOCK: f"b{b}",
            api_topology.LABEL_RACK: f"b{b}-r{r}",
            api_topology.LABEL_CLIQUE: f"b{b}-r{r}-c{c}",
            api_topology.LABEL_HOSTNAME: name,
        }
        out.append(
            NodeInfo(
                name=name,
                allocatable={resources.CPU: 128_000, resources.MEMORY: 1_048_576 * MIB, resources.PODS: 110},
                gpus=GPUS_PER_NODE,
                gpu_model="H100",
                labels=labels,
                annotations={gputopo.ANNOTATION: annotation},
            )
        )
    return out


#: (share of jobs, kind): the workload's mix.
_KINDS = (
    (0.30, "clique"),  # required clique: 2-4 workers of 8 GPUs, or 2-8 of 4
    (0.20, "rack"),  # required rack, preferred clique: 4-8 workers of 8 GPUs
    (0.15, "block"),  # preferred block: 8-24 workers of 8 GPUs
    (0.35, "pod"),  # plain pods of 1, 2, 4 or 8 GPUs, preferring a clique (the fullest one that fits)
)


def generate(
    jobs: int = 400, *, cluster_gpus: int = 1024, load: float = 1.2, mean_duration_s: float = 3600.0, seed: int = 0
) -> list[Job]:
    """Jobs whose GPU demand, at the arrival rate chosen, is ``load`` times what the cluster can run."""
    rng = np.random.default_rng(seed)
    kinds = rng.choice([k for _, k in _KINDS], size=jobs, p=[p for p, _ in _KINDS])
    drafts: list[tuple[str, int, int, TopologyConstraint, bool]] = []
    for kind in kinds.tolist():
        if kind == "clique":
            if rng.random() < 0.5:
                drafts.append((kind, int(rng.integers(2, 5)), 8, TopologyConstraint(required="clique"), True))
            else:
                drafts.append((kind, int(rng.integers(2, 9)), 4, TopologyConstraint(required="clique"), True))
        elif kind == "rack":
            constraint = TopologyConstraint(required="rack", preferred="clique")
            drafts.append((kind, int(rng.integers(4, 9)), 8, constraint, True))
        elif kind == "block":
            drafts.append((kind, int(rng.integers(8, 25)), 8, TopologyConstraint(preferred="block"), True))
        else:
            gpus = int(rng.choice([1, 2, 4, 8], p=[0.4, 0.3, 0.2, 0.1]))
            drafts.append((kind, 1, gpus, TopologyConstraint(preferred="clique"), False))
    sigma = 0.8
    durations = rng.lognormal(math.log(mean_duration_s) - sigma**2 / 2, sigma, size=jobs)
    gpu_seconds = float(sum(w * g * d for (_, w, g, _, _), d in zip(drafts, durations, strict=True)))
    span = gpu_seconds / (load * cluster_gpus)
    arrivals = np.sort(rng.uniform(0.0, span, size=jobs))
    return [
        Job(f"{kind}-{i:04d}", workers, gpus, float(a), float(d), constraint, is_gang)
        for i, ((kind, workers, gpus, constraint, is_gang), a, d) in enumerate(
            zip(drafts, arrivals, durations, strict=True)
        )
    ]


def _pods(job: Job, *, constrained: bool) -> list[PodRequest]:
    annotations: dict[str, str] = {}
    if not job.gang and constrained and job.topology.preferred:
        annotations = {ANNOTATION_TOPOLOGY_PREFERRED: job.topology.preferred}
    return [
        PodRequest(
            namespace=NAMESPACE,
            name=f"{job.name}-{w}" if job.gang else job.name,
            resources={resources.CPU: 8_000 * job.gpus_per_worker, resources.MEMORY: 65_536 * MIB, resources.PODS: 1},
            gpu=GpuRequest(count=job.gpus_per_worker, milli=1000),
            labels={LABEL_POD_GROUP: job.name} if job.gang else {},
            annotations=annotations,
            topology=job.topology if constrained and not job.gang else NO_CONSTRAINT,
            created=job.arrival,
        )
        for w in range(job.workers)
    ]


@dataclass
class TopologyRun:
    #: Gangs with a preferred level placed in one domain of it, over those placed.
    one_domain_share: float
    #: Placed gangs whose members are not all in one domain of their required level.
    required_violations: int
    #: Cliques with every GPU free, averaged over the arrival span (time-weighted).
    free_cliques_mean: float
    #: GPUs allocated over the arrival span, percent of the cluster (time-weighted).
    gpu_allocation: float
    placed_jobs: int
    waiting_jobs: int
    wait_mean_s: float
    cycles: int
    wall_s: float
    events: dict[str, int] = dataclasses.field(default_factory=dict)


class TopologySimulation(jobsim.JobSimulation):
    """The topology scenario on the job event loop: where each job's pods land, and the free cliques over time."""

    def __init__(self, nodes: Sequence[NodeInfo], jobs: Sequence[Job], config: ProfileConfig, *, ignore: bool) -> None:
        super().__init__(nodes, config)
        self.jobs = jobs
        self.ignore = ignore
        self.ids = self.cache.domain_ids()
        ids = self.ids
        self.clique_of = ids[:, CLIQUE] if CLIQUE is not None else np.full(self.cache.arrays.slots, -1, dtype=np.int64)
        clique_of = self.clique_of
        self.clique_gpus = np.bincount(clique_of[clique_of >= 0], weights=self.cache.arrays.gpu_count[clique_of >= 0])
        self.capacity = float(sum(n.gpus for n in nodes))
        self.by_name = {j.name: j for j in jobs}
        self.pods = {j.name: _pods(j, constrained=not ignore) for j in jobs}
        #: Each job's nodes (slots), one per pod placed; when each job started.
        self.nodes_of: dict[str, list[int]] = {}
        self.started: dict[str, float] = {}
        self.running_gpus = 0.0
        self.start = jobs[0].arrival if jobs else 0.0
        self.end = max((j.arrival for j in jobs), default=0.0)
        self.last = self.start
        self.alloc_area = 0.0
        self.free_clique_area = 0.0
        for job in jobs:
            self.arrive(job.name, job.arrival)

    def free_cliques(self) -> int:
        a = self.cache.arrays
        whole = (a.gpu_free >= layout.WHOLE).sum(axis=1)
        inside = self.clique_of >= 0
        free = np.bincount(self.clique_of[inside], weights=whole[inside], minlength=self.clique_gpus.shape[0])
        return int((free >= self.clique_gpus).sum())

    def advance(self, t: float) -> None:
        if t <= self.end:
            self.alloc_area += self.running_gpus * (t - self.last)
            self.free_clique_area += self.free_cliques() * (t - self.last)
            self.last = t

    def arrived(self, name: str) -> None:
        job = self.by_name[name]
        group = None
        if job.gang:
            constraint = NO_CONSTRAINT if self.ignore else job.topology
            group = PodGroup(NAMESPACE, job.name, min_member=job.workers, topology=constraint, created=job.arrival)
        self.submit(self.pods[name], group)

    def departed(self, name: str) -> None:
        job = self.by_name[name]
        self.remove(self.pods[name], f"{NAMESPACE}/{name}" if job.gang else None)
        self.running_gpus -= job.gpus
        self.pods_deleted()

    def placed(self, decision: Decision) -> None:
        job_name = decision.pod.pod_group or decision.pod.name
        slot = self.cache.slot_of(decision.node)
        assert slot is not None
        self.nodes_of.setdefault(job_name, []).append(slot)

    def stepped(self, *, bound: int) -> None:
        for job_name, slots in self.nodes_of.items():
            job = self.by_name[job_name]
            if job_name not in self.started and len(slots) >= job.workers:
                self.started[job_name] = self.now
                self.running_gpus += job.gpus
                self.depart(job_name, job.duration)

    def finished(self) -> bool:
        # Everything ran, or what waits cannot fit even in the empty cluster: nothing will change.
        return not self.events_left and (len(self.started) == len(self.jobs) or self.running_gpus == 0)

    def result(self, wall_s: float) -> TopologyRun:
        jobs, ids, nodes_of, started = self.jobs, self.ids, self.nodes_of, self.started
        preferred = [j for j in jobs if j.gang and j.topology.preferred and j.name in started]
        in_one = sum(_domains(ids, nodes_of[j.name], j.topology.preferred) == 1 for j in preferred)
        violations = sum(
            _domains(ids, nodes_of[j.name], j.topology.required) != 1
            for j in jobs
            if j.gang and j.topology.required and j.name in started
        )
        waits = [started[j.name] - j.arrival for j in jobs if j.name in started]
        span = max(self.end - self.start, 1e-9)
        return TopologyRun(
            one_domain_share=in_one / len(preferred) if preferred else math.nan,
            required_violations=int(violations),
            free_cliques_mean=self.free_clique_area / span,
            gpu_allocation=100.0 * self.alloc_area / (span * self.capacity),
            placed_jobs=len(started),
            waiting_jobs=len(jobs) - len(started),
            wait_mean_s=float(np.mean(waits)) if waits else math.nan,
            cycles=self.cycles,
            wall_s=wall_s,
            events=self.log.count,
        )


def run(nodes: Sequence[NodeInfo], jobs: Sequence[Job], config: ProfileConfig, *, ignore: bool = False) -> TopologyRun:
    """Run ``jobs`` on ``nodes``; with ``ignore`` every topology constraint is dropped (the metrics still judge
    placements by the constraints as written)."""
    clock_start = time.perf_counter()
    sim = TopologySimulation(nodes, jobs, config, ignore=ignore)
    sim.run()
    return sim.result(time.perf_counter() - clock_start)


def _domains(ids: np.ndarray, slots: Sequence[int], level_name: str) -> int:
    """How many domains of the level the slots span; a node outside every domain counts as a domain of its own."""
    level = api_topology.DEFAULT_TOPOLOGY.find_level(level_name)
    assert level is not None
    column = ids[list(slots), level]
    return len(set(column[column >= 0].tolist())) + int((column < 0).sum())


def summary(runs: Sequence[TopologyRun]) -> dict[str, float]:
    """The mean of each figure over the runs (violations are summed: any is one too many)."""
    return {
        "one_domain_share": float(np.mean([r.one_domain_share for r in runs])),
        "required_violations": float(sum(r.required_violations for r in runs)),
        "free_cliques_mean": float(np.mean([r.free_cliques_mean for r in runs])),
        "gpu_allocation": float(np.mean([r.gpu_allocation for r in runs])),
        "placed_jobs": float(np.mean([r.placed_jobs for r in runs])),
        "waiting_jobs_at_end": float(np.mean([r.waiting_jobs for r in runs])),
        "wait_mean_s": float(np.mean([r.wait_mean_s for r in runs])),
        "wall_s": float(np.mean([r.wall_s for r in runs])),
    }


def table(results: dict[str, dict[str, float]]) -> str:
    head = (
        f"{'run':<10}{'one-domain share':>18}{'required violations':>21}{'free cliques':>14}{'GPU alloc':>11}"
        f"{'placed':>8}{'waiting':>9}{'wait mean s':>13}{'wall s':>8}"
    )
    lines = [head, "-" * len(head)]
    for name, r in results.items():
        lines.append(
            f"{name:<10}{100 * r['one_domain_share']:>17.1f}%{r['required_violations']:>21.0f}"
            f"{r['free_cliques_mean']:>14.2f}{r['gpu_allocation']:>10.2f}%{r['placed_jobs']:>8.0f}"
            f"{r['waiting_jobs_at_end']:>9.0f}{r['wait_mean_s']:>13.0f}{r['wall_s']:>8.2f}"
        )
    return "\n".join(lines)
