"""The session's actions: what happens to one job taken from the queue, in the order the profile names them.

The loop pops an item, reads it as an :class:`~scheduler.core.jobs.Attempt` of a job (its single pod, ``minMember``
members of a gang together, or one gang member alone), lets the queue gate admit it, and runs the profile's
``actions``, least disruptive first (the order of :data:`.registry.ACTIONS`):

- ``allocate`` (always first, :mod:`.allocate`): place the attempt's pods on a what-if of the cycle's snapshot,
  all or none; only a placement that holds whole is committed (assumed in the cache, handed to the binder);
- ``consolidate`` (:mod:`.consolidate`, not in the default profile): move running pods to other nodes to make room,
  nobody's work lost (each moved pod's controller recreates it on the target held for it);
- ``reclaim`` (:mod:`.reclaim`): across queues, take back what other queues borrowed beyond their guarantee, when
  the job stays within its own queue's guarantee;
- ``preempt`` (:mod:`.preempt`): within the job's queue, evict work of lower priority;
- ``backfill`` (:mod:`.backfill`, not in the default profile): hold for the head of the queue's line the nodes that
  free soonest, with its expected start; other work uses that room only if its declared run time ends by then.

Each action is one module behind one small interface, :class:`Action`: given the attempt, the cycle's snapshot and
a :class:`~scheduler.core.statement.Statement`, it tries on what-ifs of the snapshot (checkpoints it rolls back) and
records on the statement the steps it decided (allocate: place every member; reclaim and preempt: nominate the room,
evict every victim; consolidate: hold the targets, evict the moved pods), then returns an :class:`Outcome`. The
session commits the statement when the action placed the job or makes room for it, and discards it otherwise; it
stops at the first action that does. When nothing placed it, the failure tail runs once, whatever the job: a
reservation against starvation (unless room is being made), the queueing hints, the gate's starving demand, and the
requeue (``scheduler.core.session``). Like kube-scheduler's PostFilter, the disruptive actions run only for a job
that did not fit; unlike KAI-Scheduler's actions, which each walk every pending job of a session, ours run for one
job at a time: the queue's order is the session's order.

An action owns what it keeps between cycles, a :class:`State` (consolidate:
``scheduler.core.consolidation.moves.Moves`` and the
background ``scheduler.core.consolidation.defrag.Defragmenter``; reclaim and preempt share
``scheduler.core.preemption.preemptor.Preemptor``),
made from the :class:`Setting` it is built from (the core's state and ports) and shared through
:meth:`Setting.state`. Room it keeps for a job goes into the holds registry (``setting.holds``), which every
cycle reads. The state declares its hooks by overriding those of :class:`State`: a pod pending or placed, a job
placed or gone, Queues and PodDisruptionBudgets changed, an eviction failed or refused, what is late (``expire``),
work of its own when it is time (``background``), leadership lost. The loop (``scheduler.core.loop``) knows actions only
through these: it builds the profile's actions from the registry and calls each state's hooks once. ``gpusched
explain`` asks each action what it would do for a job (:meth:`Action.explain`).

Adding an action takes two files (``backfill`` was added so):

1. its module here: a subclass of :class:`Action` with its ``name``, built from a
   :class:`Setting` (``__init__(self, setting)``), whose ``run`` records its steps on the statement and returns an
   :class:`Outcome`; if it keeps state between cycles, a subclass of :class:`State` overriding the hooks it needs,
   made with ``setting.state(...)`` and listed in the action's ``states``; if it can say more to ``gpusched
   explain``, an ``explain`` method;
2. its registration, one line in :data:`.registry.ACTIONS` at its place in the order (least disruptive first).

Profiles then name it (``actions: [allocate, ..., backfill]``); the registry checks names and order when the
loop builds them, and nothing else (the loop, the session, explain, the operator, the simulator) names actions. Its
tests go in ``tests/core/test_actions.py`` or a file of its own, and its user-facing documentation in ``docs/``.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from scheduler.api.objects.pdb import DisruptionBudget
from scheduler.api.objects.pod import PodRequest
from scheduler.cache.state import Snapshot
from scheduler.core.cycle import Context, Diagnosis, Scheduler
from scheduler.core.holds import Holds
from scheduler.core.jobs import Attempt, Jobs
from scheduler.core.ports import Events, Evictor, Mover
from scheduler.core.statement import Statement
from scheduler.core.tenancy import Tenancy
from scheduler.framework.interface import Decision, Status
from scheduler.queue.scheduling import SchedulingQueue


class Verdict(enum.Enum):
    #: The job is placed (its statement is committed): the session ends.
    PLACED = "placed"
    #: Room is being made for it (its statement is committed; victims evicted, or still terminating): the session
    #: ends; the job waits.
    WAITS = "waits"
    #: Nothing done (its statement, if any, is discarded): the next action runs.
    NOTHING = "nothing"


_SUCCESS = Status.success()


@dataclass(frozen=True, slots=True)
class Outcome:
    """What an action did with an attempt."""

    verdict: Verdict
    #: Why it is not placed (allocate's: the code picks the way back to the queue); success when it is.
    status: Status = _SUCCESS
    #: The placements decided (allocate).
    decisions: tuple[Decision, ...] = ()
    #: Why no node could take it, node counts per reason (for the queueing hints).
    diagnosis: Diagnosis | None = None
    #: What kube-scheduler's PostFilter would add to the ``FailedScheduling`` message (``preemption: ...``): why
    #: preemption made no room for a single pod, or "" (it made room, or it is not kube-scheduler's kind).
    said: str = ""


NOTHING = Outcome(Verdict.NOTHING)
WAITS = Outcome(Verdict.WAITS)


class State:
    """What an action keeps from one cycle to the next, and the hooks through which the loop tells it what happened
    and asks what it holds. Every hook does nothing unless a state overrides it. Actions that share their state
    (reclaim and preempt share the preemptor's) share one object: the loop calls each state's hooks once."""

    def pod_pending(self, pod: PodRequest) -> None:
        """A pod of ours without a node was seen (new or updated)."""

    def pod_placed(self, pod: PodRequest) -> None:
        """A pod was seen bound (its phase may have changed)."""

    def job_placed(self, key: str) -> None:
        """Queue item ``key`` (a job, or a gang's member placed alone) was placed."""

    def job_gone(self, key: str) -> None:
        """Pod or job ``key`` left."""

    def queues_changed(self) -> set[str]:
        """The cluster's Queues changed (guarantees, policies, what may move): the jobs to try again now."""
        return set()

    def budget_changed(self, key: str) -> set[str]:
        """PodDisruptionBudget ``key`` was seen (new or changed) or went: the jobs to try again now."""
        return set()

    def eviction_failed(self, pod_key: str, message: str) -> set[str]:
        """The deletion of a pod it evicted failed: the jobs to try again now."""
        return set()

    def move_refused(self, pod_key: str, message: str) -> None:
        """The eviction of a pod it moved was refused (a PodDisruptionBudget)."""

    def expire(self) -> bool:
        """Give up what is late (call it periodically); whether room it held was released."""
        return False

    def background(self) -> bool:
        """Work of its own when nothing waits and it is time (call it periodically); whether it started any."""
        return False

    def leadership_lost(self) -> None:
        """This replica no longer leads: drop what it was carrying out."""


S = TypeVar("S", bound=State)


@dataclass(eq=False)
class Setting:
    """What an action is built from: the core's state and ports (the loop's), and the states actions share."""

    scheduler: Scheduler
    queue: SchedulingQueue
    jobs: Jobs
    tenancy: Tenancy
    holds: Holds
    clock: Callable[[], float]
    events: Events
    #: Who deletes preempted pods (None: no preemption), and who evicts moved pods (None: no consolidation).
    evictor: Evictor | None = None
    mover: Mover | None = None
    #: The cluster's PodDisruptionBudgets by ``namespace/name``.
    budgets: dict[str, DisruptionBudget] = field(default_factory=dict)
    _states: dict[type[State], State] = field(default_factory=dict)

    def state(self, kind: type[S], make: Callable[[], S]) -> S:
        """The one state of ``kind`` the actions share (made by ``make`` for the first that asks)."""
        found = self._states.get(kind)
        if found is None:
            found = self._states[kind] = make()
        assert isinstance(found, kind)
        return found


@dataclass(frozen=True, slots=True)
class Asked:
    """A job ``gpusched explain`` asks the actions about: what its cycles would try now."""

    key: str
    members: Sequence[PodRequest]
    snapshot: Snapshot
    whole_gang: bool
    #: The topology level a whole gang stays inside, if any.
    level: int | None
    context: Context


class Action:
    """One step of the session, built from a :class:`Setting` (``registry.ACTIONS``)."""

    #: The name a profile gives it (``actions: [allocate, ...]``).
    name = ""
    #: What it keeps between cycles (several actions may share one).
    states: tuple[State, ...] = ()

    def run(self, attempt: Attempt, snapshot: Snapshot, statement: Statement) -> Outcome:
        """Try ``attempt`` on what-ifs of ``snapshot``; record on ``statement`` what it decides (the session commits
        it when the job is placed or waits, and discards it otherwise); say what it did."""
        raise NotImplementedError

    def evicts_below(self, attempt: Attempt) -> float:
        """The priority below which it may take running pods' room for ``attempt`` (evict or move them), for the
        queueing hints: while such a pod runs, a deletion that leaves no free room for the job may still let this
        action make it. ``inf`` (any pod's, the default: moving pods takes any priority), ``-inf`` (none)."""
        return math.inf

    def explain(self, asked: Asked) -> list[str]:
        """What it is doing, or would do now, for the job ``asked`` is about (``gpusched explain``), as lines; none
        unless it says more than the cycle's reasons."""
        return []
