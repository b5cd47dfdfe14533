"""The move-plan search of consolidation: which running pods to move, and where, so that a pending job fits.

Everything is tried on one what-if of the cycle's snapshot: the pods of a candidate set are taken off their nodes,
the job is placed (a gang whole, inside one domain of the level its topology requires), then every moved pod is
placed again, never on the node it leaves nor on a node the caller bars (``barred``: background defragmentation's
whole nodes, and where earlier moves came from); a set for which all of that holds is a plan, and every what-if is
rolled back. Which pods may move at all (the rules: controller, Queue, annotation, priority, cooldown, budgets) and
where they may not go are the caller's (``scheduler.core.consolidation.moves``); here only the per-node and per-plan
budgets and
the disruption budgets bound the sets.

The plan kept moves the fewest pods, then the fewest GPUs, then is done at once rather than in steps, then leaves
the least fragmentation (the FGD paper's measure over the typical pods of the profile's ``fgd`` plugin). Sets are
tried node by node first: on each of the ``candidate_nodes`` nodes that need the fewest moves to hold the job's
largest member, every set of its movable pods up to the per-node budget, smallest first. A job that needs room on
several nodes (a gang) then gets the fewest-moves sets of the best nodes together, one node more at a time, and
every pod it can do without is put back.

Two rules shape what a plan may spend:

- **A plan buys more than it costs**: the GPUs its moved pods hold (whole and shared, in GPU-milli) are fewer than
  the job asks, and so are the pods it moves (each moved pod makes room for more than one GPU). Moving a 1-GPU pod
  so that a 1-GPU pod fits is a swap, not consolidation: it stops a running pod to place one no larger, where the
  moved pod itself had to find a place. A job of one GPU or less moves nothing: any GPU freed anywhere fits it.
  (The profile's ``planCost`` names this rule, ``FewerGPUsAndPods``, or another: :func:`buys_more_than_it_costs`.)
- **Most of a node is emptied directly**: for a member asking more than half of a node's GPUs, the node's set is
  also the one a person would pick: its movable pods largest first, the fewest that free enough (one set per node,
  not every subset), within ``maxPodsPerWholeNode`` pods instead of ``maxPodsPerNode`` and ``maxPodsPerPlan``.

The PodDisruptionBudgets decide how a set's evictions may go (:class:`Pace`, the caller's answer): all at once;
one at a time (a budget allows fewer of its pods at once than the set moves, but each eviction alone: the plan is
carried out in steps, in the order of its moves); or not at all (the set is left out).

A job waits through many cycles and searches at each one the cluster changed: what a search read that rests on one
node alone is kept for the next search of the same shape (:class:`Memo`): the ranking's reads of the nodes
(``room.Read``) and, per candidate node, its sets of pods that free enough there. Each is read again only where
what it rests on changed, so a search spends its time on the what-ifs and on the nodes that changed; its answer is
the one a search from scratch gives.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from scheduler.api.objects.pod import PodRequest
from scheduler.cache.state import PodEntry, Snapshot
from scheduler.core import gang
from scheduler.core.consolidation import room as move_room
from scheduler.core.cycle import Context, Scheduler
from scheduler.framework import fragmentation, typical
from scheduler.framework.interface import Decision
from scheduler.framework.profile import ConsolidationConfig
from scheduler.kernels import fgd as fgd_kernel
from scheduler.kernels import layout

#: Sets of one node's pods tried at most (the smallest first).
MAX_SETS_PER_NODE = 64
#: What-ifs one search runs at most (each places the job and every moved pod): a large cluster's search stays
#: bounded, and a job that finds nothing within it waits for the cluster to change.
MAX_ATTEMPTS = 128
#: Nodes ranked per node a search may try (``candidateNodes``): the scan for them stops there.
RANKED_PER_CANDIDATE = 4
#: A search's verdicts (:attr:`Found.verdict`).
PLAN, IMPOSSIBLE, OUT_OF_REACH = "plan", "impossible", "out of reach"
#: Job shapes whose searches' reads are kept at most (the one searched longest ago goes first).
MAX_SHAPES_KEPT = 32

#: A set of one node's pods as a search tries it: its size, the whole GPUs it holds, the pods.
TriedSet = tuple[int, int, tuple[PodEntry, ...]]


class Pace(enum.Enum):
    """How a set's evictions may go within the PodDisruptionBudgets."""

    #: Every eviction at once: the budgets allow them together.
    AT_ONCE = "at once"
    #: One eviction at a time, in the plan's order: a budget allows fewer of its pods at once, but each alone.
    IN_STEPS = "one at a time"


@dataclass(frozen=True, slots=True)
class Move:
    """One running pod moved: from ``source`` to ``target`` (its replacement's place)."""

    pod: PodRequest
    source: str
    target: str
    gpu_ids: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Plan:
    """The pods to move and where, and where the job goes once they have moved."""

    moves: tuple[Move, ...]
    job: tuple[Decision, ...]
    #: Whole GPUs the moved pods hold.
    gpus: int
    #: The cluster's fragmentation after the plan (GPU-milli; the FGD measure).
    fragmentation: float
    #: How its evictions go: at once, or one at a time in the order of ``moves`` (the budgets allow no more).
    pace: Pace = Pace.AT_ONCE

    def cost(self) -> tuple[int, int, bool, float]:
        """Fewest pods, then fewest GPUs, then a plan done at once before one done in steps (it is over sooner and
        holds its nodes for less), then the least fragmentation."""
        return (len(self.moves), self.gpus, self.pace is Pace.IN_STEPS, self.fragmentation)

    def describe(self) -> str:
        moved = ", ".join(f"{m.pod.key} {m.source} -> {m.target}" for m in self.moves)
        placed = ", ".join(f"{d.pod.key} on {d.node}" for d in self.job)
        steps = " one at a time, as the PodDisruptionBudgets allow" if self.pace is Pace.IN_STEPS else ""
        return f"move {len(self.moves)} pod(s) ({self.gpus} GPUs){steps}: {moved}; then {placed}"


@dataclass(frozen=True, slots=True)
class Found:
    """A search's answer: the plan, or why there is none."""

    plan: Plan | None
    why: str = ""
    #: What-ifs the search ran.
    attempts: int = 0
    #: :data:`PLAN`, :data:`IMPOSSIBLE` (no plan within the rules: a check proved it, or every set within the
    #: budgets was tried) or :data:`OUT_OF_REACH` (the search's bounds stopped it first).
    verdict: str = ""


def _kind(entry: PodEntry, snapshot: Snapshot) -> tuple[Any, ...]:
    """What makes moving one pod differ from moving another of the same node: its shape and priority, and what
    budgets read (namespace, labels); a shared GPU's pod also its devices (what it frees depends on who shares); on a
    node with NUMA zones, the zones it takes (two pods alike in two zones free different zones)."""
    pod = entry.pod
    gpu = pod.gpu
    who = (pod.namespace, tuple(sorted(pod.labels.items()))) if gpu.whole or not gpu.count else (pod.owner, pod.key)
    zones: tuple[Any, ...] = ()
    if snapshot.numa.nodes:
        zones = tuple(tuple(sorted(z.items())) for z in snapshot.numa_taken(pod.key, entry.placement.slot))
    return (
        who,
        gpu.count,
        gpu.milli,
        gpu.memory,
        gpu.models,
        tuple(sorted(pod.resources.items())),
        pod.priority,
        zones,
    )


def _kinds(entries: Sequence[PodEntry], snapshot: Snapshot) -> tuple[tuple[Any, ...], ...]:
    """What a set of one node's pods is, up to interchangeable pods (:func:`_kind`)."""
    return tuple(sorted(_kind(e, snapshot) for e in entries))


def _combinations(n: int, size: int) -> npt.NDArray[np.int64]:
    """Every set of ``size`` of ``n`` indices, one per row, in the order of ``itertools.combinations``."""
    if size == 1:
        return np.arange(n, dtype=np.int64).reshape(n, 1)
    if size == 2:
        return np.stack(np.triu_indices(n, 1), axis=1).astype(np.int64)
    return np.array(list(itertools.combinations(range(n), size)), dtype=np.int64).reshape(-1, size)


def _first_of_each_kind(sets: npt.NDArray[np.int64], kinds: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """The rows of ``sets`` (indices of pods whose kinds are ``kinds``) that are the first of their kind (the same
    kinds in any order), in their order."""
    if sets.shape[0] <= 1:
        return sets
    chosen = np.sort(kinds[sets], axis=1)
    base = int(kinds.max()) + 1
    if base ** sets.shape[1] < 2**62:  # each set's kinds as one number (digits in base ``base``): a faster unique
        codes = chosen @ (base ** np.arange(sets.shape[1], dtype=np.int64))
        _, first = np.unique(codes, return_index=True)
    else:
        _, first = np.unique(chosen, axis=0, return_index=True)
    first.sort()
    return sets[first]


def _cheapest_first(found: TriedSet) -> tuple[int, int, list[str]]:
    """The order one node's sets are tried in: fewest pods, then fewest whole GPUs, then by the pods' keys."""
    size, gpus, chosen = found
    return (size, gpus, [e.pod.key for e in chosen])


def _gpus(pods: Sequence[PodRequest]) -> int:
    return sum(p.gpu.count for p in pods if p.gpu.whole)


def _milli(pods: Sequence[PodRequest]) -> int:
    """The GPU-milli ``pods`` hold, whole GPUs and shares alike."""
    return sum(p.gpu.total_milli for p in pods)


def buys_more_than_it_costs(
    moved: Sequence[PodRequest], job: Sequence[PodRequest], rule: str = "FewerGPUsAndPods"
) -> bool:
    """Whether moving ``moved`` for ``job`` is within ``rule`` (``planCost``, ``profile.PLAN_COSTS``): by default it
    moves fewer GPUs than the job asks, and fewer pods than the whole GPUs it asks (each moved pod makes room for
    more than one GPU; so a job of one GPU or less moves nothing); ``FewerGPUsAndPodsOrOne`` lets a job of one GPU
    or less move one pod (smaller than itself); ``FewerGPUs`` keeps the GPUs part alone; ``Any`` allows any set."""
    if rule == "Any":
        return True
    asks = _milli(job)
    if _milli(moved) >= asks:
        return False
    if rule == "FewerGPUs":
        return True
    pods = asks // layout.WHOLE
    if rule == "FewerGPUsAndPodsOrOne":
        pods = max(pods, 2)
    return len(moved) < pods


@dataclass(slots=True)
class NodeSets:
    """The sets of a candidate node's pods that free enough there for the member (``room.sets_free_enough``), one of
    each kind, cheapest first, found for ``candidate`` (the same object while the ranking's read of the node holds:
    its pods, its row of the arrays)."""

    candidate: move_room.Candidate
    sets: list[TriedSet]
    #: The kinds of the pods that would empty the node (:meth:`Search._emptying`), once asked.
    emptied_kinds: tuple[tuple[Any, ...], ...] | None = None


@dataclass(slots=True)
class Kept:
    """What the searches for one job shape keep between them (see the module notes)."""

    reads: move_room.Reads = field(default_factory=move_room.Reads)
    #: Node slot -> its sets, as the last search that tried the node found them.
    sets: dict[int, NodeSets] = field(default_factory=dict)


class Memo:
    """What searches keep between them: the GPUs held on each node (``room.HeldMemo``) and, per job shape (what its
    members ask, the budgets), the reads of a :class:`Kept`; for the :data:`MAX_SHAPES_KEPT` shapes searched last."""

    def __init__(self) -> None:
        self.held: move_room.HeldMemo = {}
        self._shapes: dict[Hashable, Kept] = {}

    def of(self, shape: Hashable) -> Kept:
        """What the searches for ``shape`` kept (made empty the first time)."""
        kept = self._shapes.pop(shape, None)
        if kept is None:
            kept = Kept()
            while len(self._shapes) >= MAX_SHAPES_KEPT:
                del self._shapes[next(iter(self._shapes))]
        self._shapes[shape] = kept  # the last searched last
        return kept


class Search:
    """One search for one job on one snapshot (see the module notes)."""

    def __init__(
        self,
        scheduler: Scheduler,
        snapshot: Snapshot,
        members: Sequence[PodRequest],
        *,
        whole_gang: bool,
        context: Context,
        level: int | None,
        limits: ConsolidationConfig,
        pace: Callable[[Sequence[PodRequest]], Pace | None],
        confine: np.ndarray | None = None,
        barred: np.ndarray | None = None,
        memo: Memo | None = None,
    ) -> None:
        """``pace``: how evicting a set of pods may go within the PodDisruptionBudgets (None: not at all);
        ``confine``: the only node slots the job may go to (None: any); the moved pods are not confined.
        ``barred``: node slots no moved pod may go to (besides the node it leaves; the job may go there):
        background defragmentation bars the whole nodes and those pods left by a move whose cooldown runs
        (``Moves.barred_targets``), so that its plan undoes no earlier one. ``memo``: what searches keep between
        them (:class:`Memo`)."""
        self.scheduler = scheduler
        self.snapshot = snapshot
        self.members = list(members)
        self.whole_gang = whole_gang
        self.context = context
        #: What the moved pods' placements respect: the context, and the barred nodes.
        self.move_context = context
        if barred is not None and barred.any():
            away = np.zeros(snapshot.slots, dtype=bool)
            size = min(barred.shape[0], away.shape[0])
            away[:size] = barred[:size]
            previous = context.reserved
            if previous is not None:
                size = min(previous.shape[0], away.shape[0])
                away[:size] |= previous[:size]
            self.move_context = replace(context, reserved=away)
        self.level = level
        self.limits = limits
        self.pace = pace
        self.memo = memo
        #: What the searches for this job's shape kept (None without a memo).
        self.kept: Kept | None = None
        self.job_context = context
        if confine is not None:
            held = np.ones(snapshot.slots, dtype=bool)
            held[: confine.shape[0]] &= ~confine[: snapshot.slots]
            previous = context.reserved
            if previous is not None:
                size = min(previous.shape[0], held.shape[0])
                held[:size] |= previous[:size]
            self.job_context = replace(context, reserved=held)
        self._typical: fgd_kernel.TypicalPods | None = None
        #: Sets left out because their evictions would exceed a PodDisruptionBudget, even one at a time.
        self.over_budget = 0
        #: Sets left out because they would move as many GPUs (or pods) as the job asks GPUs, or more.
        self.no_gain = 0
        #: What-ifs run so far (at most :data:`MAX_ATTEMPTS`).
        self.attempts = 0
        #: Whether a bound of the search (sets per node, what-ifs, greedy sets across nodes) left sets untried.
        self.cut = False
        self.ranking: move_room.Ranking | None = None
        self.room: move_room.Room
        #: The member a set of one node's pods must make room for, and its request vector.
        self.bar: PodRequest
        self.bar_request: np.ndarray

    def run(
        self,
        movable_on: Callable[[int], list[PodEntry]],
        movable_known: Callable[[Sequence[int]], list[list[PodEntry] | None]] | None = None,
    ) -> Found:
        """Search; ``movable_on(slot)`` gives the pods of a node that may move; ``movable_known(slots)`` what it
        would give of each node without reading it again (None where it would; see ``room.rank``). The nodes are
        ranked by what moving their pods would free for the job's largest member
        (``scheduler.core.consolidation.room``), and what-ifs are run on at most ``candidate_nodes`` of them, fewest
        moves first."""
        found = self._run(movable_on, movable_known)
        return replace(found, attempts=self.attempts)

    def _run(
        self,
        movable_on: Callable[[int], list[PodEntry]],
        movable_known: Callable[[Sequence[int]], list[list[PodEntry] | None]] | None,
    ) -> Found:
        if self.limits.plan_cost == "FewerGPUsAndPods" and _milli(self.members) // layout.WHOLE <= 1:
            # Every set moves at least one pod, and this rule moves fewer pods than the whole GPUs the job asks: no
            # set is within it (a churn run's searches for pods of one GPU or less tried every node's sets first).
            return Found(
                None,
                "no set of movable pods may move for it: each would move as many GPUs or pods as the job asks GPUs,"
                " or more (a job of one GPU or less moves nothing under planCost FewerGPUsAndPods)",
                verdict=IMPOSSIBLE,
            )
        a = self.snapshot.arrays
        _, anywhere = gang.free_gpus(a, self.context)
        if _gpus(self.members) > int(anywhere.sum()):
            # Moves free no GPU in all: they only gather the free ones.
            return Found(
                None,
                f"the job needs {_gpus(self.members)} GPUs and the cluster has {int(anywhere.sum())} free",
                verdict=IMPOSSIBLE,
            )
        room = self.room = move_room.Room(self.snapshot, self.job_context, self.move_context)
        largest = max(self.members, key=lambda p: (p.gpu.count if p.gpu.whole else 0, p.gpu.total_milli, p.key))
        # A set of one node must free room for a member there: the job's only one, or a gang's smallest.
        self.bar = largest if len(self.members) == 1 else min(self.members, key=lambda p: (p.gpu.count, p.key))
        self.bar_request = self.snapshot.request_vector(self.bar)
        if self.memo is not None:
            limits = self.limits
            self.kept = self.memo.of(
                (
                    self.snapshot.request_vector(largest).tobytes(),
                    largest.gpu,
                    self.bar_request.tobytes(),
                    self.bar.gpu,
                    a.cap.shape,
                    a.gpu_free.shape,
                    limits.max_pods_per_node,
                    limits.max_pods_per_whole_node,
                    limits.max_pods_per_plan,
                )
            )
        ranking = move_room.rank(
            room,
            largest,
            movable_on,
            per_node=self.limits.max_pods_per_node,
            per_whole_node=self.limits.max_pods_per_whole_node,
            enough=RANKED_PER_CANDIDATE * self.limits.candidate_nodes,
            held_memo=self.memo.held if self.memo is not None else None,
            reads=self.kept.reads if self.kept is not None else None,
            movable_known=movable_known,
        )
        self.ranking = ranking
        if not ranking.movable_nodes:
            return Found(None, "no running pod may move for it", verdict=IMPOSSIBLE)
        if not ranking.candidates:
            return Found(
                None,
                f"no node can hold it by moving pods ({ranking.no_room} node(s) with movable pods would not hold it if "
                f"all of them left; {ranking.stranded} movable pod(s) fit on no other node)",
                verdict=IMPOSSIBLE,
            )
        best: Plan | None = None
        tried: list[move_room.Candidate] = []
        left = list(ranking.candidates)
        while left and len(tried) < self.limits.candidate_nodes and self.attempts < MAX_ATTEMPTS:
            candidate = left.pop(0)
            before = self.attempts
            plan = self._on_node(candidate, best)
            if self.attempts > before:
                tried.append(candidate)
            if plan is not None and (best is None or plan.cost() < best.cost()):
                best = plan
        if best is None and len(self.members) > 1:
            nodes = tried or ranking.candidates[: self.limits.candidate_nodes]
            best = self._across(
                [c.slot for c in nodes], {c.slot: c.entries for c in nodes}, {c.slot: c.moves for c in nodes}
            )
            self.cut = True  # sets across nodes are tried greedily, not all
        if best is not None:
            return Found(best, verdict=PLAN)
        bounded = bool(left) or self.cut or ranking.cut or self.attempts >= MAX_ATTEMPTS
        why = "no set of movable pods lets the job and every moved pod fit"
        if self.over_budget:
            why += (
                f" ({self.over_budget} set(s) left out: their evictions would exceed a PodDisruptionBudget, even one"
                " at a time)"
            )
        if self.no_gain:
            why += (
                f" ({self.no_gain} set(s) left out: they would move as many GPUs or pods as the job asks GPUs, or more)"
            )
        if bounded:
            why += (
                f" among the {len(tried)} best of {len(ranking.candidates)}{'+' if ranking.cut else ''} node(s)"
                " that could hold it"
                f" (within {MAX_ATTEMPTS} what-ifs, {self.limits.candidate_nodes} nodes)"
            )
        return Found(None, why, verdict=OUT_OF_REACH if bounded else IMPOSSIBLE)

    def _on_node(self, candidate: move_room.Candidate, best: Plan | None) -> Plan | None:
        """The cheapest set of the candidate node's movable pods whose moves let the job fit."""
        room, slot = self.room, candidate.slot
        found_sets = self._sets(candidate)
        # The other nodes must have room for the whole GPUs a set holds (``room.others_hold``).
        sets = [found for found in found_sets.sets if room.others_hold_gpus(slot, found[1])]
        if len(sets) > MAX_SETS_PER_NODE:
            self.cut = True
        trial = sets[:MAX_SETS_PER_NODE]
        emptied = self._emptying(candidate)
        if emptied is not None:
            if found_sets.emptied_kinds is None:
                found_sets.emptied_kinds = _kinds(emptied, self.snapshot)
            if found_sets.emptied_kinds not in {_kinds(c, self.snapshot) for *_, c in trial}:
                trial.append((len(emptied), _gpus([e.pod for e in emptied]), emptied))
                trial.sort(key=_cheapest_first)
        found: Plan | None = None
        for size, gpus, chosen in trial:
            if found is not None and (size, gpus) > (len(found.moves), found.gpus):
                break  # only sets as cheap as the first plan compete on fragmentation
            if best is not None and (size, gpus) > (len(best.moves), best.gpus):
                break
            if self.attempts >= MAX_ATTEMPTS:
                self.cut = True
                break
            plan = self.attempt(chosen, whole_node=chosen is emptied)
            if plan is not None and (found is None or plan.cost() < found.cost()):
                found = plan
        return found

    def _sets(self, candidate: move_room.Candidate) -> NodeSets:
        """The sets of the candidate node's pods within the per-node budget that free enough there for the member,
        one of each kind, cheapest first (kept for the next search while the node's read holds; not on a cluster
        with NUMA zones, where a pod's kind is also the zones it takes)."""
        kept = self.kept if not self.snapshot.numa.nodes else None
        known = kept.sets.get(candidate.slot) if kept is not None else None
        if known is not None and known.candidate is candidate:
            return known
        entries, slot = candidate.entries, candidate.slot
        # Each pod's kind read once, as a number: a set's kind is then its numbers sorted (a churn run's searches
        # spent a fifth of their time making the kinds of every set again from the pods).
        numbered: dict[tuple[Any, ...], int] = {}
        kinds = np.array([numbered.setdefault(_kind(e, self.snapshot), len(numbered)) for e in entries], dtype=np.int64)
        sets: list[TriedSet] = []
        held = self.room.held(entries)
        for size in range(1, min(self.limits.max_pods_per_node, self.limits.max_pods_per_plan, len(entries)) + 1):
            # Pods of one shape (and the same budgets) are interchangeable here: one set of each kind is tried, the
            # first of its kind in the order of itertools.combinations.
            distinct = _first_of_each_kind(_combinations(len(entries), size), kinds)
            # The sets' room checked together (what room.frees_enough says of each).
            fit = self.room.sets_free_enough(slot, self.bar_request, self.bar, held, distinct)
            for row in distinct[fit].tolist():
                chosen = tuple(entries[i] for i in row)
                sets.append((size, _gpus([e.pod for e in chosen]), chosen))
        sets.sort(key=_cheapest_first)
        found = NodeSets(candidate, sets)
        if kept is not None:
            kept.sets[slot] = found
        return found

    def _emptying(self, candidate: move_room.Candidate) -> tuple[PodEntry, ...] | None:
        """For a member asking most of the candidate node's GPUs: its movable pods largest first, the fewest that
        free enough for it (``candidate.moves`` of them, as ranked), within ``maxPodsPerWholeNode``; else None."""
        gpus_of_node = int(self.snapshot.arrays.gpu_count[candidate.slot])
        if not move_room.needs_most_of(self.bar, gpus_of_node):
            return None
        chosen = tuple(candidate.entries[: candidate.moves])
        if not 0 < len(chosen) <= self.limits.max_pods_per_whole_node:
            return None
        if not self.room.frees_enough(candidate.slot, self.bar_request, self.bar, chosen):
            return None
        if not self.room.others_hold(candidate.slot, chosen):
            return None
        return chosen

    def _across(self, nodes: list[int], by_slot: dict[int, list[PodEntry]], fewest: dict[int, int]) -> Plan | None:
        """The fewest-moves sets of the best nodes together, a node more at a time; then what it can do without."""
        chosen: list[PodEntry] = []
        plan: Plan | None = None
        for slot in nodes:
            entries = sorted(by_slot[slot], key=lambda e: (-e.pod.gpu.count, e.pod.key))
            room = self.limits.max_pods_per_plan - len(chosen)
            chosen.extend(entries[: min(room, fewest[slot])])
            plan = self.attempt(chosen)
            if plan is not None or len(chosen) >= self.limits.max_pods_per_plan:
                break
        if plan is None:
            return None
        for entry in sorted(chosen, key=lambda e: (e.pod.gpu.count, e.pod.key)):
            fewer = [e for e in chosen if e is not entry]
            smaller = self.attempt(fewer) if fewer else None
            if smaller is not None:
                chosen, plan = fewer, smaller
        return plan

    def attempt(self, chosen: Sequence[PodEntry], *, whole_node: bool = False) -> Plan | None:
        """The plan that moves ``chosen``, if the job and every moved pod fit; every change rolled back.
        ``whole_node``: ``chosen`` empties most of one node for the job (``maxPodsPerWholeNode`` bounds it)."""
        pods = [e.pod for e in chosen]
        most = self.limits.max_pods_per_whole_node if whole_node else self.limits.max_pods_per_plan
        if len(pods) > most or self.attempts >= MAX_ATTEMPTS:
            return None
        if not buys_more_than_it_costs(pods, self.members, self.limits.plan_cost):
            self.no_gain += 1
            return None
        pace = self.pace(pods)
        if pace is None:
            self.over_budget += 1
            return None
        self.attempts += 1
        snapshot, scheduler = self.snapshot, self.scheduler
        token = snapshot.checkpoint()
        try:
            for entry in chosen:
                snapshot.unplace(entry.placement)
            job = self._place_job()
            if job is None:
                return None
            moves = []
            for entry in sorted(chosen, key=lambda e: (-e.pod.gpu.count, e.pod.key)):
                away = np.zeros(snapshot.slots, dtype=bool)
                away[entry.placement.slot] = True
                held = self.move_context.reserved
                if held is not None:
                    size = min(held.shape[0], away.shape[0])
                    away[:size] |= held[:size]
                again = replace(entry.pod, node_name="", gpu_ids=(), phase="Pending")
                result = scheduler.place(again, snapshot, replace(self.move_context, reserved=away), explain=False)
                if result.decision is None:
                    return None
                target = scheduler.cache.slot_of(result.decision.node)
                assert target is not None
                snapshot.place(snapshot.placement(again, target, result.decision.gpu_ids))
                source = snapshot.names[entry.placement.slot] or ""
                moves.append(Move(entry.pod, source, result.decision.node, result.decision.gpu_ids))
            return Plan(tuple(moves), tuple(job), _gpus(pods), self._fragmentation(), pace)
        finally:
            snapshot.rollback(token)

    def _place_job(self) -> list[Decision] | None:
        """Place the job on the what-if (kept there); None if it does not fit."""
        snapshot, scheduler = self.snapshot, self.scheduler
        if not self.whole_gang:
            result = scheduler.place(self.members[0], snapshot, self.job_context, explain=False)
            if result.decision is None:
                return None
            slot = scheduler.cache.slot_of(result.decision.node)
            assert slot is not None
            snapshot.place(snapshot.placement(self.members[0], slot, result.decision.gpu_ids))
            return [result.decision]
        masks: list[np.ndarray | None] = [None]
        if self.level is not None:
            ids = snapshot.domain_ids()
            column = np.full(snapshot.slots, -1, dtype=np.int64)
            size = min(ids.shape[0], column.shape[0])
            column[:size] = ids[:size, self.level]
            masks = [column == d for d in np.unique(column[column >= 0]).tolist()]
        for mask in masks:
            inner = snapshot.checkpoint()
            context = self.job_context if mask is None else replace(self.job_context, topology_slots=mask)
            planned = gang.what_if(scheduler, snapshot, self.members, context)
            if planned.status.ok:
                snapshot.keep(inner)
                return planned.decisions
            snapshot.rollback(inner)
        return None

    def _fragmentation(self) -> float:
        a = self.snapshot.arrays
        if self._typical is None:
            fgd = next((s for s, _, _ in self.scheduler.framework.scorers if getattr(s, "name", "") == "fgd"), None)
            shapes = getattr(fgd, "shapes", None) or list(typical.GENERIC)
            self._typical = fragmentation.typical_arrays(shapes, self.snapshot.models)
        out = np.zeros(a.slots)
        fgd_kernel.fragmentation(a.cap, a.used, a.gpu_free, a.gpu_count, a.node_model, self._typical, out)
        return float(out.sum())
