"""The move-plan search of consolidation: which running pods to move, and where, so that a pending job fits.

Everything is tried on one what-if of the cycle's snapshot: the pods of a candidate set are taken off their nodes,
the job is placed (a gang whole, inside one domain of the level its topology requires), then every moved pod is
placed again, never on the node it leaves; a set for which all of that holds is a plan, and every what-if is
rolled back. Which pods may move at all (the rules: controller, Queue, annotation, priority, cooldown, budgets) is
the caller's (``scheduler.core.moves``); here only the per-node and per-plan budgets and the disruption budgets
bound the sets.

The plan kept moves the fewest pods, then the fewest GPUs, then leaves the least fragmentation (the FGD paper's
measure over the typical pods of the profile's ``fgd`` plugin). Sets are tried node by node first: on each of the
``candidate_nodes`` nodes that need the fewest moves to hold the job's largest member, every set of its movable
pods up to the per-node budget, smallest first. A job that needs room on several nodes (a gang) then gets the
fewest-moves sets of the best nodes together, one node more at a time, and every pod it can do without is put back.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from scheduler.api import typical
from scheduler.api.pod import PodRequest
from scheduler.cache.state import PodEntry, Snapshot
from scheduler.core import gang
from scheduler.core.cycle import Scheduler
from scheduler.framework import fragmentation
from scheduler.framework.interface import RESERVED_SLOTS, TOPOLOGY_SLOTS, Decision
from scheduler.framework.profile import ConsolidationConfig
from scheduler.kernels import fgd as fgd_kernel

#: Sets of one node's pods tried at most (the smallest first).
MAX_SETS_PER_NODE = 64
#: What-ifs one search runs at most (each places the job and every moved pod): a large cluster's search stays
#: bounded, and a job that finds nothing within it waits for the cluster to change.
MAX_ATTEMPTS = 128


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

    def cost(self) -> tuple[int, int, float]:
        return (len(self.moves), self.gpus, self.fragmentation)

    def describe(self) -> str:
        moved = ", ".join(f"{m.pod.key} {m.source} -> {m.target}" for m in self.moves)
        placed = ", ".join(f"{d.pod.key} on {d.node}" for d in self.job)
        return f"move {len(self.moves)} pod(s) ({self.gpus} GPUs): {moved}; then {placed}"


@dataclass(frozen=True, slots=True)
class Found:
    """A search's answer: the plan, or why there is none."""

    plan: Plan | None
    why: str = ""
    #: What-ifs the search ran.
    attempts: int = 0


def _kind(pod: PodRequest) -> tuple[Any, ...]:
    gpu = pod.gpu
    return (pod.owner, gpu.count, gpu.milli, gpu.memory, gpu.models, tuple(sorted(pod.resources.items())), pod.priority)


def _gpus(pods: Sequence[PodRequest]) -> int:
    return sum(p.gpu.count for p in pods if p.gpu.whole)


class Search:
    """One search for one job on one snapshot (see the module notes)."""

    def __init__(
        self,
        scheduler: Scheduler,
        snapshot: Snapshot,
        members: Sequence[PodRequest],
        *,
        whole_gang: bool,
        context: Mapping[str, Any],
        level: int | None,
        limits: ConsolidationConfig,
        within_budgets: Callable[[Sequence[PodRequest]], bool],
        confine: np.ndarray | None = None,
    ) -> None:
        """``confine``: the only node slots the job may go to (None: any); the moved pods are not confined."""
        self.scheduler = scheduler
        self.snapshot = snapshot
        self.members = list(members)
        self.whole_gang = whole_gang
        self.context = dict(context)
        self.level = level
        self.limits = limits
        self.within_budgets = within_budgets
        self.job_context = dict(context)
        if confine is not None:
            held = np.ones(snapshot.slots, dtype=bool)
            held[: confine.shape[0]] &= ~confine[: snapshot.slots]
            previous = self.context.get(RESERVED_SLOTS)
            if previous is not None:
                size = min(previous.shape[0], held.shape[0])
                held[:size] |= previous[:size]
            self.job_context[RESERVED_SLOTS] = held
        self._typical: fgd_kernel.TypicalPods | None = None
        #: Sets left out because their evictions together would exceed a PodDisruptionBudget.
        self.over_budget = 0
        #: What-ifs run so far (at most :data:`MAX_ATTEMPTS`).
        self.attempts = 0

    def run(self, movable_on: Callable[[int], list[PodEntry]]) -> Found:
        found = self._run(movable_on)
        return replace(found, attempts=self.attempts)

    def _run(self, movable_on: Callable[[int], list[PodEntry]]) -> Found:
        """Search; ``movable_on(slot)`` gives the pods of a node that may move. Nodes are looked at most free GPUs
        first, until twice ``candidate_nodes`` of them could hold the job's largest member after their moves (a
        large cluster's search does not read every pod)."""
        a = self.snapshot.arrays
        _, anywhere = gang.free_gpus(a, self.context)
        if _gpus(self.members) > int(anywhere.sum()):
            # Moves free no GPU in all: they only gather the free ones.
            return Found(
                None, f"the job needs {_gpus(self.members)} GPUs and the cluster has {int(anywhere.sum())} free"
            )
        usable, free = gang.free_gpus(a, self.job_context)
        needs = [p.gpu.count for p in self.members if p.gpu.whole]
        slots = np.flatnonzero(usable)
        order = slots[np.lexsort((slots, -free[slots]))]
        by_slot: dict[int, list[PodEntry]] = {}
        largest = max(needs, default=0)
        ranked: list[tuple[int, int, int]] = []  # (moves, GPUs moved, slot) to free ``largest`` GPUs on the slot
        for slot in order.tolist():
            entries = movable_on(slot)
            if not entries:
                continue
            by_slot[slot] = entries
            short = largest - int(free[slot])
            biggest = sorted((e.pod.gpu.count if e.pod.gpu.whole else 0 for e in entries), reverse=True)
            taken = np.cumsum([0, *biggest[: self.limits.max_pods_per_node]])
            enough = np.flatnonzero(taken >= short)
            if enough.size:
                k = max(1, int(enough[0]))
                ranked.append((k, int(taken[k]), slot))
                if len(ranked) >= 2 * self.limits.candidate_nodes:
                    break
        if not by_slot:
            return Found(None, "no running pod may move for it")
        if not ranked:
            return Found(
                None, f"no node can free {largest} GPUs by moving at most {self.limits.max_pods_per_node} pods"
            )
        ranked.sort()
        nodes = [slot for _, _, slot in ranked[: self.limits.candidate_nodes]]
        fewest = {slot: k for k, _, slot in ranked}
        best: Plan | None = None
        for slot in nodes:
            plan = self._on_node(by_slot[slot], best)
            if plan is not None and (best is None or plan.cost() < best.cost()):
                best = plan
        if best is None:
            best = self._across(nodes, by_slot, fewest)
        if best is None:
            why = "no set of movable pods lets the job and every moved pod fit"
            if self.over_budget:
                why += f" ({self.over_budget} set(s) left out: their evictions would exceed a PodDisruptionBudget)"
            if self.attempts >= MAX_ATTEMPTS:
                why += f" within {MAX_ATTEMPTS} what-ifs"
            return Found(None, why)
        return Found(best)

    def _on_node(self, entries: list[PodEntry], best: Plan | None) -> Plan | None:
        """The cheapest set of ``entries`` (pods of one node) whose moves let the job fit."""
        sets: list[tuple[int, int, tuple[PodEntry, ...]]] = []
        for size in range(1, min(self.limits.max_pods_per_node, self.limits.max_pods_per_plan, len(entries)) + 1):
            for chosen in itertools.combinations(entries, size):
                sets.append((size, _gpus([e.pod for e in chosen]), chosen))
        sets.sort(key=lambda s: (s[0], s[1], [e.pod.key for e in s[2]]))
        found: Plan | None = None
        seen: set[tuple[tuple[Any, ...], ...]] = set()
        for size, gpus, chosen in sets[:MAX_SETS_PER_NODE]:
            # Pods of one controller asking the same are interchangeable here: one set of each kind is tried.
            kind = tuple(sorted(_kind(e.pod) for e in chosen))
            if kind in seen:
                continue
            seen.add(kind)
            if found is not None and (size, gpus) > (len(found.moves), found.gpus):
                break  # only sets as cheap as the first plan compete on fragmentation
            if best is not None and (size, gpus) > (len(best.moves), best.gpus):
                break
            plan = self.attempt(chosen)
            if plan is not None and (found is None or plan.cost() < found.cost()):
                found = plan
        return found

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

    def attempt(self, chosen: Sequence[PodEntry]) -> Plan | None:
        """The plan that moves ``chosen``, if the job and every moved pod fit; every change rolled back."""
        pods = [e.pod for e in chosen]
        if len(pods) > self.limits.max_pods_per_plan or self.attempts >= MAX_ATTEMPTS:
            return None
        if not self.within_budgets(pods):
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
                held = self.context.get(RESERVED_SLOTS)
                if held is not None:
                    size = min(held.shape[0], away.shape[0])
                    away[:size] |= held[:size]
                again = replace(entry.pod, node_name="", gpu_ids=(), phase="Pending")
                result = scheduler.place(again, snapshot, {**self.context, RESERVED_SLOTS: away})
                if result.decision is None:
                    return None
                target = scheduler.cache.slot_of(result.decision.node)
                assert target is not None
                snapshot.place(snapshot.placement(again, target, result.decision.gpu_ids))
                source = snapshot.names[entry.placement.slot] or ""
                moves.append(Move(entry.pod, source, result.decision.node, result.decision.gpu_ids))
            return Plan(tuple(moves), tuple(job), _gpus(pods), self._fragmentation())
        finally:
            snapshot.rollback(token)

    def _place_job(self) -> list[Decision] | None:
        """Place the job on the what-if (kept there); None if it does not fit."""
        snapshot, scheduler = self.snapshot, self.scheduler
        if not self.whole_gang:
            result = scheduler.place(self.members[0], snapshot, self.job_context)
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
            context = self.job_context if mask is None else {**self.job_context, TOPOLOGY_SLOTS: mask}
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
