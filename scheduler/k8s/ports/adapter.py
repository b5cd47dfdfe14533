"""The adapter: the core's ports made real in a cluster (bind, events, evict, nominate), and the binder's outcomes.

:class:`Adapter` is what the scheduling core calls out to: the framework's Binder (``bind``), the loop's Events
(``emit``), Evictor (``evict``, ``nominate``) and Mover (``move``: consolidation's evictions through the Eviction
API, ``scheduler.k8s.ports.evictions``), see ``scheduler.core.ports``. It owns the
:class:`~scheduler.k8s.ports.binder.Binder` and every callback the binder makes (PreBind of volumes and claims, bound,
failed, uncertain), so the binder never calls back into the rest of the operator. Invariants kept here:

- Only the leader writes: Events and conditions are written when ``leading`` says so; the metrics count always.
- A pod handed to the binder stays assumed until the watch says otherwise (``scheduler.k8s.feeds.feed``): a success
  answer only counts it; an unknown outcome is read back after :data:`RECHECK_S` if the watch has not told.
- One writer per pod for ``status.nominatedNodeName``: two writes in flight could land in either order.
- A pod's ``Scheduled`` Event is written once its binding succeeded, as kube-scheduler writes it after its binding
  cycle: not for a binding that then failed, and not beside the bindings of a gang just placed (five more writes
  in the moment its members' four bindings wait for the API server).
- The per-pod state kept here (when its binding started, the nomination being written, the binder's refusals) is
  dropped when the binding ends or the pod leaves (:meth:`Adapter.forget`, told by the feed).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

import structlog

from scheduler.api.objects.pod import PodRequest
from scheduler.core.loop import SchedulingLoop
from scheduler.framework.interface import Decision
from scheduler.k8s import publisher as k8s_publisher
from scheduler.k8s.config import BindingConfig
from scheduler.k8s.context import OperatorContext
from scheduler.k8s.feeds.feed import PodFeed
from scheduler.k8s.ports import device_claims, evictions, volume_binding
from scheduler.k8s.ports.binder import Binder, BinderSettings
from scheduler.k8s.ports.events import rfc3339
from scheduler.k8s.publisher import StatusPublisher

log = structlog.get_logger(__name__)

#: Seconds after an unknown bind outcome before the pod is read back (if the watch has not told by then).
RECHECK_S = 5.0


class Adapter:
    """The core's Binder, Events and Evictor in a cluster; see the module notes."""

    def __init__(self, context: OperatorContext, *, binding: BindingConfig) -> None:
        self.client = context.client
        self.cache = context.cache
        self.metrics = context.metrics
        self.recorder = context.recorder
        self.conditions = context.conditions
        self._binding = binding
        self.scheduler_name = context.scheduler_name
        self._leading = context.leading
        self._wake = context.wake
        self._spawn = context.spawn
        self.clock = context.clock
        self.binder: Binder | None = None
        #: Pod key -> (the pod, the nominated node it should show; "" none) while a writer is at work for it.
        self._nominations: dict[str, tuple[PodRequest, str]] = {}
        #: Pod key -> when its binding started (time.monotonic()), for the bind latency.
        self._bind_started: dict[str, float] = {}
        #: Pod key -> (kind, message) of its ``Scheduled`` Event, written when its binding succeeds.
        self._when_bound: dict[str, tuple[str, str]] = {}

    def serve(self, loop: SchedulingLoop, feed: PodFeed, publisher: StatusPublisher) -> None:
        """The loop these ports serve (built with them, so it comes after), the feed whose pods they bind and the
        publisher they tell of missing PodGroups and refused Queues; then the volume and claim PreBinds."""
        self.loop = loop
        self.feed = feed
        self.publisher = publisher
        #: The volume PreBind (``scheduler.k8s.ports.volume_binding``).
        self.volume_binder = volume_binding.VolumeBinder(self.client, feed.volumes)
        #: The DRA PreBind: allocations and reservations written into the claims
        # (``scheduler.k8s.ports.device_claims``).
        self.claim_writer = device_claims.ClaimWriter(self.client, self.cache.devices, on_change=feed.claims_changed)

    def start(self) -> None:
        """Start the binder (on the running event loop)."""
        self.binder = Binder(
            self.client,
            on_bound=self._on_bound,
            on_failed=self._on_failed,
            on_uncertain=self._on_uncertain,
            settings=BinderSettings(max_in_flight=self._binding.concurrency),
            prebind=self._prebind,
            unprebind=self.claim_writer.undo,
            nodes=self.feed.nodes,
        )

    async def drain(self) -> None:
        """Wait for the bindings in flight."""
        if self.binder is not None:
            await self.binder.drain()

    def forget(self, key: str) -> None:
        """The pod is gone: the binder drops what it remembers of its refusals."""
        if self.binder is not None:
            self.binder.forget(key)
        self._when_bound.pop(key, None)

    # --- the core's ports: Binder, Events, Evictor ---------------------------------------------------------------

    def bind(self, decision: Decision) -> None:
        assert self.binder is not None, "start() the operator before scheduling"
        self._bind_started[decision.pod.key] = time.monotonic()
        self.binder.bind(decision)

    def emit(self, *, obj: str, kind: str, reason: str, message: str) -> None:
        """The loop's Events: written by the leader only. A failed attempt, or work waiting for its queue, also
        sets the PodScheduled condition of the pod (of every waiting member, for a gang: with an Event each).
        ``PodGroupNotFound`` waits its grace in the status publisher and is told only if the group is still
        missing then."""
        word, _, key = obj.partition(" ")
        if reason == "PodGroupNotFound" and word == "pod":
            self.publisher.group_missing(key, message)
            return
        if reason == "InvalidQueue" and word == "queue":
            self.publisher.queue_refused(key, message)
        if reason == "Scheduled" and word == "pod":
            self.metrics.schedule_attempts.labels("scheduled").inc()
        elif reason == "Scheduled" and word == "podgroup" and (job := self.loop.gang(key)) is not None:
            first = job.first_attempt
            if first is not None:
                self.metrics.gang_wait.observe(max(0.0, self.clock() - first))
        elif reason == "FailedScheduling":
            self.metrics.schedule_attempts.labels("unschedulable").inc()
        if not self._leading():
            return
        if reason == "Scheduled" and word == "pod" and key in self._bind_started:
            self._when_bound[key] = (kind, message)
            return
        self.recorder.emit(obj=obj, kind=kind, reason=reason, message=message)
        if reason not in ("FailedScheduling", "QueueNotFound", "QueueNotAccepted"):
            return
        pending = self.feed.pending
        if word == "pod" and key in pending:
            self.conditions.unschedulable(pending[key], message)
        elif word == "podgroup" and (job := self.loop.gang(key)) is not None and job.group is not None:
            told = k8s_publisher.gang_wait(job, message)
            for member in job.pending.values():
                self.conditions.unschedulable(member, told)
                self.recorder.emit(obj=f"pod {member.key}", kind=kind, reason=reason, message=told)

    def evict(self, pods: list[PodRequest], reason: str) -> None:
        for pod in pods:
            self.metrics.preempted(self.loop.queue_of(pod), reason)
            self._spawn(self._delete(pod, reason))

    def move(self, pods: list[PodRequest], reason: str) -> None:
        """Consolidation's moves: evict ``pods`` through the Eviction API, in order, stopping at a refusal (which
        abandons the plan in the loop). A replica that does not lead evicts nothing (the loop drops its plans when
        it loses the lease: this is the last guard)."""
        if not self._leading():
            log.warning("move not carried out: not leading", pods=[p.key for p in pods])
            return
        self.metrics.moved(len(pods), sum(p.gpu.count for p in pods if p.gpu.whole))
        self._spawn(evictions.evict_in_order(self.client, pods, reason, refused=self._move_refused))

    def _move_refused(self, key: str, why: str) -> None:
        self.metrics.move_refusals.inc()
        self.loop.move_refused(key, why)
        self._wake()

    def nominate(self, pod: PodRequest, node: str) -> None:
        """Write (or clear, ``node=""``) the preemptor's ``status.nominatedNodeName``, as kube-scheduler does."""
        # One writer per pod, writing the latest wish until it is what was written last: two writes in flight for
        # one pod could land in either order and leave a nomination that was already cleared.
        busy = pod.key in self._nominations
        self._nominations[pod.key] = (pod, node)
        if not busy:
            self._spawn(self._write_nomination(pod.key))

    async def _write_nomination(self, key: str) -> None:
        written: str | None = None
        try:
            while (wish := self._nominations[key])[1] != written:
                pod, node = wish
                body: dict[str, Any] = {"status": {"nominatedNodeName": node or None}}
                if pod.uid:
                    body["metadata"] = {"uid": pod.uid}
                if not await self._patch_status(pod, body, "nominated node"):
                    break  # the pod is gone
                written = node
        finally:
            del self._nominations[key]

    async def _patch_status(self, pod: PodRequest, body: Mapping[str, Any], what: str) -> bool:
        """A strategic merge patch of the pod's status; False if the pod is gone."""
        answer = await self.client.patch(
            self.client.core.patch_namespaced_pod_status,
            name=pod.name,
            namespace=pod.namespace,
            body=body,
            strategic=True,
        )
        if not answer.ok and answer.status != 404:
            log.warning("pod status not written", pod=pod.key, what=what, status=answer.status, error=answer.message)
        return answer.status != 404

    async def _delete(self, pod: PodRequest, reason: str) -> None:
        # As kube-scheduler before it deletes a victim: the DisruptionTarget condition tells the pod's controllers
        # and its containers' handlers why it goes (a pod already gone needs neither).
        condition = {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "PreemptionByScheduler",
            "message": f"{self.scheduler_name}: preempting to accommodate a higher priority pod",
            "lastTransitionTime": rfc3339(self.clock()),
        }
        marked: dict[str, Any] = {"status": {"conditions": [condition]}}
        if pod.uid:
            marked["metadata"] = {"uid": pod.uid}
        if not await self._patch_status(pod, marked, "DisruptionTarget condition"):
            return
        body: dict[str, Any] = {"preconditions": {"uid": pod.uid}} if pod.uid else {}
        answer = await self.client.call(
            self.client.core.delete_namespaced_pod, name=pod.name, namespace=pod.namespace, body=body
        )
        if answer.ok or answer.status == 404:
            log.info("preempted", pod=pod.key, reason=reason)
            return
        log.warning("preemption failed", pod=pod.key, status=answer.status, error=answer.message)
        # The room it was to free is not coming: its preemptor searches again (kube-scheduler retries it too).
        self.loop.eviction_failed(pod.key, answer.message)
        self._wake()

    # --- the binder's callbacks --------------------------------------------------------------------------------

    async def _prebind(self, decision: Decision) -> str:
        """Before a binding: the volumes' PreBind, then the claims' (``scheduler.k8s.ports.volume_binding``,
        ``.dra``)."""
        if decision.volumes:
            problem = await self.volume_binder.prebind(decision)
            if problem:
                return problem
        if decision.claims:
            return await self.claim_writer.prebind(decision)
        return ""

    def _on_bound(self, key: str) -> None:
        self._observe_bind(key, "bound")
        self._tell_scheduled(key)
        first = self.feed.bound(key)
        if first is not None:
            self.metrics.e2e_duration.observe(time.monotonic() - first)

    def _on_failed(self, pod: PodRequest, reason: str, retry: bool, backoff: float) -> None:
        self._observe_bind(pod.key, "refused" if retry else "failed")
        self._when_bound.pop(pod.key, None)  # not scheduled after all: FailedBinding (or the watch) says what was
        if retry:
            self._release(pod, reason, backoff)
        else:
            # The pod is gone or placed by someone else: its reservation goes, and the watch says which.
            self.loop.scheduler.bind_failed(pod.key)

    def _release(self, pod: PodRequest, reason: str, backoff: float) -> None:
        """The one release path of a binding that did not happen and may be tried again: the loop releases the
        pod's place everywhere at once and queues it again, held back ``backoff`` seconds so that a refusal that
        does not go away (a webhook) does not win the same GPUs every cycle."""
        current = self.feed.pending.get(pod.key)
        if current is None or not self.cache.is_assumed(pod.key):
            # Deleted or unreadable meanwhile (the loop has let it go), or the watch showed it on a node: only
            # the reservation, if any is left, goes.
            self.loop.scheduler.bind_failed(pod.key)
            return
        # ``current``: the pod as it is now (its claims' GPUs may have been read again while it was placed).
        self.loop.bind_failed(current, reason, backoff_s=backoff)
        self._wake()

    def _on_uncertain(self, key: str) -> None:
        self._observe_bind(key, "uncertain")
        self._tell_scheduled(key)  # most likely bound (the pod stays assumed); a recheck that finds it not says so
        pod = self.cache.pod(key)
        if pod is not None:
            self._recheck_later(pod.pod)

    def _recheck_later(self, pod: PodRequest) -> None:
        asyncio.get_running_loop().call_later(RECHECK_S, lambda: self._spawn(self._recheck(pod)))

    async def _recheck(self, pod: PodRequest) -> None:
        """An unknown outcome the watch has not cleared up: read the pod; unbound means the binding failed. Until
        the API server answers with the pod or with 404 (it is restarting, or refuses everyone while its RBAC loads),
        read again later: nothing else would, and the pod would stay assumed, never tried again and never told
        why."""
        if not self.cache.is_assumed(pod.key):
            return  # the watch showed the truth
        answer = await self.client.call(self.client.core.read_namespaced_pod, name=pod.name, namespace=pod.namespace)
        if not self.cache.is_assumed(pod.key):
            return
        if answer.status == 404:
            return  # gone: the watch says so
        if not answer.ok:
            # No answer, 5xx, 429, and also 401 and 403: an API server just restarted refuses every request until its
            # authenticators and RBAC caches have loaded ("clusterrole gpusched not found"); giving up then left
            # the pod assumed for good (seen under the shipped RBAC after a restart: 5 pods never bound).
            self._recheck_later(pod)
            return
        spec = answer.body.get("spec")
        if isinstance(spec, Mapping) and spec.get("nodeName"):
            return  # bound: the watch will confirm it
        self._release(pod, "the binding's outcome was unknown and the pod is still unbound", 0.0)

    def _tell_scheduled(self, key: str) -> None:
        told = self._when_bound.pop(key, None)
        if told is not None and self._leading():
            self.recorder.emit(obj=f"pod {key}", kind=told[0], reason="Scheduled", message=told[1])

    def _observe_bind(self, key: str, result: str) -> None:
        self.metrics.binds.labels(result).inc()
        started = self._bind_started.pop(key, None)
        if started is not None:
            self.metrics.bind_duration.observe(time.monotonic() - started)
