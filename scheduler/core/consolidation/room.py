"""Where a move plan could make room for a job: the nodes ranked by what moving their pods would free for it, and
the cheap checks that spare the search what-ifs that cannot succeed.

Every check here is a necessary condition only (it reads free capacity: CPU, memory, pod slots, extended resources
and free GPU devices; not GPU models, taints, affinities), so a check that says no is a proof that no what-if could
say yes, and one that says yes still leaves the answer to the what-if (``scheduler.core.consolidation.plan``):

- a moved pod whose shape fits on no other node (with what is free now) cannot be in any plan: it is left out of
  every set (``stranded``);
- a node on which the job's member would not fit even if every movable pod left it can hold no plan (``no_room``);
- a set of one node's pods that does not free enough on that node for the member, or whose whole GPUs outnumber the
  free whole GPUs of all the other nodes, is not tried.

A node's rank for the job is the fewest of its movable pods (taken largest first) that would free enough for the
member, then the whole GPUs they hold: the nodes needing the fewest moves first, whatever they have free now. A
member that asks more than half of a node's GPUs (:func:`needs_most_of`) may empty that node of up to
``per_whole_node`` pods, instead of ``per_node``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from scheduler.api.objects.pod import PodRequest
from scheduler.cache.state import PodEntry, Snapshot
from scheduler.core import gang
from scheduler.core.cycle import Context
from scheduler.kernels import layout

F64 = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Candidate:
    """A node a plan could make room on: its movable pods that could go elsewhere, and its rank."""

    slot: int
    entries: list[PodEntry]
    #: The fewest of ``entries`` (largest first) that free enough for the member.
    moves: int
    #: Whole GPUs those pods hold.
    gpus: int


@dataclass(frozen=True, slots=True)
class Held:
    """What some pods of one node hold, one row each: the resource columns compared as quantities, the GPU-milli per
    device of the node, the whole GPUs."""

    adds: F64
    devices: F64
    whole: npt.NDArray[np.int64]


#: Node slot -> (a list of its movable pods, the GPUs each of them holds, sorted): kept between searches, and read
#: while ``movable_on`` gives the same list (the same object: its memo holds).
HeldMemo = dict[int, tuple[list[PodEntry], list[int]]]


@dataclass(slots=True)
class Ranking:
    candidates: list[Candidate]
    #: Nodes with movable pods on which the member would not fit even if all of them (those of them that could go
    #: elsewhere; the largest within the per-node budget, for GPUs) left.
    no_room: int = 0
    #: Movable pods left out because their shape fits on no other node.
    stranded: int = 0
    #: Nodes with at least one movable pod.
    movable_nodes: int = 0
    #: Whether the scan stopped at ``enough`` candidates with nodes left unread.
    cut: bool = False


def needs_most_of(member: PodRequest, gpus_of_node: int) -> bool:
    """Whether ``member`` asks more than half of the whole GPUs of a node that has ``gpus_of_node``: room for it
    there means emptying most of the node, which no set of a few pods does."""
    return member.gpu.whole and 2 * member.gpu.count > gpus_of_node > 0


def _columns(width: int) -> npt.NDArray[np.int64]:
    """The resource columns compared as quantities (GPUs are compared device by device)."""
    return np.array([c for c in range(width) if c not in (layout.GPU_MILLI, layout.GPU_MEMORY)], dtype=np.int64)


class Room:
    """Free capacity of one snapshot, read once per search."""

    def __init__(self, snapshot: Snapshot, job_context: Context, context: Context) -> None:
        """``job_context``: what the job's placement respects (the nodes it may go to); ``context``: the moved
        pods' (they may go anywhere but their own node and what other plans hold)."""
        a = snapshot.arrays
        self.snapshot = snapshot
        self.job_usable, _ = gang.free_gpus(a, job_context)
        self.usable, self.whole = gang.free_gpus(a, context)
        self.cols = _columns(a.cap.shape[1])
        self.free = (a.cap - a.used)[:, self.cols]
        self.gpu_free = a.gpu_free
        self.total_whole = int(self.whole.sum())
        self._fits: dict[tuple[Any, ...], tuple[int, int]] = {}

    def fits_elsewhere(self, entry: PodEntry) -> bool:
        """Whether the pod of ``entry`` fits on some node other than its own with what is free now."""
        request, pod = entry.placement.request, entry.pod
        # The whole request is the key (its GPU columns follow from the rest): cheaper than taking the columns out,
        # for a search that reads a few thousand pods.
        key = (request.tobytes(), pod.gpu.count, pod.gpu.milli)
        hits = self._fits.get(key)
        if hits is None:
            mask = self.usable & (self.free >= request[self.cols] - 1e-9).all(axis=1)
            if pod.gpu.whole:
                mask &= self.whole >= pod.gpu.count
            elif pod.gpu.count:
                mask &= (self.gpu_free >= pod.gpu.milli).any(axis=1)
            found = np.flatnonzero(mask)
            hits = self._fits[key] = (int(found.size), int(found[0]) if found.size else -1)
        return hits[0] > 1 or (hits[0] == 1 and hits[1] != entry.placement.slot)

    def frees_enough(self, slot: int, request: F64, member: PodRequest, chosen: Sequence[PodEntry]) -> bool:
        """Whether ``member`` (its ``request``) would fit on ``slot`` by quantities if ``chosen`` left it."""
        free = self.free[slot].copy()
        devices = self.gpu_free[slot].copy()
        for entry in chosen:
            free += entry.placement.request[self.cols]
            for device in entry.placement.gpu_ids:
                devices[device] += layout.WHOLE if entry.pod.gpu.whole else entry.placement.gpu_milli
        if not (free >= request[self.cols] - 1e-9).all():
            return False
        gpu = member.gpu
        if gpu.whole:
            return int((devices >= layout.WHOLE).sum()) >= gpu.count
        if gpu.count:
            return bool((devices >= gpu.milli).any())
        return True

    def held(self, entries: Sequence[PodEntry]) -> Held:
        """What each of ``entries`` holds, for :meth:`sets_free_enough`."""
        adds = np.stack([e.placement.request[self.cols] for e in entries])
        devices = np.zeros((len(entries), self.gpu_free.shape[1]))
        whole = np.zeros(len(entries), dtype=np.int64)
        for i, entry in enumerate(entries):
            for device in entry.placement.gpu_ids:
                devices[i, device] += layout.WHOLE if entry.pod.gpu.whole else entry.placement.gpu_milli
            if entry.pod.gpu.whole:
                whole[i] = entry.pod.gpu.count
        return Held(adds, devices, whole)

    def sets_free_enough(
        self, slot: int, request: F64, member: PodRequest, held_by: Held, sets: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.bool_]:
        """Per set of one node's pods (the rows of ``sets``, indices into the pods ``held_by`` was read from, all of
        one size): whether :meth:`frees_enough` and :meth:`others_hold` both say yes of it, found for all the sets at
        once (the same sums, added in the same order)."""
        adds, devices, whole = held_by.adds, held_by.devices, held_by.whole
        count = sets.shape[0]
        free = np.tile(self.free[slot], (count, 1))
        freed = np.tile(self.gpu_free[slot], (count, 1))
        held = np.zeros(count, dtype=np.int64)
        for column in range(sets.shape[1]):
            free += adds[sets[:, column]]
            freed += devices[sets[:, column]]
            held += whole[sets[:, column]]
        ok = (free >= request[self.cols] - 1e-9).all(axis=1) & (held <= self.total_whole - int(self.whole[slot]))
        gpu = member.gpu
        if gpu.whole:
            ok &= (freed >= layout.WHOLE).sum(axis=1) >= gpu.count
        elif gpu.count:
            ok &= (freed >= gpu.milli).any(axis=1)
        return np.asarray(ok, dtype=bool)

    def others_hold(self, slot: int, chosen: Sequence[PodEntry]) -> bool:
        """Whether the other nodes have as many free whole GPUs as ``chosen`` (pods of ``slot``) hold."""
        gpus = sum(e.pod.gpu.count for e in chosen if e.pod.gpu.whole)
        return gpus <= self.total_whole - int(self.whole[slot])


def rank(
    room: Room,
    member: PodRequest,
    movable_on: Callable[[int], list[PodEntry]],
    *,
    per_node: int,
    per_whole_node: int = 0,
    enough: int,
    held_memo: HeldMemo | None = None,
) -> Ranking:
    """The nodes that could hold ``member`` after moves, fewest moves first (see the module notes). Nodes are read
    fewest GPUs short of the member first, until ``enough`` of them could hold it (a large cluster's search does
    not read every pod). On a node of which ``member`` asks most (:func:`needs_most_of`) up to ``per_whole_node``
    pods may move, if more than ``per_node``. ``held_memo``: the GPUs held on each node, kept between searches."""
    snapshot = room.snapshot
    a = snapshot.arrays
    request = snapshot.request_vector(member)
    cap = a.cap[:, room.cols]
    possible = room.job_usable & (cap >= request[room.cols] - 1e-9).all(axis=1)
    if member.gpu.count:
        possible &= a.gpu_count >= member.gpu.count
    out = Ranking([])
    ranked: list[tuple[int, int, int, Candidate]] = []
    slots = np.flatnonzero(possible)
    short = np.maximum(member.gpu.count - room.whole[slots], 0) if member.gpu.whole else np.zeros(slots.size)
    for slot in slots[np.lexsort((slots, short))].tolist():
        if len(ranked) >= enough:
            out.cut = True
            break
        entries = movable_on(slot)
        if not entries:
            continue
        out.movable_nodes += 1
        budget = per_node
        if needs_most_of(member, int(a.gpu_count[slot])):
            budget = max(per_node, per_whole_node)
        if member.gpu.whole:
            # No set within the budget frees more devices than its ``budget`` largest pods hold.
            known = held_memo.get(slot) if held_memo is not None else None
            if known is not None and known[0] is entries:
                held = known[1]
            else:
                held = sorted(e.pod.gpu.count if e.pod.gpu.whole else min(e.pod.gpu.count, 1) for e in entries)
                if held_memo is not None:
                    held_memo[slot] = (entries, held)
            if int(room.whole[slot]) + sum(held[-budget:]) < member.gpu.count:
                out.no_room += 1
                continue
        kept = [e for e in entries if room.fits_elsewhere(e)]
        out.stranded += len(entries) - len(kept)
        if not kept or not room.frees_enough(slot, request, member, kept):
            out.no_room += 1
            continue
        kept.sort(key=lambda e: (-(e.pod.gpu.count if e.pod.gpu.whole else 0), -e.pod.gpu.milli, e.pod.key))
        moves = len(kept)
        for k in range(1, min(budget, len(kept)) + 1):
            if room.frees_enough(slot, request, member, kept[:k]):
                moves = k
                break
        gpus = sum(e.pod.gpu.count for e in kept[:moves] if e.pod.gpu.whole)
        ranked.append((moves, gpus, slot, Candidate(slot, kept, moves, gpus)))
    ranked.sort(key=lambda r: r[:3])
    out.candidates = [c for *_, c in ranked]
    return out
