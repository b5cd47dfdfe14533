"""The consolidate action: a job that fits nowhere gets room by moving running pods to other nodes.

Between allocate and reclaim: nobody's work is lost, every moved pod runs again elsewhere (its controller
recreates it, and the new pod goes to the target the plan held for it). The plan is searched on one what-if of the
snapshot (``scheduler.core.consolidation.plan``) among the pods that may move (``scheduler.core.consolidation.moves``);
it is carried
out as one statement (``scheduler.core.statement``: targets held, then the moved pods evicted) and the job waits for
its room. A job whose plan
is being carried out waits for it; a search that finds nothing is not run again until the cluster changes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from scheduler.api.objects.pod import PodRequest
from scheduler.cache.state import Snapshot
from scheduler.core import memo
from scheduler.core.actions import NOTHING, WAITS, Action, Asked, Outcome, Setting
from scheduler.core.consolidation import no_plans as move_memo
from scheduler.core.consolidation.defrag import Defragmenter
from scheduler.core.consolidation.moves import Moves, NoPlan
from scheduler.core.consolidation.plan import Found, Search
from scheduler.core.cycle import Context
from scheduler.core.jobs import Attempt
from scheduler.core.statement import Statement

_counts = re.compile(r"\d+")


class Consolidate(Action):
    name = "consolidate"

    def __init__(self, setting: Setting) -> None:
        self.scheduler = setting.scheduler
        self.moves = setting.state(Moves, lambda: Moves(setting))
        # Background defragmentation moves pods as a plan for a job does, when nothing waits.
        self.states = (self.moves, setting.state(Defragmenter, lambda: Defragmenter(setting, self.moves)))

    def run(self, attempt: Attempt, snapshot: Snapshot, statement: Statement) -> Outcome:
        moves = self.moves
        if moves.mover is None or moves.holds.uses_reservation(attempt.key):
            return NOTHING  # a Reservation's user goes only into its room: moving others away would not help it
        if moves.in_flight(attempt.key) or moves.replacing(attempt.key):
            return WAITS
        a = snapshot.arrays
        version = memo.generation(a)
        tried = moves.no_plan.last(attempt.key)
        if moves.no_plan.recall(attempt.key, (version, moves.clock())) is not None:
            return NOTHING
        shape = move_memo.shape(
            attempt.members,
            whole_gang=attempt.whole_gang,
            priority=attempt.priority,
            level=attempt.level,
            context=attempt.context,
            kinds=moves.kinds_of(attempt.key, attempt.members),
        )
        cache = self.scheduler.cache
        recalled = moves.memo.recall(shape, move_memo.Present(snapshot, cache, moves.epoch, moves.clock()))
        if recalled is not None:
            why, verdict = recalled.why, recalled.verdict
        else:
            found = self.search(attempt, snapshot)
            moves.verdicts[found.verdict] = moves.verdicts.get(found.verdict, 0) + 1
            moves.last_verdict[attempt.key] = found.verdict
            if found.plan is not None:
                moves.start(attempt.key, attempt.obj, found.plan, statement)
                return WAITS
            why, verdict = found.why, found.verdict
            if shape is not None:
                kept = move_memo.answer(
                    snapshot,
                    cache,
                    moves.memo_pods,
                    why=why,
                    verdict=verdict,
                    epoch=moves.epoch,
                    until=moves.cooldown_ends(),
                )
                moves.memo.keep(shape, kept)
        if tried is None or _counts.sub("N", tried.why) != _counts.sub("N", why):
            # Once per distinct reason: counts of nodes and pods in it change with every search.
            self.scheduler_event(attempt, why)
        moves.no_plan.keep(attempt.key, NoPlan(version, why, moves.cooldown_ends()))
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
            memo=moves.search_memo,
        ).run(lambda slot: moves.movable_on(slot, priority), lambda slots: moves.movable_known(slots, priority))

    def explain(self, asked: Asked) -> list[str]:
        """The plan being carried out for the job, the one it would carry out now, or why none exists (its own
        search, on the cycle's context); nothing when no pod may be moved (no mover)."""
        if self.moves.mover is None:
            return []
        if asked.key in self.moves.plans:
            return [f"  consolidation: {self.moves.why(asked.key)}"]
        found = self.plan_for(
            asked.members,
            asked.snapshot,
            whole_gang=asked.whole_gang,
            priority=max(p.priority for p in asked.members),
            level=asked.level,
            context=asked.context,
        )
        if found.plan is None:
            return [f"  consolidation cannot make room: {found.why}"]
        return [f"  consolidation would {found.plan.describe()}"]

    def scheduler_event(self, attempt: Attempt, why: str) -> None:
        self.moves.events.emit(
            obj=attempt.obj, kind="Normal", reason="NoMovePlan", message=f"consolidation cannot make room: {why}"
        )
