"""Holds: the one registry of node slots kept for a job, which every other job's cycles must leave alone.

Each :class:`Hold` says what kind of hold it is (:class:`Kind`), who it is for (a job key: a single pod's, a gang's,
a replacement pod's), that job's priority, the node slots it holds (and, where that is known, what it holds there:
a nominated pod's requests), when it was made and until when: ``until`` None holds until it is released; a time
makes it expire, and the registry drops an expired hold itself (:meth:`Holds.expire`: before each cycle's context is
computed, and whenever the loop looks at the move plans), telling the concern that made it
(:meth:`Holds.when_expired`), never each caller. One hold per kind per job: holding again replaces it where it was.

Kinds, and what a job ``key`` may use of a hold for another job (:meth:`Holds.context`, the cycle's
``Context.reserved``; the victim searches read the same holds through :meth:`Holds.in_search`,
:meth:`Holds.nominated_for_others` and :meth:`Holds.nominated_pods`):

- ``NOMINATION``: the node a single pod's within-queue preemption is freeing (kube-scheduler's nominated node), the
  pod counted there by its requests as kube-scheduler counts it: placed on its node in the cycles (and victim
  searches) of pods of its priority or lower only (``Context.nominated``), so that a pod of equal priority does
  not take its room but still fits beside it where the node holds both. Its GPUs and its claims' devices are chosen
  there as its own cycle would choose them with its victims gone (``Scheduler.add_nominated``): whole GPUs are only
  to be had whole, so counting its milli on the node would not keep the devices it needs free. The pod as its
  latest update shows it is counted (:meth:`Holds.pod_updated`). Its node is also what was written in the pod's
  ``status.nominatedNodeName``, which outlives the room: a released nomination stays *lapsed* (counted nowhere,
  :attr:`Hold.lapsed`) until :meth:`Holds.unnominate` (the preemptor clears the pod's field then) or a new
  nomination. This is the only record of nominations (the preemptor keeps none of its own).
- ``PREEMPTION`` and ``GANG``: the whole nodes the victims of a job's reclaim or preemption free (a single pod's
  reclaim; a gang's, or a gang member's). A job holding one of these ignores the others' of its priority or lower
  (preemptors whose victims share a node would otherwise keep each other off it; their victims are disjoint and
  freed room for all of them), not those of higher priority: as kube-scheduler counts a nominated pod against pods
  of its priority or lower, the room a higher-priority preemptor waits for is its own first. Every other job leaves
  them all alone. A gang's or a reclaim's victim search sees these nodes as the job's cycles will once its own
  victims free room (:meth:`Holds.in_search`): on a node held for a job of its priority or lower only what its own
  victims free counts (the room already free there is the holder's), and a node held for a job of higher priority
  not at all.

  The three preemption kinds are kept, with the pods evicted for them, until the job is placed or gone; once every
  victim is gone and the job still does not fit, they are released (:meth:`Holds.still_evicting`).
- ``MOVE_PLAN``: a consolidation plan being carried out (``scheduler.core.consolidation.moves``): the job's nodes until
it is
  placed and each moved pod's target until its replacement is; until the deadline of the plan's step under way
  (an expired plan is abandoned by its owner, told by the registry). Its users are confined within it
  (:attr:`Hold.only`: the job to its nodes, a replacement that claimed a move to that move's target); everyone else
  leaves it all alone, whatever its priority.
- ``STARVATION``: a reservation against starvation (off unless ``reserve_after_s`` is set, :meth:`Holds.reserve`):
  the best-ranked job of 2+ whole GPUs that has waited that long without room holds the nodes with the most free
  GPUs until their GPUs cover it; other jobs backfill only elsewhere. Off by default: without run-time estimates a
  reservation idles GPUs while its nodes drain (on the built-in gang scenario it cost 15 points of GPU allocation),
  so it is for fairness-first clusters. Left out of no victim search.
- ``RESERVATION``: the nodes a ``Reservation`` object holds (``scheduler.core.reservations``; its job key is
  :func:`reservation_key`'s, which no pod or gang has) until its expiry
  (``until``), its first user (``allocateOnce``) or its deletion. Its users (the pods its ``owners`` name, by job
  key, added as they come) are confined within it (:attr:`Hold.only`, as a move plan's); every other job leaves it
  all alone, whatever its priority, and every other job's victim search leaves it out (``kept``); a user's searches
  only inside it.
- ``HEAD``: the head of a queue's line, held by the ``backfill`` action (``scheduler.core.actions.backfill``):
  the nodes that free soonest for a job that fits nowhere, with its expected start (:attr:`Hold.expected_start`,
  from the running pods' declared run times). Another job may use them only if its own declared run time ends by
  then (its ``ends``, :meth:`Holds.context`); a job that declares none never does. An expected start that came
  while its job still waits (a soft estimate overrun), or that is unknown, is reckoned again before each cycle by
  whoever made the hold (:meth:`Holds.when_overrun`). Victim searches leave them out, as the reservation against
  starvation.

Releasing: :meth:`Holds.release` is "job ``key`` is placed or gone" (every hold for it whose kind ends with its
job, :attr:`Kind.ends_with_job`; a nomination lapses); a move plan's hold ends with its plan, released by its
owner with ``kind=Kind.MOVE_PLAN``.

Adding a kind (as issue 43's ``Reservation``, room held ahead of the pods that will use it, was): a member of
:class:`Kind` (not ending with a job: it ends at its TTL, ``until``, or with its first user), made with
:meth:`Holds.hold`\\ ``(kind=Kind.RESERVATION, job=<the reservation's key>, slots=..., until=<expiry>)`` and
released with :meth:`Holds.release`\\ ``(key, kind=Kind.RESERVATION)``; its expiry told to whoever publishes its
status through :meth:`Holds.when_expired`. Who may use it is the one rule in :meth:`Holds._binds` (its users, as a
move plan's, through :attr:`Hold.only`; a head-of-queue hold's, that a job whose run ends by its expected start may
use it); how the victim searches count it, in :meth:`Holds.in_search` (``kept`` leaves it out).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from scheduler.api.objects.pod import PodRequest
from scheduler.cache.state import Cache
from scheduler.core.cycle import Context, NominatedPod
from scheduler.core.jobs import Attempt
from scheduler.core.tenancy import Tenancy
from scheduler.kernels import layout


class Kind(enum.Enum):
    """What a hold is for (the module notes say what each keeps whom off)."""

    NOMINATION = "nomination"
    PREEMPTION = "preemption"
    GANG = "gang"
    MOVE_PLAN = "move plan"
    STARVATION = "starvation"
    RESERVATION = "reservation"
    HEAD = "head of queue"

    @property
    def ends_with_job(self) -> bool:
        """Whether a hold of this kind ends when its job is placed or gone (:meth:`Holds.release`); a move plan's
        holds its replacements' targets after its job is placed, and ends with the plan; a Reservation's ends at its
        expiry, with its first user, or when it is deleted (``scheduler.core.reservations``)."""
        return self not in CONFINING


#: The kinds that hold the room a job's reclaim or preemption frees (a job holds one of them at a time).
PREEMPTING = (Kind.NOMINATION, Kind.PREEMPTION, Kind.GANG)
#: Of those, the kinds held as whole nodes.
WHOLE_NODES = (Kind.PREEMPTION, Kind.GANG)


#: What a Reservation's hold is for: ``reservation:ns/name`` (a job key no pod or gang has: a pod ``ns/name`` of the
#: same name must not take the Reservation's room for its own).
RESERVATION_KEY = "reservation:"


def reservation_key(key: str) -> str:
    """The job key of the hold for Reservation ``key`` (``ns/name``)."""
    return f"{RESERVATION_KEY}{key}"


def reservation_of(hold: Hold) -> str:
    """The Reservation (``ns/name``) a ``RESERVATION`` hold is for."""
    return hold.job.removeprefix(RESERVATION_KEY)


#: The kinds whose users are confined within them (:attr:`Hold.only`) and that everyone else leaves alone.
CONFINING = (Kind.MOVE_PLAN, Kind.RESERVATION)

#: The kinds every victim search for another job leaves out (their nodes are not free room for anyone's arithmetic).
KEPT = (Kind.STARVATION, Kind.HEAD)

#: The kinds a job's placement or departure releases.
_ENDS_WITH_JOB = tuple(k for k in Kind if k.ends_with_job)


@dataclass(frozen=True, slots=True, eq=False)
class Hold:
    """Node slots held for job ``job`` (of ``priority``), made at ``made``, until ``until`` (None: until released)."""

    kind: Kind
    job: str
    priority: int
    #: The node slots held (a boolean mask, as long as the cache's arrays were when it was made).
    slots: np.ndarray
    made: float
    until: float | None = None
    #: The pods evicted for it (a preemption kind): while one is there, the job waits instead of preempting.
    victims: tuple[str, ...] = ()
    #: A nomination's pod, its node (by name: a node's slot may change when it leaves and comes back), and what
    #: the pod takes there (its request vector).
    pod: PodRequest | None = None
    node: str = ""
    request: np.ndarray | None = None
    #: The leaf queue of a starving job (reservations are ranked by it).
    queue: str = ""
    #: Users confined within it: job key -> the node slots it may use (a move plan's job, its replacements).
    only: Mapping[str, np.ndarray] = field(default_factory=dict)
    #: A released nomination, kept only as the node written on its pod (it holds and counts nothing).
    lapsed: bool = False
    #: When its job is expected to start on the slots (a head-of-queue hold; inf: a pod there declares no run time).
    expected_start: float | None = None

    def expired(self, now: float) -> bool:
        return self.until is not None and now >= self.until


class Holds:
    def __init__(
        self, cache: Cache, tenancy: Tenancy, *, clock: Callable[[], float], reserve_after_s: float | None
    ) -> None:
        self.cache = cache
        self.tenancy = tenancy
        self.clock = clock
        self.reserve_after_s = reserve_after_s
        #: (kind, job key) -> its hold, in the order they were made.
        self._holds: dict[tuple[Kind, str], Hold] = {}
        #: Per kind, who is told when a hold of it expires.
        self._told: dict[Kind, Callable[[Hold], None]] = {}
        #: Per kind, who reckons an expected start again once it has come while its job still waits.
        self._reckon: dict[Kind, Callable[[Hold], float]] = {}

    # --- making and ending holds ---------------------------------------------------------------------------------

    def hold(
        self,
        *,
        kind: Kind,
        job: str,
        slots: np.ndarray,
        until: float | None = None,
        priority: int = 0,
        made: float | None = None,
        victims: tuple[str, ...] = (),
        pod: PodRequest | None = None,
        node: str = "",
        request: np.ndarray | None = None,
        queue: str = "",
        only: Mapping[str, np.ndarray] | None = None,
        expected_start: float | None = None,
    ) -> Hold:
        """Hold ``slots`` for ``job`` (of ``priority``) until ``until`` (None: until released), made ``made`` (now
        if None); it replaces ``job``'s hold of ``kind`` where that was. The other fields as :class:`Hold`'s."""
        hold = Hold(
            kind,
            job,
            priority,
            slots,
            self.clock() if made is None else made,
            until,
            victims,
            pod,
            node,
            request,
            queue,
            {} if only is None else only,
            expected_start=expected_start,
        )
        self._holds[(kind, job)] = hold
        return hold

    def release(self, job: str, *, kind: Kind | None = None) -> None:
        """Job ``job`` is placed or gone: every hold for it whose kind ends with its job is free for others (with
        ``kind``: its hold of that kind). A nomination lapses: its node stays written on the pod (the module notes).
        """
        if not self._holds:
            return
        for each in (kind,) if kind is not None else _ENDS_WITH_JOB:
            hold = self._holds.get((each, job))
            if hold is None:
                continue
            if each is Kind.NOMINATION:
                if not hold.lapsed:
                    self._holds[(each, job)] = replace(hold, lapsed=True, victims=(), request=None)
            else:
                del self._holds[(each, job)]

    def expire(self) -> list[Hold]:
        """Drop the holds whose time is up, telling whoever made them (:meth:`when_expired`); those dropped."""
        now = self.clock()
        gone = [hold for hold in self._holds.values() if hold.expired(now)]
        for hold in gone:
            del self._holds[(hold.kind, hold.job)]
        for hold in gone:
            told = self._told.get(hold.kind)
            if told is not None:
                told(hold)
        return gone

    def when_expired(self, kind: Kind, told: Callable[[Hold], None]) -> None:
        """Tell ``told`` of every hold of ``kind`` that expires (its maker ends what the hold was for)."""
        self._told[kind] = told

    def when_overrun(self, kind: Kind, reckon: Callable[[Hold], float]) -> None:
        """Ask ``reckon`` for the new expected start of a hold of ``kind`` whose expected start has come while its
        job still waits (a run time overrun), or is unknown (inf: a pod there declares no run time): it is reckoned
        again before each cycle's context until its job starts."""
        self._reckon[kind] = reckon

    def _overrun(self) -> None:
        now = self.clock()
        for key, hold in list(self._holds.items()):
            reckon = self._reckon.get(hold.kind)
            start = hold.expected_start
            if reckon is not None and start is not None and (start <= now or start == math.inf):
                self._holds[key] = replace(hold, expected_start=reckon(hold))

    def get(self, kind: Kind, job: str) -> Hold | None:
        """Job ``job``'s hold of ``kind``, if any."""
        return self._holds.get((kind, job))

    # --- what is held --------------------------------------------------------------------------------------------

    def of_kind(self, kind: Kind) -> list[Hold]:
        """The holds of ``kind``, in the order they were made (lapsed nominations included)."""
        return [hold for (k, _), hold in self._holds.items() if k is kind]

    @property
    def reservation(self) -> Hold | None:
        """The reservation against starvation, if a job holds one."""
        return next(iter(self.of_kind(Kind.STARVATION)), None)

    @property
    def holding(self) -> bool:
        """Whether any hold is kept (lapsed nominations included): without, no cycle has anything to respect."""
        return bool(self._holds)

    def context(self, key: str, *, priority: int, ends: float | None = None) -> Context:
        """What job ``key``'s cycles (at ``priority``) must respect: the node slots it may not use
        (``Context.reserved``, by the rules of the module notes), and the single pods nominated for others that it
        counts (``Context.nominated``, :meth:`nominated_pods`). ``ends``: when the job would end if it started now,
        by its declared run time (None: it declares none). Expired holds are dropped first, overrun expected starts
        reckoned again."""
        self.expire()
        self._overrun()
        own = self._whole(key)
        slots = self.cache.arrays.slots
        masks = [
            mask for hold in self._holds.values() if (mask := self._binds(hold, key, own, slots, ends)) is not None
        ]
        return Context(reserved=union(masks), nominated=tuple(self.nominated_pods(key, priority)))

    def _binds(self, hold: Hold, key: str, own: Hold | None, slots: int, ends: float | None) -> np.ndarray | None:
        """The node slots ``hold`` keeps job ``key`` off (None: none); ``own``: the whole nodes ``key`` holds for its
        own preemption, if any; ``ends``: when ``key`` would end if started now (None: it declares no run time)."""
        if hold.kind is Kind.NOMINATION:
            return None  # counted on its node by its requests (``Context.nominated``), not held whole
        if hold.kind is Kind.RESERVATION and hold.job == key:
            return None  # the Reservation placed again (its ghosts) may use what it holds
        if hold.kind in CONFINING:
            allowed = hold.only.get(key)
            return ~sized(allowed, slots) if allowed is not None else sized(hold.slots, slots)
        if hold.job == key:
            return None
        if hold.kind is Kind.HEAD and backfills(ends, hold):
            return None
        if hold.kind in WHOLE_NODES and own is not None and hold.priority <= own.priority:
            return None
        return hold.slots

    def _whole(self, key: str) -> Hold | None:
        """The whole nodes held for job ``key``'s own preemption, if any."""
        return self._holds.get((Kind.PREEMPTION, key)) or self._holds.get((Kind.GANG, key))

    def _others_whole(self, key: str) -> list[Hold]:
        return [hold for hold in self._holds.values() if hold.kind in WHOLE_NODES and hold.job != key]

    def in_search(self, key: str, priority: int) -> tuple[np.ndarray | None, np.ndarray | None]:
        """How job ``key``'s victim search (at ``priority``) sees the nodes held for others, as its cycles will once
        its victims free room for it (:meth:`context`, with whole nodes of its own): ``(kept, shared)``. ``kept``:
        the nodes those cycles still leave alone (whole nodes held for higher priority, the reservation against
        starvation, a Reservation's nodes; for a Reservation's user, every node but those), left out of the
        search. ``shared``: the other whole nodes, held for its priority or lower, which those cycles may use; of
        their room only what its own victims free is the job's, the rest is freed for their holders (None: none)."""
        others = self._others_whole(key)
        masks = [hold.slots for hold in others if hold.priority > priority]
        masks += [hold.slots for kind in KEPT for hold in self.of_kind(kind) if hold.job != key]
        slots = self.cache.arrays.slots
        for hold in self.of_kind(Kind.RESERVATION):
            if hold.job == key:
                continue
            allowed = hold.only.get(key)
            # A user's victims only where its cycles may go: inside the Reservation; anyone else's never there.
            masks.append(hold.slots if allowed is None else ~sized(allowed, slots))
        kept = union(masks)
        shared = union([hold.slots for hold in others if hold.priority <= priority])
        if shared is not None and kept is not None:
            size = min(shared.shape[0], kept.shape[0])
            shared[:size] &= ~kept[:size]
        return kept, shared if shared is not None and shared.any() else None

    def nominated_for_others(self, key: str, priority: int) -> np.ndarray | None:
        """The node slots held whole for jobs other than ``key`` of ``priority`` or higher (None: none), which a
        single pod's victim search leaves out: kube-scheduler adds such a nominated pod to its node before it looks
        for victims there, and a hold here is the whole node."""
        return union([hold.slots for hold in self._others_whole(key) if hold.priority >= priority])

    def nominated_pods(self, key: str, priority: int) -> list[NominatedPod]:
        """The single pods nominated for jobs other than ``key`` of ``priority`` or higher, which a pod of
        ``priority`` counts on their nodes (kube-scheduler's addNominatedPods), the higher priority first (placed in
        that order, the devices a node holds go to them in that order)."""
        found: list[tuple[int, NominatedPod]] = []
        for hold in self.of_kind(Kind.NOMINATION):
            if hold.lapsed or hold.job == key or hold.priority < priority:
                continue
            slot = self.cache.slot_of(hold.node)
            if slot is not None and hold.pod is not None and hold.request is not None:
                found.append((hold.priority, NominatedPod(hold.pod, slot, hold.request, hold.victims)))
        found.sort(key=lambda entry: -entry[0])
        return [nominated for _, nominated in found]

    def uses_reservation(self, key: str) -> bool:
        """Whether job ``key`` is a user of a Reservation's hold (its cycles go only into its room)."""
        return any(key in hold.only for hold in self.of_kind(Kind.RESERVATION))

    def reservations_keeping(self, key: str) -> list[Hold]:
        """The Reservations' holds that keep job ``key`` off their nodes (it is none of their users)."""
        return [hold for hold in self.of_kind(Kind.RESERVATION) if hold.job != key and key not in hold.only]

    # --- nominations -------------------------------------------------------------------------------------------

    def nominate(
        self,
        key: str,
        victims: list[PodRequest],
        priority: int = 0,
        *,
        pod: PodRequest | None = None,
        node: str = "",
        kind: Kind = Kind.PREEMPTION,
    ) -> None:
        """Job ``key`` (of ``priority``) evicts ``victims``: the room they free is its own until it is placed or
        gone. ``pod`` on ``node``: a single pod nominated there, counted by its requests (and the devices it will
        take there); without, the nodes its victims free are held whole, as ``kind`` (a gang's or a reclaim's)."""
        evicted = tuple(victim.key for victim in victims)
        for each in WHOLE_NODES:
            self._holds.pop((each, key), None)
        if pod is not None:
            self._holds.pop((Kind.NOMINATION, key), None)
            at = np.zeros(self.cache.arrays.slots, dtype=bool)
            slot = self.cache.slot_of(node)
            if slot is not None:
                at[slot] = True
            self.hold(
                kind=Kind.NOMINATION,
                job=key,
                slots=at,
                priority=priority,
                victims=evicted,
                pod=pod,
                node=node,
                request=self._request(pod),
            )
            return
        self.release(key, kind=Kind.NOMINATION)  # its node stays written on the pod until it is unnominated
        freed = np.zeros(self.cache.arrays.slots, dtype=bool)
        for victim in victims:
            entry = self.cache.pod(victim.key)
            if entry is not None:
                freed[entry.placement.slot] = True
        self.hold(kind=kind, job=key, slots=freed, priority=priority, victims=evicted)

    def nomination(self, key: str) -> Hold | None:
        """Single pod ``key``'s nomination (lapsed or not): its pod, node and priority."""
        return self._holds.get((Kind.NOMINATION, key))

    def unnominate(self, key: str) -> Hold | None:
        """Forget single pod ``key``'s nomination altogether (its pod shows no nominated node any more); it, if any."""
        return self._holds.pop((Kind.NOMINATION, key), None)

    def pod_updated(self, pod: PodRequest) -> None:
        """Pod ``pod`` changed (an update from the watch): if it is nominated, it is counted (and searches again) as
        it is now."""
        hold = self.nomination(pod.key)
        if hold is not None and hold.pod != pod:
            request = None if hold.lapsed else self._request(pod)
            self._holds[(Kind.NOMINATION, pod.key)] = replace(hold, pod=pod, request=request)

    def _request(self, pod: PodRequest) -> np.ndarray:
        return self.cache.request_vector(pod)[: self.cache.arrays.cap.shape[1]]

    def evicting_for(self, pod_key: str) -> list[str]:
        """The jobs that evicted pod ``pod_key`` and hold the room it frees."""
        return [
            hold.job
            for hold in self._holds.values()
            if hold.kind in PREEMPTING and not hold.lapsed and pod_key in hold.victims
        ]

    def still_evicting(self, key: str) -> bool | None:
        """None without a nomination; True while a victim of job ``key`` is still there; False once all are gone
        (what it holds is released then: the job preempts again if it still does not fit)."""
        hold = self._whole(key)
        if hold is None:
            hold = self.nomination(key)
            if hold is None or hold.lapsed:
                return None
        if any(self.cache.pod(k) is not None for k in hold.victims):
            return True
        self.release(key)
        return False

    # --- reservations against starvation -------------------------------------------------------------------------

    def reserve(self, attempt: Attempt) -> None:
        """Reserve nodes for ``attempt``'s job if it is the best-ranked job left without room for long enough.

        Only jobs of two or more whole GPUs reserve: any GPU that frees fits a one-GPU job, so backfill cannot
        starve it, and the fair order gives it the next one.
        """
        first_attempt = attempt.item.first_attempt
        gpus = sum(p.gpu.count for p in attempt.members if p.gpu.whole)
        if gpus < 2 or self.reserve_after_s is None or first_attempt is None:
            return
        if self.clock() - first_attempt < self.reserve_after_s:
            return
        current = self.reservation
        if current is not None:
            if current.job == attempt.key:
                return  # keep the nodes it has: they are draining for it
            if self.tenancy.rank(current.queue) <= self.tenancy.rank(attempt.queue):
                return
            del self._holds[(Kind.STARVATION, current.job)]
        a = self.cache.arrays
        usable = (a.base_reason == layout.FIT) & (a.gpu_count > 0)
        slots = np.flatnonzero(usable)
        free = (a.gpu_free[slots] >= layout.WHOLE).sum(axis=1)
        order = slots[np.lexsort((slots, -free))]
        covered = np.cumsum(a.gpu_count[order])
        take = order[: int(np.searchsorted(covered, gpus)) + 1]
        mask = np.zeros(a.slots, dtype=bool)
        mask[take] = True
        self.hold(kind=Kind.STARVATION, job=attempt.key, slots=mask, priority=attempt.priority, queue=attempt.queue)


def backfills(ends: float | None, hold: Hold) -> bool:
    """Whether a job that would end at ``ends`` if started now (None: it declares no run time) may use the room of
    head-of-queue ``hold``: only if it is gone by the held job's expected start."""
    return ends is not None and hold.expected_start is not None and ends <= hold.expected_start


def union(masks: list[np.ndarray]) -> np.ndarray | None:
    """A new mask of the node slots any of ``masks`` holds (masks of different lengths: as long as the longest);
    None: no mask."""
    if not masks:
        return None
    held = np.zeros(max(m.shape[0] for m in masks), dtype=bool)
    for mask in masks:
        held[: mask.shape[0]] |= mask
    return held


def sized(mask: np.ndarray, slots: int) -> np.ndarray:
    """``mask`` cut or grown (False) to ``slots`` (the arrays grow when nodes come)."""
    out = np.zeros(slots, dtype=bool)
    size = min(slots, mask.shape[0])
    out[:size] = mask[:size]
    return out
