"""Preemption: make room for a job that does not fit, least disruptive first, whole jobs at a time.

First reclaim: when the job stays within its queue's guarantee, borrowed work of other queues (the job's queue's
``reclaim`` policy), never taking a victim's queue below its own guarantee. Else within-queue preemption:
lower-priority work of its own queue (``withinQueue``). Victims are chosen by ``scheduler.core.reclaim`` on what-ifs
of the snapshot; a job that requires one topology domain gets victims from one domain only.

State kept here and nowhere else: victims evicted and not gone yet (never chosen again, and no longer counted as
their queue's surplus), the cluster version at which a job's last search found nothing (not searched again until
the cluster changes), and how many jobs were preempted per victim queue (metrics). The nodes a preemptor frees are
nominated for it in :class:`scheduler.core.holds.Holds`.
"""

from __future__ import annotations

from collections.abc import Callable

from scheduler.api.pod import PodRequest
from scheduler.core import reclaim
from scheduler.core.cycle import Scheduler
from scheduler.core.holds import Holds
from scheduler.core.jobs import Jobs
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
        #: Jobs preempted so far, by the victim's queue.
        self.preemptions: dict[str, int] = {}
        self._candidates: tuple[int, list[reclaim.Candidate]] | None = None

    def forget(self, key: str) -> None:
        """Job ``key`` is placed or gone."""
        self.no_victims.pop(key, None)

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

    def preempt(
        self, item: QueueItem, pods: list[PodRequest], priority: int, obj: str, required_level: int | None = None
    ) -> bool:
        """Evict victims so that ``item`` (``pods`` at ``priority``) fits; True if it waits for victims now."""
        if self.evictor is None:
            return False
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
        candidates = [c for c in self.running(version) if c.key not in self.terminating]
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
                self._evict(item.key, victims, f"preempted to give queue {item.queue!r} its guarantee back ({obj})")
                self.events.emit(
                    obj=obj,
                    kind="Normal",
                    reason="Reclaiming",
                    message=f"preempting {len(victims)} job(s) of queues above their guarantee",
                )
                return True
        own = [c for c in candidates if c.queue == item.queue and c.priority < priority]
        if not own:
            return False
        victims = self._victims(pods, priority, self.tenancy.within_queue_policy(item.queue), own, required_level)
        if not victims:
            return False
        del self.no_victims[item.key]
        self._evict(item.key, victims, f"preempted by higher-priority work of queue {item.queue!r} ({obj})")
        self.events.emit(
            obj=obj,
            kind="Normal",
            reason="Preempting",
            message=f"preempting {len(victims)} lower-priority job(s) of queue {item.queue!r}",
        )
        return True

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

    def _evict(self, key: str, victims: list[reclaim.Candidate], reason: str) -> None:
        assert self.evictor is not None
        self.holds.nominate(key, [pod for victim in victims for pod in victim.pods])
        for victim in victims:
            for pod in victim.pods:
                self.events.emit(obj=f"pod {pod.key}", kind="Warning", reason="Preempted", message=reason)
            self.evictor.evict(victim.pods, reason)
            self.terminating[victim.key] = victim
            self.preemptions[victim.queue] = self.preemptions.get(victim.queue, 0) + 1
