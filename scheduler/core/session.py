"""The session for one item taken from the queue: what it places, the queue gate, the profile's actions in order,
and the failure tail, once, whatever the job.

An item is read as an :class:`~scheduler.core.jobs.Attempt` of its job: ``minMember`` members of a gang placed
together (once that many exist), one member of a gang placed alone near its placed siblings (while the gang holds
its place), or a single pod. The queue gate may hold it back (a queue limit, the fair-share gate): it then waits
for the events that may change that. Else the actions run (``scheduler.core.actions``): allocate, and for a job
that did not fit the actions that make room, until one does. Each action records what it decides on a
:class:`~scheduler.core.statement.Statement`, which the session commits when the action placed the job or makes room
for it, and discards otherwise. A job that was not placed gets an Event (a gang:
its Scheduled=False condition and phase too); unless allocate broke (``ERROR``: backoff), the failure tail runs:
a reservation against starvation (unless room is being made for it), the queueing hints, the gate's starving
demand, and the unschedulable pool.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from scheduler.api.objects.pod import PodRequest
from scheduler.core import capacity, gang, gate, holds
from scheduler.core.actions import Action, Outcome, Verdict
from scheduler.core.cycle import Context, Diagnosis, Scheduler
from scheduler.core.hints import Hints
from scheduler.core.holds import Holds
from scheduler.core.jobs import Attempt, Job
from scheduler.core.ports import Events
from scheduler.core.statement import Statement
from scheduler.core.tenancy import requests_of
from scheduler.framework import reasons as framework_reasons
from scheduler.framework.interface import Code, Decision, Status
from scheduler.queue.scheduling import SchedulingQueue

#: What kube-scheduler's DynamicResources PostFilter says for a pod without ResourceClaims (k8s 1.36), before its
#: DefaultPreemption's words: gpusched's profile with ``dra`` says it too.
NO_CLAIMS_TO_DEALLOCATE = "no new claims to deallocate"


class Session:
    def __init__(
        self,
        scheduler: Scheduler,
        queue: SchedulingQueue,
        *,
        clock: Callable[[], float],
        events: Events,
        gate: gate.Gate,
        holds: Holds,
        hints: Hints,
        actions: Sequence[Action],
        context: Callable[[str], Context],
        placed: Callable[[str, Job, list[PodRequest]], None],
        enqueue: Callable[[Job], None],
    ) -> None:
        """``context(key)``: what job ``key``'s cycles get from outside (held nodes, the waiting demand);
        ``placed(key, job, pods)``: the loop's bookkeeping for ``pods`` of ``job`` placed by queue item ``key``;
        ``enqueue(job)``: queue what of ``job`` can be tried now."""
        self.scheduler = scheduler
        self.queue = queue
        self.clock = clock
        self.events = events
        self.gate = gate
        self.holds = holds
        self.hints = hints
        self.actions = list(actions)
        #: Whether the profile refuses nodes for want of free room (the ``fit`` filter): only then is a job that
        #: found none woken by the deletions that free some (``scheduler.core.hints``).
        self.room_filtered = any(f.name == "fit" for f in scheduler.framework.filters)
        self.context = context
        self.placed = placed
        self.enqueue = enqueue

    def run(self, attempt: Attempt) -> None:
        if not self._choose(attempt):
            self.queue.done(attempt.key)
            self.enqueue(attempt.job)  # what of it can be tried now (the gang whole, or its members alone)
            return
        item, members = attempt.item, attempt.members
        reason, over = self.gate.held_back(item.queue, requests_of(members), item.key)
        if over:
            self._not_placed(attempt, reason, over)
            # Like a job without room: a deletion that leaves fewer free GPUs than it needs cannot let it start.
            self.hints.failed(item.key, members, gate.WAKES, evicts_below=self._evicts_below(attempt))
            self.queue.requeue_unschedulable(item, over)
            return
        allocate, *make_room = self.actions
        outcome = self.act(allocate, attempt)
        if outcome.verdict is Verdict.PLACED:
            self._allocated(attempt, outcome.decisions)
            return
        status = outcome.status
        if status.code == Code.ERROR or status.gated:
            self._not_placed(attempt, self._reason(attempt, status), status.message)
            if status.code == Code.ERROR:
                self.queue.requeue_error(item, status.message)
                return
            # Not tried at all (an object it names does not exist yet): no backoff, no room made for it.
            self.hints.failed(
                item.key, members, self.scheduler.wakes(outcome.diagnosis), evicts_below=self._evicts_below(attempt)
            )
            self.queue.requeue_gated(item, status.message)
            return
        said = ""
        if attempt.unresolved is None:
            waits = False
            for action in make_room:
                made = self.act(action, attempt)
                said = made.said or said
                if made.verdict is Verdict.WAITS:
                    waits = True
                    break
            if not waits:
                self.holds.reserve(attempt)
        # Said after the actions that make room, as kube-scheduler's FailedScheduling comes after its PostFilter:
        # why preemption did not help, if it did not, is part of the message.
        if said and self.scheduler.allocates_claims and not any(p.resource_claims for p in members):
            said = f"{NO_CLAIMS_TO_DEALLOCATE}, {said}"  # kube-scheduler's DynamicResources PostFilter runs first
        message = _with_post_filter(status.message, outcome.diagnosis, said)
        message = self._held_for_reservations(attempt.key, outcome.diagnosis, message)
        self._not_placed(attempt, self._reason(attempt, status), message)
        self.hints.failed(
            item.key, members, self.scheduler.wakes(outcome.diagnosis), evicts_below=self._evicts_below(attempt)
        )
        self.gate.starve(item.key, item.queue, requests_of(members))
        self.queue.requeue_unschedulable(item, message)

    def _evicts_below(self, attempt: Attempt) -> float:
        """Below which priority the make-room actions may take running pods' room for ``attempt`` (the queueing
        hints: room freed by a deletion is what it waits for only when none may); ``inf`` without the ``fit``
        filter (nothing else refuses a node for want of free room)."""
        if not self.room_filtered:
            return math.inf
        return max((action.evicts_below(attempt) for action in self.actions[1:]), default=-math.inf)

    def act(self, action: Action, attempt: Attempt) -> Outcome:
        """Run ``action`` on the cycle's snapshot; commit what it decided if it placed the job or makes room for it,
        else discard it."""
        statement = Statement(self.scheduler)
        outcome = action.run(attempt, self.scheduler.cache.snapshot(), statement)
        if outcome.verdict is Verdict.NOTHING:
            statement.discard()
        else:
            statement.commit()
        return outcome

    def _choose(self, attempt: Attempt) -> bool:
        """Choose the pods ``attempt`` places and what its cycles get from outside (:func:`choose`)."""
        if attempt.whole_gang and attempt.job.first_attempt is None:
            attempt.job.first_attempt = self.clock()
        return choose(self.scheduler, attempt, self.context(attempt.key))

    def _held_for_reservations(self, key: str, diagnosis: Diagnosis | None, message: str) -> str:
        """``message`` with the Reservations named whose nodes the job was kept off, if any were."""
        if diagnosis is None or framework_reasons.RESERVED.code not in diagnosis.codes:
            return message
        keeping = self.holds.reservations_keeping(key)
        if not keeping:
            return message
        names = ", ".join(sorted(f"Reservation {holds.reservation_of(hold)}" for hold in keeping))
        return f"{message} Nodes held by {names}: only the pods it names may use them."

    def _reason(self, attempt: Attempt, status: Status) -> str:
        """The reason of a gang's Scheduled=False condition after a cycle that did not place it."""
        group, first = attempt.job.group, attempt.job.first_attempt
        if status.code == Code.UNRESOLVABLE and status.plugin == "topology":
            return "InvalidTopology"
        if capacity.says_never(status.message):
            return capacity.NEVER_FITS  # not "NotAllMembersFit": no wait makes room that the cluster does not have
        timed_out = group is not None and first is not None and self.clock() - first >= group.schedule_timeout_s
        return "Unschedulable" if timed_out else "NotAllMembersFit"

    def _not_placed(self, attempt: Attempt, reason: str, message: str) -> None:
        """Say why ``attempt`` was not placed: an Event, and for a gang short of ``minMember`` (tried whole, or the
        member it waits for tried alone) its condition and phase."""
        job, now = attempt.job, self.clock()
        short = attempt.whole_gang or (job.group is not None and not job.satisfied)
        if short:
            said = message if attempt.whole_gang else f"{attempt.obj}, the member it waits for: {message}"
            job.set_condition("Scheduled", "False", reason, said, now)
        self.events.emit(obj=attempt.obj, kind="Warning", reason="FailedScheduling", message=message)
        if short:
            job.refresh_phase(now)

    def _allocated(self, attempt: Attempt, decisions: Sequence[Decision]) -> None:
        """``attempt`` was placed: it leaves the queue, holds capacity in its queue, and says so."""
        job, now = attempt.job, self.clock()
        self.queue.done(attempt.key)
        self.placed(attempt.key, job, [d.pod for d in decisions])
        for decision in decisions:
            self.events.emit(
                obj=f"pod {decision.pod.key}",
                kind="Normal",
                reason="Scheduled",
                message=scheduled(decision.pod.key, decision.node, decision.gpu_ids),
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
        self.enqueue(job)


def _with_post_filter(message: str, diagnosis: Diagnosis | None, said: str) -> str:
    """``message`` with kube-scheduler's PostFilter words ``said`` after its own sentence (before gpusched's "Never
    fits" sentence when there is one), as kube-scheduler's FitError puts them; a message of gpusched's own, not
    kube-scheduler's ``0/N nodes are available`` (a profile that cannot allocate claims), is left as it is."""
    if not said or not message.startswith("0/"):
        return message
    if diagnosis is not None and message == diagnosis.message():
        return diagnosis.message(post_filter=said)
    return f"{message} {said}"


def scheduled(pod: str, node: str, gpu_ids: tuple[int, ...]) -> str:
    # kube-scheduler's wording, which tools and Kubernetes' own e2e tests match on.
    gpus = f" (GPUs {','.join(str(g) for g in gpu_ids)})" if gpu_ids else ""
    return f"Successfully assigned {pod} to {node}{gpus}"


def choose(scheduler: Scheduler, attempt: Attempt, context: Context) -> bool:
    """Whether ``attempt`` can be tried as it was queued, and if so its pods and what its cycles get (:func:`fill`;
    ``context``: what its job's cycles get from outside, ``SchedulingLoop.cycle_context``). False for a gang not
    ready, or a member whose gang no longer holds its place."""
    job, group = attempt.job, attempt.job.group
    if attempt.whole_gang:
        if job.missing <= 0 or len(job.pending) < job.missing:
            return False
    elif attempt.alone is None and not job.pending:
        return False
    elif group is not None and not job.alone_allowed:
        return False  # the gang lost its members meanwhile (preempted, deleted): this one waits for it
    elif group is not None and job.full:
        return False  # an elastic gang at its maxMember: this one waits for a member to leave
    fill(scheduler, attempt, context)
    return True


def fill(scheduler: Scheduler, attempt: Attempt, context: Context) -> None:
    """Fill in what ``attempt`` tries: its pods (a gang's ``minMember`` core members, or its one pod), the topology
    level a whole gang stays inside, and what its cycles get: ``context``, with what a gang's running members add.
    The session tries exactly this (after :func:`choose`), and ``scheduler.core.explanation`` tells it, so the two
    cannot disagree."""
    job, group = attempt.job, attempt.job.group
    if attempt.whole_gang:
        assert group is not None
        attempt.members = gang.core_members(job.pending.values(), job.missing)
        (attempt.level, _), attempt.unresolved = gang.resolve_levels(scheduler, group.topology, obj=attempt.obj)
        context = gang.rejoin_context(scheduler, group, job.placed, context, pending=job.pending.values())
    else:
        attempt.members = [attempt.alone or next(iter(job.pending.values()))]
        if group is not None:
            # A member beyond minMember, or one whose binding failed: place it near the others.
            context = gang.member_context(
                scheduler, group, job.placed, context, member=attempt.members[0], pending=job.pending.values()
            )
    attempt.context = context
