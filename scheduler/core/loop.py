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
- ``scheduler.core.session``: one item taken from the queue, read as an attempt of its job: the queue gate, the
  actions, and the failure tail, once, for any job;
- ``scheduler.core.actions``: what a job taken from the queue goes through, in the profile's order (allocate,
  then for a job that does not fit the actions that make room), each action in a module of its own, with the
  state it keeps; the loop knows them only through their interface (``Action``, and ``State``: the hooks through
  which it tells each state what happened);
- ``scheduler.core.holds``: the one registry of holds (nominations, reservations, gangs' room, move plans), which
  says what every job's cycles must leave alone;
- ``scheduler.core.hints``: which cluster events may help which waiting jobs.

Gang rules: a group is not tried until ``minMember`` of its members exist; then one cycle places ``minMember`` of
them all or nothing (``scheduler.core.gang``), and the others are placed afterwards one by one, near the gang, as
long as the gang holds ``minMember`` placed members (never alone: a gang whose members were preempted is placed
whole again), and never more than ``maxMember`` at once (an elastic gang); a member of a group that does not exist
waits (with an Event) and joins when the group appears; a group that cannot be placed gets condition Scheduled=False
with the per-reason node counts, an Event, and backoff; after ``scheduleTimeoutSeconds`` it turns Unschedulable and
is still retried; a bind failure of one member keeps the other members' places and retries that member alone.

Queue rules: work goes to the leaf queue of its job; work for a queue that does not exist (or is not a leaf)
waits with an Event and is queued as soon as the queue appears; pending work is ordered by its queue's rank
(below guarantee first, then the hierarchical borrowed share over weight, see ``scheduler.queue.fairshare``), then
by priority, then by age; a job that does not fit preempts, least disruptive first (``scheduler.core.actions``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TypeVar

from scheduler.api.crds.podgroup import PodGroup
from scheduler.api.crds.queue import QueueSpec
from scheduler.api.crds.reservation import Reservation
from scheduler.api.objects.pdb import DisruptionBudget
from scheduler.api.objects.pod import PodRequest
from scheduler.core import actions, gate
from scheduler.core.actions import registry
from scheduler.core.cycle import Context, Scheduler
from scheduler.core.hints import ClusterEvent, Hints
from scheduler.core.holds import Holds
from scheduler.core.jobs import Attempt, Job, Jobs
from scheduler.core.ports import Events, Evictor, Mover
from scheduler.core.reservations import Reservations
from scheduler.core.session import Session
from scheduler.core.tenancy import QueueStatus, Tenancy, Vector, add_into, requests_of
from scheduler.queue.scheduling import QueueItem, SchedulingQueue

__all__ = ["ClusterEvent", "Events", "Evictor", "Job", "SchedulingLoop"]

S = TypeVar("S", bound=actions.State)


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
        mover: Mover | None = None,
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
        self.hints = Hints(scheduler.cache)
        #: Reservations: room held ahead of their owners' pods (``scheduler.core.reservations``).
        self.reservations = Reservations(scheduler, self.holds, self.tenancy, events=events, clock=clock)
        #: What the actions are built from; the ports (``evictor``, ``mover``) may be set later.
        self.setting = actions.Setting(
            scheduler, queue, self.jobs, self.tenancy, self.holds, clock, events, evictor=evictor, mover=mover
        )
        #: The cluster's PodDisruptionBudgets by ``namespace/name`` (preemption weighs them, consolidation obeys them).
        self.budgets = self.setting.budgets
        #: The session's actions, in the profile's order (``allocate`` first).
        self.actions = registry.build(scheduler.framework.config, self.setting)
        #: What they keep between cycles, each state once (actions may share one), in the actions' order.
        self.states = list(dict.fromkeys(state for action in self.actions for state in action.states))
        self.session = Session(
            scheduler,
            queue,
            clock=clock,
            events=events,
            gate=self.gate,
            holds=self.holds,
            hints=self.hints,
            actions=self.actions,
            context=self.cycle_context,
            placed=self._allocated,
            enqueue=self._enqueue,
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
        self.reservations.pod_pending(pod, job.key)  # an owner's pod goes into its Reservation's room
        # A nominated pod is counted on its node as it is now (kube-scheduler's nominator takes the update too).
        self.holds.pod_updated(pod)
        for state in self.states:
            state.pod_pending(pod)
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
        for state in self.states:
            state.pod_placed(pod)
        self.reservations.pod_placed(pod)

    def pod_outside(self, pod: PodRequest) -> None:
        """The API server shows ``pod`` bound by another scheduler: it holds its node's capacity (the cache has it)
        and no queue's; the capacity the queues share is the smaller for it. Never evicted or moved from here."""
        if self.tenancy.hold_outside(pod):
            self._demand_version += 1
            self.resort()

    def pod_gone(self, key: str, *, finished: str = "") -> None:
        """The pod was deleted, or ``finished`` (its phase ``Succeeded`` or ``Failed``): a gang counts it."""
        self.queue.remove(key)
        self._demand_version += 1
        if self.tenancy.release(key):
            self.resort()
        self._job_gone(key)
        self.gate.drop_waiting(key)
        self.reservations.pod_gone(key)
        job = self.jobs.of_pod(key)
        alone = job is not None and job.group is not None and job.alone_allowed
        full = job is not None and job.full
        job = self.jobs.pod_gone(key, finished=finished)
        if job is None or job.group is None:
            return
        if alone and not job.alone_allowed:
            self._enqueue(job)  # its members beyond minMember wait for the gang now: never placed alone
        elif full and not job.full:
            self._enqueue(job)  # below its maxMember again: a waiting member may take the place
        elif not job.pending:
            self.queue.remove(job.key)
            if not job.placed:
                # Every member gone and the PodGroup still there (Kueue evicted the workload: its Job suspended,
                # its pods deleted): whatever was held for the gang goes with them.
                self._job_gone(job.key)
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

    def reservation_upsert(self, reservation: Reservation, ghosts: tuple[PodRequest, ...]) -> None:
        """A Reservation was seen (new, changed, or listed after a restart) with its ghost pods: it is placed (or
        held again where its status says) now, or when room comes."""
        self.reservations.upsert(reservation, ghosts)
        self._reservations_freed()

    def reservation_removed(self, key: str) -> None:
        """The Reservation was deleted: its room is free; the jobs it kept off are tried again."""
        self.reservations.removed(key)
        self._reservations_freed()

    def reservation_failed(self, key: str, message: str) -> None:
        """The Reservation cannot be read: it holds nothing (phase Failed, with ``message``)."""
        self.reservations.failed(key, message)
        self._reservations_freed()

    def _reservations_freed(self) -> None:
        if self.reservations.freed():
            self.cluster_event(ClusterEvent.POD_DELETED)

    def queues_changed(self, specs: list[QueueSpec]) -> None:
        """The cluster's Queues changed: rebuild the tree, report bad queues, queue what was waiting for them."""
        self._wake(ClusterEvent.QUEUE_CHANGED, [state.queues_changed() for state in self.states])
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

    def move_refused(self, pod_key: str, message: str) -> None:
        """The eviction of pod ``pod_key``, moved by consolidation, was refused (a PodDisruptionBudget): its plan is
        abandoned, what it held released, and the job it made room for tries again when the cluster changes."""
        for state in self.states:
            state.move_refused(pod_key, message)
        self.cluster_event(ClusterEvent.POD_DELETED)

    def eviction_failed(self, pod_key: str, message: str) -> None:
        """The deletion of preempted pod ``pod_key`` failed: the jobs it was evicted for no longer hold its room
        and are tried again now."""
        self._wake("VictimDeletionFailed", [state.eviction_failed(pod_key, message) for state in self.states])

    def budget_upsert(self, budget: DisruptionBudget) -> None:
        """A PodDisruptionBudget was seen (new or changed): preemption prefers victims it does not protect, and
        consolidation moves no more of its pods at once than it allows."""
        self.budgets[budget.key] = budget
        self._wake(ClusterEvent.BUDGET_CHANGED, [state.budget_changed(budget.key) for state in self.states])

    def budget_removed(self, key: str) -> None:
        self.budgets.pop(key, None)
        self._wake(ClusterEvent.BUDGET_CHANGED, [state.budget_changed(key) for state in self.states])

    def leadership_lost(self) -> None:
        """This replica no longer leads: what the actions were carrying out (move plans) is dropped, so that no later
        step is taken on its word."""
        for state in self.states:
            state.leadership_lost()

    def carry_out_moves(self) -> None:
        """Give up what the actions' states hold past its time (a move plan whose step under way was not done in
        time), and release it (call it periodically: a step may be late with nothing else happening); the jobs it
        was for try again."""
        moved = any([state.expire() for state in self.states])
        self.reservations.expire()  # after the move plans: their state hears of its own expired holds first
        if moved or self.reservations.freed():
            self.cluster_event(ClusterEvent.POD_DELETED)

    def _wake(self, event: ClusterEvent | str, keys: list[set[str]]) -> None:
        """Try the jobs of ``keys`` again now (the actions' answers for them are stale)."""
        waiting = set().union(*keys)
        if waiting:
            self.queue.move_all_to_active(event, lambda item: item.key in waiting)

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
        self.reservations.place_pending()  # room may have come for a Reservation too
        may_help = self.hints.may_help(event, self.gate.still_gated)
        self.queue.move_all_to_active(event, may_help)

    def pods_changed(self, pod_keys: set[str], event: ClusterEvent | str) -> None:
        """What only the pods ``pod_keys`` use changed (their ResourceClaims): their jobs, not others, may fit now."""
        keys = set(pod_keys)
        for pod_key in pod_keys:
            job = self.jobs.of_pod(pod_key)
            if job is not None:
                keys.add(job.key)
        if keys:
            self.queue.move_all_to_active(event, lambda item: item.key in keys)

    def bind_failed(self, pod: PodRequest, reason: str, *, backoff_s: float = 0.0) -> None:
        """A binding failed: release the pod's place (its reservation in the cache, its queue's usage, its job's
        member) and retry it alone (a gang keeps the others), not before ``backoff_s`` seconds."""
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
        if backoff_s > 0:
            self.queue.back_off(pod.key, backoff_s)
            self.queue.back_off(job.key, backoff_s)

    # --- what the operator, explain and metrics read -------------------------------------------------------------

    def job_of(self, pod_key: str) -> Job | None:
        return self.jobs.of_pod(pod_key)

    def gang(self, group_key: str) -> Job | None:
        return self.jobs.gang(group_key)

    def queue_of(self, pod: PodRequest) -> str:
        """The leaf queue ``pod`` counts against (its job's); "" for a pod another scheduler bound (no queue)."""
        if self.tenancy.is_outside(pod.key):
            return ""
        return self.jobs.queue_of(pod)

    def held(self, leaf: str) -> Vector:
        """What ``leaf`` holds now (its placed pods' requests)."""
        return dict(self.tenancy.allocated.get(leaf, {}))

    @property
    def evictor(self) -> Evictor | None:
        """Who deletes preempted pods (None: no preemption)."""
        return self.setting.evictor

    @evictor.setter
    def evictor(self, evictor: Evictor | None) -> None:
        self.setting.evictor = evictor

    @property
    def mover(self) -> Mover | None:
        """Who evicts the pods consolidation moves (None: no pod moves)."""
        return self.setting.mover

    @mover.setter
    def mover(self, mover: Mover | None) -> None:
        self.setting.mover = mover

    def action_state(self, kind: type[S]) -> S | None:
        """The state of ``kind`` the profile's actions keep (what metrics, the simulator and tests read of it); None
        when none of them keeps one."""
        return next((state for state in self.states if isinstance(state, kind)), None)

    # --- the cycle ---------------------------------------------------------------------------------------------

    def run_once(self) -> bool:
        """Run one cycle if anything is ready; False when nothing was."""
        self._reservations_freed()  # a Reservation's hold expired during the last cycle
        self.sort_pending()
        item = self.queue.pop()
        if item is None:
            return False
        queued = self.jobs.queued(item.key)
        if queued is None:
            self.queue.done(item.key)  # its job is gone
        else:
            self.session.run(Attempt(queued[0], item, queued[1]))
        return True

    def defragment(self) -> bool:
        """Background defragmentation, if the profile turns it on and it is time (call it periodically): when
        nothing waits, empty a nearly empty node by moving its pods (``scheduler.core.consolidation.defrag``). Whether
        it did."""
        return any([state.background() for state in self.states])

    def run_until_idle(self, limit: int = 1_000_000) -> int:
        """Run cycles until nothing is ready (or ``limit`` cycles). Returns how many ran."""
        cycles = 0
        while cycles < limit and self.run_once():
            cycles += 1
        return cycles

    # --- bookkeeping -------------------------------------------------------------------------------------------

    def cycle_context(self, key: str) -> Context:
        """What job ``key``'s cycles get from outside (the one place a job's context is built): what the holds
        registry keeps it off (the nodes held for others: nominations, reservations, gangs' room, the targets of
        moves) and the pods nominated for others that it counts (those of its priority or higher), and the waiting
        demand."""
        if not self.holds.holding:  # most cycles of a cluster: nothing held, nothing to ask
            return Context(pending=self)
        queued = self.jobs.queued(key)
        priority = queued[0].priority if queued is not None else 0
        if queued is not None and queued[1] is not None:
            priority = max(priority, queued[1].priority)  # a member tried alone, as its queue item is ranked
        held = self.holds.context(key, priority=priority, ends=self._ends(queued))
        return Context(pending=self, reserved=held.reserved, nominated=held.nominated)

    def _ends(self, queued: tuple[Job, PodRequest | None] | None) -> float | None:
        """When the queued pods would end if they started now, by their declared run times (the longest of them);
        None when one declares none (it may not backfill room held for another job: ``scheduler.core.holds``)."""
        if queued is None:
            return None
        job, alone = queued
        pods = [alone] if alone is not None else list(job.pending.values())
        if not pods or any(p.run_time is None for p in pods):
            return None
        return self.clock() + max(p.run_time.seconds for p in pods if p.run_time is not None)

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
            self.queue.update(QueueItem.of(job))
            return
        group = job.group
        if self.gate.hold_for_queue(leaf, f"podgroup {group.key}", job, self.events):
            # The PodGroup says it too, not only its members (its REASON column was empty).
            job.set_condition("Scheduled", "False", *self.gate.queue_problem(leaf), self.clock())
            return
        scheduled = job.conditions.get("Scheduled")
        if scheduled is not None and scheduled.reason in gate.QUEUE_WAITS:
            # Its queue takes it now: what it waits for next comes with its next attempt (or its members).
            job.set_condition(
                "Scheduled", "False", "Queued", f"queue {leaf!r} takes it; it waits for its turn", self.clock()
            )
            job.refresh_phase(self.clock())
        if job.alone_allowed:
            self.queue.remove(job.key)
            if job.full:
                for pod_key in job.pending:
                    self.queue.remove(pod_key)  # the gang holds its maxMember: they wait for one to leave
                return
            # A member tried alone goes at its gang's priority if that is higher than its own; one that grows a gang
            # already at its minimum goes after the work of that priority still waiting to start.
            created = math.inf if job.satisfied else None
            for pod in job.pending.values():
                priority = max(pod.priority, group.priority)
                self.queue.update(QueueItem(pod.key, priority, pod.created if created is None else created, leaf))
            return
        for pod_key in job.pending:
            self.queue.remove(pod_key)
        if not job.pending:
            self.queue.remove(job.key)
        elif job.exists >= group.min_member:
            self.queue.update(QueueItem.of(job))

    def _allocated(self, key: str, job: Job, pods: list[PodRequest]) -> None:
        """Queue item ``key`` placed ``pods`` of ``job``: what it held and waited for is released, and the pods
        hold capacity in the job's queue."""
        self._job_placed(key)
        self._placed(job, pods)

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
        for state in self.states:
            state.job_placed(key)
        self.holds.release(key)
        self.hints.forget(key)
        if self.gate.fed(key):
            self._wake_gated()

    def _job_gone(self, key: str) -> None:
        for state in self.states:
            state.job_gone(key)
        self.holds.release(key)
        self.hints.forget(key)
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
            "minMember": job.group.min_member if job.group is not None else 1,
            "maxMember": (job.group.max_member or None) if job.group is not None else None,
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

    def queue_statuses(self) -> dict[str, QueueStatus]:
        """Every Queue's status in numbers: allocation, guarantee in use, borrowed, decayed usage, pending pods and
        gangs, shares (the operator writes these to ``status``)."""
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
