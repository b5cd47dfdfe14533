"""Replay a trace in time: pods arrive at their creation time and leave after their run time.

A pod that fits nowhere waits; when a pod leaves, waiting pods are retried in arrival order (as kube-scheduler
moves unschedulable pods back to its active queue on a pod deletion), until ``RETRY_LIMIT`` of them in a row
still do not fit. A pod runs for ``deletion - scheduled`` seconds of the trace (``deletion - creation`` when it
was never scheduled there); without a deletion time it stays to the end.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from scheduler.api.basics.errors import InvalidObject
from scheduler.framework.profile import ProfileConfig
from scheduler.sim.engine import SimCluster
from scheduler.sim.trace import NodeSpec, PodSpec

RETRY_LIMIT = 64
ARRIVE, DEPART = 1, 0  # departures first at equal times, so freed room is there for arrivals


@dataclass
class ReplayRun:
    time_weighted_alloc: float
    pending_mean_s: float
    pending_p99_s: float
    failed_pods: int
    placed_pods: int
    times: np.ndarray
    alloc_pct: np.ndarray
    wall_s: float
    decisions: int


def run_replay(
    nodes: Sequence[NodeSpec],
    pods: Sequence[PodSpec],
    config: ProfileConfig,
    *,
    progress: Callable[[int], None] | None = None,
) -> ReplayRun:
    for i, p in enumerate(pods):
        if p.creation is None:
            raise InvalidObject(
                "--replay needs creation_time on every pod", obj=f"pod {p.name} (row {i + 1})", field="creation_time"
            )
    sim = SimCluster.build(nodes, config)
    events: list[tuple[float, int, int]] = [(float(p.creation or 0.0), ARRIVE, i) for i, p in enumerate(pods)]
    heapq.heapify(events)
    waiting: list[int] = []
    placed_at: dict[int, float] = {}
    allocated = 0.0
    last_t = events[0][0] if events else 0.0
    end_t = max((float(p.creation or 0.0) for p in pods), default=0.0)
    area = 0.0
    samples_t: list[float] = []
    samples_a: list[float] = []
    decisions = 0
    handled = 0
    start = time.perf_counter()

    def try_place(i: int, now: float) -> bool:
        nonlocal allocated, decisions
        spec = pods[i]
        decisions += 1
        if sim.scheduler.schedule(spec.request(f"{spec.name}#{i}")).decision is None:
            return False
        allocated += spec.gpu_total
        placed_at[i] = now
        if spec.deletion is not None:
            began = spec.scheduled if spec.scheduled is not None else spec.creation
            run_for = max(0.0, spec.deletion - float(began or 0.0))
            heapq.heappush(events, (now + run_for, DEPART, i))
        return True

    while events:
        now, kind, i = heapq.heappop(events)
        if now <= end_t:
            area += allocated * (now - last_t)
            last_t = now
        if kind == DEPART:
            spec = pods[i]
            sim.cache.remove_pod(f"trace/{spec.name}#{i}")
            allocated -= spec.gpu_total
            still: list[int] = []
            misses = 0
            for j in waiting:
                if misses < RETRY_LIMIT and try_place(j, now):
                    misses = 0
                    continue
                misses += 1
                still.append(j)
            waiting = still
        else:
            if not try_place(i, now):
                waiting.append(i)
            handled += 1
            if progress is not None and handled % 500 == 0:
                progress(handled)
        if not samples_t or now - samples_t[-1] >= (end_t - float(pods[0].creation or 0.0)) / 400 or not events:
            samples_t.append(now)
            samples_a.append(100.0 * allocated / sim.gpu_capacity)
    wall = time.perf_counter() - start
    t0 = min(float(p.creation or 0.0) for p in pods)
    span = max(end_t - t0, 1e-9)
    pending = np.array([placed_at[i] - float(pods[i].creation or 0.0) for i in placed_at])
    return ReplayRun(
        time_weighted_alloc=100.0 * area / (span * sim.gpu_capacity),
        pending_mean_s=float(pending.mean()) if pending.size else math.nan,
        pending_p99_s=float(np.percentile(pending, 99)) if pending.size else math.nan,
        failed_pods=len(pods) - len(placed_at),
        placed_pods=len(placed_at),
        times=np.array(samples_t),
        alloc_pct=np.array(samples_a),
        wall_s=wall,
        decisions=decisions,
    )
