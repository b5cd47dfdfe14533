"""The scheduling loop: pending pods and gangs in, cycles run, results out as events and group status.

Everything that wants a decision enters here (the operator's handlers and the simulator call the same
methods): :meth:`SchedulingLoop.pod_pending` for a pod of ours without a node, :meth:`pod_placed` and
:meth:`pod_gone` for what the API server (or the simulator) says, :meth:`group_upsert` / :meth:`group_removed`
for PodGroups, :meth:`cluster_event` when the cluster changed so that waiting work may now fit.

Gang rules kept here:
- a group is not tried until ``minMember`` of its members exist; then one cycle places ``minMember`` of them
  all or nothing (``scheduler.core.gang``), and the others are placed afterwards one by one, near the gang;
- a member of a group that does not exist waits (with an Event) and joins when the group appears;
- a group that cannot be placed gets condition Scheduled=False with the per-reason node counts, an Event,
  and backoff; after ``scheduleTimeoutSeconds`` it turns Unschedulable and is still retried;
- a bind failure of one member keeps the other members' reservations and retries that member alone.

Queue rules kept here (``scheduler.core.tenancy`` holds the numbers):
- work goes to the leaf queue named by the pod's ``gpusched.io/queue`` label or its PodGroup's ``spec.queue``,
  ``default`` without one; work for a queue that does not exist (or is not a leaf) waits with an Event and is
  queued as soon as the queue appears;
- a job runs only if its queue and every ancestor stay within their limits and borrowing ceilings;
- pending work is ordered by its queue's rank (below guarantee first, then the hierarchical borrowed share over
  weight, see ``scheduler.api.fairshare``), then by priority, then by age;
- a job that does not fit preempts, least disruptive first: borrowed work of other queues when the job stays
  within its queue's guarantee (the queue's ``reclaim`` policy), else lower-priority work of its own queue
  (``withinQueue``); whole gangs, lowest priority and youngest first, only if a what-if shows the job then fits;
- against starvation (when ``reserve_after_s`` is set), the best-ranked job of 2+ GPUs that does not fit for lack
  of room reserves the nodes with the most free GPUs until their GPUs cover it; other jobs backfill only
  elsewhere (the ``reservation`` filter plugin) until it is placed or gone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from scheduler.api.pod import PodRequest
from scheduler.api.podgroup import PodGroup
from scheduler.api.queue import QueueSpec
from scheduler.core import gang, reclaim
from scheduler.core.cycle import Scheduler
from scheduler.core.tenancy import Tenancy, add_into, request_of, requests_of
from scheduler.framework.interface import GANG_SLOTS, RESERVED_SLOTS, Code
from scheduler.kernels import layout
from scheduler.queue.scheduling import QueueItem, SchedulingQueue

GANG_PREFIX = "gang:"


class Evictor(Protocol):
    """Deletes preempted pods (the API server's eviction in a cluster; the simulator removes them)."""

    def evict(self, pods: list[PodRequest], reason: str) -> None: ...


class Events(Protocol):
    """Where the loop reports what users should see (Kubernetes Events in a cluster, a list in the simulator)."""

    def emit(self, *, obj: str, kind: str, reason: str, message: str) -> None: ...


@dataclass(slots=True)
class Condition:
    type: str
    status: str
    reason: str
    message: str
    since: float


@dataclass
class GroupState:
    """What the loop knows of one PodGroup: its members and the status users read."""

    group: PodGroup
    pending: dict[str, PodRequest] = field(default_factory=dict)
    placed: set[str] = field(default_factory=set)
    running: set[str] = field(default_factory=set)
    phase: str = "Pending"
    first_attempt: float | None = None
    last_schedule: float | None = None
    conditions: dict[str, Condition] = field(default_factory=dict)

    @property
    def satisfied(self) -> bool:
        return len(self.placed) >= self.group.min_member

    def set_condition(self, type_: str, status: str, reason: str, message: str, now: float) -> None:
        old = self.conditions.get(type_)
        since = old.since if old is not None and old.status == status else now
        self.conditions[type_] = Condition(type_, status, reason, message, since)


class SchedulingLoop:
    """Takes work from the queue and runs pod and gang cycles on the scheduler."""

    def __init__(
        self,
        scheduler: Scheduler,
        queue: SchedulingQueue,
        *,
        clock: Callable[[], float],
        events: Events,
        tenancy: Tenancy | None = None,
        evictor: Evictor | None = None,
        reserve_after_s: float | None = None,
        fair_share_gate: bool = True,
    ) -> None:
        self.scheduler = scheduler
        self.queue = queue
        self.clock = clock
        self.events = events
        self.tenancy = tenancy if tenancy is not None else Tenancy(scheduler.cache, clock=clock)
        self.evictor = evictor
        #: How long a job waits without room before it may reserve nodes; None turns reservations off. Off by
        #: default: without run-time estimates a reservation idles GPUs while its nodes drain (on the built-in
        #: gang scenario it cost 15 points of GPU allocation), so it is for fairness-first clusters.
        self.reserve_after_s = reserve_after_s
        #: When each running job started (gang key or pod key), for choosing the youngest victims.
        self.started: dict[str, float] = {}
        #: Whole GPUs each waiting job needed when it last failed for lack of room (a queueing hint: a pod
        #: deletion that leaves fewer free GPUs in the cluster cannot help it).
        self.needs: dict[str, int] = {}
        #: Leaf queue -> job key -> what the job asks for, for the jobs that failed for lack of room (the demand
        #: the fair-share gate weighs; see ``Tenancy.fair_share_gate``).
        self.starving: dict[str, dict[str, dict[str, float]]] = {}
        #: Per leaf, the sum of ``starving`` (kept as jobs come and go).
        self.starving_totals: dict[str, dict[str, float]] = {}
        #: Jobs the fair-share gate held back, with what they ask for (for the queueing hint).
        self.gated: dict[str, dict[str, float]] = {}
        #: Whether a queue at its fair share must leave freed capacity to queues below theirs (the gate).
        self.fair_share_gate = fair_share_gate
        #: Job key -> the cluster's version when no victims could be found for it: not searched again until
        #: the cluster changes (a search is a what-if per victim tried).
        self.no_victims: dict[str, int] = {}
        self._jobs: tuple[int, list[reclaim.Candidate]] | None = None
        #: Jobs preempted so far, by the victim's queue (for metrics).
        self.preemptions: dict[str, int] = {}
        #: The leaf queues in rank order when the pending work was last sorted (see :meth:`resort`).
        self._leaf_order: list[str] | None = None
        self.resort()
        #: Pods and groups whose queue does not exist (yet), by queue name.
        self.queue_orphans: dict[str, dict[str, PodRequest | PodGroup]] = {}
        #: (queue item key, its leaf queue, reserved node slots) for the job held against starvation.
        self.reservation: tuple[str, str, np.ndarray] | None = None
        #: Job key -> the node slots its preemption is freeing: other jobs may not take them meanwhile (else the
        #: capacity goes to whoever comes first and the preemptor preempts again), like kube-scheduler's
        #: nominated node. Kept until the job is placed or gone.
        self.nominated: dict[str, np.ndarray] = {}
        #: Job key -> the pods its preemption evicted: while any is still there, the job waits for them instead
        #: of preempting more; once all are gone and it still does not fit, its nomination is dropped.
        self.evicting: dict[str, list[str]] = {}
        #: Victims evicted and not yet gone (job key -> the candidate): never chosen again by another preemptor,
        #: and what they hold no longer counts as their queue's surplus.
        self.terminating: dict[str, reclaim.Candidate] = {}
        self.groups: dict[str, GroupState] = {}
        #: Members whose group does not exist (yet), by group key.
        self.orphans: dict[str, dict[str, PodRequest]] = {}
        #: Pod key -> group key, for members the loop knows.
        self.member_of: dict[str, str] = {}

    # --- inputs ------------------------------------------------------------------------------------------------

    def pod_pending(self, pod: PodRequest) -> None:
        """A pod of ours that has no node yet (new or updated)."""
        name = pod.pod_group
        if not name:
            leaf = self.tenancy.leaf_of(pod.queue)
            if self._held_for_queue(leaf, f"pod {pod.key}", pod.key, pod):
                return
            self.queue.update(QueueItem(pod.key, pod.priority, pod.created, leaf, pod))
            return
        key = f"{pod.namespace}/{name}"
        state = self.groups.get(key)
        if state is None:
            first = pod.key not in self.orphans.get(key, {})
            self.orphans.setdefault(key, {})[pod.key] = pod
            if first:
                self.events.emit(
                    obj=f"pod {pod.key}",
                    kind="Warning",
                    reason="PodGroupNotFound",
                    message=f"PodGroup {key} does not exist; the pod waits for it",
                )
            return
        self.member_of[pod.key] = key
        if pod.key in state.placed:
            return
        state.pending[pod.key] = pod
        self._enqueue(state)

    def pod_placed(self, pod: PodRequest) -> None:
        """The API server shows the pod bound (by us or anyone); a member counts as placed, Running as running."""
        self.queue.done(pod.key)
        key = self.member_of.get(pod.key)
        if key is None or key not in self.groups:
            return
        state = self.groups[key]
        state.pending.pop(pod.key, None)
        state.placed.add(pod.key)
        if pod.phase == "Running":
            state.running.add(pod.key)
        self._refresh_phase(state)

    def adopt(self, pod: PodRequest, queue: str) -> None:
        """A pod of ours found already on a node (placed before a restart, or by an earlier leader): charged to
        ``queue`` (its PodGroup's ``spec.queue`` or its own label) and, like the jobs this loop placed, a job that
        reclaim and within-queue preemption may choose (its gang as a whole). Call :meth:`resort` after a batch."""
        self.tenancy.charge(pod.key, self.tenancy.leaf_of(queue), request_of(pod))
        job = GANG_PREFIX + f"{pod.namespace}/{pod.pod_group}" if pod.pod_group else pod.key
        self.started.setdefault(job, self.clock())

    def pod_gone(self, key: str) -> None:
        """The pod was deleted or finished."""
        self.queue.remove(key)
        self._release(key)
        self._unreserve(key)
        self.started.pop(key, None)
        self.needs.pop(key, None)
        self._fed(key)
        self.no_victims.pop(key, None)
        self.gated.pop(key, None)
        for held in self.queue_orphans.values():
            held.pop(key, None)
        group_key = self.member_of.pop(key, None)
        for orphans in self.orphans.values():
            orphans.pop(key, None)
        if group_key is None or group_key not in self.groups:
            return
        state = self.groups[group_key]
        state.pending.pop(key, None)
        state.placed.discard(key)
        state.running.discard(key)
        if not state.pending:
            self.queue.remove(GANG_PREFIX + group_key)
        self._refresh_phase(state)

    def group_upsert(self, group: PodGroup) -> None:
        state = self.groups.get(group.key)
        if state is None:
            state = self.groups[group.key] = GroupState(group)
        else:
            state.group = group
        for key, pod in self.orphans.pop(group.key, {}).items():
            self.member_of[key] = group.key
            state.pending[key] = pod
        self._enqueue(state)
        self._refresh_phase(state)

    def group_removed(self, key: str) -> None:
        """The PodGroup was deleted: its waiting members wait again for a group of that name."""
        state = self.groups.pop(key, None)
        self.queue.remove(GANG_PREFIX + key)
        self._unreserve(GANG_PREFIX + key)
        self.started.pop(GANG_PREFIX + key, None)
        self.needs.pop(GANG_PREFIX + key, None)
        self._fed(GANG_PREFIX + key)
        self.no_victims.pop(GANG_PREFIX + key, None)
        self.gated.pop(GANG_PREFIX + key, None)
        if state is None:
            return
        for pod_key, pod in state.pending.items():
            self.queue.remove(pod_key)
            self.member_of.pop(pod_key, None)
            self.orphans.setdefault(key, {})[pod_key] = pod

    def queues_changed(self, specs: list[QueueSpec]) -> None:
        """The cluster's Queues changed: rebuild the tree, report bad queues, queue what was waiting for them."""
        self.no_victims.clear()  # guarantees and policies may have changed
        for problem in self.tenancy.set_queues(specs):
            self.events.emit(obj=problem.obj, kind="Warning", reason="InvalidQueue", message=str(problem))
        self._leaf_order = None
        self.resort()
        for leaf in list(self.queue_orphans):
            if self.tenancy.problem(leaf):
                continue
            for held in self.queue_orphans.pop(leaf).values():
                if isinstance(held, PodGroup):
                    state = self.groups.get(held.key)
                    if state is not None:
                        self._enqueue(state)
                else:
                    self.pod_pending(held)
        self.cluster_event("queue changed")

    def record_usage(self, dt_s: float) -> None:
        """Add ``dt_s`` seconds of current allocation to every queue's usage history (call it periodically)."""
        self.tenancy.record_usage(dt_s)
        self.resort()

    def resort(self) -> None:
        """Re-sort the pending work if the leaf queues' order changed (shares move with every charge, release
        and usage record). ``_less`` compares queues by rank only, and ranks never tie (each ends in the queue's
        name), so with the same order every comparison is the same and the O(n) re-sort is skipped: the common
        case, one pod charged to a queue that keeps its place."""
        order = sorted(self.tenancy.tree.leaves(), key=self.tenancy.rank)
        if order == self._leaf_order:
            return
        self._leaf_order = order
        self.queue.set_less(self._less)

    def cluster_event(self, event: str) -> None:
        """Something changed that may let waiting work fit (a pod left, a node came, a queue changed).

        After a pod deletion only the jobs that could now find their GPUs free in the cluster are woken; the
        others stay put (and are still retried at the queue's unschedulable timeout).
        """
        if event != "pod deleted" or not self.needs:
            self.queue.move_all_to_active(event)
            return
        a = self.scheduler.cache.arrays
        free = int((a.gpu_free[a.base_reason == layout.FIT] >= layout.WHOLE).sum())
        self.queue.move_all_to_active(
            event, lambda item: self.needs.get(item.key, 0) <= free and not self._still_gated(item)
        )

    def _still_gated(self, item: QueueItem) -> bool:
        """Whether a job the fair-share gate held back would still be held (a queueing hint)."""
        request = self.gated.get(item.key)
        if request is None:
            return False
        counted = item.key in self.starving.get(item.queue, {})
        return bool(self.tenancy.fair_share_gate(item.queue, request, self.starving_totals, counted=counted))

    def _wake_gated(self) -> None:
        """Some queue's starving work was placed or left: jobs the gate held back may go now."""
        if self.gated:
            self.queue.move_all_to_active(
                "starving job fed", lambda item: item.key in self.gated and not self._still_gated(item)
            )

    def bind_failed(self, pod: PodRequest, reason: str) -> None:
        """A binding failed: release the pod's reservation and retry it alone (a gang keeps the others)."""
        self.scheduler.bind_failed(pod.key)
        self._release(pod.key)
        key = self.member_of.get(pod.key)
        state = self.groups.get(key) if key is not None else None
        self.events.emit(obj=f"pod {pod.key}", kind="Warning", reason="FailedBinding", message=reason)
        if state is not None:
            state.placed.discard(pod.key)
            state.pending[pod.key] = pod
            now = self.clock()
            state.set_condition(
                "Scheduled",
                "False",
                "MemberBindFailed",
                f"member {pod.name} failed to bind ({reason}); retrying it",
                now,
            )
            self._refresh_phase(state)
        leaf = self.tenancy.leaf_of(state.group.queue if state is not None else pod.queue)
        self.queue.update(QueueItem(pod.key, pod.priority, pod.created, leaf, pod))

    # --- the cycle ---------------------------------------------------------------------------------------------

    def run_once(self) -> bool:
        """Run one cycle if anything is ready; False when nothing was."""
        item = self.queue.pop()
        if item is None:
            return False
        if item.key.startswith(GANG_PREFIX):
            self._gang_cycle(item)
        else:
            self._pod_cycle(item)
        return True

    def run_until_idle(self, limit: int = 1_000_000) -> int:
        """Run cycles until nothing is ready (or ``limit`` cycles). Returns how many ran."""
        cycles = 0
        while cycles < limit and self.run_once():
            cycles += 1
        return cycles

    def _enqueue(self, state: GroupState) -> None:
        group = state.group
        leaf = self.tenancy.leaf_of(group.queue)
        if self._held_for_queue(leaf, f"podgroup {group.key}", GANG_PREFIX + group.key, group):
            return
        if state.satisfied:
            # The gang is placed: the rest join one by one.
            for pod in state.pending.values():
                self.queue.update(QueueItem(pod.key, max(pod.priority, group.priority), pod.created, leaf, pod))
            return
        if len(state.pending) + len(state.placed) >= group.min_member:
            self.queue.update(QueueItem(GANG_PREFIX + group.key, _priority(state), group.created, leaf, group.key))

    def _held_for_queue(self, leaf: str, obj: str, key: str, held: PodRequest | PodGroup) -> bool:
        """Hold work whose queue cannot take it (with an Event the first time); True if held."""
        problem = self.tenancy.problem(leaf)
        if not problem:
            return False
        waiting = self.queue_orphans.setdefault(leaf, {})
        if key not in waiting:
            self.events.emit(obj=obj, kind="Warning", reason="QueueNotFound", message=f"{problem}; waiting for it")
        waiting[key] = held
        return True

    def _less(self, a: QueueItem, b: QueueItem) -> bool:
        return (self.tenancy.rank(a.queue), -a.priority, a.created, a.key) < (
            self.tenancy.rank(b.queue),
            -b.priority,
            b.created,
            b.key,
        )

    def _charge(self, pods: list[PodRequest], leaf: str) -> None:
        for pod in pods:
            self.tenancy.charge(pod.key, leaf, request_of(pod))
        self.resort()

    def _release(self, key: str) -> None:
        if self.tenancy.release(key):
            self.resort()

    def _running_jobs(self, version: int) -> list[reclaim.Candidate]:
        """Every running job (a placed gang as a whole, or a pod outside any gang) with its leaf queue; the same
        list while the cluster's ``version`` stays (placements and removals change it)."""
        if self._jobs is not None and self._jobs[0] == version:
            return self._jobs[1]
        jobs = []
        for key, started in self.started.items():
            if key.startswith(GANG_PREFIX):
                state = self.groups.get(key.removeprefix(GANG_PREFIX))
                if state is None:
                    continue
                queue = self.tenancy.leaf_of(state.group.queue)
                pods = [e.pod for k in state.placed if (e := self.scheduler.cache.pod(k)) is not None]
                priority = max([state.group.priority, *(p.priority for p in pods)])
            else:
                entry = self.scheduler.cache.pod(key)
                if entry is None:
                    continue
                queue, pods, priority = self.tenancy.leaf_of(entry.pod.queue), [entry.pod], entry.pod.priority
            if pods:
                ahead = self.tenancy.rank(queue)[1][-1][0]
                jobs.append(reclaim.Candidate(key, queue, priority, started, pods, requests_of(pods), ahead))
        self._jobs = (version, jobs)
        return jobs

    def _preempt(
        self, item: QueueItem, pods: list[PodRequest], priority: int, obj: str, required_level: int | None = None
    ) -> bool:
        """Make room for a job that does not fit, least disruptive first: reclaim borrowed work of other queues
        (if the job stays within its queue's guarantee, per the queue's ``reclaim``), else preempt lower-priority
        work of its own queue (per ``withinQueue``). A job that requires one domain of ``required_level`` gets
        victims from one domain only, so the freed capacity is contiguous there. True if victims were evicted."""
        if self.evictor is None:
            return False
        evicting = self.evicting.get(item.key)
        if evicting is not None:
            if any(self.scheduler.cache.pod(k) is not None for k in evicting):
                return True  # its victims are still terminating
            self._unreserve(item.key)
        a = self.scheduler.cache.arrays
        version = int(a.gen.max()) if a.slots else 0
        if self.no_victims.get(item.key) == version:
            return False
        self.no_victims[item.key] = version
        for victim_key, victim in list(self.terminating.items()):
            if all(self.scheduler.cache.pod(p.key) is None for p in victim.pods):
                del self.terminating[victim_key]
        jobs = [c for c in self._running_jobs(version) if c.key not in self.terminating]
        if self.tenancy.within_guarantee(item.queue, requests_of(pods)):
            borrowers = [c for c in jobs if c.queue != item.queue and self.tenancy.borrowing(c.queue)]
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
        own = [c for c in jobs if c.queue == item.queue and c.priority < priority]
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
        if required_level is not None:
            return reclaim.find_victims_in_domain(
                self.scheduler,
                pods,
                level=required_level,
                priority=priority,
                policy=policy,
                candidates=candidates,
                surplus=surplus,
            )
        return reclaim.find_victims(
            self.scheduler, pods, priority=priority, policy=policy, candidates=candidates, surplus=surplus
        )

    def _evict(self, key: str, victims: list[reclaim.Candidate], reason: str) -> None:
        assert self.evictor is not None
        a = self.scheduler.cache.arrays
        freed = np.zeros(a.slots, dtype=bool)
        for victim in victims:
            for pod in victim.pods:
                entry = self.scheduler.cache.pod(pod.key)
                if entry is not None:
                    freed[entry.placement.slot] = True
        self.nominated[key] = freed
        self.evicting[key] = [pod.key for victim in victims for pod in victim.pods]
        for victim in victims:
            for pod in victim.pods:
                self.events.emit(obj=f"pod {pod.key}", kind="Warning", reason="Preempted", message=reason)
            self.evictor.evict(victim.pods, reason)
            self.terminating[victim.key] = victim
            self.preemptions[victim.queue] = self.preemptions.get(victim.queue, 0) + 1

    def _context(self, key: str) -> dict[str, Any]:
        """What other jobs' cycles must respect: the reservation and the nominations, unless they are its own. A
        job with a nomination of its own ignores the others' (preemptors whose victims share a node would
        otherwise keep each other off it; their victims are disjoint and freed room for all of them)."""
        masks = [] if key in self.nominated else [mask for owner, mask in self.nominated.items() if owner != key]
        if self.reservation is not None and self.reservation[0] != key:
            masks.append(self.reservation[2])
        if masks:
            slots = max(m.shape[0] for m in masks)
            reserved = np.zeros(slots, dtype=bool)
            for mask in masks:
                reserved[: mask.shape[0]] |= mask
            return {RESERVED_SLOTS: reserved}
        return {}

    def _reserve(self, item: QueueItem, pods: list[PodRequest]) -> None:
        """Reserve nodes for ``item`` if it is the best-ranked job left without room.

        Only jobs of two or more whole GPUs reserve: any GPU that frees fits a one-GPU job, so backfill cannot
        starve it, and the fair order gives it the next one.
        """
        gpus = sum(p.gpu.count for p in pods if p.gpu.whole)
        if gpus < 2:
            return
        if self.reserve_after_s is None or item.first_attempt is None:
            return
        if self.clock() - item.first_attempt < self.reserve_after_s:
            return
        current = self.reservation
        if current is not None:
            if current[0] == item.key:
                return  # keep the nodes it has: they are draining for it
            if self.tenancy.rank(current[1]) <= self.tenancy.rank(item.queue):
                return
        a = self.scheduler.cache.arrays
        usable = (a.base_reason == layout.FIT) & (a.gpu_count > 0)
        slots = np.flatnonzero(usable)
        free = (a.gpu_free[slots] >= layout.WHOLE).sum(axis=1)
        order = slots[np.lexsort((slots, -free))]
        covered = np.cumsum(a.gpu_count[order])
        take = order[: int(np.searchsorted(covered, gpus)) + 1]
        mask = np.zeros(a.slots, dtype=bool)
        mask[take] = True
        self.reservation = (item.key, item.queue, mask)

    def _unreserve(self, key: str) -> None:
        self.nominated.pop(key, None)
        self.evicting.pop(key, None)
        if self.reservation is not None and self.reservation[0] == key:
            self.reservation = None

    def _held_back(self, leaf: str, pods: list[PodRequest], key: str = "") -> tuple[str, str]:
        """(reason, message) if the queue may not start the job now (a limit, or the fair-share gate), else ("", "")."""
        request = requests_of(pods)
        over = self.tenancy.over_ceiling(leaf, request)
        if over:
            return "QueueLimit", over
        if not self.fair_share_gate or not self.starving:
            self.gated.pop(key, None)
            return "", ""
        counted = key in self.starving.get(leaf, {})
        gated = self.tenancy.fair_share_gate(leaf, request, self.starving_totals, counted=counted)
        if gated:
            self.gated[key] = request
            return "FairShare", gated
        self.gated.pop(key, None)
        return "", ""

    def _starve(self, item: QueueItem, pods: list[PodRequest]) -> None:
        jobs = self.starving.setdefault(item.queue, {})
        vector = requests_of(pods)
        old = jobs.get(item.key)
        if old == vector:
            return  # failed again for the same: the demand is unchanged
        total = self.starving_totals.setdefault(item.queue, {})
        if old is not None:
            add_into(total, old, -1.0)
        add_into(total, vector)
        jobs[item.key] = vector
        self.tenancy.demand_changed()

    def _fed(self, key: str) -> None:
        """The job is placed or gone: it no longer waits for room."""
        for queue, jobs in list(self.starving.items()):
            vector = jobs.pop(key, None)
            if vector is None:
                continue
            if jobs:
                add_into(self.starving_totals[queue], vector, -1.0)
            else:
                del self.starving[queue]
                del self.starving_totals[queue]
            self.tenancy.demand_changed()
            self._wake_gated()
            return

    def _gang_cycle(self, item: QueueItem) -> None:
        key = item.key.removeprefix(GANG_PREFIX)
        state = self.groups.get(key)
        if state is None:
            self.queue.done(item.key)
            return
        group = state.group
        now = self.clock()
        if state.first_attempt is None:
            state.first_attempt = now
        need = group.min_member - len(state.placed)
        if need <= 0 or len(state.pending) < need:
            self.queue.done(item.key)
            self._enqueue(state)
            return
        members = gang.order_members(list(state.pending.values()))[:need]
        held_reason, over = self._held_back(item.queue, members, item.key)
        if over:
            state.set_condition("Scheduled", "False", held_reason, over, now)
            self.events.emit(obj=f"podgroup {key}", kind="Warning", reason="FailedScheduling", message=over)
            self._refresh_phase(state)
            # Like a job without room: a deletion that leaves fewer free GPUs than it needs cannot let it start.
            self.needs[item.key] = sum(p.gpu.count for p in members if p.gpu.whole)
            self.queue.requeue_unschedulable(item, over)
            return
        result = gang.place_gang(self.scheduler, group, members, self._context(item.key))
        if result.status.ok:
            self.queue.done(item.key)
            self._unreserve(item.key)
            self.needs.pop(item.key, None)
            self._fed(item.key)
            self.no_victims.pop(item.key, None)
            self._charge([d.pod for d in result.decisions], item.queue)
            self.started[item.key] = now
            for decision in result.decisions:
                state.pending.pop(decision.pod.key, None)
                state.placed.add(decision.pod.key)
                self.events.emit(
                    obj=f"pod {decision.pod.key}",
                    kind="Normal",
                    reason="Scheduled",
                    message=_scheduled(decision.node, decision.gpu_ids),
                )
            state.last_schedule = now
            state.set_condition(
                "Scheduled", "True", "Scheduled", f"{len(result.decisions)} members placed together", now
            )
            self.events.emit(
                obj=f"podgroup {key}",
                kind="Normal",
                reason="Scheduled",
                message=f"{len(result.decisions)} of {group.min_member} members placed together",
            )
            self._refresh_phase(state)
            self._enqueue(state)
            return
        message = result.status.message
        timed_out = now - state.first_attempt >= group.schedule_timeout_s
        reason = "Unschedulable" if timed_out else "NotAllMembersFit"
        if result.status.code == Code.UNRESOLVABLE and result.status.plugin == "topology":
            reason = "InvalidTopology"
        state.set_condition("Scheduled", "False", reason, message, now)
        self.events.emit(obj=f"podgroup {key}", kind="Warning", reason="FailedScheduling", message=message)
        self._refresh_phase(state)
        if result.status.code == Code.ERROR:
            self.queue.requeue_error(item, message)
        else:
            (required, _), problem = gang.resolve_levels(self.scheduler, group.topology, obj=f"podgroup {key}")
            if problem is None and not self._preempt(item, members, item.priority, f"podgroup {key}", required):
                self._reserve(item, members)
            self.needs[item.key] = sum(p.gpu.count for p in members if p.gpu.whole)
            self._starve(item, members)
            self.queue.requeue_unschedulable(item, message)

    def _pod_cycle(self, item: QueueItem) -> None:
        pod = item.payload
        assert isinstance(pod, PodRequest)
        key = self.member_of.get(pod.key)
        state = self.groups.get(key) if key is not None else None
        context = None
        if state is not None:
            # A member beyond minMember, or one whose binding failed: place it near the others.
            slots: dict[int, int] = {}
            for member in state.placed:
                entry = self.scheduler.cache.pod(member)
                if entry is not None:
                    slots[entry.placement.slot] = slots.get(entry.placement.slot, 0) + 1
            context = {GANG_SLOTS: slots, **gang.member_context(self.scheduler, state.group, slots)}
        context = {**self._context(item.key), **(context or {})}
        _, over = self._held_back(item.queue, [pod], item.key)
        if over:
            self.events.emit(obj=f"pod {pod.key}", kind="Warning", reason="FailedScheduling", message=over)
            self.needs[item.key] = pod.gpu.count if pod.gpu.whole else 0
            self.queue.requeue_unschedulable(item, over)
            return
        result = self.scheduler.schedule(pod, context)
        if result.decision is not None and result.status.ok:
            self.queue.done(item.key)
            self._unreserve(item.key)
            self.needs.pop(item.key, None)
            self._fed(item.key)
            self.no_victims.pop(item.key, None)
            self._charge([pod], item.queue)
            if state is None:
                self.started[item.key] = self.clock()
            self.events.emit(
                obj=f"pod {pod.key}",
                kind="Normal",
                reason="Scheduled",
                message=_scheduled(result.decision.node, result.decision.gpu_ids),
            )
            if state is not None:
                state.pending.pop(pod.key, None)
                state.placed.add(pod.key)
                self._refresh_phase(state)
            return
        message = result.status.message
        self.events.emit(obj=f"pod {pod.key}", kind="Warning", reason="FailedScheduling", message=message)
        if result.status.code == Code.ERROR:
            self.queue.requeue_error(item, message)
        else:
            if not self._preempt(item, [pod], pod.priority, f"pod {pod.key}"):
                self._reserve(item, [pod])
            self.needs[item.key] = pod.gpu.count if pod.gpu.whole else 0
            self._starve(item, [pod])
            self.queue.requeue_unschedulable(item, message)

    def _refresh_phase(self, state: GroupState) -> None:
        group = state.group
        now = self.clock()
        if len(state.running) >= group.min_member:
            state.phase = "Running"
        elif state.satisfied:
            state.phase = "Scheduled"
        elif len(state.pending) + len(state.placed) < group.min_member:
            state.phase = "Pending"
            state.set_condition(
                "Scheduled",
                "False",
                "WaitingForMembers",
                f"{len(state.pending) + len(state.placed)} of {group.min_member} members exist",
                now,
            )
        elif state.first_attempt is not None and now - state.first_attempt >= group.schedule_timeout_s:
            state.phase = "Unschedulable"
        elif state.first_attempt is not None:
            state.phase = "Scheduling"

    # --- status ------------------------------------------------------------------------------------------------

    def group_status(self, key: str) -> dict[str, object] | None:
        """The PodGroup status as users read it (the operator writes this to ``status``)."""
        state = self.groups.get(key)
        if state is None:
            return None
        return {
            "phase": state.phase,
            "scheduled": len(state.placed),
            "running": len(state.running),
            "lastScheduleTime": state.last_schedule,
            "conditions": [
                {
                    "type": c.type,
                    "status": c.status,
                    "reason": c.reason,
                    "message": c.message,
                    "lastTransitionTime": c.since,
                }
                for c in state.conditions.values()
            ],
        }

    def queue_statuses(self) -> dict[str, dict[str, object]]:
        """Every Queue's status as users read it: allocation, guarantee in use, borrowed, decayed usage, pending
        pods and gangs, shares (the operator writes these to ``status``)."""
        pending: dict[str, dict[str, float]] = {}
        pods: dict[str, int] = {}
        gangs: dict[str, int] = {}
        for item in self.queue.items():
            if item.key.startswith(GANG_PREFIX):
                state = self.groups.get(item.key.removeprefix(GANG_PREFIX))
                if state is None:
                    continue
                members = list(state.pending.values())
                gangs[item.queue] = gangs.get(item.queue, 0) + 1
            elif isinstance(item.payload, PodRequest):
                members = [item.payload]
            else:
                continue
            pods[item.queue] = pods.get(item.queue, 0) + len(members)
            add_into(pending.setdefault(item.queue, {}), requests_of(members))
        return self.tenancy.statuses(pending=pending, pending_pods=pods, pending_gangs=gangs)


def _priority(state: GroupState) -> int:
    """A gang's priority: its own (``priorityClassName`` resolved by whoever parsed it) or, higher, that of its
    members (the API server resolves a pod's ``priorityClassName`` into ``spec.priority``)."""
    return max([state.group.priority, *(p.priority for p in state.pending.values())])


def _scheduled(node: str, gpu_ids: tuple[int, ...]) -> str:
    gpus = f" (GPUs {','.join(str(g) for g in gpu_ids)})" if gpu_ids else ""
    return f"assigned to {node}{gpus}"
