"""Gang workloads: distributed jobs whose workers must start together.

A job is a PodGroup of ``workers`` pods (``minMember`` = workers), each with ``gpus_per_worker`` whole GPUs. The
built-in generator draws 2 to 64 workers of 1, 2, 4 or 8 GPUs, Poisson arrivals that offer more work than the
cluster holds, and log-normal run times. Jobs can also be read from CSV:

    job,workers,gpus_per_worker,cpu_milli,memory_mib,arrival,duration

The run is event-driven in simulated seconds and goes through the same scheduling loop and queue as the
operator. After every step it checks that no gang is partly placed, and counts a deadlock whenever gangs wait,
nothing runs, and still nothing could be placed.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from scheduler.api import resources
from scheduler.api.errors import InvalidObject
from scheduler.api.node import MIB
from scheduler.api.pod import LABEL_POD_GROUP, PodRequest
from scheduler.api.podgroup import PodGroup
from scheduler.api.queue import QueueSpec
from scheduler.api.resources import GpuRequest
from scheduler.cache.state import Cache
from scheduler.core.cycle import Scheduler
from scheduler.core.framework import Framework
from scheduler.core.loop import ClusterEvent, SchedulingLoop
from scheduler.framework.interface import Decision
from scheduler.framework.profile import ProfileConfig
from scheduler.queue.scheduling import SchedulingQueue
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


class EventLog:
    """Counts the Events the loop emits, by reason (the simulators' Events port)."""

    def __init__(self) -> None:
        self.count: dict[str, int] = {}

    def emit(self, *, obj: str, kind: str, reason: str, message: str) -> None:
        self.count[reason] = self.count.get(reason, 0) + 1


class _Evictor:
    """Collects the pods the loop preempts; the run removes them and resubmits their jobs."""

    def __init__(self) -> None:
        self.pods: list[PodRequest] = []

    def evict(self, pods: list[PodRequest], reason: str) -> None:
        self.pods.extend(pods)

    def nominate(self, pod: PodRequest, node: str) -> None:
        # A simulated pod has no status to show it in; the run places it wherever its next cycle finds room.
        return None


class Binder:
    """Binds at once; the run confirms the bindings and tells the loop the pods run."""

    def __init__(self) -> None:
        self.bound: list[Decision] = []

    def bind(self, decision: Decision) -> None:
        self.bound.append(decision)


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


def run(
    nodes: Sequence[NodeSpec],
    jobs: Sequence[Job],
    config: ProfileConfig,
    *,
    queues: Sequence[QueueSpec] = (),
    reserve_after_s: float | None = None,
) -> GangRun:
    now = 0.0
    cache = Cache()
    for node in nodes:
        cache.upsert_node(node.info())
    capacity = float(sum(n.gpus for n in nodes))
    binder = Binder()
    scheduler = Scheduler(cache, Framework.build(config), binder)
    queue = SchedulingQueue(clock=lambda: now)
    log = EventLog()
    evictor = _Evictor()
    loop = SchedulingLoop(
        scheduler, queue, clock=lambda: now, events=log, evictor=evictor, reserve_after_s=reserve_after_s
    )
    if queues:
        loop.queues_changed(list(queues))
    by_name = {j.name: j for j in jobs}
    held: dict[str, float] = {}
    timeline: list[tuple[float, dict[str, float]]] = []
    recorded = jobs[0].arrival if jobs else 0.0
    pods = {j.name: _pods(j) for j in jobs}
    events: list[tuple[float, int, str, int]] = [(j.arrival, 1, j.name, 0) for j in jobs]
    run_of: dict[str, int] = {}
    first_start: dict[str, tuple[float, float]] = {}
    preempted_gpu_s = 0.0
    preemptions = 0
    heapq.heapify(events)
    started: dict[str, float] = {}
    running_gpus = 0.0
    area = 0.0
    last = jobs[0].arrival if jobs else 0.0
    end = max((j.arrival for j in jobs), default=0.0)
    partial = 0
    deadlocks = 0
    cycles = 0
    clock_start = time.perf_counter()

    def preempt() -> bool:
        """Remove what the loop preempted and resubmit those jobs; True if anything was."""
        nonlocal running_gpus, preempted_gpu_s, preemptions
        if not evictor.pods:
            return False
        victims = {pod.pod_group for pod in evictor.pods}
        evictor.pods.clear()
        for job_name in sorted(victims):
            job = by_name[job_name]
            if job_name in started:
                preempted_gpu_s += job.gpus * (now - started.pop(job_name))
                running_gpus -= job.gpus
                held[job.queue] -= job.gpus
            for pod in pods[job_name]:
                cache.remove_pod(pod.key)
                loop.pod_gone(pod.key)
            loop.group_removed(f"{NAMESPACE}/{job_name}")
            run_of[job_name] = run_of.get(job_name, 0) + 1
            heapq.heappush(events, (now, 1, job_name, run_of[job_name]))
            preemptions += 1
        loop.cluster_event(ClusterEvent.POD_DELETED)
        return True

    def step() -> None:
        nonlocal cycles, running_gpus, partial, deadlocks
        placed_before = len(binder.bound)
        cycles += loop.run_until_idle()
        while preempt():
            cycles += loop.run_until_idle()
        for decision in binder.bound[placed_before:]:
            cache.confirm(decision.pod.key)
            loop.pod_placed(dataclasses.replace(decision.pod, node_name=decision.node, phase="Running"))
        for state in loop.jobs.gangs():
            assert state.group is not None
            placed = len(state.placed)
            if 0 < placed < state.group.min_member:
                partial += 1
            job_name = state.group.name
            if state.satisfied and job_name not in started:
                started[job_name] = now
                first_start.setdefault(job_name, (by_name[job_name].arrival, now))
                job = by_name[job_name]
                running_gpus += job.gpus
                held[job.queue] = held.get(job.queue, 0.0) + job.gpus
                heapq.heappush(events, (now + job.duration, 0, job_name, run_of.get(job_name, 0)))
        if not timeline or timeline[-1][1] != held:
            timeline.append((now, dict(held)))
        waiting = [s for s in loop.jobs.gangs() if not s.satisfied]
        if waiting and running_gpus == 0 and len(binder.bound) == placed_before:
            deadlocks += 1

    while events or queue.next_wakeup() is not None:
        wake = queue.next_wakeup()
        if events and (wake is None or events[0][0] <= wake):
            t, kind, name, run_number = heapq.heappop(events)
            if kind == 0 and run_number != run_of.get(name, 0):
                continue  # the departure of a run that was preempted
        elif wake is not None:
            t, kind, name, run_number = wake, 2, "", 0
        else:
            break
        if t <= end:
            area += running_gpus * (t - last)
            last = t
        now = max(now, t)
        loop.record_usage(now - recorded)
        recorded = now
        job = by_name.get(name)
        if kind == 1 and job is not None:
            loop.group_upsert(
                PodGroup(NAMESPACE, job.name, min_member=job.workers, queue=job.queue, created=job.arrival)
            )
            for pod in pods[name]:
                loop.pod_pending(pod)
        elif kind == 0 and job is not None:
            for pod in pods[name]:
                cache.remove_pod(pod.key)
                loop.pod_gone(pod.key)
            loop.group_removed(f"{NAMESPACE}/{name}")
            running_gpus -= job.gpus
            held[job.queue] -= job.gpus
            loop.cluster_event(ClusterEvent.POD_DELETED)
        step()
        if not events and all(s.satisfied for s in loop.jobs.gangs()):
            break
    waits = np.array([first_start[j.name][1] - j.arrival for j in jobs if j.name in first_start])
    span = max(end - (jobs[0].arrival if jobs else 0.0), 1e-9)
    return GangRun(
        partial_gangs=partial,
        deadlocks=deadlocks,
        gang_wait_mean_s=float(waits.mean()) if waits.size else math.nan,
        gang_wait_p99_s=float(np.percentile(waits, 99)) if waits.size else math.nan,
        gpu_allocation=100.0 * area / (span * capacity),
        placed_gangs=len(first_start),
        waiting_gangs=len(jobs) - len(first_start),
        cycles=cycles,
        wall_s=time.perf_counter() - clock_start,
        events=log.count,
        timeline=timeline,
        starts=first_start,
        preempted_gpu_hours=preempted_gpu_s / 3600.0,
        preemptions=preemptions,
    )
