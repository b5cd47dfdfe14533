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

What the ranking found on a node for a member's shape is kept (:class:`Read`) and read again only when something it
rests on changed: the node's movable pods (the list ``movable_on`` gives), its row of the arrays (its generation),
its free whole GPUs within the context, or whether one of its pods' shapes fits on some other node. A search runs at
every cycle a job waits, and between two of them few nodes change (a churn run's searches found 88% of the nodes
they read as they were).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

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
    device of the node (the whole GPUs a set holds are the search's to count: :meth:`Room.others_hold_gpus`)."""

    adds: F64
    devices: F64


#: Node slot -> (a list of its movable pods, the GPUs each of them holds, sorted): kept between searches, and read
#: while ``movable_on`` gives the same list (the same object: its memo holds).
HeldMemo = dict[int, tuple[list[PodEntry], list[int]]]

#: What a pod's shape is to :meth:`Room.fits_elsewhere`: its request vector, GPU count and milli.
FitKey = tuple[bytes, int, int]


@dataclass(frozen=True, slots=True)
class Read:
    """What :func:`rank` found on one node for one member's shape, and what that rests on besides the node's row of
    the arrays (kept by :class:`Reads`)."""

    #: The node's movable pods (the list ``movable_on`` gave: while it gives the same object, they are the same).
    entries: list[PodEntry]
    #: The shapes of its pods that were asked whether they fit on another node (none when the node was ruled out by
    #: its GPUs alone, or has no movable pod).
    asked: tuple[FitKey, ...]
    #: Movable pods left out because their shape fits on no other node.
    stranded: int
    #: The node as a candidate; None if it could not hold the member.
    candidate: Candidate | None


#: :attr:`Reads.kind` of a node: never read (or what its read rests on changed), no movable pod, could not hold
#: the member, a candidate.
UNREAD, NO_MOVABLE, NO_ROOM, CANDIDATE = -1, 0, 1, 2


class Reads:
    """What :func:`rank` found on each node for one member's shape, kept between searches, with what each read
    rests on: the node's movable pods (the same list), its generation in the arrays and its free whole GPUs within
    the context (per node, as arrays, so that a search finds the nodes that changed at once), and for each shape of
    its pods that was asked, where that shape fit then (a change marks every node that asked it)."""

    def __init__(self) -> None:
        self.by_slot: dict[int, Read] = {}
        self.kind = np.zeros(0, dtype=np.int8)
        self.gen = np.zeros(0, dtype=np.int64)
        self.whole = np.zeros(0, dtype=np.int64)
        self.stranded = np.zeros(0, dtype=np.int64)
        #: Shape -> (a pod of it, where it fit then (:func:`_answers`), the node slots that asked it).
        self.fits: dict[FitKey, tuple[PodEntry, tuple[int, int], set[int]]] = {}

    def size_to(self, slots: int) -> None:
        """Make room for ``slots`` node slots (new ones unread)."""
        have = self.kind.shape[0]
        if slots <= have:
            return
        self.kind = np.concatenate([self.kind, np.full(slots - have, UNREAD, dtype=np.int8)])
        self.gen = np.concatenate([self.gen, np.zeros(slots - have, dtype=np.int64)])
        self.whole = np.concatenate([self.whole, np.zeros(slots - have, dtype=np.int64)])
        self.stranded = np.concatenate([self.stranded, np.zeros(slots - have, dtype=np.int64)])

    def keep(self, room: Room, slot: int, gen: int, read: Read) -> None:
        """``read`` is what ``slot`` (its generation ``gen``) gives now."""
        self.by_slot[slot] = read
        self.kind[slot] = NO_MOVABLE if not read.entries else NO_ROOM if read.candidate is None else CANDIDATE
        self.gen[slot] = gen
        self.whole[slot] = room.whole[slot]
        self.stranded[slot] = read.stranded
        for key in read.asked:
            known = self.fits.get(key)
            if known is None:
                entry = next(e for e in read.entries if room.fit_key(e) == key)
                known = self.fits[key] = (entry, _answers(room.hits(entry, key)), set())
            known[2].add(slot)

    def refresh(self, room: Room) -> None:
        """Mark unread every node that asked about a shape whose answer may differ now (it fits on other nodes)."""
        if not self.fits:
            return
        found = room.hits_all([(entry, key) for key, (entry, _, _) in self.fits.items()])
        for (key, (_, then, asked)), now in zip(list(self.fits.items()), found, strict=True):
            if _answers(now) != then:
                self.kind[list(asked)] = UNREAD
                del self.fits[key]  # asked again by the nodes read again


def _answers(hits: tuple[int, int]) -> tuple[int, int]:
    """What :meth:`Room.fits_elsewhere` answers on every node, given its shape's :meth:`Room.hits`: on two nodes or
    more, yes everywhere; on one, yes but there; on none, no."""
    count, first = hits
    return (min(count, 2), first if count == 1 else -1)


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
        self._fits: dict[FitKey, tuple[int, int]] = {}

    @staticmethod
    def fit_key(entry: PodEntry) -> FitKey:
        """The shape of ``entry``'s pod as far as :meth:`fits_elsewhere` is concerned."""
        # The whole request is the key (its GPU columns follow from the rest): cheaper than taking the columns out,
        # for a search that reads a few thousand pods.
        return (entry.placement.request.tobytes(), entry.pod.gpu.count, entry.pod.gpu.milli)

    def fits_elsewhere(self, entry: PodEntry, key: FitKey | None = None) -> bool:
        """Whether the pod of ``entry`` (its :meth:`fit_key`, if known) fits on some node other than its own with
        what is free now."""
        count, first = self.hits(entry, self.fit_key(entry) if key is None else key)
        return count > 1 or (count == 1 and first != entry.placement.slot)

    def hits(self, entry: PodEntry, key: FitKey) -> tuple[int, int]:
        """Where the shape ``key`` of ``entry``'s pod fits with what is free now: on how many nodes, and the first of
        them (-1 if none)."""
        hits = self._fits.get(key)
        if hits is None:
            hits = self.hits_all([(entry, key)])[0]
        return hits

    def hits_all(self, asked: Sequence[tuple[PodEntry, FitKey]]) -> list[tuple[int, int]]:
        """:meth:`hits` of each shape of ``asked`` (a pod of it, its key), those not known yet found together."""
        todo = [(entry, key) for entry, key in asked if key not in self._fits]
        if todo:
            requests = np.stack([entry.placement.request[self.cols] for entry, _ in todo])
            masks = (self.free[np.newaxis] >= requests[:, np.newaxis, :] - 1e-9).all(axis=2) & self.usable
            for mask, (entry, key) in zip(masks, todo, strict=True):
                gpu = entry.pod.gpu
                if gpu.whole:
                    mask &= self.whole >= gpu.count
                elif gpu.count:
                    mask &= (self.gpu_free >= gpu.milli).any(axis=1)
                found = np.flatnonzero(mask)
                self._fits[key] = (int(found.size), int(found[0]) if found.size else -1)
        return [self._fits[key] for _, key in asked]

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
        for i, entry in enumerate(entries):
            for device in entry.placement.gpu_ids:
                devices[i, device] += layout.WHOLE if entry.pod.gpu.whole else entry.placement.gpu_milli
        return Held(adds, devices)

    def sets_free_enough(
        self, slot: int, request: F64, member: PodRequest, held_by: Held, sets: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.bool_]:
        """Per set of one node's pods (the rows of ``sets``, indices into the pods ``held_by`` was read from, all of
        one size): whether :meth:`frees_enough` says yes of it, found for all the sets at once (the same sums, added
        in the same order). What it reads of the cluster is the node's row alone (:meth:`others_hold` is the other
        nodes' part)."""
        adds, devices = held_by.adds, held_by.devices
        count = sets.shape[0]
        free = np.tile(self.free[slot], (count, 1))
        freed = np.tile(self.gpu_free[slot], (count, 1))
        for column in range(sets.shape[1]):
            free += adds[sets[:, column]]
            freed += devices[sets[:, column]]
        ok = (free >= request[self.cols] - 1e-9).all(axis=1)
        gpu = member.gpu
        if gpu.whole:
            ok &= (freed >= layout.WHOLE).sum(axis=1) >= gpu.count
        elif gpu.count:
            ok &= (freed >= gpu.milli).any(axis=1)
        return np.asarray(ok, dtype=bool)

    def others_hold(self, slot: int, chosen: Sequence[PodEntry]) -> bool:
        """Whether the other nodes have as many free whole GPUs as ``chosen`` (pods of ``slot``) hold."""
        return self.others_hold_gpus(slot, sum(e.pod.gpu.count for e in chosen if e.pod.gpu.whole))

    def others_hold_gpus(self, slot: int, gpus: int) -> bool:
        """Whether the nodes other than ``slot`` have ``gpus`` free whole GPUs."""
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
    reads: Reads | None = None,
    movable_known: Callable[[Sequence[int]], list[list[PodEntry] | None]] | None = None,
) -> Ranking:
    """The nodes that could hold ``member`` after moves, fewest moves first (see the module notes). Nodes are read
    fewest GPUs short of the member first, until ``enough`` of them could hold it (a large cluster's search does
    not read every pod). On a node of which ``member`` asks most (:func:`needs_most_of`) up to ``per_whole_node``
    pods may move, if more than ``per_node``. ``held_memo``: the GPUs held on each node, kept between searches.
    ``reads``: what earlier rankings for a member of this shape (the same request, the same budgets) found on each
    node, taken again where it still holds (``movable_known`` says where ``movable_on`` would give the same pods
    without reading the node), and kept up to date: the ranking is the one read from scratch."""
    snapshot = room.snapshot
    a = snapshot.arrays
    request = snapshot.request_vector(member)
    cap = a.cap[:, room.cols]
    possible = room.job_usable & (cap >= request[room.cols] - 1e-9).all(axis=1)
    if member.gpu.count:
        possible &= a.gpu_count >= member.gpu.count
    slots = np.flatnonzero(possible)
    short = np.maximum(member.gpu.count - room.whole[slots], 0) if member.gpu.whole else np.zeros(slots.size)
    order = slots[np.lexsort((slots, short))]

    def read(slot: int, entries: list[PodEntry]) -> Read:
        return _read(room, member, request, slot, entries, per_node, per_whole_node, held_memo)

    if reads is None or movable_known is None:
        return _rank_afresh(order.tolist(), movable_on, read, enough)
    reads.size_to(a.slots)
    reads.refresh(room)
    listed = order.tolist()
    known = movable_known(listed)
    by_slot = reads.by_slot
    same = np.fromiter(
        (
            entries is not None and (kept := by_slot.get(slot)) is not None and kept.entries is entries
            for slot, entries in zip(listed, known, strict=True)
        ),
        dtype=bool,
        count=len(listed),
    )
    # Where the node's row and its free whole GPUs are as they were and its pods' shapes fit where they did.
    stays = (
        (reads.kind[order] != UNREAD) & (reads.gen[order] == a.gen[order]) & (reads.whole[order] == room.whole[order])
    )
    same &= stays
    # The nodes read again, in the ranking's order, until ``enough`` candidates come before the next one.
    found = (reads.kind[order] == CANDIDATE) & same
    found_before = np.cumsum(found) - found
    found_again = 0
    for at in np.flatnonzero(~same).tolist():
        if int(found_before[at]) + found_again >= enough:
            break
        slot = listed[at]
        entries = known[at]
        if entries is None:
            entries = movable_on(slot)
            kept = by_slot.get(slot)
            if kept is not None and kept.entries is entries and stays[at]:
                found_again += kept.candidate is not None  # read again, its movable pods are the same ones
                continue
        got = read(slot, entries) if entries else Read(entries, (), 0, None)
        reads.keep(room, slot, int(a.gen[slot]), got)
        found_again += got.candidate is not None
    kinds = reads.kind[order]
    at_candidates = np.flatnonzero(kinds == CANDIDATE)
    out = Ranking([])
    read_up_to = len(listed)
    if at_candidates.size >= enough:
        read_up_to = int(at_candidates[enough - 1]) + 1 if enough > 0 else 0
        out.cut = read_up_to < len(listed)
    kinds = kinds[:read_up_to]
    out.movable_nodes = int((kinds >= NO_ROOM).sum())
    out.no_room = int((kinds == NO_ROOM).sum())
    out.stranded = int(reads.stranded[order[:read_up_to]].sum())
    ranked = []
    for slot in order[:read_up_to][kinds == CANDIDATE].tolist():
        candidate = by_slot[slot].candidate
        assert candidate is not None
        ranked.append((candidate.moves, candidate.gpus, slot, candidate))
    ranked.sort(key=lambda r: r[:3])
    out.candidates = [c for *_, c in ranked]
    return out


def _rank_afresh(
    order: list[int],
    movable_on: Callable[[int], list[PodEntry]],
    read: Callable[[int, list[PodEntry]], Read],
    enough: int,
) -> Ranking:
    """:func:`rank` reading every node (in ``order``) until ``enough`` candidates."""
    out = Ranking([])
    ranked: list[tuple[int, int, int, Candidate]] = []
    for slot in order:
        if len(ranked) >= enough:
            out.cut = True
            break
        entries = movable_on(slot)
        if not entries:
            continue
        out.movable_nodes += 1
        found = read(slot, entries)
        out.stranded += found.stranded
        candidate = found.candidate
        if candidate is None:
            out.no_room += 1
            continue
        ranked.append((candidate.moves, candidate.gpus, slot, candidate))
    ranked.sort(key=lambda r: r[:3])
    out.candidates = [c for *_, c in ranked]
    return out


def _read(
    room: Room,
    member: PodRequest,
    request: F64,
    slot: int,
    entries: list[PodEntry],
    per_node: int,
    per_whole_node: int,
    held_memo: HeldMemo | None,
) -> Read:
    """What :func:`rank` finds on node ``slot``, whose movable pods are ``entries`` (not none)."""
    budget = per_node
    if needs_most_of(member, int(room.snapshot.arrays.gpu_count[slot])):
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
            return Read(entries, (), 0, None)
    asked: dict[FitKey, bool] = {}
    kept = []
    for entry in entries:
        key = room.fit_key(entry)
        fits = asked.get(key)
        if fits is None:
            fits = asked[key] = room.fits_elsewhere(entry, key)
        if fits:
            kept.append(entry)
    stranded = len(entries) - len(kept)
    if not kept or not room.frees_enough(slot, request, member, kept):
        return Read(entries, tuple(asked), stranded, None)
    kept.sort(key=lambda e: (-(e.pod.gpu.count if e.pod.gpu.whole else 0), -e.pod.gpu.milli, e.pod.key))
    moves = len(kept)
    for k in range(1, min(budget, len(kept)) + 1):
        if room.frees_enough(slot, request, member, kept[:k]):
            moves = k
            break
    gpus = sum(e.pod.gpu.count for e in kept[:moves] if e.pod.gpu.whole)
    return Read(entries, tuple(asked), stranded, Candidate(slot, kept, moves, gpus))
