"""The session's actions: what happens to one job taken from the queue, in the order the profile names them.

The loop pops an item, reads it as an :class:`~scheduler.core.jobs.Attempt` of a job (its single pod, ``minMember``
members of a gang together, or one gang member alone), lets the queue gate admit it, and runs the profile's
``actions`` (``scheduler.framework.profile.ACTIONS``), least disruptive first:

- ``allocate`` (always first, :mod:`.allocate`): place the attempt's pods on a what-if of the cycle's snapshot,
  all or none; only a placement that holds whole is committed (assumed in the cache, handed to the binder);
- ``consolidate`` (:mod:`.consolidate`, not in the default profile): move running pods to other nodes to make room,
  nobody's work lost (each moved pod's controller recreates it on the target held for it);
- ``reclaim`` (:mod:`.reclaim`): across queues, take back what other queues borrowed beyond their guarantee, when
  the job stays within its own queue's guarantee;
- ``preempt`` (:mod:`.preempt`): within the job's queue, evict work of lower priority.

Each action is one module behind one small interface, :class:`Action`: given the attempt and the cycle's
snapshot, it tries on what-ifs of the snapshot (checkpoints it rolls back) and commits what it decided as one
statement (allocate: assume and bind every member; reclaim and preempt: nominate the room and evict every
victim), then returns an :class:`Outcome`. The session stops at the first action that places the job or makes
room for it. When nothing placed it, the failure tail runs once, whatever the job: a reservation against
starvation (unless room is being made), the queueing hints, the gate's starving demand, and the requeue
(``scheduler.core.session``). Like kube-scheduler's PostFilter, the disruptive actions run only for a job that did
not fit; unlike KAI-Scheduler's actions, which each walk every pending job of a session, ours run for one job at
a time: the queue's order is the session's order.

The next action plugs in here: ``backfill`` (place work that fits in the room held for a waiting job while it
drains: after preempt). Like the others it is a module with a class that has ``name`` and ``run``, its name in
``ACTIONS`` of ``scheduler.framework.profile`` at its place in the order, and an entry in :func:`build`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from scheduler.cache.state import Snapshot
from scheduler.core.cycle import Diagnosis, Scheduler
from scheduler.core.jobs import Attempt
from scheduler.core.moves import Moves
from scheduler.core.preemption import NOT_ELIGIBLE_TERMINATING, Preemptor
from scheduler.core.tenancy import Tenancy
from scheduler.framework.interface import Decision, Status


class Verdict(enum.Enum):
    #: The job is placed (its decisions are committed): the session ends.
    PLACED = "placed"
    #: Room is being made for it (victims evicted, or still terminating): the session ends; the job waits.
    WAITS = "waits"
    #: Nothing done: the next action runs.
    NOTHING = "nothing"


_SUCCESS = Status.success()


@dataclass(frozen=True, slots=True)
class Outcome:
    """What an action did with an attempt."""

    verdict: Verdict
    #: Why it is not placed (allocate's: the code picks the way back to the queue); success when it is.
    status: Status = _SUCCESS
    #: The placements committed (allocate).
    decisions: tuple[Decision, ...] = ()
    #: Why no node could take it, node counts per reason (for the queueing hints).
    diagnosis: Diagnosis | None = None
    #: What kube-scheduler's PostFilter would add to the ``FailedScheduling`` message (``preemption: ...``): why
    #: preemption made no room for a single pod, or "" (it made room, or it is not kube-scheduler's kind).
    said: str = ""


NOTHING = Outcome(Verdict.NOTHING)
WAITS = Outcome(Verdict.WAITS)
#: A single pod whose victims are still terminating waits for them, and says so as kube-scheduler does.
WAITS_FOR_VICTIMS = Outcome(Verdict.WAITS, said=NOT_ELIGIBLE_TERMINATING)


def waits_for_victims(attempt: Attempt) -> Outcome:
    """What reclaim and preempt answer for a job whose victims are still terminating (``Search.waits``)."""
    return WAITS_FOR_VICTIMS if attempt.job.group is None else WAITS


class Action(Protocol):
    """One step of the session."""

    #: The name a profile gives it (``actions: [allocate, ...]``).
    name: str

    def run(self, attempt: Attempt, snapshot: Snapshot) -> Outcome:
        """Try ``attempt`` on what-ifs of ``snapshot``; commit what it decides as one statement; say what it did."""
        ...


def build(
    names: Sequence[str], *, scheduler: Scheduler, preemptor: Preemptor, tenancy: Tenancy, moves: Moves
) -> list[Action]:
    """The actions a profile names, in its order (``scheduler.framework.profile`` checked the names and order)."""
    # Imported here: each action's module imports Outcome and Verdict from this package.
    from scheduler.core.actions import allocate, consolidate, preempt, reclaim

    made: dict[str, Callable[[], Action]] = {
        "allocate": lambda: allocate.Allocate(scheduler),
        "consolidate": lambda: consolidate.Consolidate(scheduler, moves),
        "reclaim": lambda: reclaim.Reclaim(preemptor, tenancy),
        "preempt": lambda: preempt.Preempt(preemptor, tenancy),
    }
    return [made[name]() for name in names]
