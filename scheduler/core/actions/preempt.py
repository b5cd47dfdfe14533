"""The preempt action: a job that does not fit evicts lower-priority work of its own queue (``withinQueue``).

A gang (or a gang's member placed alone) takes whole jobs of its queue of lower priority, found on what-ifs of
the snapshot by ``scheduler.core.preemption.victims.find_victims`` (from one domain when its topology requires one). A
single
pod does it as kube-scheduler's DefaultPreemption: victims on one node (``node_preemption.node_victims``, budgets
weighed), that node nominated for it (``status.nominatedNodeName``, cleared when a later search finds nothing),
and victims evicted for a pod of lower priority counted as its own. The room is nominated for the job and every
victim evicted, as one statement (``scheduler.core.statement``).

An elastic gang's surplus (its members placed beyond ``minMember``) is lent: a gang of the same queue waiting for
its minimum takes it even at equal priority (never a core of equal priority), so that a job that grew into idle
room does not keep the next job of its queue from starting. A member growing its own gang takes nothing of equal
priority, so the surplus does not come back by preemption.
"""

from __future__ import annotations

import math
from collections.abc import Hashable

import numpy as np

from scheduler.api.objects.pod import PREEMPT_NEVER, PodRequest
from scheduler.cache.state import Snapshot
from scheduler.core import min_runtime
from scheduler.core.actions import NOTHING, WAITS, Action, Outcome, Setting, Verdict
from scheduler.core.cycle import Context
from scheduler.core.jobs import Attempt
from scheduler.core.preemption import nodes as node_preemption
from scheduler.core.preemption import victims as reclaim
from scheduler.core.preemption.preemptor import Preemptor, Search, waits_for_victims
from scheduler.core.statement import Statement


class Preempt(Action):
    name = "preempt"

    def __init__(self, setting: Setting) -> None:
        self.preemptor = setting.state(Preemptor, lambda: Preemptor(setting))
        self.states = (self.preemptor,)
        self.scheduler = setting.scheduler
        self.tenancy = setting.tenancy
        #: The last ``preemption: ...`` said, by :meth:`Preemptor.outcome_key`: the pods of one shape that the
        #: search memo answers at once are told the same without counting the nodes again.
        self._said: tuple[tuple[Hashable, int], str] | None = None

    def run(self, attempt: Attempt, snapshot: Snapshot, statement: Statement) -> Outcome:
        search = self.preemptor.search(attempt)
        single = attempt.job.group is None
        if search.waits:
            return waits_for_victims(attempt)
        if not search.may:
            if not single:
                return NOTHING
            self.preemptor.unnominate(attempt.key)
            said = search.refused
            if search.known:  # nothing found for its shape at this generation already: the same nodes, said again
                said = self._no_candidate(attempt, self.preemptor.placements(), snapshot, known=True)
            return Outcome(Verdict.NOTHING, said=said)
        if single:
            placed = search.placements
            assert placed is not None
            if self._pod(attempt, attempt.members[0], search, snapshot, statement):
                return WAITS
            self.preemptor.unnominate(attempt.key)
            return Outcome(Verdict.NOTHING, said=self._no_candidate(attempt, placed, snapshot))
        queue, priority, job = attempt.queue, attempt.priority, attempt.job.key
        lent = attempt.whole_gang
        own = [
            c
            for c in search.candidates
            if c.queue == queue
            and (c.priority < priority or (lent and c.surplus and c.priority == priority))
            and c.job != job
        ]
        own, spared = min_runtime.old_enough(self.tenancy, own, "preempt")
        if spared:
            self.preemptor.spared(attempt)
        if not own:
            return NOTHING
        policy = self.tenancy.within_queue_policy(queue)
        # ``own`` holds only what it may take: a bound one above its priority lets its lent surplus through.
        # A segmented gang is fitted segment by segment. Of the attempt's context only the nodes held for other
        # jobs count, as its cycles will see them once it holds room of its own (see docs/gangs.md on held nodes),
        # and the single pods nominated for others of its priority or higher, counted on their nodes.
        kept, held = self.preemptor.in_search(attempt.key, priority)
        context = Context(reserved=kept, nominated=attempt.context.nominated)
        victims = self.preemptor.victims(
            attempt.members,
            priority + 1,
            policy,
            own,
            attempt.level,
            snapshot=snapshot,
            context=context,
            held=held,
            group=attempt.job.group if attempt.whole_gang else None,
        )
        if not victims:
            return NOTHING
        if all(v.priority < priority for v in victims):
            reason = f"preempted by higher-priority work of queue {queue!r} ({attempt.obj})"
            message = f"preempting {len(victims)} lower-priority job(s) of queue {queue!r}"
        else:
            reason = f"surplus of an elastic gang given back to {attempt.obj} of queue {queue!r}, below its minimum"
            message = f"preempting {len(victims)} job(s) or surplus member(s) of queue {queue!r}"
        self.preemptor.make_room(attempt, victims, statement, reason=reason, event="Preempting", message=message)
        return WAITS

    def evicts_below(self, attempt: Attempt) -> float:
        """Work of lower priority (a whole gang takes an elastic gang's surplus at its own priority too); none without
        an evictor or for a pod that never preempts."""
        if self.preemptor.evictor is None:
            return -math.inf
        if attempt.job.group is None and attempt.members[0].preemption_policy == PREEMPT_NEVER:
            return -math.inf
        return attempt.priority + 1 if attempt.whole_gang else attempt.priority

    def _own(self, attempt: Attempt, placed: reclaim.Placements) -> np.ndarray:
        """Per candidate of ``placed``, whether single pod ``attempt`` may evict it: work of its queue of lower
        priority (none when the queue's withinQueue policy is never), not evicted already for another pod of its
        priority or higher (victims evicted for it, or for a pod of lower priority, are still on their node: it
        may count them). Those not old enough yet are told apart by :meth:`_young`."""
        key, priority = attempt.key, attempt.priority
        if self.tenancy.within_queue_policy(attempt.queue) == reclaim.NEVER:
            return np.zeros(len(placed.candidates), dtype=bool)
        own = (placed.queue == placed.queues.get(attempt.queue, -1)) & (placed.priority < priority)
        for leaving in self.preemptor.leaving_for_others(key, priority):
            if (index := placed.index.get(leaving)) is not None:
                own[index] = False
        return np.asarray(own, dtype=bool)

    def _young(self, placed: reclaim.Placements, own: np.ndarray) -> np.ndarray:
        """Per candidate of ``placed``, whether one ``own`` lets through has not run its queue's minimum run time
        before preemption within the queue (``scheduler.core.min_runtime``)."""
        young = np.zeros(len(placed.candidates), dtype=bool)
        if not min_runtime.in_force(self.tenancy, "preempt"):
            return young
        for i in np.flatnonzero(own).tolist():
            young[i] = not min_runtime.may_disturb(self.tenancy, placed.candidates[i], "preempt")
        return young

    def _no_candidate(
        self, attempt: Attempt, placed: reclaim.Placements, snapshot: Snapshot, *, known: bool = False
    ) -> str:
        """kube-scheduler's ``preemption: ...`` for a single pod no node can make room for; ``known``: the search
        memo answered (a search that ran counts the nodes again: a queue's policy may have changed meanwhile)."""
        key = self.preemptor.outcome_key(attempt)
        if known and self._said is not None and self._said[0] == key:
            return self._said[1]
        allowed = self._own(attempt, placed)
        young = self._young(placed, allowed)
        pod = attempt.members[0]
        said = node_preemption.no_candidate(
            snapshot,
            pod,
            self.scheduler.cache.request_vector(pod),
            priority=attempt.priority,
            placed=placed,
            allowed=allowed & ~young,
            reasons=attempt.reasons,
            young=young,
            scheduler=self.scheduler,
        )
        self._said = (key, said)
        return said

    def _pod(self, attempt: Attempt, pod: PodRequest, search: Search, snapshot: Snapshot, statement: Statement) -> bool:
        """Within-queue preemption for one pod, on one node, as kube-scheduler's DefaultPreemption does it."""
        placed = search.placements
        assert placed is not None
        own = self._own(attempt, placed)
        young = self._young(placed, own)
        if young.any():
            self.preemptor.spared(attempt)
            own &= ~young
        if not own.any():
            return False
        choice = self.preemptor.node_victims(attempt, pod, placed=placed, allowed=own, snapshot=snapshot)
        if choice is None:
            return False
        self.preemptor.nominate_node(attempt, pod, choice, statement)
        return True
