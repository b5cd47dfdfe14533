"""Gang workloads: distributed jobs whose workers must start together.

A job is a PodGroup of ``workers`` pods (``minMember`` = workers), each with ``gpus_per_worker`` whole GPUs. The
built-in generator draws 2 to 64 workers of 1, 2, 4 or 8 GPUs, Poisson arrivals that offer more work than the
cluster holds, and log-normal run times. Jobs can also be read from CSV:

    job,workers,gpus_per_worker,cpu_milli,memory_mib,arrival,duration

The run is event-driven in simulated seconds (the job event loop of ``scheduler.sim.jobsim``) and goes through the
same scheduling loop and queue as the operator. After every step it checks that no gang is partly placed, and
counts a deadlock whenever gangs wait, nothing runs, and still nothing could be placed.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from scheduler.api.basics import resources
from scheduler.api.basics.errors import InvalidObject
from scheduler.api.basics.resources import GpuRequest
from scheduler.api.crds.podgroup import PodGroup
from scheduler.api.crds.queue import QueueSpec
from scheduler.api.objects.node import MIB
from scheduler.api.objects.pod import LABEL_POD_GROUP, PodRequest
from scheduler.framework.profile import ProfileConfig
from scheduler.sim import jobsim
from scheduler.sim.trace import NodeSpec

NAMESPACE = "jobs"


@dataclass(frozen=True, slots=True)
class Job:
    name: str
    workers: int
    gpus_per_worker: int
    cpu_milli: int
    memory_mib: int
    arrival: float
    duration: float
    #: The leaf queue the job is submitted to ("" for the default queue).
    queue: str = ""

    @property
    def gpus(self) -> int:
        return self.workers * self.gpus_per_worker


def cluster(nodes: int = 64) -> list[NodeSpec]:
    """``nodes`` 8-GPU nodes (128 cores, 1 TiB)."""
    return [NodeSpec(f"gpu-{i:03d}", 128_000, 1_048_576, 8, "A100") for i in range(nodes)]


def generate(
    jobs: int = 300, *, cluster_gpus: int = 512, load: float = 1.3, mean_duration_s: float = 3600.0, seed: int = 0
) -> list[Job]:
    """Jobs whose GPU demand, at the arrival rate chosen, is ``load`` times what the cluster can run."""
    rng = np.random.default_rng(seed)
    workers = rng.choice([2, 4, 8, 16, 32, 64], size=jobs, p=[0.3, 0.25, 0.2, 0.13, 0.08, 0.04])
    per_worker = rng.choice([1, 2, 4, 8], size=jobs, p=[0.2, 0.2, 0.25, 0.35])
    # A job never asks for more than the whole cluster.
    workers = np.minimum(workers, np.maximum(2, cluster_gpus // per_worker))
    sigma = 0.8
    durations = rng.lognormal(math.log(mean_duration_s) - sigma**2 / 2, sigma, size=jobs)
    gpu_seconds = float((workers * per_worker * durations).sum())
    span = gpu_seconds / (load * cluster_gpus)
    arrivals = np.sort(rng.uniform(0.0, span, size=jobs))
    return [
        Job(f"job-{i:04d}", int(w), int(g), 12_000 * int(g), 98_304 * int(g), float(a), float(d))
        for i, (w, g, a, d) in enumerate(zip(workers, per_worker, arrivals, durations, strict=True))
    ]


def load_jobs(path: str | Path) -> list[Job]:
    """Jobs from CSV; a bad row is an error naming the file, the line and the column."""
    import csv

    path = Path(path)
    try:
        handle = path.open(newline="")
    except OSError as exc:
        raise InvalidObject(f"cannot read: {exc.strerror}", obj=f"file {path}") from None
    columns = ("job", "workers", "gpus_per_worker", "cpu_milli", "memory_mib", "arrival", "duration")
    jobs = []
    with handle:
        reader = csv.DictReader(handle)
        missing = [c for c in columns if c not in (reader.fieldnames or [])]
        if missing:
            raise InvalidObject(f"missing columns {missing}", obj=f"file {path} line 1")
        for row in reader:
            where = f"file {path} line {reader.line_num}"
            values: dict[str, float] = {}
            for column in columns[1:]:
                raw = (row.get(column) or "").strip()
                try:
                    values[column] = float(raw)
                except ValueError:
                    raise InvalidObject(f"{raw!r} is not a number", obj=where, field=column) from None
                if values[column] < 0 or not math.isfinite(values[column]):
                    raise InvalidObject(f"{raw!r} must be a finite number >= 0", obj=where, field=column)
            for column in ("workers", "gpus_per_worker", "cpu_milli", "memory_mib"):
                if values[column] != int(values[column]):
                    raise InvalidObject(f"{values[column]} is not a whole number", obj=where, field=column)
            if values["workers"] < 1:
                raise InvalidObject("a job needs at least one worker", obj=where, field="workers")
            name = (row.get("job") or "").strip()
            if not name:
                raise InvalidObject("empty job name", obj=where, field="job")
            jobs.append(
                Job(
                    name,
                    int(values["workers"]),
                    int(values["gpus_per_worker"]),
                    int(values["cpu_milli"]),
                    int(values["memory_mib"]),
                    values["arrival"],
                    values["duration"],
                )
            )
    if not jobs:
        raise InvalidObject("no jobs", obj=f"file {path}")
    return sorted(jobs, key=lambda j: (j.arrival, j.name))


def _pods(job: Job) -> list[PodRequest]:
    gpu = GpuRequest(count=job.gpus_per_worker, milli=1000) if job.gpus_per_worker else resources.NO_GPU
    return [
        PodRequest(
            namespace=NAMESPACE,
            name=f"{job.name}-{w}",
            resources={resources.CPU: job.cpu_milli, resources.MEMORY: job.memory_mib * MIB, resources.PODS: 1},
            gpu=gpu,
            labels={LABEL_POD_GROUP: job.name},
            created=job.arrival,
        )
        for w in range(job.workers)
    ]


@dataclass
class GangRun:
    partial_gangs: int
    deadlocks: int
    gang_wait_mean_s: float
    gang_wait_p99_s: float
    gpu_allocation: float
    placed_gangs: int
    waiting_gangs: int
    cycles: int
    wall_s: float
    events: dict[str, int]
    #: GPUs held by each queue's running jobs after every change: (time, {queue: GPUs}).
    timeline: list[tuple[float, dict[str, float]]] = dataclasses.field(default_factory=list)
    #: Arrival and start time of every job that started.
    starts: dict[str, tuple[float, float]] = dataclasses.field(default_factory=dict)
    #: GPU-hours of work lost to preemption (preempted jobs start again from the beginning).
    preempted_gpu_hours: float = 0.0
    preemptions: int = 0


class GangSimulation(jobsim.JobSimulation):
    """The gang scenario on the job event loop: what it measures as jobs start, wait, are preempted and end."""

    def __init__(
        self,
        nodes: Sequence[NodeSpec],
        jobs: Sequence[Job],
        config: ProfileConfig,
        *,
        queues: Sequence[QueueSpec] = (),
        reserve_after_s: float | None = None,
    ) -> None:
        self.evictor = jobsim.Evictions()
        super().__init__((n.info() for n in nodes), config, evictor=self.evictor, reserve_after_s=reserve_after_s)
        if queues:
            self.loop.queues_changed(list(queues))
        self.jobs = jobs
        self.capacity = float(sum(n.gpus for n in nodes))
        self.by_name = {j.name: j for j in jobs}
        self.pods = {j.name: _pods(j) for j in jobs}
        #: GPUs held by each queue's running jobs, and their history.
        self.held: dict[str, float] = {}
        self.timeline: list[tuple[float, dict[str, float]]] = []
        self.recorded = jobs[0].arrival if jobs else 0.0
        #: Arrival and first start of each job that started; when each running job started.
        self.first_start: dict[str, tuple[float, float]] = {}
        self.started: dict[str, float] = {}
        self.preempted_gpu_s = 0.0
        self.preemptions = 0
        self.running_gpus = 0.0
        self.area = 0.0
        self.last = jobs[0].arrival if jobs else 0.0
        self.end = max((j.arrival for j in jobs), default=0.0)
        self.partial = 0
        self.deadlocks = 0
        for job in jobs:
            self.arrive(job.name, job.arrival)

    def advance(self, t: float) -> None:
        if t <= self.end:
            self.area += self.running_gpus * (t - self.last)
            self.last = t
        self.loop.record_usage(self.now - self.recorded)
        self.recorded = self.now

    def arrived(self, name: str) -> None:
        job = self.by_name[name]
        group = PodGroup(NAMESPACE, job.name, min_member=job.workers, queue=job.queue, created=job.arrival)
        self.submit(self.pods[name], group)

    def departed(self, name: str) -> None:
        job = self.by_name[name]
        self.remove(self.pods[name], f"{NAMESPACE}/{name}")
        self.running_gpus -= job.gpus
        self.held[job.queue] -= job.gpus
        self.pods_deleted()

    def preempted(self) -> bool:
        if not self.evictor.pods:
            return False
        victims = {pod.pod_group for pod in self.evictor.pods}
        self.evictor.pods.clear()
        for job_name in sorted(victims):
            job = self.by_name[job_name]
            if job_name in self.started:
                self.preempted_gpu_s += job.gpus * (self.now - self.started.pop(job_name))
                self.running_gpus -= job.gpus
                self.held[job.queue] -= job.gpus
            self.remove(self.pods[job_name], f"{NAMESPACE}/{job_name}")
            self.resubmit(job_name)
            self.preemptions += 1
        self.pods_deleted()
        return True

    def gangs_checked(self) -> Iterator[tuple[str, bool, int]]:
        """Every gang: its job's name, whether it holds its minimum, its placed members; one partly placed is
        counted (``partial``)."""
        for state in self.loop.jobs.gangs():
            assert state.group is not None
            placed = len(state.placed)
            if 0 < placed < state.group.min_member:
                self.partial += 1
            yield state.group.name, state.satisfied, placed

    def stepped(self, *, bound: int) -> None:
        for job_name, satisfied, _ in self.gangs_checked():
            if satisfied and job_name not in self.started:
                self.started[job_name] = self.now
                self.first_start.setdefault(job_name, (self.by_name[job_name].arrival, self.now))
                job = self.by_name[job_name]
                self.running_gpus += job.gpus
                self.held[job.queue] = self.held.get(job.queue, 0.0) + job.gpus
                self.depart(job_name, job.duration)
        if not self.timeline or self.timeline[-1][1] != self.held:
            self.timeline.append((self.now, dict(self.held)))
        waiting = [s for s in self.loop.jobs.gangs() if not s.satisfied]
        if waiting and self.running_gpus == 0 and bound == 0:
            self.deadlocks += 1

    def finished(self) -> bool:
        return not self.events_left and all(s.satisfied for s in self.loop.jobs.gangs())

    def result(self, wall_s: float) -> GangRun:
        jobs = self.jobs
        waits = np.array([self.first_start[j.name][1] - j.arrival for j in jobs if j.name in self.first_start])
        span = max(self.end - (jobs[0].arrival if jobs else 0.0), 1e-9)
        return GangRun(
            partial_gangs=self.partial,
            deadlocks=self.deadlocks,
            gang_wait_mean_s=float(waits.mean()) if waits.size else math.nan,
            gang_wait_p99_s=float(np.percentile(waits, 99)) if waits.size else math.nan,
            gpu_allocation=100.0 * self.area / (span * self.capacity),
            placed_gangs=len(self.first_start),
            waiting_gangs=len(jobs) - len(self.first_start),
            cycles=self.cycles,
            wall_s=wall_s,
            events=self.log.count,
            timeline=self.timeline,
            starts=self.first_start,
            preempted_gpu_hours=self.preempted_gpu_s / 3600.0,
            preemptions=self.preemptions,
        )


def run(
    nodes: Sequence[NodeSpec],
    jobs: Sequence[Job],
    config: ProfileConfig,
    *,
    queues: Sequence[QueueSpec] = (),
    reserve_after_s: float | None = None,
) -> GangRun:
    clock_start = time.perf_counter()
    sim = GangSimulation(nodes, jobs, config, queues=queues, reserve_after_s=reserve_after_s)
    sim.run()
    return sim.result(time.perf_counter() - clock_start)
