"""Queueing hints: which cluster events may make a waiting job schedulable, so it is not retried for the others.

When a job fails, the loop records the events that may help it (:meth:`Hints.failed`), declared by whoever
rejected it: the filter plugins for the reasons its nodes failed for (``FilterPlugin.wakes``, gathered by
``Scheduler.wakes``), the queue gate for its limits and fair share (``scheduler.core.gate.WAKES``). A queue change
may always help (guarantees and reclaim policies move with it). A cluster event then wakes only the waiting jobs it
may help (:meth:`Hints.may_help`); a job whose failure declared nothing is woken by every event, and every job is
still retried at the queue's unschedulable timeout.

On top, a pod deletion wakes only the jobs that could now find their whole GPUs free in the cluster (the whole
GPUs each needed when it last failed) and that the fair-share gate would no longer hold back; and, as
kube-scheduler's hints return Skip, a job some member of which found room on no node when it failed (a GPU with
its share free, its MIG profile's slices through the share it counts for, its whole GPUs on one node, its CPU,
memory and extended resources such as ``nvidia.com/mig-1g.10gb``) is woken only when a node changed since then
(the generation numbers of ``scheduler.cache.arrays``) has room for each such member (the fit kernel's own test,
without the node's rules). Nodes not changed since hold what they held, so nothing is missed: a member with no
room anywhere cannot be placed by ``allocate``. Room is not needed when a make-room action may take running pods'
for the job (``Action.evicts_below``: consolidation may move any pod, preemption takes lower priorities): such a
job keeps being woken by every deletion while any pod it may take has been placed (``Cache.lowest_priority``).

A pod's deletion frees no device a ResourceClaim holds (the claim's release, a device change, does), so the DRA
plugin does not declare it (as kube-scheduler's DynamicResources registers no pod deletion); but a deletion that
dropped an allocation the cache had assumed for the pod (its claim not written yet: ``DeviceStore.releases``
moved) is a device change too, and wakes the jobs that wait for one (with the room test above).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from scheduler.api.objects.pod import PodRequest
from scheduler.cache.state import Cache
from scheduler.framework.interface import ClusterEvent
from scheduler.kernels import fit as fit_kernel
from scheduler.kernels import layout
from scheduler.queue.scheduling import QueueItem

__all__ = ["ClusterEvent", "Hints"]

#: Any GPU model does (the node's rules, models among them, are the filters' to say).
_ANY_MODEL = np.zeros(1, dtype=bool)


@dataclass(frozen=True, slots=True)
class _Need:
    """What one member needs of one node's free room: its request per column, ``gpus`` devices of ``milli`` each
    (1000: whole ones), ``memory`` of device memory on a shared one."""

    request: np.ndarray
    gpus: int
    milli: float
    memory: float
    #: Equal for equal needs.
    key: tuple[bytes, int, float, float]


@dataclass(slots=True)
class _Short:
    """A waiting job some members of which (``needs``) found room on no node at generation ``since``."""

    needs: list[_Need]
    since: int
    #: Running pods below this priority may be taken for the job (evicted or moved): room is then not needed.
    evicts_below: float


class Hints:
    def __init__(self, cache: Cache) -> None:
        self.cache = cache
        #: Whole GPUs each waiting job needed when it last failed for lack of room.
        self.needs: dict[str, int] = {}
        #: The events that may help each waiting job (a job not here: any event may).
        self.events: dict[str, frozenset[ClusterEvent]] = {}
        #: The waiting jobs that found no room for some member when they last failed.
        self.short: dict[str, _Short] = {}
        #: Whether some node has room for each need asked about at one cluster generation.
        self._anywhere: tuple[int, dict[tuple[bytes, int, float, float], bool]] = (-1, {})
        #: ``DeviceStore.releases`` at the last event: a deletion that moved it let devices go.
        self._releases = cache.devices.releases

    def failed(
        self,
        key: str,
        pods: list[PodRequest],
        events: frozenset[ClusterEvent] | None,
        *,
        evicts_below: float = math.inf,
    ) -> None:
        """Job ``key`` (``pods``) failed; ``events`` may help it (None: any event may); the make-room actions may take
        the room of running pods below priority ``evicts_below`` for it (``-inf``: of none)."""
        self.needs[key] = sum(p.gpu.count for p in pods if p.gpu.whole)
        if events is None:
            self.events.pop(key, None)
        else:
            self.events[key] = events | {ClusterEvent.QUEUE_CHANGED}
        self.short.pop(key, None)
        if evicts_below == math.inf:
            return  # it may take any pod's room: free room is not what it waits for
        now = _generation(self.cache)
        if self._anywhere[0] != now:
            self._anywhere = (now, {})  # what holds at one generation holds until the cluster changes
        known = self._anywhere[1]
        lacking = []
        for need in _distinct(_need(self.cache, p) for p in pods):
            found = known.get(need.key)
            if found is None:
                found = known[need.key] = _room(self.cache, None, need)
            if not found:
                lacking.append(need)
        if lacking:
            self.short[key] = _Short(lacking, now, evicts_below)

    def forget(self, key: str) -> None:
        self.needs.pop(key, None)
        self.events.pop(key, None)
        self.short.pop(key, None)

    def may_help(
        self, event: ClusterEvent, still_gated: Callable[[QueueItem], bool]
    ) -> Callable[[QueueItem], bool] | None:
        """Which waiting jobs ``event`` may help (None: all of them)."""
        arrays = self.cache.arrays
        deletion = event == ClusterEvent.POD_DELETED and bool(self.needs)
        releases = self.cache.devices.releases
        # The pod's devices went with it: the jobs waiting for a device change may fit too.
        released = event == ClusterEvent.POD_DELETED and releases != self._releases
        self._releases = releases
        if not deletion and not self.events:
            return None
        free = int((arrays.gpu_free[arrays.base_reason == layout.FIT] >= layout.WHOLE).sum()) if deletion else 0
        now = _generation(self.cache)
        lowest = self.cache.lowest_priority
        # Per event: the nodes changed since each generation asked about, and what they have room for (waiting
        # jobs are mostly of a few shapes, and all that this hint kept waiting wait since the same event).
        seen = _Seen(self.cache)

        def helps(item: QueueItem) -> bool:
            events = self.events.get(item.key)
            if events is not None and event not in events and not (released and ClusterEvent.DEVICE_CHANGED in events):
                return False
            if not deletion:
                return True
            if self.needs.get(item.key, 0) > free or still_gated(item):
                return False
            short = self.short.get(item.key)
            return short is None or self._room_came(item.key, short, now, lowest, seen)

        return helps

    def _room_came(self, key: str, short: _Short, now: int, lowest: float, seen: _Seen) -> bool:
        """Whether every member that found no room may find it now, on a node changed since; if not, the job waits
        on from now (the nodes changed up to now have no room for those members either)."""
        if lowest < short.evicts_below:
            return True  # a pod it may take runs (or ran) somewhere: taking it may make the room
        lacking = [n for n in short.needs if not seen.room(short.since, n)]
        if not lacking:
            return True
        self.short[key] = _Short(lacking, now, short.evicts_below)
        return False


class _Seen:
    """What one event's checks found: the nodes changed since a generation, and whether they have room for a need."""

    def __init__(self, cache: Cache) -> None:
        self.cache = cache
        self._changed: dict[int, np.ndarray] = {}
        self._room: dict[tuple[int, tuple[bytes, int, float, float]], bool] = {}

    def room(self, since: int, need: _Need) -> bool:
        found = self._room.get((since, need.key))
        if found is None:
            changed = self._changed.get(since)
            if changed is None:
                a = self.cache.arrays
                changed = self._changed[since] = np.flatnonzero(a.gen[: a.slots] > since)
            found = self._room[(since, need.key)] = _room(self.cache, changed, need)
        return found


def _generation(cache: Cache) -> int:
    arrays = cache.arrays
    return int(arrays.gen.max()) if arrays.slots else 0


def _need(cache: Cache, pod: PodRequest) -> _Need:
    gpu = pod.gpu
    request = cache.request_vector(pod)
    key = (request.tobytes(), gpu.count, float(gpu.milli), float(gpu.memory))
    return _Need(request, gpu.count, float(gpu.milli), float(gpu.memory), key)


def _distinct(needs: Iterable[_Need]) -> list[_Need]:
    """The needs apart from repeats (a gang's members are mostly alike)."""
    return list({n.key: n for n in needs}.values())


def _room(cache: Cache, slots: np.ndarray | None, need: _Need) -> bool:
    """Whether one of the nodes ``slots`` (None: of all) has the free room ``need`` asks (a cordoned node counts: a
    pod may tolerate the cordon)."""
    a = cache.arrays
    rows = slice(None) if slots is None else slots
    count = a.slots if slots is None else slots.shape[0]
    if count == 0:
        return False
    columns = a.cap.shape[1]
    request = need.request
    if request.shape[0] < columns:
        request = np.concatenate([request, np.zeros(columns - request.shape[0])])
    present = np.where(a.base_reason[rows] == layout.ABSENT, layout.ABSENT, layout.FIT).astype(np.int8)
    out = np.empty(count, dtype=np.int8)
    fit_kernel.fit(
        a.cap[rows],
        a.used[rows],
        request[:columns],
        a.gpu_free[rows],
        a.gpu_mem_free[rows],
        a.gpu_count[rows],
        a.node_model[rows],
        _ANY_MODEL,
        True,
        need.gpus,
        need.milli,
        need.memory,
        present,
        out,
    )
    return bool((out == layout.FIT).any())
