"""The reclaim action: a job that does not fit takes back what other queues borrowed beyond their guarantee.

Only for a job that stays within its own queue's guarantee: the victims are whole jobs of queues that borrow
(above their guarantee), found on what-ifs of the snapshot by ``scheduler.core.preemption.victims.find_victims`` under
the
job's queue's ``reclaim`` policy, never taking a victim's queue below its own guarantee (what terminating victims
will free already counts), nor a victim younger than its queue's minimum run time for reclaim
(``scheduler.core.min_runtime``). A gang whose topology requires one domain gets victims from one domain only. The room
they free is nominated for the job, and every victim is evicted, as one statement (``scheduler.core.statement``).
"""

from __future__ import annotations

import math

from scheduler.cache.state import Snapshot
from scheduler.core import min_runtime
from scheduler.core.actions import NOTHING, WAITS, Action, Outcome, Setting
from scheduler.core.cycle import Context
from scheduler.core.jobs import Attempt
from scheduler.core.preemption.preemptor import Preemptor, waits_for_victims
from scheduler.core.statement import Statement
from scheduler.core.tenancy import requests_of


class Reclaim(Action):
    name = "reclaim"

    def __init__(self, setting: Setting) -> None:
        self.preemptor = setting.state(Preemptor, lambda: Preemptor(setting))
        self.states = (self.preemptor,)
        self.tenancy = setting.tenancy

    def evicts_below(self, attempt: Attempt) -> float:
        """Another queue's work of any priority; none with one queue (nobody borrows from another)."""
        return math.inf if len(self.tenancy.tree.leaves()) > 1 else -math.inf

    def run(self, attempt: Attempt, snapshot: Snapshot, statement: Statement) -> Outcome:
        search = self.preemptor.search(attempt)
        queue, pods = attempt.queue, attempt.members
        if search.waits:
            return waits_for_victims(attempt)
        if not search.may or not self.tenancy.within_guarantee(queue, requests_of(pods)):
            return NOTHING
        borrowers = [c for c in search.candidates if c.queue != queue and self.tenancy.borrowing(c.queue)]
        borrowers, spared = min_runtime.old_enough(self.tenancy, borrowers, "reclaim")
        if spared:
            self.preemptor.spared(attempt)
        surplus = {q: bound for q in {c.queue for c in borrowers} if (bound := self.tenancy.surplus(q)) is not None}
        for victim in self.preemptor.leaving():
            left = surplus.get(victim.queue)
            if left is not None:
                for name in left:
                    left[name] -= victim.request.get(name, 0.0)
        policy = self.tenancy.reclaim_policy(queue)
        # The victims' what-ifs place a segmented gang segment by segment, inside the domain its running members
        # hold (those keys of the attempt's context), and see the nodes held for other jobs as its cycles will once
        # its victims free room for it: those it may share offer only what its own victims free there, the others
        # are left out (see docs/gangs.md on reclaim latency); the single pods nominated for others of its priority
        # or higher are counted on their nodes, as its cycles count them.
        group = attempt.job.group if attempt.whole_gang else None
        told = attempt.context
        kept, held = self.preemptor.in_search(attempt.key, attempt.priority)
        context = Context(
            reserved=kept, nominated=told.nominated, topology_slots=told.topology_slots, segments=told.segments
        )
        victims = self.preemptor.victims(
            pods,
            attempt.priority,
            policy,
            borrowers,
            attempt.level,
            surplus,
            snapshot=snapshot,
            context=context,
            held=held,
            group=group,
        )
        if not victims:
            return NOTHING
        self.preemptor.make_room(
            attempt,
            victims,
            statement,
            reason=f"preempted to give queue {queue!r} its guarantee back ({attempt.obj})",
            event="Reclaiming",
            message=f"preempting {len(victims)} job(s) of queues above their guarantee",
        )
        return WAITS
