"""A Statement: the steps one action decided for one job, made real together by the session, or not at all.

As in KAI-Scheduler, an action does not change the cluster while it decides: it tries on what-ifs of the cycle's
snapshot (checkpoints it rolls back, the snapshot's one undo log), and records what it decided here, in order:

- ``place``: pods placed, each assumed in the cache, then each handed to the binder (a binder that answers at once
  sees its siblings assumed already);
- ``nominate``: room held for the job while its victims leave (the holds, and a single pod's nominated node);
- ``hold``: room held by a plan of moves (its targets, and the job's nodes);
- ``evict``: a victim (a preempted job, a moved pod) handed to the evictor;
- ``tell``: an Event that says what the statement did (after the steps it tells of).

The session (``scheduler.core.session``) commits the statement of an action that placed the job or makes room for
it, and discards it otherwise; a step whose owner keeps state applies it through its own function, so the state
changes only when the step is committed. Nothing reads the cluster's state between the recording and the commit
(the action returns, the session commits): a step reads at commit time what it would have read when recorded.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from scheduler.core.cycle import Scheduler
from scheduler.framework.interface import Decision

#: The kinds of step, in the words of the module notes.
PLACE, NOMINATE, HOLD, EVICT, TELL = "place", "nominate", "hold", "evict", "tell"


@dataclass(frozen=True, slots=True)
class Step:
    """One thing a statement will make real: its ``kind``, and how."""

    kind: str
    apply: Callable[[], None]


class Statement:
    """The steps an action recorded for one job, made real in their order by :meth:`commit`, or dropped."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self.steps: list[Step] = []

    def place(self, decisions: Sequence[Decision]) -> None:
        """Place every pod of ``decisions``: all assumed in the cache first, then all handed to the binder."""
        decided = list(decisions)
        self.steps.append(Step(PLACE, lambda: self._place(decided)))

    def nominate(self, apply: Callable[[], None]) -> None:
        self.steps.append(Step(NOMINATE, apply))

    def hold(self, apply: Callable[[], None]) -> None:
        self.steps.append(Step(HOLD, apply))

    def evict(self, apply: Callable[[], None]) -> None:
        self.steps.append(Step(EVICT, apply))

    def tell(self, apply: Callable[[], None]) -> None:
        self.steps.append(Step(TELL, apply))

    def commit(self) -> None:
        """Make every step real, in the order recorded; the statement is empty afterwards."""
        steps, self.steps = self.steps, []
        for step in steps:
            step.apply()

    def discard(self) -> None:
        """Drop every step: nothing of it happens."""
        self.steps = []

    def _place(self, decisions: list[Decision]) -> None:
        for decision in decisions:
            self.scheduler.cache.assume(
                decision.pod, decision.node, decision.gpu_ids, decision.volumes, decision.claims
            )
        for decision in decisions:
            self.scheduler.binder.bind(decision)
