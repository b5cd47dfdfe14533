"""The jobs holding capacity as victim candidates, kept up to date as jobs change: what every preemption search
starts from.

A search (``scheduler.core.preemption.preemptor``) looks at every job holding capacity: a gang whole (an elastic gang's
surplus members one by one, then its core), a single pod; and, as arrays
(:class:`scheduler.core.preemption.victims.Placements`),
where their pods run. Built from scratch for each search at a new cluster generation, that list was most of the
cost of kube-scheduler's PreemptionBasic workload: every bind and every eviction moves the generation. Here each
job's entry (its candidates, and per candidate where its pods run: :class:`Held`) is kept, and rebuilt only when the
job changed. Two sources say which jobs did:

- :class:`scheduler.core.jobs.Jobs` tells every job that changed (a member came, was placed, unplaced or left, its
  PodGroup came, changed or went);
- the cache's per-node generations tell on which nodes pods came, went, or were placed anew (the node changed):
  the jobs with a pod on such a node, now or at the last build, are rebuilt.

What moves without any job changing is kept out of the entries: how far each queue is ahead of its fair share (its
rank share, which orders a reclaim's victims), read once per queue at each build. The arrays are put together from
the kept pieces with numpy (:func:`assemble`); :func:`placements` builds them from scratch, the same way.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain

import numpy as np

from scheduler.cache.state import Cache, PodEntry
from scheduler.core.jobs import Job, Jobs
from scheduler.core.preemption.victims import Candidate, Placements
from scheduler.core.tenancy import Tenancy, placed_requests_of
from scheduler.kernels import layout


@dataclass(frozen=True, slots=True)
class Held:
    """Where one candidate's pods run (those the cache holds, in the candidate's order): per pod its node slot, its
    request row, its whole GPUs."""

    slot: np.ndarray
    rows: np.ndarray
    whole: np.ndarray


def held(entries: Sequence[PodEntry], columns: int) -> Held:
    """:class:`Held` for the cache's ``entries`` of a candidate's pods, rows ``columns`` wide."""
    rows = np.zeros((len(entries), columns))
    for row, entry in zip(rows, entries, strict=True):
        width = min(columns, entry.placement.request.shape[0])  # older vectors may be shorter
        row[:width] = entry.placement.request[:width]
    return Held(
        slot=np.array([e.placement.slot for e in entries], dtype=np.int64),
        rows=rows,
        whole=np.array(
            [len(e.placement.gpu_ids) if e.placement.gpu_milli >= layout.WHOLE else 0 for e in entries],
            dtype=np.float64,
        ),
    )


class SlotOwners(Mapping[int, list[int]]):
    """Per node slot, the candidates (their indices, ascending) with a pod there; only slots with one are keys."""

    def __init__(self, slot: np.ndarray, owner: np.ndarray, candidates: int) -> None:
        pairs = np.unique(slot * max(candidates, 1) + owner)  # by slot, then by candidate; each pair once
        slots = pairs // max(candidates, 1)
        self._owners = pairs % max(candidates, 1)
        self._slots, self._starts = np.unique(slots, return_index=True)
        self._ends = np.append(self._starts[1:], pairs.shape[0])

    def __getitem__(self, slot: int) -> list[int]:
        i = int(np.searchsorted(self._slots, slot))
        if i >= self._slots.shape[0] or self._slots[i] != slot:
            raise KeyError(slot)
        owners: list[int] = self._owners[self._starts[i] : self._ends[i]].tolist()
        return owners

    def __iter__(self) -> Iterator[int]:
        return iter(self._slots.tolist())

    def __len__(self) -> int:
        return int(self._slots.shape[0])


def assemble(candidates: Sequence[Candidate], pieces: Sequence[Held], columns: int) -> Placements:
    """The arrays of :class:`Placements` from each candidate's :class:`Held` (their rows ``columns`` wide)."""
    count = len(candidates)
    sizes = np.fromiter((h.slot.shape[0] for h in pieces), dtype=np.int64, count=count)
    if count:
        slot = np.concatenate([h.slot for h in pieces])
        rows = np.concatenate([h.rows for h in pieces])
        whole = np.concatenate([h.whole for h in pieces])
    else:
        slot, rows, whole = np.zeros(0, dtype=np.int64), np.zeros((0, columns)), np.zeros(0)
    owner = np.repeat(np.arange(count, dtype=np.int64), sizes)
    queues: dict[str, int] = {}
    return Placements(
        candidates=list(candidates),
        index={c.key: i for i, c in enumerate(candidates)},
        queue=np.fromiter((queues.setdefault(c.queue, len(queues)) for c in candidates), dtype=np.int64, count=count),
        queues=queues,
        priority=np.fromiter((c.priority for c in candidates), dtype=np.int64, count=count),
        behind=np.fromiter((bool(c.after) for c in candidates), dtype=bool, count=count),
        owner=owner,
        slot=slot,
        rows=rows,
        whole=whole,
        by_slot=SlotOwners(slot, owner, count),
    )


def placements(cache: Cache, candidates: Sequence[Candidate]) -> Placements:
    """The arrays of :class:`Placements` for ``candidates`` as the cache holds them now, built from scratch."""
    columns = cache.arrays.cap.shape[1]
    pieces = [held([e for p in c.pods if (e := cache.pod(p.key)) is not None], columns) for c in candidates]
    return assemble(candidates, pieces, columns)


@dataclass(slots=True)
class _Entry:
    """One job's candidates (its surplus members, then its core) and where each one's pods run."""

    candidates: list[Candidate]
    held: list[Held]
    slots: frozenset[int]


def entry(cache: Cache, job: Job, columns: int) -> _Entry | None:
    """Job ``job``'s candidates as the cache holds its pods now, or None if it holds no capacity."""
    if job.started is None:
        return None
    found = {k: e for k in job.placed if (e := cache.pod(k)) is not None}
    if not found:
        return None
    pods = [e.pod for e in found.values()]
    queue = job.queue
    priority = max([job.group.priority, *(p.priority for p in pods)]) if job.group else pods[0].priority
    candidates: list[Candidate] = []
    pieces: list[Held] = []
    surplus = [p for p in job.surplus() if p.key in found]
    for rank, pod in enumerate(surplus):
        candidates.append(
            Candidate(
                pod.key, queue, priority, job.started, [pod], placed_requests_of(cache, [pod]), 0.0, job.key, rank
            )
        )
        pieces.append(held([found[pod.key]], columns))
    after = frozenset(p.key for p in surplus)
    core = [p for p in pods if p.key not in after]
    if core:
        candidates.append(
            Candidate(job.key, queue, priority, job.started, core, placed_requests_of(cache, core), after=after)
        )
        pieces.append(held([found[p.key] for p in core], columns))
    slots = frozenset(e.placement.slot for e in found.values())
    return _Entry(candidates, pieces, slots)


@dataclass(frozen=True, slots=True)
class Running:
    """Every job holding capacity as candidates, where their pods run, and per queue of theirs how far it is ahead of
    its fair share (what :func:`scheduler.core.preemption.victims.take_order` reads for them)."""

    candidates: list[Candidate]
    placements: Placements
    ahead: Mapping[str, float]


class RunningJobs:
    """The candidates of every job holding capacity, each job's rebuilt only when it changed (see the module
    notes)."""

    def __init__(self, jobs: Jobs, cache: Cache, tenancy: Tenancy) -> None:
        self.jobs = jobs
        self.cache = cache
        self.tenancy = tenancy
        self._entries: dict[str, _Entry] = {}
        #: Per node slot, the jobs whose entry has a pod there.
        self._on_slot: dict[int, set[str]] = {}
        #: Jobs changed since the last build (in the order they changed), unless every job is to be rebuilt.
        self._changed: dict[str, None] = {}
        self._everything = True
        #: The cache's per-node generations and its columns at the last build.
        self._gen = np.zeros(0, dtype=np.int64)
        self._columns = 0
        jobs.watch(self._job_changed)

    def _job_changed(self, key: str) -> None:
        if self._everything:
            return
        self._changed[key] = None
        if len(self._changed) > max(4096, 2 * len(self._entries)):
            self._everything = True  # as cheap to rebuild every job, and what is kept stays bounded
            self._changed.clear()

    def build(self) -> Running:
        """Every job holding capacity now: the jobs changed since the last build are rebuilt, the others kept."""
        cache = self.cache
        gen = cache.arrays.gen
        columns = cache.arrays.cap.shape[1]
        if self._everything or columns != self._columns:  # a resource first seen: every row is wider
            self._entries.clear()
            self._on_slot.clear()
            keys: list[str] = [job.key for job in self.jobs.all()]
        else:
            keys = list(self._changed)
            size = min(gen.shape[0], self._gen.shape[0])
            moved = np.flatnonzero(gen[:size] != self._gen[:size]).tolist() + list(range(size, gen.shape[0]))
            for slot in moved:
                keys.extend(self._on_slot.get(slot, ()))
                for pod_key in cache.pods_on(slot):
                    job = self.jobs.of_pod(pod_key)
                    if job is not None:
                        keys.append(job.key)
        self._changed.clear()
        self._everything = False
        self._gen = gen.copy()
        self._columns = columns
        for key in dict.fromkeys(keys):
            self._update(key, columns)
        entries = self._entries.values()
        candidates = list(chain.from_iterable(e.candidates for e in entries))
        placed = assemble(candidates, list(chain.from_iterable(e.held for e in entries)), columns)
        ahead = {queue: self.tenancy.rank(queue)[1][-1][0] for queue in placed.queues}
        return Running(candidates, placed, ahead)

    def _update(self, key: str, columns: int) -> None:
        old = self._entries.get(key)
        if old is not None:
            for slot in old.slots:
                on = self._on_slot[slot]
                on.discard(key)
                if not on:
                    del self._on_slot[slot]
        job = self.jobs.get(key)
        new = entry(self.cache, job, columns) if job is not None else None
        if new is None:
            self._entries.pop(key, None)
            return
        self._entries[key] = new  # a job rebuilt keeps its place in the order
        for slot in new.slots:
            self._on_slot.setdefault(slot, set()).add(key)
