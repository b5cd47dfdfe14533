"""Queueing hints: which cluster events can make a waiting job schedulable, so the others are not retried for them.

Every event that may let waiting work fit is one of :class:`ClusterEvent`. Most wake every job waiting for room.
A pod deletion wakes only the jobs that could now find their whole GPUs free in the cluster (:attr:`Hints.needs`,
kept when a job fails for lack of room or for its queue's limit) and that the fair-share gate would no longer hold
back; the others stay put (and are still retried at the queue's unschedulable timeout).
"""

from __future__ import annotations

import enum
from collections.abc import Callable

from scheduler.api.pod import PodRequest
from scheduler.cache.arrays import ClusterArrays
from scheduler.kernels import layout
from scheduler.queue.scheduling import QueueItem


class ClusterEvent(enum.StrEnum):
    POD_DELETED = "pod deleted"
    NODE_ADDED = "node added"
    NODE_UPDATED = "node updated"
    QUEUE_CHANGED = "queue changed"
    TOPOLOGY_CHANGED = "topology changed"
    #: A job that waited for room was placed or left: the jobs the fair-share gate held back may go.
    STARVING_JOB_FED = "starving job fed"


class Hints:
    def __init__(self) -> None:
        #: Whole GPUs each waiting job needed when it last failed for lack of room.
        self.needs: dict[str, int] = {}

    def failed(self, key: str, pods: list[PodRequest]) -> None:
        """Job ``key`` failed for lack of room (or its queue's limit): a deletion that leaves fewer free whole GPUs
        in the cluster than it needs cannot help it."""
        self.needs[key] = sum(p.gpu.count for p in pods if p.gpu.whole)

    def forget(self, key: str) -> None:
        self.needs.pop(key, None)

    def filter(
        self, event: ClusterEvent, arrays: ClusterArrays, still_gated: Callable[[QueueItem], bool]
    ) -> Callable[[QueueItem], bool] | None:
        """Which waiting jobs ``event`` may help (None: all of them)."""
        if event != ClusterEvent.POD_DELETED or not self.needs:
            return None
        free = int((arrays.gpu_free[arrays.base_reason == layout.FIT] >= layout.WHOLE).sum())
        return lambda item: self.needs.get(item.key, 0) <= free and not still_gated(item)
