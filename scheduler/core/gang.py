"""All-or-nothing placement of a gang (a PodGroup's members).

One cycle places ``minMember`` members on a checkpoint of the snapshot, largest first, each seeing the
placements before it (and preferring the nodes the gang already uses, through the ``gang`` score plugin). If
every one of them fits, all are assumed in the cache and handed to the binder; if any does not, the snapshot
is rolled back and nothing is held. A gang never holds part of the cluster while it waits, so two gangs that
each need more than half the cluster cannot deadlock: whichever is tried first with room runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from scheduler.api import resources
from scheduler.api.pod import PodRequest
from scheduler.api.podgroup import PodGroup
from scheduler.cache.state import Snapshot
from scheduler.core.cycle import Diagnosis, Scheduler
from scheduler.framework.interface import GANG_SLOTS, Code, Decision, Status
from scheduler.kernels import layout


@dataclass(slots=True)
class GangResult:
    status: Status
    decisions: list[Decision] = field(default_factory=list)
    #: The member that did not fit, and why no node could take it.
    blocked: str = ""
    diagnosis: Diagnosis | None = None


def _size(pod: PodRequest) -> tuple[float, ...]:
    return (
        -float(pod.gpu.total_milli),
        -float(pod.resources.get(resources.CPU, 0)),
        -float(pod.resources.get(resources.MEMORY, 0)),
    )


def order_members(members: Sequence[PodRequest]) -> list[PodRequest]:
    """Largest first (GPU, then CPU, then memory), ties by name so the order is stable."""
    return sorted(members, key=lambda p: (*_size(p), p.key))


def min_resources_short(scheduler: Scheduler, group: PodGroup) -> str:
    """Which of ``spec.minResources`` the cluster does not have free in all, or "" (checked before trying)."""
    if not group.min_resources:
        return ""
    cache = scheduler.cache
    columns = {name: cache.column(name) for name in group.min_resources if name != resources.GPU}
    a = cache.arrays  # after cache.column(), which may add a column
    present = a.base_reason == layout.FIT
    short = []
    for name, amount in group.min_resources.items():
        if name == resources.GPU:
            free = float((a.gpu_free[present] >= layout.WHOLE).sum())
        else:
            free = float(np.maximum(a.cap[present, columns[name]] - a.used[present, columns[name]], 0.0).sum())
        if free < amount:
            short.append(f"{name} (needs {amount}, {free:g} free)")
    return ", ".join(short)


def gpus_short(scheduler: Scheduler, members: Sequence[PodRequest]) -> str:
    """A necessary condition, cheap to check before a full what-if: enough free GPUs in the whole cluster."""
    a = scheduler.cache.arrays
    present = a.base_reason == layout.FIT
    whole = sum(p.gpu.count for p in members if p.gpu.whole)
    shared = sum(p.gpu.milli for p in members if p.gpu.shared)
    free_per_node = (a.gpu_free[present] >= layout.WHOLE).sum(axis=1)
    free_whole = int(free_per_node.sum())
    if whole > free_whole:
        return f"the gang needs {whole} whole GPUs and the cluster has {free_whole} free"
    largest = max((p.gpu.count for p in members if p.gpu.whole), default=0)
    most = int(free_per_node.max()) if free_per_node.size else 0
    if largest > most:
        return f"a member needs {largest} whole GPUs on one node and no node has more than {most} free"
    free_milli = float(a.gpu_free[present].clip(min=0.0).sum())
    if whole * layout.WHOLE + shared > free_milli:
        return f"the gang needs {whole * 1000 + shared} GPU-milli and the cluster has {free_milli:g} free"
    return ""


def place_gang(
    scheduler: Scheduler, group: PodGroup, members: Sequence[PodRequest], context: Mapping[str, Any] | None = None
) -> GangResult:
    """Place ``members`` all together or not at all; on success they are assumed and handed to the binder."""
    short = gpus_short(scheduler, members)
    if short:
        return GangResult(Status(Code.UNSCHEDULABLE, short, "gang"))
    short = min_resources_short(scheduler, group)
    if short:
        return GangResult(
            Status(Code.UNSCHEDULABLE, f"not enough free in the cluster for minResources: {short}", "gang")
        )
    snapshot = scheduler.cache.snapshot()
    token = snapshot.checkpoint()
    try:
        result = what_if(scheduler, snapshot, members, context)
    finally:
        snapshot.rollback(token)
    if not result.status.ok:
        return result
    for decision in result.decisions:
        scheduler.cache.assume(decision.pod, decision.node, decision.gpu_ids)
    for decision in result.decisions:
        scheduler.binder.bind(decision)
    return result


def what_if(
    scheduler: Scheduler, snapshot: Snapshot, members: Sequence[PodRequest], context: Mapping[str, Any] | None = None
) -> GangResult:
    """Place ``members`` one after another on ``snapshot`` (inside a checkpoint the caller opened and will roll
    back), largest first; the decisions if all fit, else why the first that did not."""
    taken: dict[int, int] = {}
    decisions: list[Decision] = []
    for pod in order_members(members):
        result = scheduler.place(pod, snapshot, {**(context or {}), GANG_SLOTS: taken})
        if result.decision is None:
            message = f"member {pod.name} of {len(members)} fits nowhere: {result.status.message}"
            return GangResult(Status(result.status.code, message, "gang"), blocked=pod.key, diagnosis=result.diagnosis)
        slot = scheduler.cache.slot_of(result.decision.node)
        assert slot is not None
        snapshot.place(snapshot.placement(pod, slot, result.decision.gpu_ids))
        taken[slot] = taken.get(slot, 0) + 1
        decisions.append(result.decision)
    return GangResult(Status.success(), decisions)
