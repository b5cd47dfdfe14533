"""The scheduling loop: pending pods and gangs in, cycles run, results out as events and group status.

Everything that wants a decision enters here (the operator's handlers and the simulator call the same
methods): :meth:`SchedulingLoop.pod_pending` for a pod of ours without a node, :meth:`pod_placed` and
:meth:`pod_gone` for what the API server (or the simulator) says, :meth:`group_upsert` / :meth:`group_removed`
for PodGroups, :meth:`queues_changed` for Queues, :meth:`budget_upsert` / :meth:`budget_removed` for
PodDisruptionBudgets, :meth:`cluster_event` when the cluster changed so that waiting work may now fit.

The loop orchestrates; each concern keeps its own state in a module of its own:

- ``scheduler.core.jobs``: which job (a single pod or a gang) each pod belongs to, the job's members, queue,
  priority, phase and conditions;
- ``scheduler.core.tenancy``: what each queue holds (charged from the jobs' placed pods, to the job's queue,
  whatever order pods and PodGroups arrive in), limits, ranks, fair shares;
- ``scheduler.core.gate``: whether a queue may start a job now (limits, the fair-share gate), work waiting for a
  queue that does not exist;
- ``scheduler.core.actions``: what a job taken from the queue goes through, in the profile's order (allocate,
  then for a job that does not fit reclaim and preempt), each action in a module of its own;
  ``scheduler.core.preemption`` and ``scheduler.core.reclaim``: the victims reclaim and preempt choose from;
- ``scheduler.core.holds``: nominations and reservations, applied to every other job's cycles by the core;
- ``scheduler.core.hints``: which cluster events may help which waiting jobs.

Gang rules: a group is not tried until ``minMember`` of its members exist; then one cycle places ``minMember`` of
them all or nothing (``scheduler.core.gang``), and the others are placed afterwards one by one, near the gang, as
long as the gang holds ``minMember`` placed members (never alone: a gang whose members were preempted is placed
whole again); a member of a group that does not exist waits (with an Event) and joins when the group appears; a
group that cannot be placed gets condition Scheduled=False with the per-reason node counts, an Event, and
backoff; after ``scheduleTimeoutSeconds`` it turns Unschedulable and is still retried; a bind failure of one
member keeps the other members' places and retries that member alone.

Queue rules: work goes to the leaf queue of its job; work for a queue that does not exist (or is not a leaf)
waits with an Event and is queued as soon as the queue appears; pending work is ordered by its queue's rank
(below guarantee first, then the hierarchical borrowed share over weight, see ``scheduler.api.fairshare``), then
by priority, then by age; a job that does not fit preempts, least disruptive first (``scheduler.core.actions``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from scheduler.api.pdb import DisruptionBudget
from scheduler.api.pod import PodRequest
from scheduler.api.podgroup import PodGroup
from scheduler.api.queue import QueueSpec
from scheduler.core import actions, gang, gate
from scheduler.core.actions import Verdict
from scheduler.core.cycle import Scheduler
from scheduler.core.hints import ClusterEvent, Hints
from scheduler.core.holds import Holds
from scheduler.core.jobs import Attempt, Job, Jobs
from scheduler.core.ports import Events, Evictor
from scheduler.core.preemption import Preemptor
from scheduler.core.tenancy import Tenancy, Vector, add_into, requests_of
from scheduler.framework.interface import GANG_SLOTS, PENDING_PODS, Code, Decision, Status
from scheduler.queue.scheduling import QueueItem, SchedulingQueue

__all__ = ["ClusterEvent", "Events", "Evictor", "Job", "SchedulingLoop"]


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
        self.jobs = Jobs()
        self.gate = gate.Gate(self.tenancy, fair_share=fair_share_gate)
        self.holds = Holds(scheduler.cache, self.tenancy, clock=clock, reserve_after_s=reserve_after_s)
        self.hints = Hints()
        self.preemptor = Preemptor(scheduler, self.jobs, self.tenancy, self.holds, events=events, evictor=evictor)
        #: The session's actions, in the profile's order (``allocate`` first).
        self.actions = actions.build(
            scheduler.framework.config.actions,
            scheduler=scheduler,
            preemptor=self.preemptor,
            tenancy=self.tenancy,
            events=events,
        )
        self._demand_version = 0
        #: The leaf queues in rank order when the pending work was last sorted (see :meth:`resort`).
        self._leaf_order: list[str] | None = None
        #: Whether the leaf order must be looked at again before the pending work is next read.
        self._order_stale = True
        self.sort_pending()

    # --- inputs ------------------------------------------------------------------------------------------------

    def pod_pending(self, pod: PodRequest) -> None:
        """A pod of ours that has no node yet (new or updated)."""
        self._demand_version += 1
        first = not self.jobs.waits_for_group(pod)
        job = self.jobs.pod_pending(pod)
        if job is None:
            if first:
                self.events.emit(
                    obj=f"pod {pod.key}",
                    kind="Warning",
                    reason="PodGroupNotFound",
                    message=f"PodGroup {pod.namespace}/{pod.pod_group} does not exist; the pod waits for it",
                )
            return
        if pod.key in job.placed:
            return
        self._enqueue(job)
        job.refresh_phase(self.clock())  # a gang's count of members that exist

    def pod_placed(self, pod: PodRequest) -> None:
        """The API server shows the pod bound (by us before a restart, or by an earlier leader, or just now): it
        holds capacity, counted against its job's queue; a member counts as placed, Running as running."""
        self.queue.done(pod.key)
        now = self.clock()
        job = self.jobs.pod_placed(pod, now=now)
        if self.tenancy.hold(pod, job.queue):
            # A pod newly held (found bound): the demand changed. Its status updates, and the confirmation of a pod
            # this loop placed (it moved from waiting to held), leave the demand as it was.
            self._demand_version += 1
            self.resort()
        job.refresh_phase(now)

    def pod_gone(self, key: str, *, finished: str = "") -> None:
        """The pod was deleted, or ``finished`` (its phase ``Succeeded`` or ``Failed``): a gang counts it."""
        self.queue.remove(key)
        self._demand_version += 1
        if self.tenancy.release(key):
            self.resort()
        self._job_gone(key)
        self.gate.drop_waiting(key)
        job = self.jobs.of_pod(key)
        alone = job is not None and job.group is not None and _alone_allowed(job)
        job = self.jobs.pod_gone(key, finished=finished)
        if job is None or job.group is None:
            return
        if alone and not _alone_allowed(job):
            self._enqueue(job)  # its members beyond minMember wait for the gang now: never placed alone
        elif not job.pending:
            self.queue.remove(job.key)
        job.refresh_phase(self.clock())

    def group_upsert(self, group: PodGroup) -> None:
        job, _ = self.jobs.group_upsert(group)
        self._hold(job)
        self._enqueue(job)
        job.refresh_phase(self.clock())

    def group_removed(self, key: str) -> None:
        """The PodGroup was deleted: its waiting members wait again for a group of that name; its placed members
        count as pods of their own queues."""
        job, moved = self.jobs.group_removed(key)
        self.queue.remove(self.jobs.gang_key(key))
        self._job_gone(self.jobs.gang_key(key))
        if job is not None:
            for pod_key in job.pending:
                self.queue.remove(pod_key)
        changed = False
        for pod in moved:
            changed |= self.tenancy.hold(pod, self.jobs.queue_of(pod))
        if changed:
            self.resort()

    def queues_changed(self, specs: list[QueueSpec]) -> None:
        """The cluster's Queues changed: rebuild the tree, report bad queues, queue what was waiting for them."""
        self.preemptor.policies_changed()
        for problem in self.tenancy.set_queues(specs):
            self.events.emit(obj=problem.obj, kind="Warning", reason="InvalidQueue", message=str(problem))
        self._leaf_order = None
        self.resort()
        for held in self.gate.admitted():
            job = self.jobs.get(held.key)  # the job may have left while it waited
            if job is not None:
                self._demand_version += 1
                self._enqueue(job)
                job.refresh_phase(self.clock())
        self.cluster_event(ClusterEvent.QUEUE_CHANGED)

    def budget_upsert(self, budget: DisruptionBudget) -> None:
        """A PodDisruptionBudget was seen (new or changed): preemption prefers victims it does not protect."""
        self.preemptor.budget_upsert(budget)

    def budget_removed(self, key: str) -> None:
        self.preemptor.budget_removed(key)

    def record_usage(self, dt_s: float) -> None:
        """Add ``dt_s`` seconds of current allocation to every queue's usage history (call it periodically)."""
        self.tenancy.record_usage(dt_s)
        self.resort()

    def resort(self) -> None:
        """The leaf queues' order may have changed (shares move with every charge, release and usage record):
        re-sort the pending work before it is next read (:meth:`sort_pending`). Only marked here: at start-up every
        bound pod found is a charge, and ranking the queues after each of 90,000 of them took most of the listing.
        """
        self._order_stale = True

    def sort_pending(self) -> None:
        """Give the queue the leaf queues' order if it changed since it was last given (ranks never tie: each ends
        in the queue's name). The pending work is ordered by its leaf's place, then priority, age and key; a new
        order of the leaves costs the number of leaves, not of pending items (``SchedulingQueue.set_queue_order``).
        """
        if not self._order_stale:
            return
        self._order_stale = False
        order = sorted(self.tenancy.tree.leaves(), key=self.tenancy.rank)
        if order == self._leaf_order:
            return
        self._leaf_order = order
        self.queue.set_queue_order({leaf: i for i, leaf in enumerate(order)})

    def cluster_event(self, event: ClusterEvent | str) -> None:
        """Something changed that may let waiting work fit (a pod left, a node came, a queue changed); the
        queueing hints (``scheduler.core.hints``) say which waiting jobs it may help."""
        event = ClusterEvent(event)
        may_help = self.hints.may_help(event, self.scheduler.cache.arrays, self.gate.still_gated)
        self.queue.move_all_to_active(event, may_help)

    def bind_failed(self, pod: PodRequest, reason: str) -> None:
        """A binding failed: release the pod's place and retry it alone (a gang keeps the others)."""
        self.scheduler.bind_failed(pod.key)
        if self.tenancy.release(pod.key):
            self.resort()
        job = self.jobs.pod_unplaced(pod) or self.jobs.pod_pending(pod)
        self.events.emit(obj=f"pod {pod.key}", kind="Warning", reason="FailedBinding", message=reason)
        if job is None:
            return
        if job.group is not None:
            job.set_condition(
                "Scheduled",
                "False",
                "MemberBindFailed",
                f"member {pod.name} failed to bind ({reason}); retrying it",
                self.clock(),
            )
            job.refresh_phase(self.clock())
        self._enqueue(job)

    # --- what the operator, explain and metrics read -------------------------------------------------------------

    def job_of(self, pod_key: str) -> Job | None:
        return self.jobs.of_pod(pod_key)

    def gang(self, group_key: str) -> Job | None:
        return self.jobs.gang(group_key)

    def queue_of(self, pod: PodRequest) -> str:
        """The leaf queue ``pod`` counts against (its job's)."""
        return self.jobs.queue_of(pod)

    def held(self, leaf: str) -> Vector:
        """What ``leaf`` holds now (its placed pods' requests)."""
        return dict(self.tenancy.allocated.get(leaf, {}))

    @property
    def evictor(self) -> Evictor | None:
        """Who deletes preempted pods (None: no preemption)."""
        return self.preemptor.evictor

    @evictor.setter
    def evictor(self, evictor: Evictor | None) -> None:
        self.preemptor.evictor = evictor

    @property
    def preemptions(self) -> dict[str, int]:
        """Jobs preempted so far, by the victim's queue."""
        return self.preemptor.preemptions

    # --- the cycle ---------------------------------------------------------------------------------------------

    def run_once(self) -> bool:
        """Run one cycle if anything is ready; False when nothing was."""
        self.sort_pending()
        item = self.queue.pop()
        if item is None:
            return False
        queued = self.jobs.queued(item.key)
        attempt = Attempt(queued[0], item, queued[1]) if queued is not None else None
        if attempt is None or not self._choose(attempt):
            self.queue.done(item.key)
            if attempt is not None:
                self._enqueue(attempt.job)  # what of it can be tried now (the gang whole, or its members alone)
            return True
        self._cycle(attempt)
        return True

    def run_until_idle(self, limit: int = 1_000_000) -> int:
        """Run cycles until nothing is ready (or ``limit`` cycles). Returns how many ran."""
        cycles = 0
        while cycles < limit and self.run_once():
            cycles += 1
        return cycles

    def _choose(self, attempt: Attempt) -> bool:
        """Choose the pods ``attempt`` places and what its cycles get from outside; False if it cannot be tried as
        it was queued (a gang not ready, or a member whose gang no longer holds its place)."""
        job = attempt.job
        group = job.group
        context = self._context(attempt.key)
        if attempt.whole_gang:
            assert group is not None
            if job.first_attempt is None:
                job.first_attempt = self.clock()
            need = group.min_member - len(job.placed) - len(job.succeeded)
            if need <= 0 or len(job.pending) < need:
                return False
            attempt.members = gang.order_members(list(job.pending.values()))[:need]
            (attempt.level, _), attempt.unresolved = gang.resolve_levels(
                self.scheduler, group.topology, obj=attempt.obj
            )
        else:
            pod = attempt.alone or next(iter(job.pending.values()), None)
            if pod is None:
                return False
            attempt.members = [pod]
        if group is not None and not attempt.whole_gang:
            if not _alone_allowed(job):
                return False  # the gang lost its members meanwhile (preempted, deleted): this one waits for it
            # A member beyond minMember, or one whose binding failed: place it near the others.
            slots: dict[int, int] = {}
            for member in job.placed:
                entry = self.scheduler.cache.pod(member)
                if entry is not None:
                    slots[entry.placement.slot] = slots.get(entry.placement.slot, 0) + 1
            context = {**context, GANG_SLOTS: slots, **gang.member_context(self.scheduler, group, slots)}
        attempt.context = context
        return True

    def _cycle(self, attempt: Attempt) -> None:
        """The session for one attempt: the queue gate, then the profile's actions in order until one places the
        job or makes room for it; the failure tail, once, for any job that was not placed."""
        item, members = attempt.item, attempt.members
        reason, over = self.gate.held_back(item.queue, requests_of(members), item.key)
        if over:
            self._not_placed(attempt, reason, over)
            # Like a job without room: a deletion that leaves fewer free GPUs than it needs cannot let it start.
            self.hints.failed(item.key, members, gate.WAKES)
            self.queue.requeue_unschedulable(item, over)
            return
        allocate, *make_room = self.actions
        outcome = allocate.run(attempt, self.scheduler.cache.snapshot())
        if outcome.verdict is Verdict.PLACED:
            self._allocated(attempt, [d.pod for d in outcome.decisions], outcome.decisions)
            return
        status = outcome.status
        self._not_placed(attempt, self._reason(attempt, status), status.message)
        if status.code == Code.ERROR:
            self.queue.requeue_error(item, status.message)
            return
        if attempt.unresolved is None:
            waits = False
            for action in make_room:
                if action.run(attempt, self.scheduler.cache.snapshot()).verdict is Verdict.WAITS:
                    waits = True
                    break
            if not waits:
                self.holds.reserve(item, members)
        self.hints.failed(item.key, members, self.scheduler.wakes(outcome.diagnosis))
        self.gate.starve(item.key, item.queue, requests_of(members))
        self.queue.requeue_unschedulable(item, status.message)

    def _reason(self, attempt: Attempt, status: Status) -> str:
        """The reason of a gang's Scheduled=False condition after a cycle that did not place it."""
        group, first = attempt.job.group, attempt.job.first_attempt
        if status.code == Code.UNRESOLVABLE and status.plugin == "topology":
            return "InvalidTopology"
        timed_out = group is not None and first is not None and self.clock() - first >= group.schedule_timeout_s
        return "Unschedulable" if timed_out else "NotAllMembersFit"

    def _not_placed(self, attempt: Attempt, reason: str, message: str) -> None:
        """Say why ``attempt`` was not placed: an Event, and for a whole gang its condition and phase."""
        job, now = attempt.job, self.clock()
        if attempt.whole_gang:
            job.set_condition("Scheduled", "False", reason, message, now)
        self.events.emit(obj=attempt.obj, kind="Warning", reason="FailedScheduling", message=message)
        if attempt.whole_gang:
            job.refresh_phase(now)

    def _allocated(self, attempt: Attempt, pods: list[PodRequest], decisions: Sequence[Decision]) -> None:
        """``attempt`` was placed: it leaves the queue, holds capacity in its queue, and says so."""
        job, item, now = attempt.job, attempt.item, self.clock()
        self.queue.done(item.key)
        self._job_placed(item.key)
        self._placed(job, pods)
        for decision in decisions:
            self.events.emit(
                obj=f"pod {decision.pod.key}",
                kind="Normal",
                reason="Scheduled",
                message=_scheduled(decision.pod.key, decision.node, decision.gpu_ids),
            )
        if not attempt.whole_gang:
            job.refresh_phase(now)  # a gang's member joined it (a single pod has no phase of its own)
            return
        assert job.group is not None
        job.last_schedule = now
        job.set_condition("Scheduled", "True", "Scheduled", f"{len(decisions)} members placed together", now)
        self.events.emit(
            obj=attempt.obj,
            kind="Normal",
            reason="Scheduled",
            message=f"{len(decisions)} of {job.group.min_member} members placed together",
        )
        job.refresh_phase(now)
        self._enqueue(job)

    # --- bookkeeping -------------------------------------------------------------------------------------------

    def _context(self, key: str) -> dict[str, Any]:
        """What job ``key``'s cycles get from outside: the nodes held for others, and the waiting demand."""
        return {**self.holds.context(key), PENDING_PODS: self}

    @property
    def version(self) -> int:
        """Grows whenever a pod starts or stops waiting or holding a node (``Demand``)."""
        return self._demand_version

    def pods(self) -> list[PodRequest]:
        """The pods waiting in the scheduling queue, a gang's pending members and single pods (``Demand``)."""
        pods: list[PodRequest] = []
        for item in self.queue.items():
            queued = self.jobs.queued(item.key)
            if queued is not None:
                job, alone = queued
                pods.extend([alone] if alone is not None else job.pending.values())
        return pods

    def _enqueue(self, job: Job) -> None:
        """Queue what of ``job`` can be tried now: a single pod; a gang whole once ``minMember`` of its members
        exist; or, while the gang holds its place, its other members one by one."""
        leaf = job.queue
        if job.group is None:
            pod = next(iter(job.pending.values()), None)
            if pod is None:
                return
            if self.gate.hold_for_queue(leaf, f"pod {pod.key}", job, self.events):
                return
            self.queue.update(QueueItem(job.key, job.priority, job.created, leaf))
            return
        group = job.group
        if self.gate.hold_for_queue(leaf, f"podgroup {group.key}", job, self.events):
            return
        if _alone_allowed(job):
            self.queue.remove(job.key)
            for pod in job.pending.values():
                # A member tried alone goes at its gang's priority if that is higher than its own.
                self.queue.update(QueueItem(pod.key, max(pod.priority, group.priority), pod.created, leaf))
            return
        for pod_key in job.pending:
            self.queue.remove(pod_key)
        if not job.pending:
            self.queue.remove(job.key)
        elif job.exists >= group.min_member:
            self.queue.update(QueueItem(job.key, job.priority, job.created, leaf))

    def _placed(self, job: Job, pods: list[PodRequest]) -> None:
        """``pods`` of ``job`` were placed by this loop: they hold capacity in the job's queue from now on."""
        now = self.clock()
        changed = False
        for pod in pods:
            self.jobs.pod_placed(pod, now=now)
            changed |= self.tenancy.hold(pod, job.queue)
        if changed:
            self.resort()

    def _hold(self, job: Job) -> None:
        """Count every placed pod of ``job`` in its queue (it may have just changed: a PodGroup came, or moved)."""
        changed = False
        for pod in job.placed.values():
            changed |= self.tenancy.hold(pod, job.queue)
        if changed:
            self.resort()

    def _job_placed(self, key: str) -> None:
        """Job ``key`` was placed: it holds nothing for later, waits for nothing, starves no more."""
        self.holds.release(key)
        self.hints.forget(key)
        self.preemptor.forget(key)
        if self.gate.fed(key):
            self._wake_gated()

    def _job_gone(self, key: str) -> None:
        self.holds.release(key)
        self.hints.forget(key)
        self.preemptor.forget(key)
        if self.gate.forget(key):
            self._wake_gated()

    def _wake_gated(self) -> None:
        """Some queue's starving work was placed or left: jobs the gate held back may go now."""
        if self.gate.gated:
            self.queue.move_all_to_active(
                ClusterEvent.STARVING_JOB_FED,
                lambda item: item.key in self.gate.gated and not self.gate.still_gated(item),
            )

    # --- status ------------------------------------------------------------------------------------------------

    def group_status(self, key: str) -> dict[str, object] | None:
        """The PodGroup status as users read it (the operator writes this to ``status``)."""
        job = self.jobs.gang(key)
        if job is None:
            return None
        return {
            "phase": job.phase,
            "scheduled": len(job.placed),
            "running": len(job.running),
            "succeeded": len(job.succeeded),
            "failed": len(job.failed),
            "lastScheduleTime": job.last_schedule,
            "conditions": [
                {
                    "type": c.type,
                    "status": c.status,
                    "reason": c.reason,
                    "message": c.message,
                    "lastTransitionTime": c.since,
                }
                for c in job.conditions.values()
            ],
        }

    def queue_statuses(self) -> dict[str, dict[str, object]]:
        """Every Queue's status as users read it: allocation, guarantee in use, borrowed, decayed usage, pending
        pods and gangs, shares (the operator writes these to ``status``)."""
        pending: dict[str, dict[str, float]] = {}
        pods: dict[str, int] = {}
        gangs: dict[str, int] = {}
        for item in self.queue.items():
            queued = self.jobs.queued(item.key)
            if queued is None:
                continue
            job, alone = queued
            members = [alone] if alone is not None else list(job.pending.values())
            if job.group is not None and alone is None:
                gangs[item.queue] = gangs.get(item.queue, 0) + 1
            pods[item.queue] = pods.get(item.queue, 0) + len(members)
            add_into(pending.setdefault(item.queue, {}), requests_of(members))
        return self.tenancy.statuses(pending=pending, pending_pods=pods, pending_gangs=gangs)


def _alone_allowed(job: Job) -> bool:
    """Whether a gang's pending members may be placed one by one: the gang holds ``minMember`` placed members (the
    rest join it), or all but one and some placed (a member whose binding failed rejoins its placed siblings)."""
    assert job.group is not None
    missing = job.group.min_member - len(job.placed) - len(job.succeeded)
    return missing <= 0 or (missing == 1 and bool(job.placed))


def _scheduled(pod: str, node: str, gpu_ids: tuple[int, ...]) -> str:
    # kube-scheduler's wording, which tools and Kubernetes' own e2e tests match on.
    gpus = f" (GPUs {','.join(str(g) for g in gpu_ids)})" if gpu_ids else ""
    return f"Successfully assigned {pod} to {node}{gpus}"
