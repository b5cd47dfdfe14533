"""The consolidate action: a job that fits nowhere gets room by moving running pods to other nodes.

Between allocate and reclaim: nobody's work is lost, every moved pod runs again elsewhere (its controller
recreates it, and the new pod goes to the target the plan held for it). The plan is searched on one what-if of the
snapshot (``scheduler.core.move_plan``) among the pods that may move (``scheduler.core.moves``); it is carried
out as one statement (targets held, then the moved pods evicted) and the job waits for its room. A job whose plan
is being carried out waits for it; a search that finds nothing is not run again until the cluster changes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from scheduler.api.pod import PodRequest
from scheduler.cache.state import Snapshot
from scheduler.core import fruitless, move_memo
from scheduler.core.actions import NOTHING, WAITS, Outcome
from scheduler.core.cycle import Context, Scheduler
from scheduler.core.jobs import Attempt
from scheduler.core.move_plan import Found, Search
from scheduler.core.moves import Moves

_counts = re.compile(r"\d+")


class Consolidate:
    name = "consolidate"

    def __init__(self, scheduler: Scheduler, moves: Moves) -> None:
        self.scheduler = scheduler
        self.moves = moves

    def run(self, attempt: Attempt, snapshot: Snapshot) -> Outcome:
        moves = self.moves
        if moves.mover is None:
            return NOTHING
        if moves.in_flight(attempt.key) or moves.replacing(attempt.key):
            return WAITS
        a = snapshot.arrays
        version = fruitless.generation(a)
        tried = moves.no_plan.get(attempt.key)
        if tried is not None and tried[0] == version and moves.clock() < tried[2]:
            return NOTHING
        shape = move_memo.shape(
            attempt.members,
            whole_gang=attempt.whole_gang,
            priority=attempt.priority,
            level=attempt.level,
            context=attempt.context,
        )
        cache = self.scheduler.cache
        recalled = moves.memo.recall(shape, snapshot, cache, epoch=moves.epoch, now=moves.clock())
        if recalled is not None:
            why, verdict = recalled
        else:
            found = self.search(attempt, snapshot)
            moves.verdicts[found.verdict] = moves.verdicts.get(found.verdict, 0) + 1
            moves.last_verdict[attempt.key] = found.verdict
            if found.plan is not None:
                moves.start(attempt.key, attempt.obj, found.plan)
                return WAITS
            why, verdict = found.why, found.verdict
            moves.memo.keep(
                shape, snapshot, cache, why=why, verdict=verdict, epoch=moves.epoch, until=moves.cooldown_ends()
            )
        if tried is None or _counts.sub("N", tried[1]) != _counts.sub("N", why):
            # Once per distinct reason: counts of nodes and pods in it change with every search.
            self.scheduler_event(attempt, why)
        moves.no_plan[attempt.key] = (version, why, moves.cooldown_ends())
        moves.last_verdict[attempt.key] = verdict
        return NOTHING

    def search(self, attempt: Attempt, snapshot: Snapshot) -> Found:
        """The plan for ``attempt`` on ``snapshot``, or why there is none."""
        return self.plan_for(
            attempt.members,
            snapshot,
            whole_gang=attempt.whole_gang,
            priority=attempt.priority,
            level=attempt.level,
            context=attempt.context,
        )

    def plan_for(
        self,
        members: Sequence[PodRequest],
        snapshot: Snapshot,
        *,
        whole_gang: bool,
        priority: int,
        level: int | None,
        context: Context,
    ) -> Found:
        """The plan for a job of ``members`` (``gpusched explain`` asks this too, with the cycle's context)."""
        moves = self.moves
        return Search(
            self.scheduler,
            snapshot,
            members,
            whole_gang=whole_gang,
            context=context,
            level=level,
            limits=moves.limits,
            pace=moves.pace,
        ).run(lambda slot: moves.movable_on(slot, priority))

    def scheduler_event(self, attempt: Attempt, why: str) -> None:
        self.moves.events.emit(
            obj=attempt.obj, kind="Normal", reason="NoMovePlan", message=f"consolidation cannot make room: {why}"
        )
