"""Reclaim: take back capacity that other queues borrowed, whole jobs at a time, only when it helps.

When a job whose queue is below its guarantee does not fit, the loop asks :func:`find_victims` for running
jobs of queues above their guarantee. Victims are tried lowest priority first, then from the queue furthest
ahead of its fair share, youngest first, never taking a queue below its own guarantee; each is removed from a
what-if of the snapshot until the waiting job fits there. Then every victim that turns out not to be needed is
put back (so the set is small and cheap). If the job cannot fit even with every candidate gone, nothing is
preempted. A gang is a victim as a whole: all its members, or none; except an elastic gang's surplus (its placed
members beyond ``minMember``), each of which is a victim of its own, taken before any whole job of its priority,
the member of highest rank first; its core (the ``minMember`` members left) is taken only after all of its surplus
(:attr:`Candidate.after`), whole, and a surplus member is put back only while its core stays.

A job whose topology requires one domain of a level (``find_victims_in_domain``) gets victims from one domain
only, and the what-ifs place it inside that domain, so the capacity freed is contiguous where it will run; the
domain needing the cheapest victims wins, and if no single domain can be freed enough, nothing is preempted.

A single pod preempting within its queue gets victims on one node (``scheduler.core.preemption.nodes``), from the
candidates and placements kept by ``scheduler.core.running_jobs``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from scheduler.api.crds.podgroup import PodGroup
from scheduler.api.objects.pod import PodRequest
from scheduler.cache.arrays import Placement
from scheduler.cache.state import Cache, Snapshot
from scheduler.core import gang, memo, registry
from scheduler.core.cycle import EMPTY, Context, Scheduler

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
    #: A surplus member of an elastic gang: the gang's key, and its place among the surplus (0: taken first).
    gang: str = ""
    rank: int = 0
    #: The core of an elastic gang: the keys of its surplus members, all taken before it (or leaving already).
    after: frozenset[str] = frozenset()

    @property
    def surplus(self) -> bool:
        return bool(self.gang)

    @property
    def job(self) -> str:
        """The job it is (part of)."""
        return self.gang or self.key


def take_order(candidate: Candidate, ahead: Mapping[str, float] | None = None) -> tuple[object, ...]:
    """Victims in the order they are taken: lowest priority, an elastic gang's surplus before whole jobs, the queue
    furthest ahead of its fair share (``ahead``, per queue, when given; else the candidate's own), the youngest, a
    gang's surplus member of highest rank first."""
    c = candidate
    share = ahead.get(c.queue, c.ahead) if ahead is not None else c.ahead
    return (c.priority, not c.surplus, -share, -c.started, c.job, c.rank)


def put_back_order(candidate: Candidate) -> tuple[object, ...]:
    """Victims in the order they are put back: the most expensive first (highest priority, running longest); a
    gang's core before its surplus, whose member of lowest rank comes back first."""
    c = candidate
    return (-c.priority, c.started, c.job, c.surplus, -c.rank)


@dataclass(frozen=True, slots=True)
class Placements:
    """Where candidates' pods run, as arrays, so that a search narrows them down without a loop over them: per
    candidate its priority and whether it waits behind its surplus; per placed pod its candidate (``owner``), its
    node slot, its request row and its whole GPUs; per node slot, the candidates with a pod there."""

    candidates: list[Candidate]
    #: Candidate key -> its index.
    index: dict[str, int]
    priority: np.ndarray
    #: Per candidate its queue's index in ``queues``.
    queue: np.ndarray
    queues: dict[str, int]
    #: An elastic gang's core (taken only after its surplus members).
    behind: np.ndarray
    owner: np.ndarray
    slot: np.ndarray
    rows: np.ndarray
    whole: np.ndarray
    by_slot: Mapping[int, list[int]]


def move(cache: Cache, snapshot: Snapshot, victim: Candidate, *, away: bool) -> None:
    """Take ``victim``'s pods off their nodes in ``snapshot``'s what-if (``away``), or put them back."""
    for pod in victim.pods:
        entry = cache.pod(pod.key)
        if entry is not None:
            if away:
                snapshot.unplace(entry.placement)
            else:
                snapshot.place(entry.placement)


def occupy(snapshot: Snapshot, held: np.ndarray) -> None:
    """Take the room free on the ``held`` node slots in ``snapshot``'s open what-if (placements of no pod), so that
    only what victims free there is left: the room already free on a node held for another job is that job's."""
    a = snapshot.arrays
    nothing = np.zeros(0)
    for slot in np.flatnonzero(held[: a.slots]).tolist():
        free = np.maximum(a.cap[slot] - a.used[slot], 0.0)
        free[~np.isfinite(free)] = 0.0  # a capacity without bound stays so
        if free.any():
            snapshot.place(Placement(slot, free))
        for device in range(int(a.gpu_count[slot])):
            milli, memory = float(a.gpu_free[slot, device]), float(a.gpu_mem_free[slot, device])
            # A device of unknown memory has it infinite: its free milli taken is enough.
            memory = memory if np.isfinite(memory) and memory > 0.0 else 0.0
            if milli > 0.0 or memory > 0.0:
                snapshot.place(Placement(slot, nothing, (device,), max(milli, 0.0), (memory,)))


def find_victims(
    scheduler: Scheduler,
    job: Sequence[PodRequest],
    *,
    priority: int,
    policy: str,
    candidates: Sequence[Candidate],
    context: Context = EMPTY,
    held: np.ndarray | None = None,
    surplus: Mapping[str, Mapping[str, float]] | None = None,
    snapshot: Snapshot | None = None,
    group: PodGroup | None = None,
    placed: Placements | None = None,
    may_use: np.ndarray | None = None,
    ahead: Mapping[str, float] | None = None,
) -> list[Candidate]:
    """The victims whose eviction lets ``job`` fit, or [] if there are none (or it would not help).

    ``group``: the gang ``job`` is the core of; with ``spec.segments`` it must fit segment by segment, each inside
    one domain (``gang.what_if_in_segments``), so victims are chosen until each segment has a domain, not merely
    until the GPUs add up.

    The what-ifs run on ``snapshot`` (the cycle's; by default the cache's), and are all rolled back. A candidate
    with no pod on a node some pod of ``job`` may use once pods leave it is not one (``may_use``: those nodes, when
    the caller knows them already; ``placed``: where the candidates run, as arrays, to tell them at once).

    ``context`` is passed to the job's what-ifs (a domain mask keeps it inside one domain; nodes held in it,
    ``Context.reserved``, are left out of the what-ifs and of the free-GPU checks: the actions pass the nodes the job
    could not use even with victims of its own there, ``Holds.in_search``). ``held``: nodes held for other jobs that
    the job may share once its victims free room there; the what-ifs open with the room free on them taken
    (:func:`occupy`), so that only what the job's own victims free there counts, not the room freed for their holder
    (counted as free, it made a job that fails only on held room look as if it needed no victim: it waited for
    the hold, see docs/gangs.md on reclaim latency). ``surplus`` bounds
    what may be taken from a queue (what it holds beyond its guarantee, per resource): victims of a queue in it
    are taken only while the queue stays at or above its guarantee, so that a reclaim never pushes its victim's
    queue below its own guarantee (which would reclaim back: ping-pong). ``ahead``: per queue, how far it is ahead of
    its fair share (read for the order victims are taken in, instead of each candidate's own ``ahead``)."""
    if policy == NEVER:
        return []
    cache = scheduler.cache
    snapshot = snapshot if snapshot is not None else cache.snapshot()
    usable = may_use if may_use is not None else _usable_slots(scheduler, snapshot, job, context)
    # A victim only on nodes none of the job's pods can ever use frees nothing it can take.
    keep: set[str] | None = None
    if usable is not None and placed is not None:
        keep = {placed.candidates[i].key for i in np.unique(placed.owner[usable[placed.slot]]).tolist()}
    elif usable is not None:
        keep = {c.key for c in candidates if _runs_on(cache, c, usable)}
    allowed = [
        c for c in candidates if (policy != LOWER_PRIORITY or c.priority < priority) and (keep is None or c.key in keep)
    ]
    ordered = sorted(allowed, key=lambda c: take_order(c, ahead))
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

    needs = [p.gpu.count for p in job if p.gpu.whole]
    # Not even every candidate's whole GPUs on top of the free ones would be enough: no what-if needed. Checked
    # before the what-if opens: every return after that point goes through its rollback. Nodes held for other
    # jobs (``context.reserved``) count as the job's cycle counts them: not at all.
    _, free_now = gang.free_gpus(cache.arrays, context)
    if held is not None:
        free_now = _without(free_now, held)
    if usable is not None:
        free_now = free_now[: usable.shape[0]][usable[: free_now.shape[0]]]
    freeable = sum(p.gpu.count for c in ordered for p in c.pods if p.gpu.whole)
    if not ordered or (needs and int(free_now.sum()) + freeable < sum(needs)):
        return []
    token = snapshot.checkpoint()

    def remove(victim: Candidate) -> None:
        move(cache, snapshot, victim, away=True)

    def restore(victim: Candidate) -> None:
        move(cache, snapshot, victim, away=False)

    def fits() -> bool:
        inner = snapshot.checkpoint()
        try:
            if group is not None and group.segment_size:
                return gang.what_if_in_segments(scheduler, snapshot, group, job, context).status.ok
            return gang.what_if(scheduler, snapshot, job, context).status.ok
        finally:
            snapshot.rollback(inner)

    mask = context.topology_slots

    def enough_gpus() -> bool:
        # A cheap necessary condition before a what-if: enough whole free GPUs, in groups large enough.
        _, free = gang.free_gpus(snapshot.arrays, context)
        if mask is not None:
            size = min(mask.shape[0], free.shape[0])
            free = np.where(mask[:size], free[:size], 0)
        return not gang.whole_gpus_short(free, needs)

    try:
        if held is not None:
            occupy(snapshot, held)
        # Remove candidates in order until the job fits; the cheap check spares the what-if until the GPUs
        # freed could hold it. If it never fits, nothing is preempted.
        chosen: list[Candidate] = []
        for victim in ordered:
            if not victim.after <= {c.key for c in chosen} or not takeable(victim):
                continue  # an elastic gang's core goes only after all of its surplus
            remove(victim)
            chosen.append(victim)
            if enough_gpus() and fits():
                break
        else:
            return []
        # Put back every victim the job can do without, the most expensive first; a surplus member only with its
        # core (which came back first, or was never taken).
        for victim in sorted(chosen, key=put_back_order):
            if victim.surplus and any(c.key == victim.gang for c in chosen):
                continue
            restore(victim)
            if enough_gpus() and fits():
                chosen.remove(victim)
            else:
                remove(victim)
        return chosen
    finally:
        snapshot.rollback(token)


def _usable_slots(
    scheduler: Scheduler, snapshot: Snapshot, job: Sequence[PodRequest], context: Context
) -> np.ndarray | None:
    """Per node slot, whether a pod of ``job`` may go there once pods leave it: its cycle's filters did not refuse
    the node for a reason no eviction changes (as the filter declares it, ``Reason.eviction_helps``). None when they
    cannot tell: a pod refused before any node was looked at, or a node refused for what another node's pods do
    (``Reason.across_nodes``: anti-affinity, spread)."""
    usable = np.zeros(snapshot.arrays.slots, dtype=bool)
    shapes: set[object] = set()
    for pod in job:
        shape = memo.pod_shape(pod)
        if shape is not None and shape in shapes:
            continue  # a gang's members are mostly alike: one filter per kind of member
        shapes.add(shape)
        reasons = scheduler.filter(pod, snapshot, context).reasons
        if reasons is None or registry.REASONS.across_nodes(reasons).any():
            return None
        size = min(reasons.shape[0], usable.shape[0])
        usable[:size] |= ~registry.REASONS.unresolvable(reasons[:size])
    return usable


def _without(free: np.ndarray, held: np.ndarray) -> np.ndarray:
    """``free`` (per node slot) with nothing on the ``held`` node slots."""
    size = min(free.shape[0], held.shape[0])
    out = free.copy()
    out[:size][held[:size]] = 0
    return out


def _runs_on(cache: Cache, candidate: Candidate, usable: np.ndarray) -> bool:
    """Whether a pod of ``candidate`` runs on a node ``usable`` marks."""
    for pod in candidate.pods:
        entry = cache.pod(pod.key)
        if entry is not None and entry.placement.slot < usable.shape[0] and usable[entry.placement.slot]:
            return True
    return False


def find_victims_in_domain(
    scheduler: Scheduler,
    job: Sequence[PodRequest],
    *,
    level: int,
    priority: int,
    policy: str,
    candidates: Sequence[Candidate],
    context: Context = EMPTY,
    held: np.ndarray | None = None,
    surplus: Mapping[str, Mapping[str, float]] | None = None,
    snapshot: Snapshot | None = None,
    group: PodGroup | None = None,
    placed: Placements | None = None,
    ahead: Mapping[str, float] | None = None,
) -> list[Candidate]:
    """Victims all inside one domain of ``level`` whose eviction lets ``job`` fit inside that domain, or [].
    ``context`` and ``held`` as :func:`find_victims`' (a mask the context holds narrows every domain).

    Every domain whose free GPUs plus its candidates' GPUs could hold the job is tried; the one whose victims
    cost least (lowest top priority, then fewest GPUs, then fewest jobs) wins. A candidate with pods in two
    domains is never a victim: evicting it would free capacity the job cannot use as a whole.
    """
    if policy == NEVER:
        return []
    cache = scheduler.cache
    snapshot = snapshot if snapshot is not None else cache.snapshot()
    # The nodes its pods may use, told once for every domain (the domain's own bound is its mask).
    may_use = _usable_slots(scheduler, snapshot, job, EMPTY)
    if may_use is None:
        may_use = np.ones(snapshot.arrays.slots, dtype=bool)
    ids = cache.domain_ids()
    column = np.full(cache.arrays.slots, -1, dtype=np.int64)
    size = min(ids.shape[0], column.shape[0])
    column[:size] = ids[:size, level]
    usable, free = gang.free_gpus(cache.arrays, context)
    if held is not None:
        free = _without(free, held)
    outer = context.topology_slots
    if outer is not None:
        reach = min(outer.shape[0], usable.shape[0])
        usable[:reach] &= outer[:reach]
        usable[reach:] = False
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
            context=replace(context, topology_slots=inside),
            held=held,
            surplus=surplus,
            snapshot=snapshot,
            group=group,
            placed=placed,
            may_use=may_use,
            ahead=ahead,
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
