"""Elastic gangs against rigid ones: the gang scenario's jobs, each run once rigid and once elastic.

The jobs are the gang scenario's (``scheduler.sim.gangs.generate``), split between two queues that are each
guaranteed half the cluster and may borrow the rest, so that a queue below its guarantee reclaims from the other.
A *rigid* job is a PodGroup of ``minMember`` = ``maxMember`` = its workers; the same job *elastic* has
``minMember`` = three quarters of its workers (:data:`MIN_FRACTION`, at least one) and ``maxMember`` = its
workers: it starts at its minimum, grows as room appears, and gives its surplus back first when another queue
reclaims its guarantee or a job of its queue cannot start.

The work model: a job has ``workers x duration`` worker-seconds to do, at one worker-second per running worker per
second (linear scaling: an elastic trainer that rescales its batch, as PyTorch elastic does), so a rigid job runs
exactly ``duration``. A preempted surplus member costs nothing but pace: its pod is deleted and made again, pending,
as the workload's controller would. A preempted core (or a rigid job) starts again from the beginning, as in the
gang scenario.

Measured per run: GPU allocation (GPU-seconds held by running jobs over the arrivals' span), mean job completion
time (arrival to the end of its work), mean wait (arrival to the start), the *reclaim latency* (for the jobs that
arrived with their queue's guarantee able to hold all their workers on top of what the queue runs and its jobs
still waiting ahead of them, arrival to start: how long a guarantee takes to be honoured; the same rule in both
runs; and, as the scenario first measured it, over the jobs judged on their arrival alone, behind their queue's
waiting jobs or not), whole-job preemptions, surplus members preempted, and the GPU-hours
of work lost.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from scheduler.api.basics import resources
from scheduler.api.crds.podgroup import PodGroup
from scheduler.api.crds.queue import QueueSpec
from scheduler.api.objects.pod import PodRequest
from scheduler.framework.profile import ProfileConfig
from scheduler.sim import gangs
from scheduler.sim.trace import NodeSpec

QUEUE_NAMES = ("qa", "qb")


def queues(cluster_gpus: int) -> list[QueueSpec]:
    """Two queues, each guaranteed half the cluster's GPUs, borrowing allowed."""
    half = cluster_gpus // 2
    return [QueueSpec(name=name, guaranteed={resources.GPU: half}) for name in QUEUE_NAMES]


def jobs(cluster_gpus: int, seed: int) -> list[gangs.Job]:
    """The gang scenario's jobs for ``seed``, alternately in each queue."""
    made = gangs.generate(cluster_gpus=cluster_gpus, seed=seed)
    return [dataclasses.replace(job, queue=QUEUE_NAMES[i % 2]) for i, job in enumerate(made)]


#: An elastic job's ``minMember``, as a fraction of its workers (rounded down, at least one).
MIN_FRACTION = (3, 4)


def min_workers(job: gangs.Job, elastic: bool) -> int:
    numerator, denominator = MIN_FRACTION
    return max(1, job.workers * numerator // denominator) if elastic else job.workers


@dataclass
class ElasticRun:
    gpu_allocation: float
    jct_mean_s: float
    wait_mean_s: float
    reclaim_latency_s: float
    #: Jobs the reclaim latency is measured over.
    entitled: int
    #: The same over the jobs whose guarantee held them on arrival, whatever of their queue waited ahead of them.
    arrival_latency_s: float
    arrival_entitled: int
    whole_preemptions: int
    surplus_preemptions: int
    lost_gpu_hours: float
    partial_gangs: int
    cycles: int
    wall_s: float


class ElasticSimulation(gangs.GangSimulation):
    """The gang simulation with a job's pace following its placed workers (see the module notes)."""

    def __init__(
        self, nodes: Sequence[NodeSpec], jobs: Sequence[gangs.Job], config: ProfileConfig, *, elastic: bool
    ) -> None:
        self.elastic = elastic
        #: Per running job: worker-seconds done up to ``since``, workers placed since then.
        self.done: dict[str, float] = {}
        self.since: dict[str, float] = {}
        self.workers: dict[str, int] = {}
        self.finish: dict[str, float] = {}
        self.entitled: set[str] = set()
        self.arrival_entitled: set[str] = set()
        self.surplus_preemptions = 0
        self.lost_gpu_s = 0.0
        capacity = sum(n.gpus for n in nodes)
        super().__init__(nodes, jobs, config, queues=queues(capacity))
        self.guarantee = {q.name: float(q.guaranteed[resources.GPU]) for q in queues(capacity)}

    def arrived(self, name: str) -> None:
        job = self.by_name[name]
        least = min_workers(job, self.elastic)
        # Entitled: the queue's guarantee holds this job on top of what the queue runs and the jobs of the queue
        # that arrived before it and still wait (they come first in its queue; judged on the arrival alone, a job
        # behind them was counted as entitled while its guarantee was promised to them).
        ahead = sum(
            self.by_name[state.group.name].gpus
            for state in self.loop.jobs.gangs()
            if state.group is not None and state.group.queue == job.queue and not state.satisfied
        )
        if self.held.get(job.queue, 0.0) + ahead + job.gpus <= self.guarantee[job.queue]:
            self.entitled.add(name)
        if self.held.get(job.queue, 0.0) + job.gpus <= self.guarantee[job.queue]:
            self.arrival_entitled.add(name)
        group = PodGroup(
            gangs.NAMESPACE,
            job.name,
            min_member=least,
            max_member=job.workers,
            queue=job.queue,
            created=job.arrival,
        )
        self.submit(self.pods[name], group)

    def _pace(self, name: str, workers: int) -> None:
        """Job ``name`` runs with ``workers`` from now: its work so far is counted and its end moved."""
        job = self.by_name[name]
        self.done[name] += self.workers[name] * (self.now - self.since[name])
        self.since[name] = self.now
        held = (workers - self.workers[name]) * job.gpus_per_worker
        self.running_gpus += held
        self.held[job.queue] = self.held.get(job.queue, 0.0) + held
        self.workers[name] = workers
        left = max(job.workers * job.duration - self.done[name], 0.0)
        self.depart_again(name, left / workers)

    def departed(self, name: str) -> None:
        job = self.by_name[name]
        self.finish[name] = self.now
        self.running_gpus -= self.workers[name] * job.gpus_per_worker
        self.held[job.queue] -= self.workers[name] * job.gpus_per_worker
        for table in (self.done, self.since, self.workers, self.started):
            table.pop(name, None)
        self.remove(self.pods[name], f"{gangs.NAMESPACE}/{name}")
        self.pods_deleted()

    def preempted(self) -> bool:
        if not self.evictor.pods:
            return False
        by_job: dict[str, list[PodRequest]] = {}
        for pod in self.evictor.pods:
            by_job.setdefault(pod.pod_group, []).append(pod)
        self.evictor.pods.clear()
        for name, evicted in sorted(by_job.items()):
            job = self.by_name[name]
            state = self.loop.gang(f"{gangs.NAMESPACE}/{name}")
            left = len(state.placed) - len(evicted) if state is not None else 0
            if name in self.started and left >= min_workers(job, self.elastic):
                # Surplus members: deleted and made again, pending; the job goes on at a slower pace.
                self.remove(evicted, None)
                made = {pod.key: pod for pod in self.pods[name]}
                for pod in evicted:
                    self.loop.pod_pending(made[pod.key])
                self.surplus_preemptions += len(evicted)
                self._pace(name, left)
                continue
            if name in self.started:
                self.done[name] += self.workers[name] * (self.now - self.since[name])
                self.lost_gpu_s += self.done[name] * job.gpus_per_worker
                self.running_gpus -= self.workers[name] * job.gpus_per_worker
                self.held[job.queue] -= self.workers[name] * job.gpus_per_worker
                for table in (self.done, self.since, self.workers, self.started):
                    table.pop(name, None)
            self.remove(self.pods[name], f"{gangs.NAMESPACE}/{name}")
            self.resubmit(name)
            self.preemptions += 1
        self.pods_deleted()
        return True

    def stepped(self, *, bound: int) -> None:
        for name, satisfied, placed in self.gangs_checked():
            if not satisfied:
                continue
            if name not in self.started:
                self.started[name] = self.now
                self.first_start.setdefault(name, (self.by_name[name].arrival, self.now))
                self.done[name], self.since[name], self.workers[name] = 0.0, self.now, 0
                self._pace(name, placed)
            elif placed != self.workers[name]:
                self._pace(name, placed)
        if not self.timeline or self.timeline[-1][1] != self.held:
            self.timeline.append((self.now, dict(self.held)))

    def elastic_result(self, wall_s: float) -> ElasticRun:
        jobs = self.jobs
        span = max(self.end - (jobs[0].arrival if jobs else 0.0), 1e-9)
        jct = [self.finish[j.name] - j.arrival for j in jobs if j.name in self.finish]
        waits = [self.first_start[j.name][1] - j.arrival for j in jobs if j.name in self.first_start]
        entitled = [self.first_start[n][1] - self.first_start[n][0] for n in self.entitled if n in self.first_start]
        alone = [
            self.first_start[n][1] - self.first_start[n][0] for n in self.arrival_entitled if n in self.first_start
        ]
        return ElasticRun(
            gpu_allocation=100.0 * self.area / (span * self.capacity),
            jct_mean_s=float(np.mean(jct)) if jct else math.nan,
            wait_mean_s=float(np.mean(waits)) if waits else math.nan,
            reclaim_latency_s=float(np.mean(entitled)) if entitled else math.nan,
            entitled=len(entitled),
            arrival_latency_s=float(np.mean(alone)) if alone else math.nan,
            arrival_entitled=len(alone),
            whole_preemptions=self.preemptions,
            surplus_preemptions=self.surplus_preemptions,
            lost_gpu_hours=self.lost_gpu_s / 3600.0,
            partial_gangs=self.partial,
            cycles=self.cycles,
            wall_s=wall_s,
        )


def run(nodes: Sequence[NodeSpec], jobs: Sequence[gangs.Job], config: ProfileConfig, *, elastic: bool) -> ElasticRun:
    started = time.perf_counter()
    sim = ElasticSimulation(nodes, jobs, config, elastic=elastic)
    sim.run()
    return sim.elastic_result(time.perf_counter() - started)


def summary(runs: Sequence[ElasticRun]) -> dict[str, Any]:
    """Means over the seeds (sums for the counts of partial gangs)."""
    out: dict[str, Any] = {}
    for key in ElasticRun.__dataclass_fields__:
        values = [getattr(r, key) for r in runs]
        out[key] = sum(values) if key == "partial_gangs" else float(np.mean(values))
    return out


def table(results: Mapping[str, Mapping[str, Any]]) -> str:
    head = (
        f"{'jobs':<9}{'GPU alloc':>11}{'JCT mean s':>12}{'wait mean s':>13}{'reclaim s':>11}{'entitled':>10}"
        f"{'on arrival s':>14}{'jobs':>6}{'whole preempt':>15}{'surplus preempt':>17}{'lost GPU-h':>12}"
        f"{'partial':>9}{'wall s':>9}"
    )
    lines = [head, "-" * len(head)]
    for name, r in results.items():
        lines.append(
            f"{name:<9}{r['gpu_allocation']:>10.2f}%{r['jct_mean_s']:>12.0f}{r['wait_mean_s']:>13.0f}"
            f"{r['reclaim_latency_s']:>11.0f}{r['entitled']:>10.0f}{r['arrival_latency_s']:>14.0f}"
            f"{r['arrival_entitled']:>6.0f}{r['whole_preemptions']:>15.1f}"
            f"{r['surplus_preemptions']:>17.1f}{r['lost_gpu_hours']:>12.1f}{r['partial_gangs']:>9}{r['wall_s']:>9.2f}"
        )
    lines += [
        "",
        "JCT mean s     seconds from a job's arrival to the end of its work; wait: to its start (minMember placed)",
        "reclaim s      arrival to start of the jobs whose queue's guarantee could hold all their workers on top of",
        "               what the queue runs and its jobs waiting ahead of them (entitled: how many, mean per seed);",
        "               on arrival: the same over the jobs judged on what the queue runs alone (jobs: how many)",
        "whole preempt  jobs preempted whole (restarted); surplus preempt: elastic members given back (mean per seed)",
        "lost GPU-h     GPU-hours of work lost to whole-job preemptions (mean per seed); partial: sum over the seeds",
    ]
    return "\n".join(lines)
