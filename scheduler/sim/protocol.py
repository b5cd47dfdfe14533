"""The FGD paper's evaluation protocol, as the authors' simulator (hkust-adsl/kubernetes-scheduler-simulator) runs it
(see ../shared/reference/README.md in the project's workspace).

Workload: every pod of the trace, shuffled with the seed; then pods drawn from the trace uniformly with
replacement and appended, in the order drawn, while the total requested GPU-milli stays within ``ratio`` x the
cluster's GPU capacity. Pods arrive one at a time in that order and never leave.

Cluster: the authors' simulator renames every node with a seeded random prefix (``0042-<name>``) before it
creates them, and its scheduler breaks ties by the smallest name; so ties go to a node order that is random
but fixed for the run (:func:`tie_order`), not to the order of the node file.

Both points move the published figures: with the whole list shuffled and ties in file order, FGD lands 2.3
points below the paper on the CPU-heavy ``cpu250`` list (docs/simulator.md, "The FGD protocol").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from scheduler.sim.trace import NodeSpec, PodSpec


def inflate(pods: Sequence[PodSpec], capacity_milli: float, ratio: float, seed: int) -> list[PodSpec]:
    """All pods shuffled with ``seed``, then samples (in the order drawn) while the GPU demand stays within
    ``ratio`` x capacity."""
    rng = np.random.default_rng(seed)
    workload = [pods[i] for i in rng.permutation(len(pods))]
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
    return workload


def tie_order(nodes: Sequence[NodeSpec], seed: int) -> list[NodeSpec]:
    """The nodes renamed as the authors' simulator does (a seeded random 4-digit prefix), so that "the first
    node by name" is a random order fixed for the run. The node file's order is kept in the list."""
    rng = np.random.default_rng([seed, len(nodes)])
    prefix = rng.permutation(len(nodes))
    width = max(4, len(str(len(nodes))))
    return [replace(node, name=f"{int(prefix[i]):0{width}d}-{node.name}") for i, node in enumerate(nodes)]


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
