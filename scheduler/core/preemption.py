"""Preemption: make room for a job that does not fit, least disruptive first, whole jobs at a time.

First reclaim: when the job stays within its queue's guarantee, borrowed work of other queues (the job's queue's
``reclaim`` policy), never taking a victim's queue below its own guarantee. Else within-queue preemption:
lower-priority work of its own queue (``withinQueue``). Victims are chosen by ``scheduler.core.reclaim`` on what-ifs
of the snapshot; a job that requires one topology domain gets victims from one domain only.

A single pod (not a gang) preempting within its queue does it as kube-scheduler's DefaultPreemption: victims of
strictly lower priority on one node, PodDisruptionBudgets weighed (``reclaim.node_victims``); a pod with
``preemptionPolicy: Never`` never preempts. Its ``status.nominatedNodeName`` is set to that node (through the
evictor) and cleared when a later search finds nothing or a higher-priority pod takes the node over. Victims
already terminating cost nothing more: a pod of higher priority than the one they were evicted for may count them
as its own (as kube-scheduler counts every pod still on the node), and the lower one's nomination is dropped.

State kept here and nowhere else: victims evicted and not gone yet (never chosen again by a job of equal or lower
priority, and no longer counted as their queue's surplus), the cluster version at which a job's last search found
nothing (not searched again until the cluster changes), the nodes nominated for single pods, the cluster's
PodDisruptionBudgets, and how many jobs were preempted per victim queue (metrics). The nodes a preemptor frees are
nominated for it in :class:`scheduler.core.holds.Holds`.
"""

from __future__ import annotations

from collections.abc import Callable

from scheduler.api import pdb as api_pdb
from scheduler.api.pod import PREEMPT_NEVER, PodRequest
from scheduler.core import reclaim
from scheduler.core.cycle import Scheduler
from scheduler.core.holds import Holds
from scheduler.core.jobs import Attempt, Jobs
from scheduler.core.ports import Events, Evictor
from scheduler.core.tenancy import Tenancy, requests_of
from scheduler.queue.scheduling import QueueItem


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
        #: Job key -> the cluster's version when no victims could be found for it.
        self.no_victims: dict[str, int] = {}
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
        self._candidates: tuple[int, list[reclaim.Candidate]] | None = None

    def forget(self, key: str) -> None:
        """Job ``key`` is placed or gone (a binding clears the pod's nominatedNodeName in the API server)."""
        self.no_victims.pop(key, None)
        self.nominations.pop(key, None)

    def budget_upsert(self, budget: api_pdb.DisruptionBudget) -> None:
        self.budgets[budget.key] = budget

    def budget_removed(self, key: str) -> None:
        self.budgets.pop(key, None)

    def policies_changed(self) -> None:
        """Queues changed (guarantees, policies): searches that found nothing may find something now."""
        self.no_victims.clear()

    def running(self, version: int) -> list[reclaim.Candidate]:
        """Every job holding capacity (a gang as a whole, or a single pod) with its leaf queue; the same list
        while the cluster's ``version`` stays (placements and removals change it)."""
        if self._candidates is not None and self._candidates[0] == version:
            return self._candidates[1]
        cache = self.scheduler.cache
        candidates = []
        for job in self.jobs.all():
            if job.started is None:
                continue
            pods = [e.pod for k in job.placed if (e := cache.pod(k)) is not None]
            if not pods:
                continue
            queue = job.queue
            priority = max([job.group.priority, *(p.priority for p in pods)]) if job.group else pods[0].priority
            ahead = self.tenancy.rank(queue)[1][-1][0]
            candidates.append(reclaim.Candidate(job.key, queue, priority, job.started, pods, requests_of(pods), ahead))
        self._candidates = (version, candidates)
        return candidates

    def preempt(self, attempt: Attempt, required_level: int | None = None) -> bool:
        """Evict victims so that ``attempt`` fits; True if it waits for victims now."""
        if self.evictor is None:
            return False
        item, pods, priority, obj = attempt.item, attempt.members, attempt.priority, attempt.obj
        # A pod of its own (a gang's member placed alone near its gang keeps the gang's rules).
        single = pods[0] if attempt.job.group is None else None
        if single is not None and single.preemption_policy == PREEMPT_NEVER:
            return False  # kube-scheduler: "not eligible due to preemptionPolicy=Never."
        evicting = self.holds.still_evicting(item.key)
        if evicting:
            return True  # its victims are still terminating
        a = self.scheduler.cache.arrays
        version = int(a.gen.max()) if a.slots else 0
        if self.no_victims.get(item.key) == version:
            return False
        self.no_victims[item.key] = version
        for victim_key, victim in list(self.terminating.items()):
            if all(self.scheduler.cache.pod(p.key) is None for p in victim.pods):
                del self.terminating[victim_key]
                self.evicted_for.pop(victim_key, None)
        running = self.running(version)
        candidates = [c for c in running if c.key not in self.terminating]
        if self.tenancy.within_guarantee(item.queue, requests_of(pods)):
            borrowers = [c for c in candidates if c.queue != item.queue and self.tenancy.borrowing(c.queue)]
            surplus = {q: bound for q in {c.queue for c in borrowers} if (bound := self.tenancy.surplus(q)) is not None}
            for victim in self.terminating.values():
                left = surplus.get(victim.queue)
                if left is not None:
                    for name in left:
                        left[name] -= victim.request.get(name, 0.0)
            policy = self.tenancy.reclaim_policy(item.queue)
            victims = self._victims(pods, priority, policy, borrowers, required_level, surplus)
            if victims:
                del self.no_victims[item.key]
                reason = f"preempted to give queue {item.queue!r} its guarantee back ({obj})"
                self._evict(item.key, priority, victims, reason)
                self.events.emit(
                    obj=obj,
                    kind="Normal",
                    reason="Reclaiming",
                    message=f"preempting {len(victims)} job(s) of queues above their guarantee",
                )
                return True
        if single is not None:
            found = self._preempt_pod(item, single, priority, obj, running)
            if not found:
                self._unnominate(item.key)
            return found
        own = [c for c in candidates if c.queue == item.queue and c.priority < priority]
        if not own:
            return False
        victims = self._victims(pods, priority, self.tenancy.within_queue_policy(item.queue), own, required_level)
        if not victims:
            return False
        del self.no_victims[item.key]
        self._evict(item.key, priority, victims, f"preempted by higher-priority work of queue {item.queue!r} ({obj})")
        self.events.emit(
            obj=obj,
            kind="Normal",
            reason="Preempting",
            message=f"preempting {len(victims)} lower-priority job(s) of queue {item.queue!r}",
        )
        return True

    def _preempt_pod(
        self, item: QueueItem, pod: PodRequest, priority: int, obj: str, running: list[reclaim.Candidate]
    ) -> bool:
        """Within-queue preemption for one pod, on one node, as kube-scheduler's DefaultPreemption does it."""
        if self.tenancy.within_queue_policy(item.queue) == reclaim.NEVER:
            return False

        # Victims already evicted (for this pod, or for a pod of lower priority) are still on their node: this pod
        # may count them.
        def available(c: reclaim.Candidate) -> bool:
            if c.key not in self.terminating:
                return True
            evicted_for, evictor_priority = self.evicted_for.get(c.key, ("", priority))
            return evicted_for == item.key or evictor_priority < priority

        own = [c for c in running if c.queue == item.queue and c.priority < priority and available(c)]
        if not own:
            return False
        choice = reclaim.node_victims(
            self.scheduler, pod, priority=priority, candidates=own, budgets=list(self.budgets.values())
        )
        if choice is None:
            return False
        del self.no_victims[item.key]
        # Lower-priority pods nominated to this node may no longer fit there: they search again (kube-scheduler
        # clears their nominatedNodeName too).
        for other, (_, node, other_priority) in list(self.nominations.items()):
            taken = any(self.evicted_for.get(v.key, ("", 0))[0] == other for v in choice.victims)
            if other != item.key and other_priority < priority and (node == choice.node or taken):
                self.holds.release(other)
                self._unnominate(other)
                self.no_victims.pop(other, None)
        self.holds.nominate(item.key, choice.pods, priority)
        reason = f"Preempted by pod {pod.uid or pod.key} on node {choice.node}: higher-priority work of queue "
        reason += f"{item.queue!r} ({obj})"
        for victim in choice.victims:
            self.evicted_for[victim.key] = (item.key, priority)
            if victim.key in self.terminating:
                continue  # evicted already, for a pod of lower priority
            if all(p.deleting for p in victim.pods):
                self.terminating[victim.key] = victim  # being deleted by someone else: no second deletion
                continue
            self._evict_one(victim, reason)
        if self.nominations.get(item.key, (pod, "", 0))[1] != choice.node:
            assert self.evictor is not None
            self.evictor.nominate(pod, choice.node)
        self.nominations[item.key] = (pod, choice.node, priority)
        budgets = f", {choice.violations} exceeding a PodDisruptionBudget" if choice.violations else ""
        self.events.emit(
            obj=obj,
            kind="Normal",
            reason="Preempting",
            message=f"preempting {len(choice.pods)} lower-priority pod(s) of queue {item.queue!r} on node "
            f"{choice.node}{budgets}",
        )
        return True

    def _unnominate(self, key: str) -> None:
        """Clear the nominatedNodeName of single pod ``key``, if it has one."""
        nominated = self.nominations.pop(key, None)
        if nominated is not None and self.evictor is not None:
            self.evictor.nominate(nominated[0], "")

    def _victims(
        self,
        pods: list[PodRequest],
        priority: int,
        policy: str,
        candidates: list[reclaim.Candidate],
        required_level: int | None,
        surplus: dict[str, dict[str, float]] | None = None,
    ) -> list[reclaim.Candidate]:
        find: Callable[..., list[reclaim.Candidate]] = reclaim.find_victims
        kwargs = {}
        if required_level is not None:
            find, kwargs = reclaim.find_victims_in_domain, {"level": required_level}
        return find(
            self.scheduler, pods, priority=priority, policy=policy, candidates=candidates, surplus=surplus, **kwargs
        )

    def _evict(self, key: str, priority: int, victims: list[reclaim.Candidate], reason: str) -> None:
        self.holds.nominate(key, [pod for victim in victims for pod in victim.pods], priority)
        for victim in victims:
            self._evict_one(victim, reason)

    def _evict_one(self, victim: reclaim.Candidate, reason: str) -> None:
        assert self.evictor is not None
        for pod in victim.pods:
            self.events.emit(obj=f"pod {pod.key}", kind="Warning", reason="Preempted", message=reason)
        self.evictor.evict(victim.pods, reason)
        self.terminating[victim.key] = victim
        self.preemptions[victim.queue] = self.preemptions.get(victim.queue, 0) + 1
