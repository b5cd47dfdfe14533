"""The event loop of the job scenarios (gangs, tenants, topology): jobs arrive and leave in simulated seconds, and
after each arrival, departure or backoff wake-up the real scheduling loop runs until it has nothing left to do.

:class:`JobSimulation` owns the cluster (a cache, the scheduler, its queue and loop, all on the simulated clock),
the event heap and that loop; a scenario subclasses it to say what an arrival and a departure do and what it
measures (:meth:`~JobSimulation.advance`, :meth:`~JobSimulation.placed`, :meth:`~JobSimulation.stepped`,
:meth:`~JobSimulation.finished`). A run that is preempted leaves the heap a departure that no longer applies: each
event carries the run number of its job, and a departure of an earlier run is dropped.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Iterable, Sequence

from scheduler.api.crds.podgroup import PodGroup
from scheduler.api.objects.node import NodeInfo
from scheduler.api.objects.pod import PodRequest
from scheduler.core import root
from scheduler.core.loop import ClusterEvent
from scheduler.core.ports import Evictor
from scheduler.framework.interface import Decision
from scheduler.framework.profile import ProfileConfig

#: Event kinds, in the order they are taken at one second: departures first (their room is free for the arrivals
#: of that second), then arrivals; a backoff wake-up carries no job.
DEPART, ARRIVE, WAKE = 0, 1, 2


class EventLog:
    """Counts the Events the loop emits, by reason (the simulators' Events port)."""

    def __init__(self) -> None:
        self.count: dict[str, int] = {}

    def emit(self, *, obj: str, kind: str, reason: str, message: str) -> None:
        self.count[reason] = self.count.get(reason, 0) + 1


class Binder:
    """Binds at once; the simulation confirms the bindings and tells the loop the pods run."""

    def __init__(self) -> None:
        self.bound: list[Decision] = []

    def bind(self, decision: Decision) -> None:
        self.bound.append(decision)


class Evictions:
    """The simulators' side of the evictor port: collects the pods the loop preempts; the scenario takes them out
    (and resubmits their jobs, or counts them)."""

    def __init__(self) -> None:
        self.pods: list[PodRequest] = []

    def evict(self, pods: list[PodRequest], reason: str) -> None:
        self.pods.extend(pods)

    def nominate(self, pod: PodRequest, node: str) -> None:
        # A simulated pod has no status to show it in; the run places it wherever its next cycle finds room.
        return None


class Mover:
    """The simulator's side of consolidation's port: collects the pods a plan moves; :meth:`JobSimulation.step`
    takes them out (they leave at once, as an accepted eviction) and submits each controller's new pod."""

    def __init__(self) -> None:
        self.pods: list[PodRequest] = []
        #: Replacements made so far (their names end in ``~m<n>``).
        self.made = 0

    def move(self, pods: list[PodRequest], reason: str) -> None:
        self.pods.extend(pods)


class JobSimulation:
    """A cluster of ``nodes`` scheduled with ``config`` on a simulated clock, and the event loop that drives it."""

    def __init__(
        self,
        nodes: Iterable[NodeInfo],
        config: ProfileConfig,
        *,
        evictor: Evictor | None = None,
        reserve_after_s: float | None = None,
    ) -> None:
        """With ``consolidate`` among ``config.actions`` the loop moves pods (:class:`Mover`): only pods with an
        ``owner`` (a controller that recreates them) move, and the new pods come back through :meth:`replaced`."""
        self.now = 0.0
        self.binder = Binder()
        self.mover = Mover()
        self.log = EventLog()
        core = root.build(
            config,
            binder=self.binder,
            clock=self.clock,
            events=self.log,
            nodes=nodes,
            evictor=evictor,
            mover=self.mover,
            reserve_after_s=reserve_after_s,
        )
        self.cache = core.cache
        self.scheduler = core.scheduler
        self.queue = core.queue
        self.loop = core.loop
        #: Scheduling cycles run so far.
        self.cycles = 0
        self._events: list[tuple[float, int, str, int]] = []
        #: Per job, how many times it was started again after a preemption.
        self._run_of: dict[str, int] = {}

    def clock(self) -> float:
        return self.now

    # --- the event heap ------------------------------------------------------------------------------------------

    def arrive(self, name: str, at: float) -> None:
        """Job ``name`` arrives at ``at``."""
        heapq.heappush(self._events, (at, ARRIVE, name, self._run_of.get(name, 0)))

    def depart(self, name: str, after: float) -> None:
        """Job ``name``, running now, leaves ``after`` seconds from now (unless it is preempted meanwhile)."""
        heapq.heappush(self._events, (self.now + after, DEPART, name, self._run_of.get(name, 0)))

    def depart_again(self, name: str, after: float) -> None:
        """Job ``name``, running now, leaves ``after`` seconds from now instead of when it was to (an elastic job's
        pace changed): its earlier departure is dropped."""
        self._run_of[name] = self._run_of.get(name, 0) + 1
        self.depart(name, after)

    def resubmit(self, name: str) -> None:
        """Job ``name`` was preempted: it arrives again now, as its next run."""
        self._run_of[name] = self._run_of.get(name, 0) + 1
        heapq.heappush(self._events, (self.now, ARRIVE, name, self._run_of[name]))

    @property
    def events_left(self) -> bool:
        return bool(self._events)

    # --- what a job does in the loop -----------------------------------------------------------------------------

    def submit(self, pods: Sequence[PodRequest], group: PodGroup | None) -> None:
        """A job's pods (and its PodGroup, for a gang) reach the loop, as the watches would hand them over."""
        if group is not None:
            self.loop.group_upsert(group)
        for pod in pods:
            self.loop.pod_pending(pod)

    def remove(self, pods: Sequence[PodRequest], group: str | None) -> None:
        """A job's pods (and its PodGroup ``group``, a key) are deleted; say :data:`ClusterEvent.POD_DELETED` once
        after the removals."""
        for pod in pods:
            self.cache.remove_pod(pod.key)
            self.loop.pod_gone(pod.key)
        if group is not None:
            self.loop.group_removed(group)

    def pods_deleted(self) -> None:
        self.loop.cluster_event(ClusterEvent.POD_DELETED)

    # --- the loop ------------------------------------------------------------------------------------------------

    def run(self) -> None:
        """Take events in time order, backoff wake-ups included, until none is left or :meth:`finished`."""
        while True:
            wake = self.queue.next_wakeup()
            if self._events and (wake is None or self._events[0][0] <= wake):
                t, kind, name, run = heapq.heappop(self._events)
                if kind == DEPART and run != self._run_of.get(name, 0):
                    continue  # the departure of a run that was preempted
            elif wake is not None:
                t, kind, name = wake, WAKE, ""
            else:
                break
            self.now = max(self.now, t)
            self.advance(t)
            if kind == ARRIVE:
                self.arrived(name)
            elif kind == DEPART:
                self.departed(name)
            self.step()
            if self.finished():
                break

    def step(self) -> None:
        """Cycles until the loop is idle (again after each round of preemptions), then the bindings confirmed."""
        before = len(self.binder.bound)
        self.cycles += self.loop.run_until_idle()
        while self.preempted() or self.moved() or (self.loop.defragment() and self.moved()):
            self.cycles += self.loop.run_until_idle()
        bound = self.binder.bound[before:]
        last = {decision.pod.key: decision for decision in bound}
        for decision in bound:
            if last[decision.pod.key] is not decision or self.cache.pod(decision.pod.key) is None:
                continue  # preempted in this step (and perhaps placed again: its last binding is the one)
            self.cache.confirm(decision.pod.key)
            self.loop.pod_placed(dataclasses.replace(decision.pod, node_name=decision.node, phase="Running"))
            self.placed(decision)
        self.stepped(bound=len(self.binder.bound) - before)

    def moved(self) -> bool:
        """Take out the pods consolidation moved (their evictions succeed at once) and submit, for each, a new
        pending pod of the same controller (:meth:`replaced` tells the scenario); whether any moved."""
        if not self.mover.pods:
            return False
        pods, self.mover.pods = self.mover.pods, []
        for pod in pods:
            self.cache.remove_pod(pod.key)
            self.loop.pod_gone(pod.key)
        for pod in pods:
            self.mover.made += 1
            base = pod.name.split("~m", 1)[0]
            new = dataclasses.replace(
                pod,
                name=f"{base}~m{self.mover.made}",
                uid="",
                node_name="",
                gpu_ids=(),
                phase="Pending",
                created=self.now,
            )
            self.replaced(pod, new)
            self.loop.pod_pending(new)
        self.pods_deleted()
        return True

    # --- what a scenario says ------------------------------------------------------------------------------------

    def replaced(self, old: PodRequest, new: PodRequest) -> None:
        """Consolidation moved ``old``: ``new``, its controller's new pod, is pending now (placed on the target held
        for it). A scenario that tracks pods by name follows the pod here (its departure, its accounting)."""

    def advance(self, t: float) -> None:
        """The clock has moved to the event at ``t`` (:attr:`now` is set): account for the time up to it."""

    def arrived(self, name: str) -> None:
        """Job ``name`` arrives now."""

    def departed(self, name: str) -> None:
        """Job ``name`` ends now."""

    def preempted(self) -> bool:
        """Take out what the loop preempted and resubmit those jobs; whether anything was."""
        return False

    def placed(self, decision: Decision) -> None:
        """The pod of ``decision`` was bound and runs."""

    def stepped(self, *, bound: int) -> None:
        """A step ended, having bound ``bound`` pods."""

    def finished(self) -> bool:
        """Whether nothing more can happen (checked after each step)."""
        return False
