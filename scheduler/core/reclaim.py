"""Reclaim: take back capacity that other queues borrowed, whole jobs at a time, only when it helps.

When a job whose queue is below its guarantee does not fit, the loop asks :func:`find_victims` for running
jobs of queues above their guarantee. Victims are tried lowest priority first, youngest first; each is removed
from a what-if of the snapshot until the waiting job fits there. Then every victim that turns out not to be
needed is put back (so the set is small and cheap). If the job cannot fit even with every candidate gone,
nothing is preempted. A gang is a victim as a whole: all its members, or none.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from scheduler.api.pod import PodRequest
from scheduler.core import gang
from scheduler.core.cycle import Scheduler
from scheduler.kernels import layout

NEVER = "Never"
LOWER_PRIORITY = "LowerPriority"


@dataclass(slots=True)
class Candidate:
    """A running job that could be preempted: a gang (all its placed members) or one pod."""

    key: str
    queue: str
    priority: int
    started: float
    pods: list[PodRequest] = field(default_factory=list)


def find_victims(
    scheduler: Scheduler,
    job: Sequence[PodRequest],
    *,
    priority: int,
    policy: str,
    candidates: Sequence[Candidate],
) -> list[Candidate]:
    """The victims whose eviction lets ``job`` fit, or [] if there are none (or it would not help)."""
    if policy == NEVER:
        return []
    allowed = [c for c in candidates if policy != LOWER_PRIORITY or c.priority < priority]
    ordered = sorted(allowed, key=lambda c: (c.priority, -c.started, c.key))
    cache = scheduler.cache
    snapshot = cache.snapshot()
    token = snapshot.checkpoint()

    def remove(victim: Candidate) -> None:
        for pod in victim.pods:
            entry = cache.pod(pod.key)
            if entry is not None:
                snapshot.unplace(entry.placement)

    def restore(victim: Candidate) -> None:
        for pod in victim.pods:
            entry = cache.pod(pod.key)
            if entry is not None:
                snapshot.place(entry.placement)

    def fits() -> bool:
        inner = snapshot.checkpoint()
        try:
            return gang.what_if(scheduler, snapshot, job).status.ok
        finally:
            snapshot.rollback(inner)

    whole = sum(p.gpu.count for p in job if p.gpu.whole)

    def enough_gpus() -> bool:
        # A cheap necessary condition before a what-if: enough whole free GPUs in the cluster.
        a = snapshot.arrays
        return whole == 0 or int((a.gpu_free[a.base_reason == layout.FIT] >= layout.WHOLE).sum()) >= whole

    try:
        # With every candidate gone, would the job fit at all? If not, nothing is preempted (one what-if).
        for victim in ordered:
            remove(victim)
        if not (enough_gpus() and fits()):
            return []
        for victim in reversed(ordered):
            restore(victim)
        chosen: list[Candidate] = []
        for victim in ordered:
            remove(victim)
            chosen.append(victim)
            if enough_gpus() and fits():
                break
        # Put back every victim the job can do without, the most expensive first.
        for victim in sorted(chosen, key=lambda c: (-c.priority, c.started, c.key)):
            restore(victim)
            if fits():
                chosen.remove(victim)
            else:
                remove(victim)
        return chosen
    finally:
        snapshot.rollback(token)
