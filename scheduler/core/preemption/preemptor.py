"""Preemption's state and the victim search that the reclaim and preempt actions share.

The decisions are the actions' (``scheduler.core.actions.reclaim``: borrowed work of other queues;
``scheduler.core.actions.preempt``: lower-priority work of the job's own queue); victims are chosen by
``scheduler.core.preemption.victims`` on what-ifs of the snapshot. Here: who may search (an evictor is set; a pod with
``preemptionPolicy: Never`` never preempts; a job whose victims are still terminating waits for them), the
candidates (every job holding capacity, whole; an elastic gang's surplus members one by one, then its core), and
eviction, recorded as steps of the session's statement (``scheduler.core.statement``: made real only when the session
commits them).

State kept here and nowhere else: victims evicted and not gone yet (never chosen again by a job of equal or lower
priority, and no longer counted as their queue's surplus), the searches that found nothing at the cluster's
generation (a :class:`scheduler.core.memo.Memo`: not run again until the cluster changes, for the job, or
for any single pod of the same shape, queue and priority), and how many jobs were preempted per victim queue
(metrics). It is the reclaim and preempt actions' one state (``scheduler.core.actions.State``: the loop tells it what
happened through its hooks). The room a preemptor frees is held for it, and a single pod's nominated node recorded,
in the holds registry (:class:`scheduler.core.holds.Holds`, read and written through it: nominations are stored there
only).

A single pod's search is kube-scheduler's PostFilter in its cost as in its choice: the candidates are arrays put
together once per generation (:class:`scheduler.core.preemption.victims.Placements`) from what
:class:`scheduler.core.running_jobs.RunningJobs` keeps per job (rebuilt only when the job changed), the nodes its
cycle refused for a reason no eviction changes are not tried, and the nodes are tried from a random one on (seeded
by the profile's ``seed``).
"""

from __future__ import annotations

import dataclasses
import functools
import operator
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

import numpy as np

from scheduler.api.crds.podgroup import PodGroup
from scheduler.api.objects.pod import PREEMPT_NEVER, PodRequest
from scheduler.cache.state import Snapshot
from scheduler.core import memo
from scheduler.core.actions import WAITS, Outcome, Setting, State
from scheduler.core.cycle import EMPTY, Context
from scheduler.core.holds import Kind
from scheduler.core.jobs import Attempt
from scheduler.core.ports import Evictor
from scheduler.core.preemption import nodes as node_preemption
from scheduler.core.preemption import victims as reclaim
from scheduler.core.running_jobs import Running, RunningJobs
from scheduler.core.statement import Statement

#: Fruitless searches remembered at most (the oldest goes first); each holds only at the generation it was found at.
_FRUITLESS_KEPT = 4096

#: kube-scheduler's PostFilter messages (DefaultPreemption's PodEligibleToPreemptOthers) for a pod that may not
#: preempt: its ``preemptionPolicy`` is ``Never``; its victims are still terminating.
NOT_ELIGIBLE_NEVER = "preemption: not eligible due to preemptionPolicy=Never."
NOT_ELIGIBLE_TERMINATING = "preemption: not eligible due to a terminating pod on the nominated node."
#: A single pod whose victims are still terminating waits for them, and says so as kube-scheduler does.
WAITS_FOR_VICTIMS = Outcome(WAITS.verdict, said=NOT_ELIGIBLE_TERMINATING)


def waits_for_victims(attempt: Attempt) -> Outcome:
    """What reclaim and preempt answer for a job whose victims are still terminating (``Search.waits``)."""
    return WAITS_FOR_VICTIMS if attempt.job.group is None else WAITS


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


class Preemptor(State):
    def __init__(self, setting: Setting) -> None:
        scheduler, jobs, tenancy = setting.scheduler, setting.jobs, setting.tenancy
        self.setting = setting
        self.scheduler = scheduler
        self.jobs = jobs
        self.tenancy = tenancy
        self.holds = setting.holds
        self.events = setting.events
        #: The cluster's PodDisruptionBudgets (the loop's: one copy).
        self.budgets = setting.budgets
        #: The searches that found no victims at the cluster's generation (:meth:`_memo_key`).
        self.fruitless: memo.Memo[Hashable, int, int] = memo.Memo(operator.eq, limit=_FRUITLESS_KEPT)
        #: Victims evicted and not yet gone (job key -> the candidate).
        self.terminating: dict[str, reclaim.Candidate] = {}
        #: Per victim in :attr:`terminating`, the job it was evicted for and that job's priority.
        self.evicted_for: dict[str, tuple[str, int]] = {}
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

    @property
    def evictor(self) -> Evictor | None:
        """Who deletes preempted pods (the loop's; None: no preemption)."""
        return self.setting.evictor

    # --- the loop's hooks (``scheduler.core.actions.State``) ----------------------------------------------------

    def job_placed(self, key: str) -> None:
        self.forget(key)

    def job_gone(self, key: str) -> None:
        self.forget(key)

    def forget(self, key: str) -> None:
        """Job ``key`` is placed or gone (a binding clears the pod's nominatedNodeName in the API server)."""
        self.fruitless.forget(("job", key))
        self.holds.unnominate(key)

    def queues_changed(self) -> set[str]:
        self.policies_changed()
        return set()

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
        return self._running(memo.generation(self.scheduler.cache.arrays))[1]

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
        version = memo.generation(self.scheduler.cache.arrays)
        key = self._memo_key(attempt)
        if self.fruitless.recall(key, version) is not None:
            return Search(may=False, known=True)
        self.fruitless.keep(key, version)  # until it finds victims (found)
        for victim_key, victim in list(self.terminating.items()):
            if all(self.scheduler.cache.pod(p.key) is None for p in victim.pods):
                del self.terminating[victim_key]
                self.evicted_for.pop(victim_key, None)
        running, placements = self._running(version)
        return Search(running=running, placements=placements, leaving=frozenset(self.terminating))

    def outcome_key(self, attempt: Attempt) -> tuple[Hashable, int]:
        """What a search's outcome is remembered by (:meth:`_memo_key`), with the cluster's generation: the same key
        finds the same victims, or none, on the same nodes."""
        return self._memo_key(attempt), memo.generation(self.scheduler.cache.arrays)

    def _memo_key(self, attempt: Attempt) -> Hashable:
        """What a fruitless search is remembered by: a single pod's shape, queue and priority (any pod of them finds
        what it finds), unless victims were evicted for it (it may count them); else the job."""
        if attempt.job.group is None and all(f != attempt.key for f, _ in self.evicted_for.values()):
            shape = memo.pod_shape(attempt.members[0])
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
        nominated = self.holds.nomination(key)
        if nominated is not None and nominated.pod is not None:
            shape = memo.pod_shape(nominated.pod)
            if shape is not None:
                self.fruitless.forget(("pod", self.jobs.queue_of(nominated.pod), nominated.priority, shape))

    def eviction_failed(self, pod_key: str, message: str) -> set[str]:
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
        return set(jobs)

    # --- what the reclaim and preempt actions ask ----------------------------------------------------------------

    def offset(self) -> int:
        """Where a single pod's search starts among the nodes that may help (modulo their number)."""
        return int(self._offsets.integers(2**31))

    def make_room(
        self,
        attempt: Attempt,
        victims: list[reclaim.Candidate],
        statement: Statement,
        *,
        reason: str,
        event: str,
        message: str,
    ) -> None:
        """Record on ``statement`` what ``victims`` do for ``attempt``: the room they free nominated for it, every
        victim evicted (``reason`` in their Events), and an Event ``event`` for the job."""
        self.found(attempt)
        key, priority = attempt.key, attempt.priority
        freed = [pod for victim in victims for pod in victim.pods]
        kind = Kind.PREEMPTION if attempt.job.group is None else Kind.GANG
        statement.nominate(lambda: self.holds.nominate(key, freed, priority, kind=kind))
        for victim in victims:
            statement.evict(functools.partial(self.evict_one, victim, reason))
        statement.tell(lambda: self.events.emit(obj=attempt.obj, kind="Normal", reason=event, message=message))

    def in_search(self, key: str, priority: int) -> tuple[np.ndarray | None, np.ndarray | None]:
        """How job ``key``'s victim search sees the nodes held for others (``Holds.in_search``)."""
        return self.holds.in_search(key, priority)

    def leaving(self) -> list[reclaim.Candidate]:
        """The victims evicted and not gone yet (what they will free counts already)."""
        return list(self.terminating.values())

    def leaving_for_others(self, key: str, priority: int) -> list[str]:
        """The victims evicted and not gone for a job other than ``key`` of ``priority`` or higher (those evicted
        for ``key``, or for a pod of lower priority, are still on their node: it may count them)."""
        out = []
        for leaving, victim in self.terminating.items():
            evicted_for, evictor_priority = self.evicted_for.get(victim.key, ("", priority))
            if evicted_for != key and evictor_priority >= priority:
                out.append(leaving)
        return out

    def node_victims(
        self,
        attempt: Attempt,
        pod: PodRequest,
        *,
        placed: reclaim.Placements,
        allowed: np.ndarray,
        snapshot: Snapshot,
    ) -> node_preemption.NodeVictims | None:
        """The node and victims that let single pod ``pod`` of ``attempt`` fit (``node_preemption.node_victims``),
        with the budgets weighed, the search started at a random node, and the pods nominated for others counted."""
        key, priority = attempt.key, attempt.priority
        return node_preemption.node_victims(
            self.scheduler,
            pod,
            priority=priority,
            placed=placed,
            allowed=allowed,
            budgets=list(self.budgets.values()),
            snapshot=snapshot,
            reasons=attempt.reasons,
            offset=self.offset(),
            held=self.holds.nominated_for_others(key, priority),
            nominated=self.holds.nominated_pods(key, priority),
        )

    def nominate_node(
        self, attempt: Attempt, pod: PodRequest, choice: node_preemption.NodeVictims, statement: Statement
    ) -> None:
        """Record on ``statement`` what ``choice`` does for single pod ``pod`` of ``attempt``: its node nominated for
        it (the lower-priority pods nominated there search again), every victim evicted, and an Event saying so."""
        key, queue, priority, obj = attempt.key, attempt.queue, attempt.priority, attempt.obj
        self.found(attempt)
        # Lower-priority pods nominated to this node may no longer fit there: they search again (kube-scheduler
        # clears their nominatedNodeName too).
        for other in self.holds.of_kind(Kind.NOMINATION):
            taken = any(self.evicted_for.get(v.key, ("", 0))[0] == other.job for v in choice.victims)
            if other.job != key and other.priority < priority and (other.node == choice.node or taken):
                statement.nominate(functools.partial(self._displaced, other.job))
        # What the pod's nominatedNodeName says now: nothing else changes it before the statement commits.
        previous = self.holds.nomination(key)
        written = previous.node if previous is not None else ""
        statement.nominate(lambda: self.holds.nominate(key, choice.pods, priority, pod=pod, node=choice.node))
        reason = f"Preempted by pod {pod.uid or pod.key} on node {choice.node}: higher-priority work of queue "
        reason += f"{queue!r} ({obj})"
        for victim in choice.victims:
            statement.evict(functools.partial(self._evict_for, victim, key, priority, reason))
        statement.nominate(lambda: self._nominated(pod, choice.node, written))
        budgets = f", {choice.violations} exceeding a PodDisruptionBudget" if choice.violations else ""
        message = (
            f"preempting {len(choice.pods)} lower-priority pod(s) of queue {queue!r} on node {choice.node}{budgets}"
        )
        statement.tell(lambda: self.events.emit(obj=obj, kind="Normal", reason="Preempting", message=message))

    def _displaced(self, key: str) -> None:
        """Nominated single pod ``key`` lost its node to a preemptor of higher priority."""
        self.retry(key)
        self.holds.release(key)
        self.unnominate(key)

    def _evict_for(self, victim: reclaim.Candidate, key: str, priority: int, reason: str) -> None:
        """Evict ``victim`` for job ``key`` of ``priority``, unless it is leaving already."""
        self.evicted_for[victim.key] = (key, priority)
        if victim.key in self.terminating:
            return  # evicted already, for a pod of lower priority
        if all(v.deleting for v in victim.pods):
            self.terminating[victim.key] = victim  # being deleted by someone else: no second deletion
            return
        self.evict_one(victim, reason)

    def _nominated(self, pod: PodRequest, node: str, written: str) -> None:
        """Single pod ``pod`` waits for ``node``: its nominatedNodeName says so (``written``: what it said)."""
        if written != node:
            assert self.evictor is not None
            self.evictor.nominate(pod, node)

    def unnominate(self, key: str) -> None:
        """Clear the nominatedNodeName of single pod ``key``, if it has one."""
        nominated = self.holds.unnominate(key)
        if nominated is not None and nominated.pod is not None and self.evictor is not None:
            self.evictor.nominate(nominated.pod, "")

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
        context: Context = EMPTY,
        held: np.ndarray | None = None,
        group: PodGroup | None = None,
    ) -> list[reclaim.Candidate]:
        """``context``: what the job's what-ifs respect, as its own cycle does; ``held``: nodes held for other jobs
        where only what its own victims free counts (``Holds.in_search``); ``group``: the gang whose core ``pods``
        are, whose segments must each find a domain (``reclaim.find_victims``)."""
        find: Callable[..., list[reclaim.Candidate]] = reclaim.find_victims
        current = self._running_at
        version = memo.generation(self.scheduler.cache.arrays)
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

    def evict_one(self, victim: reclaim.Candidate, reason: str) -> None:
        assert self.evictor is not None
        for pod in victim.pods:
            self.events.emit(obj=f"pod {pod.key}", kind="Warning", reason="Preempted", message=reason)
        self.evictor.evict(victim.pods, reason)
        self.terminating[victim.key] = victim
        self.preemptions[victim.queue] = self.preemptions.get(victim.queue, 0) + 1
