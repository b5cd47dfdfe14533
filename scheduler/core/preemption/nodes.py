"""Preemption for a single pod: victims on one node, as kube-scheduler's DefaultPreemption chooses them.

A single pod preempting within its queue gets victims on one node (:func:`node_victims`), from the candidates and
placements of ``scheduler.core.preemption.victims``: on each node, every lower-priority candidate is removed from a
what-if; if
the pod then fits there (judged on that node alone, ``Scheduler.fits_on``, as kube-scheduler filters the one
node), candidates are put back, the most important first (higher priority, then running longer), first those
whose eviction would exceed a PodDisruptionBudget, then the others, each kept if the pod still fits; what could
not be put back are the node's victims. The node is the one whose victims exceed the
fewest budgets, then with the lowest highest victim priority, the smallest sum of priorities, the fewest
victims, the latest start among its highest-priority victims, then the first by name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from scheduler.api.objects import pdb as api_pdb
from scheduler.api.objects.pod import PodRequest
from scheduler.cache.state import Snapshot
from scheduler.core import capacity, reason_texts, registry
from scheduler.core.cycle import NominatedPod, Scheduler
from scheduler.core.preemption import victims as reclaim
from scheduler.kernels import layout

#: kube-scheduler's DefaultPreemption defaults: nodes tried per search once one without budget violations is found
#: (``minCandidateNodesAbsolute``, and ``minCandidateNodesPercentage`` of the nodes that could help).
CANDIDATE_NODES = 100
CANDIDATE_NODES_PERCENT = 10
#: kube-scheduler's words for a node no eviction can help (refused for a reason no eviction changes, or not looked at)
#: and for a node without a pod the preemptor may evict (DefaultPreemption's node statuses).
NOT_HELPFUL = "Preemption is not helpful for scheduling"
NO_VICTIMS = "No preemption victims found for incoming pod"
#: gpusched's words for a node whose only pods the preemptor could evict have not run their queue's minimum run time.
YOUNG_VICTIMS = "No preemption victims past their queue's minimum run time"
#: Added to each victim's priority in the sum criterion (kube-scheduler's MaxInt32 + 1), so that more victims of
#: a negative priority never sum to less than fewer of them.
_PRIORITY_OFFSET = 2**31


@dataclass(slots=True)
class NodeVictims:
    """The victims on one node whose eviction lets a pod fit there, most important first."""

    node: str
    slot: int
    victims: list[reclaim.Candidate]
    #: How many victim pods exceed a PodDisruptionBudget.
    violations: int

    @property
    def pods(self) -> list[PodRequest]:
        return [pod for victim in self.victims for pod in victim.pods]

    def cost(self, rank: int) -> tuple[int, int, int, int, float, int]:
        """kube-scheduler's order of candidate nodes (smaller first); ``rank`` is the node's place by name."""
        pods = [(v.priority, v.started) for v in self.victims for _ in v.pods]
        top = max(p for p, _ in pods)
        earliest = min(started for p, started in pods if p == top)
        total = sum(p + _PRIORITY_OFFSET for p, _ in pods)
        return (self.violations, top, total, len(pods), -earliest, rank)


def more_important_first(candidates: Sequence[reclaim.Candidate]) -> list[reclaim.Candidate]:
    """Higher priority first, then the one running longer (kube-scheduler's MoreImportantPod), then by key."""
    return sorted(candidates, key=lambda c: (-c.priority, c.started, c.key))


def no_candidate(
    snapshot: Snapshot,
    pod: PodRequest,
    request: np.ndarray,
    *,
    priority: int,
    placed: reclaim.Placements,
    allowed: np.ndarray,
    reasons: np.ndarray | None,
    young: np.ndarray | None = None,
    scheduler: Scheduler | None = None,
) -> str:
    """kube-scheduler's PostFilter message when no node can make room for ``pod`` (:func:`node_victims` found none):
    ``preemption: 0/N nodes are available: ...``, the nodes of its failed cycle counted by why, as DefaultPreemption
    counts them: :data:`NOT_HELPFUL` on a node refused for a reason no eviction changes (``Reason.eviction_helps``,
    or too small for the pod even empty, as kube-scheduler's NodeResourcesFit calls a request above allocatable
    unresolvable; every node when the pod was refused before any node was looked at), :data:`NO_VICTIMS` on a node
    without a candidate ``allowed`` of lower priority than ``priority``, else what the node refused the pod for
    (evicting all it may evict there did not make room; the cycle's own reason stands for the filter's after the
    evictions). ``request``: the pod's request vector (``Cache.request_vector``). ``young``: per candidate, one it
    may not evict yet for its queue's minimum run time: a node with such but no other victims says
    :data:`YOUNG_VICTIMS`. ``scheduler``: on a node with NUMA zones, the reason stands as its filters give it with
    every pod the preemptor may evict there gone (:func:`_after_evictions`), as kube-scheduler tells the filters'
    verdict after its victims are removed: a node with room enough once they leave, but in no one zone, says the
    kubelet's refusal (``no NUMA zone has 4 nvidia.com/gpu (single-numa-node)``), not the cycle's ``Insufficient``."""
    if reasons is None:
        nodes = int((snapshot.arrays.base_reason != layout.ABSENT).sum())
        return f"preemption: 0/{nodes} nodes are available: {nodes} {NOT_HELPFUL}." if nodes else ""
    present = reasons != layout.ABSENT
    nodes = int(present.sum())
    if not nodes:
        return ""
    allowed = allowed & (placed.priority < priority) & ~placed.behind
    entries = allowed[placed.owner]
    size = reasons.shape[0]
    slots = placed.slot[entries]
    victims = np.bincount(slots[slots < size], minlength=size)[:size] > 0
    not_helpful = present & (registry.REASONS.unresolvable(reasons) | (reasons == layout.FIT))
    room = capacity.room_when_empty(snapshot, pod, request)
    too_small = np.zeros(size, dtype=bool)
    too_small[: min(size, room.shape[0])] = ~room[:size]
    not_helpful |= present & too_small
    no_victims = present & ~not_helpful & ~victims
    young_only = np.zeros(size, dtype=bool)
    if young is not None and young.any():
        young = young & (placed.priority < priority) & ~placed.behind
        slots = placed.slot[young[placed.owner]]
        young_only = no_victims & (np.bincount(slots[slots < size], minlength=size)[:size] > 0)
        no_victims &= ~young_only
    counts: dict[str, int] = {}
    for text, count in (
        (NOT_HELPFUL, int(not_helpful.sum())),
        (NO_VICTIMS, int(no_victims.sum())),
        (YOUNG_VICTIMS, int(young_only.sum())),
    ):
        if count:
            counts[text] = count
    rest = present & ~not_helpful & ~no_victims & ~young_only
    if scheduler is not None and snapshot.numa.nodes:
        for text, count in _after_evictions(scheduler, snapshot, pod, placed, allowed, rest).items():
            counts[text] = counts.get(text, 0) + count
    codes, numbers = np.unique(reasons[rest], return_counts=True)
    for code, count in zip(codes.tolist(), numbers.tolist(), strict=True):
        text = reason_texts.reason_text(int(code), snapshot.columns)
        counts[text] = counts.get(text, 0) + int(count)
    # Ordered as the cycle's own sentence orders its reasons (``cycle.Diagnosis``): most nodes first, then by text.
    parts = ", ".join(f"{n} {text}" for text, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    return f"preemption: 0/{nodes} nodes are available: {parts}."


def _after_evictions(
    scheduler: Scheduler,
    snapshot: Snapshot,
    pod: PodRequest,
    placed: reclaim.Placements,
    allowed: np.ndarray,
    rest: np.ndarray,
) -> dict[str, int]:
    """On the nodes ``rest`` marks that publish NUMA zones, why the pod is refused with every candidate ``allowed``
    there gone, counted by text; each node counted here is taken out of ``rest`` (its cycle's reason no longer
    stands). A node where the pod then passes every filter keeps its cycle's reason (what stopped the search there
    was another check of :func:`node_victims`)."""
    out: dict[str, int] = {}
    cache, names, store = scheduler.cache, snapshot.names, snapshot.numa
    for slot in np.flatnonzero(rest).tolist():
        name = names[slot] if slot < len(names) else None
        if name is None or name not in store.nodes:
            continue
        token = snapshot.checkpoint()
        try:
            for i in placed.by_slot.get(slot, ()):
                if allowed[i]:
                    reclaim.move(cache, snapshot, placed.candidates[i], away=True)
            reasons = scheduler.filter(pod, snapshot, only=slot).reasons
            if reasons is None or slot >= reasons.shape[0] or reasons[slot] == layout.FIT:
                continue
            text = reason_texts.node_text(snapshot, pod, int(reasons[slot]), slot)
        finally:
            snapshot.rollback(token)
        out[text] = out.get(text, 0) + 1
        rest[slot] = False
    return out


def node_victims(
    scheduler: Scheduler,
    pod: PodRequest,
    *,
    priority: int,
    placed: reclaim.Placements,
    allowed: np.ndarray,
    budgets: Sequence[api_pdb.DisruptionBudget] = (),
    snapshot: Snapshot | None = None,
    reasons: np.ndarray | None = None,
    offset: int = 0,
    held: np.ndarray | None = None,
    nominated: Sequence[NominatedPod] = (),
) -> NodeVictims | None:
    """The node and victims that let ``pod`` fit with the least disruption (see the module notes), or None.

    Only the candidates of ``placed`` that ``allowed`` (per candidate) lets through and of lower priority than
    ``priority`` are victims. A candidate with pods on several nodes (a gang) is removed whole wherever it runs, and
    counted on each node it touches; an elastic gang's core only once its surplus is gone (its surplus members are
    candidates of their own). ``reasons``: per node slot, why the pod's failed cycle refused the node; a node refused
    for a reason no eviction can change (``Reason.eviction_helps``) is not tried. The nodes are tried in name order from
    the ``offset``-th on (modulo their number), as kube-scheduler starts at a random one. ``held``: per node slot,
    whether it is nominated whole for another job of the pod's priority or higher (not tried). ``nominated``: the
    single pods nominated for others of the pod's priority or higher, counted on their nodes as the pod's cycle
    counts them (kube-scheduler adds them to the node before it looks for victims there): their requests, and the
    devices they will take there (``Scheduler.add_nominated``)."""
    cache = scheduler.cache
    a = cache.arrays
    allowed = allowed & (placed.priority < priority) & ~placed.behind
    if not allowed.any():
        return None
    request = cache.request_vector(pod)
    columns = a.cap.shape[1]
    if request[columns:].any():
        return None  # a resource no node has
    request = request[:columns]
    plain = np.ones(columns, dtype=bool)
    plain[[layout.GPU_MILLI, layout.GPU_MEMORY]] = False  # devices are the what-if's to judge
    # Nodes worth a what-if: in the cluster, not refused for a reason no eviction changes, with a victim there.
    worth = a.base_reason == layout.FIT
    if reasons is not None:
        size = min(reasons.shape[0], worth.shape[0])
        worth[:size] &= ~registry.REASONS.unresolvable(reasons[:size])
        worth[size:] = False  # came after the cycle: tried next time
    if held is not None:
        size = min(held.shape[0], worth.shape[0])
        worth[:size] &= ~held[:size]
    taken = allowed[placed.owner] & worth[placed.slot]
    # What those nodes would have free with all their candidates gone: a necessary condition before any what-if,
    # from arrays (no loop over the candidates); whole GPUs first, the most telling for most pods.
    if pod.gpu.whole and taken.any():
        free = (a.gpu_free >= layout.WHOLE).sum(axis=1)
        whole = np.bincount(placed.slot[taken], weights=placed.whole[taken], minlength=a.slots)[: a.slots]
        worth &= free + whole >= pod.gpu.count
        taken &= worth[placed.slot]
    if not taken.any():
        return None
    slots = placed.slot[taken]
    rows = placed.rows[taken]
    room = a.cap - a.used
    by_slot: dict[int, list[NominatedPod]] = {}
    for other in nominated:
        if other.slot < a.slots:
            by_slot.setdefault(other.slot, []).append(other)
            room[other.slot, : other.request.shape[0]] -= other.request
    for column in np.flatnonzero(plain[: rows.shape[1]]).tolist():
        room[:, column] += np.bincount(slots, weights=rows[:, column], minlength=a.slots)[: a.slots]
    enough_room = worth & np.all(room[:, plain] >= request[plain] - 1e-9, axis=1)
    enough_room &= np.bincount(slots, minlength=a.slots)[: a.slots] > 0
    rank = cache.name_rank()
    helpful = np.flatnonzero(enough_room)
    if helpful.shape[0] == 0:
        return None
    helpful = helpful[np.argsort(rank[helpful], kind="stable")]
    potential: list[int] = np.roll(helpful, -(offset % helpful.shape[0])).tolist()
    enough = max(CANDIDATE_NODES, len(potential) * CANDIDATE_NODES_PERCENT // 100)
    snapshot = snapshot if snapshot is not None else cache.snapshot()
    token = snapshot.checkpoint()

    def remove(victim: reclaim.Candidate) -> None:
        reclaim.move(cache, snapshot, victim, away=True)

    def restore(victim: reclaim.Candidate) -> None:
        reclaim.move(cache, snapshot, victim, away=False)

    trial = snapshot.arrays
    # ``short``'s comparisons one column at a time, on the same values as the arrays' (a node's row is a few columns:
    # numpy's per-call cost, not the arithmetic, was most of the search).
    checked = [(int(c), float(request[c]) - 1e-9) for c in np.flatnonzero(plain)]
    whole_gpus = pod.gpu.count if pod.gpu.whole else 0

    def short(used: np.ndarray, gpu_free: np.ndarray, slot: int) -> bool:
        # The node's free resources and whole GPUs: a necessary condition, where most put-backs fail.
        cap = trial.cap[slot]
        if any(cap[c] - used[c] < need for c, need in checked):
            return True
        return bool(whole_gpus) and int((gpu_free >= layout.WHOLE).sum()) < whole_gpus

    def fits(slot: int) -> bool:
        return not short(trial.used[slot], trial.gpu_free[slot], slot) and scheduler.fits_on(pod, snapshot, slot)

    def short_with(victim: reclaim.Candidate, slot: int) -> bool:
        # ``short`` on the node as putting ``victim`` back would leave it, without putting it back (the same sums in
        # the same order as the arrays' own): a victim that must stay costs no move there and back.
        used, gpu_free = trial.used[slot].copy(), trial.gpu_free[slot]
        if whole_gpus:
            gpu_free = gpu_free.copy()
        for pod in victim.pods:
            entry = cache.pod(pod.key)
            if entry is not None and entry.placement.slot == slot:
                placement = entry.placement
                used[: placement.request.shape[0]] += placement.request
                if whole_gpus:  # read only then
                    for device in placement.gpu_ids:
                        gpu_free[device] -= placement.gpu_milli
        return short(used, gpu_free, slot)

    found: list[NodeVictims] = []
    try:
        for slot in potential:
            local = more_important_first([placed.candidates[i] for i in placed.by_slot[slot] if allowed[i]])
            inner = snapshot.checkpoint()
            try:
                for other in by_slot.get(slot, ()):
                    scheduler.add_nominated(other, snapshot)
                for victim in local:
                    remove(victim)
                if not fits(slot):
                    continue
                flags = api_pdb.violating([(p.namespace, p.name, p.labels) for v in local for p in v.pods], budgets)
                exceeding: dict[str, int] = {}
                at = 0
                for victim in local:
                    count = sum(flags[at : at + len(victim.pods)])
                    at += len(victim.pods)
                    if count:
                        exceeding[victim.key] = count
                victims: list[reclaim.Candidate] = []
                violations = 0
                # Put back the budget-protected first: what cannot be spared of them costs a violation each.
                ordered = [v for v in local if v.key in exceeding] + [v for v in local if v.key not in exceeding]
                for victim in ordered:
                    if not short_with(victim, slot):
                        restore(victim)
                        if scheduler.fits_on(pod, snapshot, slot):
                            continue
                        remove(victim)
                    victims.append(victim)
                    violations += exceeding.get(victim.key, 0)
            finally:
                snapshot.rollback(inner)
            if not victims:
                continue  # it fits there as things are: the cycle's own choice, not preemption's
            name = snapshot.names[slot]
            assert name is not None
            found.append(NodeVictims(name, slot, more_important_first(victims), violations))
            if len(found) >= enough and any(f.violations == 0 for f in found):
                break
    finally:
        snapshot.rollback(token)
    if not found:
        return None
    return min(found, key=lambda f: f.cost(int(rank[f.slot])))
