"""The preempt action: a job that does not fit evicts lower-priority work of its own queue (``withinQueue``).

A gang (or a gang's member placed alone) takes whole jobs of its queue of lower priority, found on what-ifs of
the snapshot by ``scheduler.core.reclaim.find_victims`` (from one domain when its topology requires one). A single
pod does it as kube-scheduler's DefaultPreemption: victims on one node (``node_preemption.node_victims``, budgets
weighed), that node nominated for it (``status.nominatedNodeName``, cleared when a later search finds nothing),
and victims evicted for a pod of lower priority counted as its own. The room is nominated for the job and every
victim evicted, as one statement.

An elastic gang's surplus (its members placed beyond ``minMember``) is lent: a gang of the same queue waiting for
its minimum takes it even at equal priority (never a core of equal priority), so that a job that grew into idle
room does not keep the next job of its queue from starting. A member growing its own gang takes nothing of equal
priority, so the surplus does not come back by preemption.
"""

from __future__ import annotations

from scheduler.api.pod import PodRequest
from scheduler.cache.state import Snapshot
from scheduler.core import node_preemption, reclaim
from scheduler.core.actions import NOTHING, WAITS, Outcome
from scheduler.core.cycle import NOMINATED_PODS
from scheduler.core.jobs import Attempt
from scheduler.core.preemption import Preemptor, Search
from scheduler.core.tenancy import Tenancy
from scheduler.framework.interface import RESERVED_SLOTS


class Preempt:
    name = "preempt"

    def __init__(self, preemptor: Preemptor, tenancy: Tenancy) -> None:
        self.preemptor = preemptor
        self.tenancy = tenancy

    def run(self, attempt: Attempt, snapshot: Snapshot) -> Outcome:
        search = self.preemptor.search(attempt)
        if search.waits:
            return WAITS
        if not search.may:
            if attempt.job.group is None:
                self.preemptor.unnominate(attempt.key)  # nothing found for its shape at this generation already
            return NOTHING
        if attempt.job.group is None:
            if self._pod(attempt, attempt.members[0], search, snapshot):
                return WAITS
            self.preemptor.unnominate(attempt.key)
            return NOTHING
        queue, priority, job = attempt.queue, attempt.priority, attempt.job.key
        lent = attempt.whole_gang
        own = [
            c
            for c in search.candidates
            if c.queue == queue
            and (c.priority < priority or (lent and c.surplus and c.priority == priority))
            and c.job != job
        ]
        if not own:
            return NOTHING
        policy = self.tenancy.within_queue_policy(queue)
        # ``own`` holds only what it may take: a bound one above its priority lets its lent surplus through.
        # A segmented gang is fitted segment by segment. Of the attempt's context only the nodes held for other
        # jobs count, as its cycles will see them once it holds room of its own (see docs/gangs.md on held nodes),
        # and the single pods nominated for others of its priority or higher, counted on their nodes.
        kept, held = self.preemptor.holds.in_search(attempt.key, priority)
        context: dict[str, object] = {} if kept is None else {RESERVED_SLOTS: kept}
        if nominated := attempt.context.get(NOMINATED_PODS):
            context[NOMINATED_PODS] = nominated
        victims = self.preemptor.victims(
            attempt.members,
            priority + 1,
            policy,
            own,
            attempt.level,
            snapshot=snapshot,
            context=context or None,
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
        self.preemptor.make_room(attempt, victims, reason=reason, event="Preempting", message=message)
        return WAITS

    def _pod(self, attempt: Attempt, pod: PodRequest, search: Search, snapshot: Snapshot) -> bool:
        """Within-queue preemption for one pod, on one node, as kube-scheduler's DefaultPreemption does it."""
        p = self.preemptor
        key, queue, priority, obj = attempt.key, attempt.queue, attempt.priority, attempt.obj
        if self.tenancy.within_queue_policy(queue) == reclaim.NEVER:
            return False

        # Victims already evicted (for this pod, or for a pod of lower priority) are still on their node: this pod
        # may count them.
        def available(c: reclaim.Candidate) -> bool:
            if c.key not in p.terminating:
                return True
            evicted_for, evictor_priority = p.evicted_for.get(c.key, ("", priority))
            return evicted_for == key or evictor_priority < priority

        placed = search.placements
        assert placed is not None
        own = (placed.queue == placed.queues.get(queue, -1)) & (placed.priority < priority)
        for leaving, victim in p.terminating.items():
            if (index := placed.index.get(leaving)) is not None and not available(victim):
                own[index] = False
        if not own.any():
            return False
        choice = node_preemption.node_victims(
            p.scheduler,
            pod,
            priority=priority,
            placed=placed,
            allowed=own,
            budgets=list(p.budgets.values()),
            snapshot=snapshot,
            reasons=attempt.reasons,
            offset=p.offset(),
            held=p.holds.nominated_for_others(key, priority),
            nominated=p.holds.nominated_pods(key, priority),
        )
        if choice is None:
            return False
        p.found(attempt)
        # Lower-priority pods nominated to this node may no longer fit there: they search again (kube-scheduler
        # clears their nominatedNodeName too).
        for other, (_, node, other_priority) in list(p.nominations.items()):
            taken = any(p.evicted_for.get(v.key, ("", 0))[0] == other for v in choice.victims)
            if other != key and other_priority < priority and (node == choice.node or taken):
                p.retry(other)
                p.holds.release(other)
                p.unnominate(other)
        p.holds.nominate(key, choice.pods, priority, pod=pod, node=choice.node)
        reason = f"Preempted by pod {pod.uid or pod.key} on node {choice.node}: higher-priority work of queue "
        reason += f"{queue!r} ({obj})"
        for victim in choice.victims:
            p.evicted_for[victim.key] = (key, priority)
            if victim.key in p.terminating:
                continue  # evicted already, for a pod of lower priority
            if all(v.deleting for v in victim.pods):
                p.terminating[victim.key] = victim  # being deleted by someone else: no second deletion
                continue
            p.evict_one(victim, reason)
        if p.nominations.get(key, (pod, "", 0))[1] != choice.node:
            assert p.evictor is not None
            p.evictor.nominate(pod, choice.node)
        p.nominations[key] = (pod, choice.node, priority)
        budgets = f", {choice.violations} exceeding a PodDisruptionBudget" if choice.violations else ""
        p.events.emit(
            obj=obj,
            kind="Normal",
            reason="Preempting",
            message=f"preempting {len(choice.pods)} lower-priority pod(s) of queue {queue!r} on node "
            f"{choice.node}{budgets}",
        )
        return True
