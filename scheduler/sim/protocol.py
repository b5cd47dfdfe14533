"""The FGD paper's evaluation protocol (see ../shared/reference/README.md in the project's workspace).

Workload: every pod of the trace, then pods drawn from the trace uniformly with replacement and appended while
the total requested GPU-milli stays within ``ratio`` x the cluster's GPU capacity; then the whole list is
shuffled with the seed. Pods arrive one at a time in that order and never leave.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from scheduler.sim.trace import PodSpec


def inflate(pods: Sequence[PodSpec], capacity_milli: float, ratio: float, seed: int) -> list[PodSpec]:
    """All pods, plus samples while the GPU demand stays within ``ratio`` x capacity, shuffled with ``seed``."""
    rng = np.random.default_rng(seed)
    workload = list(pods)
    target = ratio * capacity_milli
    total = float(sum(p.gpu_total for p in workload))
    # Without a GPU pod to draw, no sample brings the demand nearer the target: sampling would never end.
    grows = any(p.gpu_total for p in pods)
    while grows:
        pick = pods[int(rng.integers(len(pods)))]
        if total + pick.gpu_total > target:
            break
        workload.append(pick)
        total += pick.gpu_total
    order = rng.permutation(len(workload))
    return [workload[i] for i in order]


def alloc_curve(
    arrived: np.ndarray, allocated: np.ndarray, capacity: float, percents: Sequence[int]
) -> dict[int, float]:
    """Allocated GPU share (%) at each percent of arrived demand.

    Every pod is a sample (arrived %, allocated %); the value at X is the mean over the samples whose arrived %
    rounds to X, or, where none does, over those within one point of X (the authors' reporting).
    """
    arrived_pct = np.rint(100.0 * arrived / capacity).astype(np.int64)
    alloc_pct = 100.0 * allocated / capacity
    curve: dict[int, float] = {}
    for x in percents:
        hit = arrived_pct == x
        if not hit.any():
            hit = np.abs(arrived_pct - x) <= 1
        if hit.any():
            curve[x] = float(alloc_pct[hit].mean())
        elif arrived_pct.size and x > arrived_pct[-1]:
            curve[x] = float(alloc_pct[-1])
    return curve
