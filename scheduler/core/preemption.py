"""Preemption's state and the victim search that the reclaim and preempt actions share.

The decisions are the actions' (``scheduler.core.actions.reclaim``: borrowed work of other queues;
``scheduler.core.actions.preempt``: lower-priority work of the job's own queue); victims are chosen by
``scheduler.core.reclaim`` on what-ifs of the snapshot. Here: who may search (an evictor is set; a pod with
``preemptionPolicy: Never`` never preempts; a job whose victims are still terminating waits for them), the
candidates (every job holding capacity, whole; an elastic gang's surplus members one by one, then its core), and
eviction.

State kept here and nowhere else: victims evicted and not gone yet (never chosen again by a job of equal or lower
priority, and no longer counted as their queue's surplus), the searches that found nothing at the cluster's
generation (:class:`scheduler.core.fruitless.Fruitless`: not run again until the cluster changes, for the job, or
for any single pod of the same shape, queue and priority), the nodes nominated for single pods, the cluster's
PodDisruptionBudgets, and how many jobs were preempted per victim queue (metrics). The nodes a preemptor frees are
nominated for it in :class:`scheduler.core.holds.Holds`.

A single pod's search is kube-scheduler's PostFilter in its cost as in its choice: the candidates are arrays put
together once per generation (:class:`scheduler.core.reclaim.Placements`) from what
:class:`scheduler.core.running_jobs.RunningJobs` keeps per job (rebuilt only when the job changed), the nodes its
cycle refused for a reason no eviction changes are not tried, and the nodes are tried from a random one on (seeded
by the profile's ``seed``).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from scheduler.api import pdb as api_pdb
from scheduler.api.pod import PREEMPT_NEVER, PodRequest
from scheduler.api.podgroup import PodGroup
from scheduler.cache.state import Snapshot
from scheduler.core import fruitless, reclaim
from scheduler.core.cycle import Scheduler
from scheduler.core.holds import Holds
from scheduler.core.jobs import Attempt, Jobs
from scheduler.core.ports import Events, Evictor
from scheduler.core.running_jobs import Running, RunningJobs
from scheduler.core.tenancy import Tenancy

#: kube-scheduler's PostFilter messages (DefaultPreemption's PodEligibleToPreemptOthers) for a pod that may not
#: preempt: its ``preemptionPolicy`` is ``Never``; its victims are still terminating.
NOT_ELIGIBLE_NEVER = "preemption: not eligible due to preemptionPolicy=Never."
NOT_ELIGIBLE_TERMINATING = "preemption: not eligible due to a terminating pod on the nominated node."


@dataclass(frozen=True)
class Search:
    """What a job that does not fit may evict: every job holding capacity (``running``, and as arrays
    ``placements``), and those not evicted already (``candidates``). ``waits``: its victims are still leaving;
    ``may``: False when it may not preempt now (no evictor, ``preemptionPolicy: Never``, or nothing found at this
    cluster generation already)."""

    waits: bool = False
    may: bool = True
    #: Why it may not preempt at all, in kube-scheduler's words (``preemptionPolicy: Never``); "" otherwise.
    refused: str = ""
    #: It may not search because a search found nothing at this cluster generation already.
    known: bool = False
    running: list[reclaim.Candidate] = field(default_factory=list)
    placements: reclaim.Placements | None = None
    #: The victims evicted and not gone when the search opened.
    leaving: frozenset[str] = frozenset()

    @functools.cached_property
    def candidates(self) -> list[reclaim.Candidate]:
        # A core waits for its gang's surplus members that are not leaving already.
        return [
            dataclasses.replace(c, after=c.after - self.leaving) if c.after else c
            for c in self.running
            if c.key not in self.leaving
        ]


class Preemptor:
    def __init__(
        self,
        scheduler: Scheduler,
        jobs: Jobs,
        tenancy: Tenancy,
        holds: Holds,
        *,
        events: Events,
        evictor: Evictor | None,
    ) -> None:
        self.scheduler = scheduler
        self.jobs = jobs
        self.tenancy = tenancy
        self.holds = holds
        self.events = events
        self.evictor = evictor
        #: The searches that found no victims at the cluster's generation (:meth:`_memo_key`).
        self.fruitless = fruitless.Fruitless()
        #: Victims evicted and not yet gone (job key -> the candidate).
        self.terminating: dict[str, reclaim.Candidate] = {}
        #: Per victim in :attr:`terminating`, the job it was evicted for and that job's priority.
        self.evicted_for: dict[str, tuple[str, int]] = {}
        #: Single pods with a nominated node: job key -> (the pod, the node, its priority).
        self.nominations: dict[str, tuple[PodRequest, str, int]] = {}
        #: The cluster's PodDisruptionBudgets by ``namespace/name``.
        self.budgets: dict[str, api_pdb.DisruptionBudget] = {}
        #: Jobs preempted so far, by the victim's queue.
        self.preemptions: dict[str, int] = {}
        #: Every job holding capacity as candidates, each job's rebuilt only when it changed.
        self.running_jobs = RunningJobs(jobs, scheduler.cache, tenancy)
        #: Their last build, and the cluster generation it was made at.
        self._running_at: tuple[int, Running] | None = None
        #: Where a single pod's search starts among the nodes (kube-scheduler's random offset).
        self._offsets = np.random.default_rng(scheduler.framework.config.seed)
        #: The last attempt's search (its actions share it).
        self._search: tuple[Attempt, Search] | None = None

    def forget(self, key: str) -> None:
        """Job ``key`` is placed or gone (a binding clears the pod's nominatedNodeName in the API server)."""
        self.fruitless.forget(("job", key))
        self.nominations.pop(key, None)

    def pod_updated(self, pod: PodRequest) -> None:
        """Pod ``pod`` changed: a nomination of it keeps the pod as it is now (its shape, if it searches again)."""
        nominated = self.nominations.get(pod.key)
        if nominated is not None:
            self.nominations[pod.key] = (pod, nominated[1], nominated[2])

    def budget_upsert(self, budget: api_pdb.DisruptionBudget) -> None:
        self.budgets[budget.key] = budget

    def budget_removed(self, key: str) -> None:
        self.budgets.pop(key, None)

    def policies_changed(self) -> None:
        """Queues changed (guarantees, policies): searches that found nothing may find something now."""
        self.fruitless.clear()

    def running(self, version: int) -> list[reclaim.Candidate]:
        """Every job holding capacity (a gang as a whole, or a single pod) with its leaf queue; the same list
        while the cluster's ``version`` stays (placements and removals change it)."""
        return self._running(version)[0]

    def _running(self, version: int) -> tuple[list[reclaim.Candidate], reclaim.Placements]:
        if self._running_at is None or self._running_at[0] != version:
            self._running_at = (version, self.running_jobs.build())
        running = self._running_at[1]
        return running.candidates, running.placements

    def placements(self) -> reclaim.Placements:
        """Where every job holding capacity runs, as arrays, at the cluster's generation of now."""
        return self._running(fruitless.generation(self.scheduler.cache.arrays))[1]

    def search(self, attempt: Attempt) -> Search:
        """The victims ``attempt`` may choose from, found once per attempt (reclaim, then preempt, share them); or,
        without them, whether it waits for victims already evicted."""
        if self._search is not None and self._search[0] is attempt:
            return self._search[1]
        search = self._open(attempt)
        self._search = (attempt, search)
        return search

    def _open(self, attempt: Attempt) -> Search:
        if self.evictor is None:
            return Search(may=False)
        single = attempt.members[0] if attempt.job.group is None else None
        if single is not None and single.preemption_policy == PREEMPT_NEVER:
            return Search(may=False, refused=NOT_ELIGIBLE_NEVER)
        if self.holds.still_evicting(attempt.key):
            return Search(waits=True, may=False)  # its victims are still terminating
        version = fruitless.generation(self.scheduler.cache.arrays)
        key = self._memo_key(attempt)
        if self.fruitless.known(key, version):
            return Search(may=False, known=True)
        self.fruitless.record(key, version)  # until it finds victims (found)
        for victim_key, victim in list(self.terminating.items()):
            if all(self.scheduler.cache.pod(p.key) is None for p in victim.pods):
                del self.terminating[victim_key]
                self.evicted_for.pop(victim_key, None)
        running, placements = self._running(version)
        return Search(running=running, placements=placements, leaving=frozenset(self.terminating))

    def outcome_key(self, attempt: Attempt) -> tuple[Hashable, int]:
        """What a search's outcome is remembered by (:meth:`_memo_key`), with the cluster's generation: the same key
        finds the same victims, or none, on the same nodes."""
        return self._memo_key(attempt), fruitless.generation(self.scheduler.cache.arrays)

    def _memo_key(self, attempt: Attempt) -> Hashable:
        """What a fruitless search is remembered by: a single pod's shape, queue and priority (any pod of them finds
        what it finds), unless victims were evicted for it (it may count them); else the job."""
        if attempt.job.group is None and all(f != attempt.key for f, _ in self.evicted_for.values()):
            shape = fruitless.pod_shape(attempt.members[0])
            if shape is not None:
                return ("pod", attempt.queue, attempt.priority, shape)
        return ("job", attempt.key)

    def found(self, attempt: Attempt) -> None:
        """``attempt`` found victims: a later search must not be skipped as fruitless."""
        self.fruitless.forget(self._memo_key(attempt))

    def spared(self, attempt: Attempt) -> None:
        """``attempt``'s search left victims out for their queue's minimum run time (``core.min_runtime``): what it
        found holds until they have run it, not for the cluster's generation, so it is not remembered as fruitless."""
        self.fruitless.forget(self._memo_key(attempt))

    def retry(self, key: str) -> None:
        """Nominated single pod ``key`` lost its room to a preemptor of higher priority: it searches again."""
        self.fruitless.forget(("job", key))
        nominated = self.nominations.get(key)
        if nominated is not None and (shape := fruitless.pod_shape(nominated[0])) is not None:
            self.fruitless.forget(("pod", self.jobs.queue_of(nominated[0]), nominated[2], shape))

    def eviction_failed(self, pod_key: str, message: str) -> list[str]:
        """The deletion of victim pod ``pod_key`` failed (refused, or no answer in time): it no longer counts as
        leaving, and each job that evicted it loses the room it held and searches again, as kube-scheduler retries
        a preemptor whose victims could not be deleted (were it deleted after all, the search finds the room free).
        Returns those jobs' keys."""
        for victim_key, victim in list(self.terminating.items()):
            if any(pod.key == pod_key for pod in victim.pods):
                del self.terminating[victim_key]
                self.evicted_for.pop(victim_key, None)
        jobs = self.holds.evicting_for(pod_key)
        for key in jobs:
            job = self.jobs.get(key)
            self.holds.release(key)
            self.retry(key)
            self.unnominate(key)
            obj = f"podgroup {job.group.key}" if job is not None and job.group is not None else f"pod {key}"
            self.events.emit(
                obj=obj,
                kind="Warning",
                reason="PreemptionFailed",
                message=f"the deletion of victim pod {pod_key} failed ({message}); looking for room again",
            )
        return jobs

    def offset(self) -> int:
        """Where a single pod's search starts among the nodes that may help (modulo their number)."""
        return int(self._offsets.integers(2**31))

    def make_room(
        self, attempt: Attempt, victims: list[reclaim.Candidate], *, reason: str, event: str, message: str
    ) -> None:
        """Commit ``victims`` for ``attempt`` as one statement: the room they free nominated for it, every victim
        evicted (``reason`` in their Events), and an Event ``event`` for the job."""
        self.found(attempt)
        self.evict(attempt.key, attempt.priority, victims, reason)
        self.events.emit(obj=attempt.obj, kind="Normal", reason=event, message=message)

    def unnominate(self, key: str) -> None:
        """Clear the nominatedNodeName of single pod ``key``, if it has one."""
        nominated = self.nominations.pop(key, None)
        if nominated is not None and self.evictor is not None:
            self.evictor.nominate(nominated[0], "")

    def victims(
        self,
        pods: list[PodRequest],
        priority: int,
        policy: str,
        candidates: list[reclaim.Candidate],
        required_level: int | None,
        surplus: dict[str, dict[str, float]] | None = None,
        *,
        snapshot: Snapshot,
        context: Mapping[str, Any] | None = None,
        held: np.ndarray | None = None,
        group: PodGroup | None = None,
    ) -> list[reclaim.Candidate]:
        """``context``: what the job's what-ifs respect, as its own cycle does; ``held``: nodes held for other jobs
        where only what its own victims free counts (``Holds.in_search``); ``group``: the gang whose core ``pods``
        are, whose segments must each find a domain (``reclaim.find_victims``)."""
        find: Callable[..., list[reclaim.Candidate]] = reclaim.find_victims
        current = self._running_at
        version = fruitless.generation(self.scheduler.cache.arrays)
        placed = current[1].placements if current is not None and current[0] == version else None
        # The queues' shares as the candidates were built (they come from the last build).
        ahead = current[1].ahead if current is not None else None
        kwargs: dict[str, object] = {
            "snapshot": snapshot,
            "placed": placed,
            "context": context,
            "held": held,
            "group": group,
            "ahead": ahead,
        }
        if required_level is not None:
            find, kwargs = reclaim.find_victims_in_domain, {**kwargs, "level": required_level}
        return find(
            self.scheduler, pods, priority=priority, policy=policy, candidates=candidates, surplus=surplus, **kwargs
        )

    def evict(self, key: str, priority: int, victims: list[reclaim.Candidate], reason: str) -> None:
        self.holds.nominate(key, [pod for victim in victims for pod in victim.pods], priority)
        for victim in victims:
            self.evict_one(victim, reason)

    def evict_one(self, victim: reclaim.Candidate, reason: str) -> None:
        assert self.evictor is not None
        for pod in victim.pods:
            self.events.emit(obj=f"pod {pod.key}", kind="Warning", reason="Preempted", message=reason)
        self.evictor.evict(victim.pods, reason)
        self.terminating[victim.key] = victim
        self.preemptions[victim.queue] = self.preemptions.get(victim.queue, 0) + 1
