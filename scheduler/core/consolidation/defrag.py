"""Background defragmentation: when nothing waits, move pods off a nearly empty node so that it is whole again.

Off unless the profile sets ``consolidation.defragmentEverySeconds``. At most that often, when the scheduling
queue is empty and no move plan is being carried out, the GPU node with the fewest GPUs in use (and some in use)
whose GPUs can all be freed by moving at most ``maxPodsPerPlan`` pods is emptied: the plan is searched as for a
pending job (``scheduler.core.consolidation.plan``) for a stand-in asking every GPU of that node, and carried out the
same
way (``scheduler.core.consolidation.moves``: targets held, pods evicted, each controller's new pod placed on its
target), the
emptied node held until the moves are done. The same rules decide which pods may move (any priority: there is no
job to compare with), and no more than ``defragmentPodsPerHour`` pods move in any hour.

A plan must leave the cluster strictly better by what it is for, the GPUs on whole nodes (GPU nodes none of whose
GPUs is in use): its moved pods go to no whole node, nor to a node pods left within the cooldown
(``Moves.barred_targets``), so the node it empties is the only one whose GPUs change from in use to free. Without
that, with one node in use and one whole, the next run would empty the full node into the whole one, and the pods
would go back and forth every cooldown for nothing.
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace

import numpy as np

from scheduler.api.basics.resources import GpuRequest
from scheduler.api.objects.pod import PodRequest
from scheduler.core.actions import Setting, State
from scheduler.core.consolidation.moves import Moves
from scheduler.core.consolidation.plan import Search
from scheduler.core.cycle import Context
from scheduler.core.holds import Kind
from scheduler.core.statement import Statement
from scheduler.kernels import layout

#: Nodes tried per run, fewest GPUs in use first.
CANDIDATES = 8
HOUR_S = 3600.0
#: Any pod's priority is at most this: background moves compare with no job.
ANY_PRIORITY = 2**31


class Defragmenter(State):
    """Background work of the consolidate action (``scheduler.core.actions.State.background``)."""

    def __init__(self, setting: Setting, moves: Moves) -> None:
        self.scheduler = setting.scheduler
        self.moves = moves
        self.queue = setting.queue
        self.clock = setting.clock
        self.last = -float("inf")
        #: (when, pods) of the background plans of the last hour.
        self.recent: deque[tuple[float, int]] = deque()
        #: Nodes emptied so far (for metrics and the simulator).
        self.nodes_emptied = 0

    def background(self) -> bool:
        """Empty one node if it is time, nothing waits, and the hour's budget allows; whether a plan started."""
        limits = self.moves.limits
        now = self.clock()
        if limits.defragment_every_s <= 0 or self.moves.mover is None or now - self.last < limits.defragment_every_s:
            return False
        self.last = now
        if len(self.queue) or self.moves.plans:
            return False
        while self.recent and now - self.recent[0][0] >= HOUR_S:
            self.recent.popleft()
        budget = min(limits.defragment_pods_per_hour - sum(n for _, n in self.recent), limits.max_pods_per_plan)
        if budget <= 0:
            return False
        a = self.scheduler.cache.arrays
        present = (a.base_reason == layout.FIT) & (a.gpu_count > 0)
        used = np.where(present, (a.gpu_free < layout.WHOLE).sum(axis=1), 0)
        # The moved pods go neither to a whole node (filling one to empty another gains nothing) nor to a node pods
        # left within the cooldown: the node emptied is then the only one whose GPUs change from in use to free.
        barred = present & (used == 0)
        vacated = self.moves.barred_targets()
        if vacated is not None:
            barred[: vacated.shape[0]] |= vacated[: barred.shape[0]]
        candidates = present & (used > 0)
        for hold in self.moves.holds.of_kind(Kind.RESERVATION):
            # Its pods are a Reservation's users, which may run nowhere else.
            candidates[: hold.slots.shape[0]] &= ~hold.slots[: candidates.shape[0]]
        slots = np.flatnonzero(candidates)
        for slot in slots[np.lexsort((slots, used[slots]))][:CANDIDATES].tolist():
            pods = self.moves.movable_on(slot, ANY_PRIORITY)
            gpus = sum(p.pod.gpu.count for p in pods if p.pod.gpu.whole)
            if not pods or gpus < used[slot] or len(pods) > budget:
                continue
            if self._empty(slot, len(pods), barred):
                self.recent.append((now, len(self.moves.plans[self._key(slot)].plan.moves)))
                self.nodes_emptied += 1
                return True
        return False

    def _key(self, slot: int) -> str:
        return f"defragment:{self.scheduler.cache.names[slot]}"

    def _empty(self, slot: int, pods: int, barred: np.ndarray) -> bool:
        cache = self.scheduler.cache
        a = cache.arrays
        node = cache.names[slot]
        stand_in = PodRequest(
            "gpusched", f"empty-{node}", gpu=GpuRequest(count=int(a.gpu_count[slot]), milli=int(layout.WHOLE))
        )
        only = np.zeros(a.slots, dtype=bool)
        only[slot] = True
        limits = replace(
            self.moves.limits,
            max_pods_per_node=pods,
            max_pods_per_plan=pods,
            max_pods_per_whole_node=pods,
            candidate_nodes=1,
        )
        found = Search(
            self.scheduler,
            cache.snapshot(),
            [stand_in],
            whole_gang=False,
            # The nodes held for others (a Reservation's, a move plan's) take none of the moved pods.
            context=Context(reserved=self.moves.holds.context(self._key(slot), priority=0).reserved),
            level=None,
            limits=limits,
            pace=self.moves.pace,
            confine=only,
            barred=barred,
        ).run(lambda s: self.moves.movable_on(s, ANY_PRIORITY) if s == slot else [])
        if found.plan is None:
            return False
        statement = Statement(self.scheduler)
        self.moves.start(self._key(slot), f"node {node}", found.plan, statement, placed=True)
        statement.commit()  # no session around it: its plan is carried out at once
        return True
