"""The operator: the scheduling core wired to one cluster, and its scheduling task.

:class:`Operator` is a composition of three parts, each in its own module, around one cache, queue and loop:

- ``scheduler.k8s.feeds.feed`` (:class:`~scheduler.k8s.feeds.feed.PodFeed`): the watches' raw objects, parsed, into the
cache
  and the loop; it holds what the watches said last (pending pods, nodes, PodGroups, Queues...);
- ``scheduler.k8s.ports.adapter`` (:class:`~scheduler.k8s.ports.adapter.Adapter`): the core's ports (bind, events,
evict,
  nominate) and the binder's outcomes;
- ``scheduler.k8s.publisher`` (:class:`~scheduler.k8s.publisher.StatusPublisher`): PodGroup, Queue and Topology
  status and the conditions of pods no cycle speaks about.

The three share one :class:`~scheduler.k8s.context.OperatorContext` (cache, metrics, Event and condition writers,
the leadership flag). The watches call the feed's ``*_event`` methods (the operator offers them under the same
names). Invariants kept here:

- Scoring never runs in a handler: :meth:`Operator.run` is its own asyncio task, runs at most ``batch`` cycles
  (or ``batch_seconds``, :data:`BATCH_S`) and then yields to the event loop, so watches and binds progress between
  batches.
- Only the leader decides and writes: cycles, Events, pod conditions and PodGroup/Queue status need
  :attr:`Operator.leading`; a standby keeps the same warm cache and queue. Losing the lease clears ``leading``,
  which every cycle checks, so scheduling stops at once (bindings already sent finish).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

import structlog

from scheduler.api.objects import node as api_node
from scheduler.api.objects import pod as api_pod
from scheduler.cache.state import Cache
from scheduler.core import cycle, root
from scheduler.k8s import status as k8s_status
from scheduler.k8s.client import Client
from scheduler.k8s.config import OperatorConfig
from scheduler.k8s.context import OperatorContext
from scheduler.k8s.feeds.feed import LISTINGS, PodFeed
from scheduler.k8s.ports.adapter import Adapter
from scheduler.k8s.ports.events import EventRecorder, EventSettings
from scheduler.k8s.publisher import STATUS_INTERVAL_S, StatusPublisher
from scheduler.k8s.serve.metrics import Metrics

__all__ = ["LISTINGS", "Operator", "warm_kernels"]

log = structlog.get_logger(__name__)

#: Seconds between additions to the queues' usage history.
USAGE_INTERVAL_S = 10.0


#: The longest run of cycles between two yields to the event loop. Each step of a binding (a new connection's
#: connect and TLS handshake, the request, the answer) and of a watch waits for the next yield, so a backlog adds
#: up to this much to each: a gang's first bindings came 0.3 to 0.4 s after its placement at 50 ms. At 10 ms, 200
#: gangs of 8 bound at 355 to 369 pods/s against 319 to 323 (docs/performance.md, "The scheduling task's batches");
#: single pods, whose cycles are short, did not change beyond the machine's noise.
BATCH_S = 0.01


class Operator:
    """Cache, queue and loop for one cluster, with the feed, the adapter and the publisher; see the module notes."""

    def __init__(
        self,
        client: Client,
        config: OperatorConfig,
        *,
        identity: str,
        scheduler_name: str = api_pod.SCHEDULER_NAME,
        batch: int = 64,
        batch_seconds: float = BATCH_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.config = config
        self.identity = identity
        #: The ``spec.schedulerName`` this operator serves (``gpusched run --scheduler-name``).
        self.scheduler_name = scheduler_name
        self.batch = batch
        self.batch_seconds = batch_seconds
        self.clock = clock
        #: Whether this replica holds the lease (only then it decides and writes).
        self.leading = False
        #: The lease thread's own view (``scheduler.k8s.leader.LeaseThread``), read before every decision: it stops
        #: deciding the moment the lease is lost, even before ``set_leading(False)`` reaches this event loop.
        self.lease_held: Callable[[], bool] = lambda: True
        #: Why the API server refuses this replica the lease (``LeaseThread.refusal``; empty: nothing refused), for
        #: readiness (``scheduler.k8s.serve.health``).
        self.lease_refusal: Callable[[], str] = lambda: ""
        self._wake = asyncio.Event()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._last_status = 0.0
        self._last_usage = time.monotonic()
        # The cluster's and the queue's gauges come from the leader only (a standby's warm cache holds the same).
        self.metrics = Metrics(leading=lambda: self.leading and self.lease_held())
        # The adapter (the core's binder) reads the cache: the cache comes first, the core around it (root.build).
        self.cache = Cache()
        # The writers every part uses; what they write about pods and objects is the feed's (uids, pending pods).
        self.recorder = EventRecorder(client, settings=EventSettings(instance=identity), uid_of=self._uid_of)
        self.conditions = k8s_status.PodConditionWriter(
            client, still_pending=self._still_pending, may_write=self._is_leading
        )
        context = OperatorContext(
            client=client,
            cache=self.cache,
            metrics=self.metrics,
            recorder=self.recorder,
            conditions=self.conditions,
            scheduler_name=scheduler_name,
            leading=self._is_leading,
            wake=self._wake.set,
            spawn=self._spawn,
            clock=clock,
        )
        self.adapter = Adapter(context, binding=config.binding)
        # pop_from_backoff: as kube-scheduler v1.33+ (SchedulerPopFromBackoffQ), an idle scheduler retries a pod a
        # cluster event woke without waiting out its backoff.
        core = root.build(
            config.profile,
            binder=self.adapter,
            clock=clock,
            events=self.adapter,
            cache=self.cache,
            evictor=self.adapter,
            mover=self.adapter,
            reserve_after_s=config.reserve_after_s,
            initial_backoff_s=config.backoff.initial_s,
            max_backoff_s=config.backoff.max_s,
            pop_from_backoff=True,
            instrument=self.metrics.instrument,
        )
        self.scheduler = core.scheduler
        self.queue = core.queue
        self.loop = core.loop
        self.publisher = StatusPublisher(
            context, loop=self.loop, may_write_topology=lambda: self.leading and self.feed.ready
        )
        self.feed = PodFeed(context, loop=self.loop, publisher=self.publisher)
        self.adapter.serve(self.loop, self.feed, self.publisher)
        self.feed.on_pod_gone.append(self.adapter.forget)
        # The watches' entry points (``scheduler.k8s.run`` and ``.handlers`` feed them): the feed's.
        self.part_listed = self.feed.part_listed
        self.held_pods = self.feed.held_pods
        self.budget_keys = self.feed.budget_keys
        self.service_keys = self.feed.service_keys
        self.podgroup_keys = self.feed.podgroup_keys
        self.pod_event = self.feed.pod_event
        self.node_event = self.feed.node_event
        self.service_event = self.feed.service_event
        self.pdb_event = self.feed.pdb_event
        self.podgroup_event = self.feed.podgroup_event
        self.compat_podgroup_event = self.feed.compat_podgroup_event
        self.queue_event = self.feed.queue_event
        self.reservation_event = self.feed.reservation_event
        self.topology_event = self.feed.topology_event
        self.namespace_event = self.feed.namespace_event
        # The core's ports, for the tests and tools that call them as the core does.
        self.evict = self.adapter.evict
        self.nominate = self.adapter.nominate

    # --- lifecycle ---------------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the writers and the binder (on the running event loop)."""
        self.adapter.start()
        self.recorder.start()
        self.conditions.start()
        self.publisher.start()

    async def close(self) -> None:
        await self.adapter.drain()
        for task in list(self._tasks):
            task.cancel()
        for writer in (self.recorder, self.conditions):
            await writer.close()
        await self.publisher.close()

    def set_leading(self, leading: bool) -> None:
        """The lease was taken (True) or lost (False); losing it stops the cycles before the next one."""
        if leading != self.leading:
            log.info("leadership", leading=leading, identity=self.identity)
            self.publisher.leadership_changed()
        self.leading = leading
        self.metrics.is_leader.set(1.0 if leading else 0.0)
        if leading:
            self.feed.grouper.leading()
        else:
            self.loop.leadership_lost()  # no step of a move plan on the word of a replica that does not lead
        self._wake.set()

    def listed(self) -> None:
        """The first full listing of nodes, pods, PodGroups and Queues has been delivered: let the loop in."""
        self.feed.listed()

    # --- what the feed holds, as the tools and the tests read it -----------------------------------------------

    @property
    def ready(self) -> bool:
        """Whether the first full listing is in (readiness)."""
        return self.feed.ready

    @property
    def pending(self) -> dict[str, api_pod.PodRequest]:
        """Pods of ours waiting for a node, by key (the feed's)."""
        return self.feed.pending

    @property
    def nodes(self) -> dict[str, api_node.NodeInfo]:
        return self.feed.nodes

    @property
    def unreadable_pods(self) -> dict[str, tuple[str, str]]:
        return self.feed.unreadable_pods

    @property
    def queue_problems(self) -> dict[str, str]:
        return self.publisher.queue_problems

    # --- the scheduling task -----------------------------------------------------------------------------------

    async def run(self) -> None:
        """Run cycles in batches while ready and leading; sleep until work, an event, or a backoff ends."""
        while True:
            self._wake.clear()
            ran = 0
            if self.ready and self.leading and self.lease_held():
                started = time.monotonic()
                while (
                    ran < self.batch
                    and self.leading
                    and self.lease_held()
                    and time.monotonic() - started < self.batch_seconds
                ):
                    cycle = time.perf_counter()
                    self.metrics.cycle_starts()
                    if not self.loop.run_once():
                        break
                    self.metrics.cycle_duration.observe(time.perf_counter() - cycle)
                    ran += 1
                self._housekeeping()
            if ran:
                await asyncio.sleep(0)
                continue
            # Not asyncio.wait_for: in Python 3.11 it swallows a cancel that arrives when the event is already set,
            # and the task then never ends (a standby never exited on SIGTERM).
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._idle_timeout()):
                    await self._wake.wait()

    def _idle_timeout(self) -> float:
        wakeup = self.queue.next_wakeup()
        timeout = 1.0 if wakeup is None else wakeup - self.clock()
        return min(1.0, max(0.001, timeout))

    def _housekeeping(self) -> None:
        now = time.monotonic()
        if now - self._last_usage >= USAGE_INTERVAL_S:
            self.loop.record_usage(now - self._last_usage)
            self._last_usage = now
        self.loop.carry_out_moves()  # a move plan whose step is late is abandoned, what it held released
        self.loop.defragment()  # when the profile turns it on and it is time (it keeps its own schedule)
        if now - self._last_status >= STATUS_INTERVAL_S / 2:
            self._last_status = now
            self.publish_status()

    def publish_status(self) -> None:
        """Hand the PodGroup and Queue status and the conditions of waiting pods to their writers (which skip
        unchanged values)."""
        feed = self.feed
        feed.forget_readable()
        self.publisher.publish(
            podgroups=feed.podgroups, queues=feed.queues, pending=feed.pending, unreadable=feed.unreadable_pods
        )

    # --- helpers -----------------------------------------------------------------------------------------------

    def _is_leading(self) -> bool:
        return self.leading

    def _uid_of(self, word: str, key: str) -> str:
        return self.feed.uid_of(word, key)

    def _still_pending(self, key: str) -> bool:
        return self.feed.still_pending(key)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def warm_kernels(config: OperatorConfig) -> int:
    """Compile the profile's kernels (or load them from numba's cache) before the operator takes part.

    A kernel compiles at its first call, 20-40 s for the whole profile on a cold cache, holding the thread that
    calls it: in the scheduling task that would freeze the event loop, the health endpoints and the lease
    renewal. Scheduling a whole-GPU pod and a shared-GPU pod on a one-node cluster here, before the watches and
    the election start, moves that cost out of the way (and to build time when the image carries the cache).
    Returns how many of the two were placed (2 unless the profile filters everything out).
    """
    node = api_node.parse_node({"metadata": {"name": "warm-up"}, "status": {"allocatable": _WARM_NODE}})
    scheduler = root.build_scheduler(config.profile, binder=cycle.NoBinding(), nodes=[node])
    placed = 0
    for raw in _WARM_PODS:
        result = scheduler.schedule(api_pod.parse_pod(raw))
        placed += result.decision is not None
    return placed


_WARM_NODE = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"}
_WARM_PODS = [
    {
        "metadata": {"name": "whole", "namespace": "warm-up"},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]},
    },
    {
        "metadata": {"name": "shared", "namespace": "warm-up", "annotations": {"gpusched.io/gpu-milli": "300"}},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
    },
]
