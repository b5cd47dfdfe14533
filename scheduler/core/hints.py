"""Queueing hints: which cluster events may make a waiting job schedulable, so it is not retried for the others.

When a job fails, the loop records the events that may help it (:meth:`Hints.failed`), declared by whoever
rejected it: the filter plugins for the reasons its nodes failed for (``FilterPlugin.wakes``, gathered by
``Scheduler.wakes``), the queue gate for its limits and fair share (``scheduler.core.gate.WAKES``). A queue change
may always help (guarantees and reclaim policies move with it). A cluster event then wakes only the waiting jobs it
may help (:meth:`Hints.may_help`); a job whose failure declared nothing is woken by every event, and every job is
still retried at the queue's unschedulable timeout.

On top, a pod deletion wakes only the jobs that could now find their whole GPUs free in the cluster (the whole
GPUs each needed when it last failed) and that the fair-share gate would no longer hold back.
"""

from __future__ import annotations

from collections.abc import Callable

from scheduler.api.objects.pod import PodRequest
from scheduler.cache.arrays import ClusterArrays
from scheduler.framework.interface import ClusterEvent
from scheduler.kernels import layout
from scheduler.queue.scheduling import QueueItem

__all__ = ["ClusterEvent", "Hints"]


class Hints:
    def __init__(self) -> None:
        #: Whole GPUs each waiting job needed when it last failed for lack of room.
        self.needs: dict[str, int] = {}
        #: The events that may help each waiting job (a job not here: any event may).
        self.events: dict[str, frozenset[ClusterEvent]] = {}

    def failed(self, key: str, pods: list[PodRequest], events: frozenset[ClusterEvent] | None) -> None:
        """Job ``key`` (``pods``) failed; ``events`` may help it (None: any event may)."""
        self.needs[key] = sum(p.gpu.count for p in pods if p.gpu.whole)
        if events is None:
            self.events.pop(key, None)
        else:
            self.events[key] = events | {ClusterEvent.QUEUE_CHANGED}

    def forget(self, key: str) -> None:
        self.needs.pop(key, None)
        self.events.pop(key, None)

    def may_help(
        self, event: ClusterEvent, arrays: ClusterArrays, still_gated: Callable[[QueueItem], bool]
    ) -> Callable[[QueueItem], bool] | None:
        """Which waiting jobs ``event`` may help (None: all of them)."""
        deletion = event == ClusterEvent.POD_DELETED and bool(self.needs)
        if not deletion and not self.events:
            return None
        free = int((arrays.gpu_free[arrays.base_reason == layout.FIT] >= layout.WHOLE).sum()) if deletion else 0

        def helps(item: QueueItem) -> bool:
            events = self.events.get(item.key)
            if events is not None and event not in events:
                return False
            return not deletion or (self.needs.get(item.key, 0) <= free and not still_gated(item))

        return helps
