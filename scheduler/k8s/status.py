"""Status writers: the pod condition ``PodScheduled=False/Unschedulable``, PodGroup (or Queue) status, and the
Topology's status.

The condition is what the cluster autoscaler looks for to add nodes, and what ``kubectl get pod`` shows; the
PodGroup status is what ``kubectl get pg`` prints. Both change far more often than anyone reads them (a
pending pod fails every cycle), so every object is written at most once per ``interval`` seconds: a value
submitted meanwhile replaces the one waiting (the last value wins), and a value equal to the last one written is
not written at all. Writes run in the background, a few at a time, through the client's shared QPS limiter.

What a write's answer means: 2xx written; 404 the object is gone (drop it); 5xx, 429 or no answer (retry after
the interval, unless a newer value came); any other 4xx refused for good (drop that value, log it).

The Topology's status changes only when the object does, and the object usually exists before this replica
leads: :class:`TopologyStatusWriter` holds its one write until the replica may write, instead of coalescing.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from scheduler.api.basics import resources
from scheduler.api.basics.quantity import text as quantity
from scheduler.api.crds import topology as api_topology
from scheduler.api.objects.pod import PodRequest
from scheduler.core import tenancy
from scheduler.k8s import worker
from scheduler.k8s.client import Answer, Client
from scheduler.k8s.ports.events import MESSAGE_LIMIT, rfc3339

log = structlog.get_logger(__name__)

Body = dict[str, Any]
#: Writes ``body`` for the object ``key``; None: nothing to write after all (the object moved on).
WriteFn = Callable[[str, Body], Awaitable[Answer | None]]


@dataclass(frozen=True, slots=True)
class StatusSettings:
    #: Seconds between two writes of the same object.
    interval: float = 5.0
    #: Writes in flight at once.
    writers: int = 4
    #: Objects whose last write is remembered (to skip unchanged values); the oldest are forgotten beyond this.
    remembered: int = 10_000


class Coalescer(worker.BackgroundWriter):
    """At most one write per key per interval, last value wins, unchanged values skipped."""

    def __init__(
        self,
        name: str,
        write: WriteFn,
        *,
        settings: StatusSettings | None = None,
        clock: Callable[[], float] = time.monotonic,
        may_write: Callable[[], bool] | None = None,
    ) -> None:
        """``may_write()`` is asked before each write, retries included: a replica that lost the lease while a
        write waited (the API server restarting) must not overwrite what the new leader wrote since."""
        self.name = name
        self.settings = settings or StatusSettings()
        self._write = write
        self._clock = clock
        self._may_write = may_write
        self._pending: dict[str, Body] = {}
        #: key -> when its write is due (a heap entry is stale unless it matches).
        self._scheduled: dict[str, float] = {}
        self._heap: list[tuple[float, int, str]] = []
        self._seq = itertools.count()
        self._writing: set[str] = set()
        #: key -> (when last written, the value the API server has, or None if unknown).
        self._last: OrderedDict[str, tuple[float, Body | None]] = OrderedDict()
        self._tasks: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._worker: asyncio.Task[None] | None = None
        self._force = False
        self.stats = {"submitted": 0, "written": 0, "coalesced": 0, "unchanged": 0, "retried": 0, "dropped": 0}

    def submit(self, key: str, value: Body) -> None:
        self.stats["submitted"] += 1
        last = self._last.get(key)
        if key not in self._pending and key not in self._writing and last is not None and last[1] == value:
            self.stats["unchanged"] += 1
            return
        if key in self._pending:
            self.stats["coalesced"] += 1
        self._pending[key] = value
        self._schedule(key)

    def forget(self, key: str) -> None:
        """Drop what waits for ``key`` and what is remembered of it (the object was deleted or moved on)."""
        self._pending.pop(key, None)
        self._scheduled.pop(key, None)
        self._last.pop(key, None)

    def leadership_changed(self) -> None:
        """The lease was taken or lost: what this replica wrote may have been overwritten by another leader since,
        so nothing it remembers counts as what the API server holds; the next values are all written."""
        self._last.clear()

    def start(self) -> None:
        if self._worker is None:
            self._worker = asyncio.get_running_loop().create_task(self._run(), name=f"gpusched {self.name} status")

    def _idle(self) -> bool:
        return not (self._pending or self._writing)

    # --- the work ----------------------------------------------------------------------------------------------

    def _schedule(self, key: str) -> None:
        if key in self._scheduled or key in self._writing:
            return  # already due, or rescheduled when its write ends
        last = self._last.get(key)
        due = self._clock() if last is None else max(self._clock(), last[0] + self.settings.interval)
        self._scheduled[key] = due
        heapq.heappush(self._heap, (due, next(self._seq), key))
        self._wake.set()

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            now = self._clock()
            while self._heap and len(self._tasks) < self.settings.writers:
                due, _, key = self._heap[0]
                if due > now and not self._force:
                    break
                heapq.heappop(self._heap)
                if self._scheduled.get(key) != due:
                    continue  # stale entry
                del self._scheduled[key]
                value = self._pending.pop(key, None)
                if value is None:
                    continue
                if self._may_write is not None and not self._may_write():
                    self.stats["dropped"] += 1
                    continue
                last = self._last.get(key)
                if last is not None and last[1] == value:
                    self.stats["unchanged"] += 1
                    continue
                self._writing.add(key)
                task = asyncio.get_running_loop().create_task(self._write_one(key, value))
                self._tasks.add(task)
                task.add_done_callback(self._done)
            delay = None
            if self._heap and len(self._tasks) < self.settings.writers:
                delay = max(0.0, self._heap[0][0] - now)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._wake.set()

    async def _write_one(self, key: str, value: Body) -> None:
        started = self._clock()
        try:
            answer = await self._write(key, value)
        except Exception:
            log.exception("status write raised", writer=self.name, object=key)
            answer = Answer(status=0, error="exception")
        finally:
            self._writing.discard(key)
        previous = self._last.pop(key, (started, None))[1]
        if answer is None:
            self.stats["dropped"] += 1
            self._pending.pop(key, None)
            return
        if answer.ok:
            self.stats["written"] += 1
            self._remember(key, started, value)
        elif answer.status == 404:
            self.stats["dropped"] += 1
            self._pending.pop(key, None)
            log.info("status not written: object gone", writer=self.name, object=key)
            return
        elif not answer.answered or answer.status >= 500 or answer.status == 429:
            self.stats["retried"] += 1
            self._remember(key, started, previous)
            self._pending.setdefault(key, value)
            log.info("status write failed; retrying", writer=self.name, object=key, error=answer.message)
        else:
            self.stats["dropped"] += 1
            self._remember(key, started, previous)
            log.warning(
                "status write refused", writer=self.name, object=key, status=answer.status, error=answer.message
            )
        if key in self._pending:
            self._schedule(key)

    def _remember(self, key: str, at: float, value: Body | None) -> None:
        self._last[key] = (at, value)
        while len(self._last) > self.settings.remembered:
            self._last.popitem(last=False)


class CoalescedWriter:
    """A writer whose writes go through its :class:`Coalescer`: forgotten, started, flushed and closed with it."""

    coalescer: Coalescer

    def forget(self, key: str) -> None:
        self.coalescer.forget(key)

    def leadership_changed(self) -> None:
        self.coalescer.leadership_changed()

    def start(self) -> None:
        self.coalescer.start()

    async def flush(self, timeout: float = 10.0) -> bool:
        return await self.coalescer.flush(timeout)

    async def close(self) -> None:
        await self.coalescer.close()


# --- the pod condition ---------------------------------------------------------------------------------------


class PodConditionWriter(CoalescedWriter):
    """Writes ``PodScheduled=False`` reason ``Unschedulable`` with the scheduler's message to ``pods/status``.

    A write waiting for its turn must not land after the pod was bound (it would mark a running pod
    unschedulable): call :meth:`forget` when a pod is bound or deleted, and pass ``still_pending(pod_key)``,
    asked right before each write, so a pod bound meanwhile is skipped. The patch carries the pod's UID, so a
    pod created again under the same name is not written to.
    """

    def __init__(
        self,
        client: Client,
        *,
        settings: StatusSettings | None = None,
        still_pending: Callable[[str], bool] | None = None,
        clock: Callable[[], float] = time.time,
        may_write: Callable[[], bool] | None = None,
    ) -> None:
        self.client = client
        self._still_pending = still_pending
        self._clock = clock
        #: Pod key -> when it turned unschedulable (the condition's lastTransitionTime).
        self._since: OrderedDict[str, float] = OrderedDict()
        #: Pod key -> the message last handed over (what ``gpusched explain`` quotes).
        self.said: OrderedDict[str, str] = OrderedDict()
        self.coalescer = Coalescer("pod-condition", self._write, settings=settings, may_write=may_write)

    def unschedulable(self, pod: PodRequest, message: str) -> None:
        self.unschedulable_key(pod.key, pod.uid, message)

    def unschedulable_key(self, key: str, uid: str, message: str) -> None:
        """As :meth:`unschedulable`, for a pod known by key and UID only (one whose spec could not be read)."""
        since = self._since.setdefault(key, self._clock())
        self.said[key] = message
        self.said.move_to_end(key)
        while len(self._since) > self.coalescer.settings.remembered:
            self._since.popitem(last=False)
        while len(self.said) > self.coalescer.settings.remembered:
            self.said.popitem(last=False)
        self.coalescer.submit(key, condition_patch(uid, message[:MESSAGE_LIMIT], since))

    def forget(self, key: str) -> None:
        self._since.pop(key, None)
        self.said.pop(key, None)
        self.coalescer.forget(key)

    def leadership_changed(self) -> None:
        """See :meth:`Coalescer.leadership_changed`; what was said is told again (``said`` is what the waiting-pod
        status rounds compare with)."""
        self.said.clear()
        self.coalescer.leadership_changed()

    async def _write(self, key: str, body: Body) -> Answer | None:
        if self._still_pending is not None and not self._still_pending(key):
            return None
        namespace, _, name = key.partition("/")
        return await self.client.patch(
            self.client.core.patch_namespaced_pod_status, name=name, namespace=namespace, body=body, strategic=True
        )


def condition_patch(uid: str, message: str, since: float) -> Body:
    """A strategic merge patch setting the pod's PodScheduled condition (conditions merge by ``type``)."""
    condition = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": message,
        "lastTransitionTime": rfc3339(since),
    }
    body: Body = {"status": {"conditions": [condition]}}
    if uid:
        body["metadata"] = {"uid": uid}
    return body


# --- custom resources -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CustomResource:
    group: str
    version: str
    plural: str
    namespaced: bool


PODGROUPS = CustomResource("scheduling.gpusched.io", "v1alpha1", "podgroups", namespaced=True)
QUEUES = CustomResource("scheduling.gpusched.io", "v1alpha1", "queues", namespaced=False)
RESERVATIONS = CustomResource("scheduling.gpusched.io", "v1alpha1", "reservations", namespaced=True)


class CustomStatusWriter(CoalescedWriter):
    """Writes the ``status`` subresource of a custom resource (PodGroups by default) with a merge patch.

    ``update(key, status)`` takes the dict ``SchedulingLoop.group_status`` returns: numbers under keys ending in
    ``Time`` are Unix seconds and become RFC 3339; None removes a field. ``key`` is ``ns/name`` (or ``name`` for
    a cluster-scoped resource).
    """

    def __init__(
        self,
        client: Client,
        resource: CustomResource = PODGROUPS,
        *,
        settings: StatusSettings | None = None,
        may_write: Callable[[], bool] | None = None,
    ) -> None:
        self.client = client
        self.resource = resource
        self.coalescer = Coalescer(resource.plural, self._write, settings=settings, may_write=may_write)

    def update(self, key: str, status: Mapping[str, object]) -> None:
        self.coalescer.submit(key, {"status": to_json(status)})

    async def _write(self, key: str, body: Body) -> Answer:
        r = self.resource
        custom = self.client.custom
        if r.namespaced:
            namespace, _, name = key.partition("/")
            return await self.client.patch(
                custom.patch_namespaced_custom_object_status, r.group, r.version, namespace, r.plural, name, body=body
            )
        return await self.client.patch(
            custom.patch_cluster_custom_object_status, r.group, r.version, r.plural, key, body=body
        )


def to_json(value: object, key: str = "") -> Any:
    """A status dict as the API server takes it: times (Unix seconds under ``...Time`` keys) as RFC 3339."""
    if isinstance(value, Mapping):
        return {str(k): to_json(v, str(k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json(v, key) for v in value]
    if key.endswith("Time") and isinstance(value, int | float) and not isinstance(value, bool):
        return rfc3339(float(value))
    return value


# --- quantities: the core's numbers as users read them ----------------------------------------------------------


def queue_status(status: tenancy.QueueStatus) -> Body:
    """A Queue's ``status`` from the core's numbers: resource amounts as canonical Kubernetes quantities (zeros
    left out), shares with four decimals. The one place the core's numbers become text."""
    body: Body = {
        "allocated": quantities(status.allocated),
        "guaranteedInUse": quantities(status.guaranteed_in_use),
        "borrowed": quantities(status.borrowed),
        "decayedUsage": quantities(status.decayed_usage),
        "pendingPods": status.pending_pods,
        "pendingGangs": status.pending_gangs,
        "dominantShare": share(status.dominant_share),
        "fairShare": share(status.fair_share),
        # The LIMIT column: "none" says there is none, where a blank would leave it to guessing.
        "gpuLimit": "none" if status.gpu_limit is None else quantity(resources.GPU, status.gpu_limit),
    }
    if status.rank_share is not None:
        body["rankShare"] = share(status.rank_share)
    return body


def quantities(vector: Mapping[str, float]) -> dict[str, str]:
    """A resource vector as canonical Kubernetes quantity strings (see :func:`quantity`); zeros left out."""
    out: dict[str, str] = {}
    for name, amount in sorted(vector.items()):
        text = quantity(name, amount)
        if text != "0":
            out[name] = text
    return out


def share(value: float) -> str:
    """A share (0..1, or below 0 for a rank below the guarantee) as the status shows it."""
    return f"{value:.4f}"


# --- the Topology ---------------------------------------------------------------------------------------------

TOPOLOGIES = CustomResource("scheduling.gpusched.io", "v1alpha1", "topologies", namespaced=False)


def topology_levels(index: api_topology.DomainIndex) -> list[Body]:
    """``status.levels`` of the Topology: per level, what its label found on the nodes the scheduler holds."""
    splits = [problem.obj for problem in index.problems if problem.obj.startswith("domain ")]
    return [
        {
            "nodeLabel": label,
            "domains": index.domain_count(i),
            "unlabelledNodes": len(index.unlabelled(i)),
            "nestingViolations": sum(1 for obj in splits if obj.startswith(f"domain {label}=")),
        }
        for i, label in enumerate(index.levels)
    ]


class AcceptedConditions:
    """The ``Accepted`` condition of objects that are in use or refused (Queues, the Topology), per object name:
    its ``lastTransitionTime`` moves only when its status does."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        #: Per object, the condition's status as last set, and since when.
        self._since: dict[str, tuple[str, float]] = {}

    def condition(self, name: str, status: str, reason: str, message: str) -> Body:
        last = self._since.get(name)
        if last is None or last[0] != status:
            last = self._since[name] = (status, self._clock())
        return {
            "type": "Accepted",
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": last[1],
        }

    def forget(self, name: str) -> None:
        self._since.pop(name, None)


class TopologyStatusWriter:
    """Writes the status of the cluster's Topology: ``Accepted`` (with the levels in use, or why the object was
    refused), ``levelCount`` and ``levels[]``.

    One object that rarely changes, so no coalescing: a newer update of an object replaces the one waiting. Only
    the leader writes, and the Topology usually exists before this replica leads (or has listed the nodes), so a
    write waits until ``may_write()`` holds; the per-level figures are computed then, from the nodes of that
    moment (they are not rewritten when nodes change later). A value equal to the last one written is not
    written: the watch delivers our own status write back as a change of the object, which must end there. A
    write that gets no answer, 429 or 5xx is retried; 404 (the object is gone) and other refusals end it.
    """

    def __init__(
        self,
        client: Client,
        *,
        may_write: Callable[[], bool],
        spawn: Callable[[Coroutine[Any, Any, None]], None],
        clock: Callable[[], float] = time.time,
        poll_s: float = 0.5,
        retry_s: float = 5.0,
    ) -> None:
        self.client = client
        self._may_write = may_write
        self._spawn = spawn
        self._clock = clock
        self.poll_s = poll_s
        self.retry_s = retry_s
        #: Per object, bumped by every update: a write whose generation is not the latest gives up.
        self._generation: dict[str, int] = {}
        self._accepted = AcceptedConditions(clock)
        #: Per object, the status as last written.
        self._written: dict[str, Body] = {}
        self.written = 0

    def accepted(self, name: str, *, generation: object, message: str, levels: Callable[[], list[Body]]) -> None:
        """The object is in use; ``levels()`` gives ``status.levels`` when the write happens."""
        condition = self._accepted.condition(name, "True", "Accepted", message)

        def status() -> Body:
            found = levels()
            return {
                "observedGeneration": generation,
                "levelCount": len(found),
                "levels": found,
                "conditions": [condition],
            }

        self._update(name, status)

    def rejected(self, name: str, *, generation: object, message: str) -> None:
        """The object is invalid and not used: the figures of the levels are removed, the condition says why."""
        condition = self._accepted.condition(name, "False", "Invalid", message)
        self._update(
            name,
            lambda: {"observedGeneration": generation, "levelCount": None, "levels": None, "conditions": [condition]},
        )

    def forget(self, name: str) -> None:
        """The object was deleted: nothing waiting for it is written."""
        self._generation[name] = self._generation.get(name, 0) + 1
        self._accepted.forget(name)
        self._written.pop(name, None)

    def _update(self, name: str, status: Callable[[], Body]) -> None:
        generation = self._generation[name] = self._generation.get(name, 0) + 1
        self._spawn(self._write(generation, name, status))

    async def _write(self, generation: int, name: str, status: Callable[[], Body]) -> None:
        r = TOPOLOGIES
        while True:
            while not self._may_write():
                if generation != self._generation.get(name):
                    return
                await asyncio.sleep(self.poll_s)
            if generation != self._generation.get(name):
                return
            body = {"status": to_json(status())}
            if self._written.get(name) == body:
                return
            answer = await self.client.patch(
                self.client.custom.patch_cluster_custom_object_status, r.group, r.version, r.plural, name, body=body
            )
            if answer.ok:
                self.written += 1
                self._written[name] = body
                return
            if answer.answered and answer.status < 500 and answer.status != 429:
                if answer.status != 404:
                    log.warning("topology status refused", object=name, status=answer.status, error=answer.message)
                return
            log.info("topology status write failed; retrying", object=name, error=answer.message)
            await asyncio.sleep(self.retry_s)
