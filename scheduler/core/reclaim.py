"""Reclaim: take back capacity that other queues borrowed, whole jobs at a time, only when it helps.

When a job whose queue is below its guarantee does not fit, the loop asks :func:`find_victims` for running
jobs of queues above their guarantee. Victims are tried lowest priority first, then from the queue furthest
ahead of its fair share, youngest first, never taking a queue below its own guarantee; each is removed from a
what-if of the snapshot until the waiting job fits there. Then every victim that turns out not to be needed is
put back (so the set is small and cheap). If the job cannot fit even with every candidate gone, nothing is
preempted. A gang is a victim as a whole: all its members, or none.

A job whose topology requires one domain of a level (``find_victims_in_domain``) gets victims from one domain
only, and the what-ifs place it inside that domain, so the capacity freed is contiguous where it will run; the
domain needing the cheapest victims wins, and if no single domain can be freed enough, nothing is preempted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from scheduler.api.pod import PodRequest
from scheduler.core import gang
from scheduler.core.cycle import Scheduler
from scheduler.framework.interface import TOPOLOGY_SLOTS

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
    #: What the job counts against its queue (for ``surplus``).
    request: dict[str, float] = field(default_factory=dict)
    #: How far its queue is ahead of its fair share (its rank share): among equal priorities, taken first.
    ahead: float = 0.0


def find_victims(
    scheduler: Scheduler,
    job: Sequence[PodRequest],
    *,
    priority: int,
    policy: str,
    candidates: Sequence[Candidate],
    context: Mapping[str, Any] | None = None,
    surplus: Mapping[str, Mapping[str, float]] | None = None,
) -> list[Candidate]:
    """The victims whose eviction lets ``job`` fit, or [] if there are none (or it would not help).

    ``context`` is passed to the job's what-ifs (a domain mask keeps it inside one domain). ``surplus`` bounds
    what may be taken from a queue (what it holds beyond its guarantee, per resource): victims of a queue in it
    are taken only while the queue stays at or above its guarantee, so that a reclaim never pushes its victim's
    queue below its own guarantee (which would reclaim back: ping-pong)."""
    if policy == NEVER:
        return []
    allowed = [c for c in candidates if policy != LOWER_PRIORITY or c.priority < priority]
    ordered = sorted(allowed, key=lambda c: (c.priority, -c.ahead, -c.started, c.key))
    remaining = {queue: dict(vector) for queue, vector in (surplus or {}).items()}

    def takeable(victim: Candidate) -> bool:
        left = remaining.get(victim.queue)
        if left is None:
            return True
        if any(victim.request.get(name, 0.0) > amount + 1e-9 for name, amount in left.items()):
            return False
        for name in left:
            left[name] -= victim.request.get(name, 0.0)
        return True

    cache = scheduler.cache
    needs = [p.gpu.count for p in job if p.gpu.whole]
    # Not even every candidate's whole GPUs on top of the free ones would be enough: no what-if needed. Checked
    # before the what-if opens: every return after that point goes through its rollback.
    _, free_now = gang.free_gpus(cache.arrays)
    freeable = sum(p.gpu.count for c in ordered for p in c.pods if p.gpu.whole)
    if needs and int(free_now.sum()) + freeable < sum(needs):
        return []
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
            return gang.what_if(scheduler, snapshot, job, context).status.ok
        finally:
            snapshot.rollback(inner)

    mask = (context or {}).get(TOPOLOGY_SLOTS)

    def enough_gpus() -> bool:
        # A cheap necessary condition before a what-if: enough whole free GPUs, in groups large enough.
        _, free = gang.free_gpus(snapshot.arrays)
        if mask is not None:
            size = min(mask.shape[0], free.shape[0])
            free = np.where(mask[:size], free[:size], 0)
        return not gang.whole_gpus_short(free, needs)

    try:
        # Remove candidates in order until the job fits; the cheap check spares the what-if until the GPUs
        # freed could hold it. If it never fits, nothing is preempted.
        chosen: list[Candidate] = []
        for victim in ordered:
            if not takeable(victim):
                continue
            remove(victim)
            chosen.append(victim)
            if enough_gpus() and fits():
                break
        else:
            return []
        # Put back every victim the job can do without, the most expensive first.
        for victim in sorted(chosen, key=lambda c: (-c.priority, c.started, c.key)):
            restore(victim)
            if enough_gpus() and fits():
                chosen.remove(victim)
            else:
                remove(victim)
        return chosen
    finally:
        snapshot.rollback(token)


def find_victims_in_domain(
    scheduler: Scheduler,
    job: Sequence[PodRequest],
    *,
    level: int,
    priority: int,
    policy: str,
    candidates: Sequence[Candidate],
    surplus: Mapping[str, Mapping[str, float]] | None = None,
) -> list[Candidate]:
    """Victims all inside one domain of ``level`` whose eviction lets ``job`` fit inside that domain, or [].

    Every domain whose free GPUs plus its candidates' GPUs could hold the job is tried; the one whose victims
    cost least (lowest top priority, then fewest GPUs, then fewest jobs) wins. A candidate with pods in two
    domains is never a victim: evicting it would free capacity the job cannot use as a whole.
    """
    if policy == NEVER:
        return []
    cache = scheduler.cache
    ids = cache.domain_ids()
    column = np.full(cache.arrays.slots, -1, dtype=np.int64)
    size = min(ids.shape[0], column.shape[0])
    column[:size] = ids[:size, level]
    usable, free = gang.free_gpus(cache.arrays)
    needs = [p.gpu.count for p in job if p.gpu.whole]
    by_domain: dict[int, list[Candidate]] = {}
    for candidate in candidates:
        domains = set()
        for pod in candidate.pods:
            entry = cache.pod(pod.key)
            domains.add(int(column[entry.placement.slot]) if entry is not None else -1)
        if len(domains) == 1 and (domain := domains.pop()) >= 0:
            by_domain.setdefault(domain, []).append(candidate)
    best: tuple[tuple[int, int, int], list[Candidate]] | None = None
    for domain, local in sorted(by_domain.items()):
        inside = (column == domain) & usable
        freeable = sum(p.gpu.count for c in local for p in c.pods if p.gpu.whole)
        if int(free[inside].sum()) + freeable < sum(needs):
            continue
        victims = find_victims(
            scheduler,
            job,
            priority=priority,
            policy=policy,
            candidates=local,
            context={TOPOLOGY_SLOTS: inside},
            surplus=surplus,
        )
        if not victims:
            continue
        cost = (
            max(v.priority for v in victims),
            sum(p.gpu.count for v in victims for p in v.pods if p.gpu.whole),
            len(victims),
        )
        if best is None or cost < best[0]:
            best = (cost, victims)
    return best[1] if best is not None else []
