"""The operator's state and its scheduling task: raw Kubernetes objects in, bindings, Events and status out.

:class:`Operator` wires the scheduling core to the cluster. Its ``*_event`` methods take raw objects as the
watches deliver them (the kopf handlers in ``scheduler.k8s.handlers`` call them, and nothing else does), and keep
the cache, the scheduling queue and the loop current. Invariants kept here:

- No decision before the first full listing: until :meth:`Operator.listed` is called, pending pods, PodGroups
  and Queues are only remembered (nodes and bound pods go to the cache at once); then the loop gets the queues,
  the groups and the pending pods in that order, so no pod waits on a queue or group merely not listed yet.
- Scoring never runs in a handler: :meth:`Operator.run` is its own asyncio task, runs at most ``batch`` cycles
  (or ``batch_seconds``) and then yields to the event loop, so watches and binds progress between batches.
- Only the leader decides and writes: cycles, Events, pod conditions and PodGroup/Queue status need
  :attr:`Operator.leading`; a standby keeps the same warm cache and queue. Losing the lease clears ``leading``,
  which every cycle checks, so scheduling stops at once (bindings already sent finish).
- A pod handed to the binder stays assumed in the cache until the watch shows it on its node (a success answer
  does not confirm it): an older watch event without ``spec.nodeName`` arriving after the answer must neither
  release its GPUs nor queue it again.
- Bound pods of every scheduler count on their nodes, whatever their annotations say later; pods of ours on a
  node are charged to their job's queue (``scheduler.core.jobs``), so queue usage after a restart is what the
  cluster holds, whatever order pods and PodGroups are listed in.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import structlog

from scheduler.api import affinity as api_affinity
from scheduler.api import node as api_node
from scheduler.api import pdb as api_pdb
from scheduler.api import pod as api_pod
from scheduler.api import podgroup as api_podgroup
from scheduler.api import queue as api_queue
from scheduler.api import topology as api_topology
from scheduler.api import workloads
from scheduler.api.errors import InvalidObject
from scheduler.api.pod import PodRequest
from scheduler.api.resources import MILLI_PER_GPU, NO_GPU, GpuRequest
from scheduler.cache import dra as cache_dra
from scheduler.cache.state import Cache
from scheduler.core.cycle import NoBinding, Scheduler
from scheduler.core.framework import Framework
from scheduler.core.hints import ClusterEvent
from scheduler.core.loop import SchedulingLoop
from scheduler.framework.interface import Decision
from scheduler.k8s import dra as k8s_dra
from scheduler.k8s import status as k8s_status
from scheduler.k8s import volumes as k8s_volumes
from scheduler.k8s.binder import Binder, BinderSettings
from scheduler.k8s.client import Client
from scheduler.k8s.config import OperatorConfig
from scheduler.k8s.events import EventRecorder, EventSettings, rfc3339
from scheduler.k8s.grouper import Grouper
from scheduler.k8s.metrics import Metrics
from scheduler.queue.scheduling import SchedulingQueue

log = structlog.get_logger(__name__)

#: The listings readiness waits for: the informers' (nodes, pods; Services, which the default spread reads, and
#: PodDisruptionBudgets, which preemption must respect from its first decision) and kopf's (PodGroups and
#: Queues, see ``scheduler.k8s.handlers``).
LISTINGS = frozenset({"nodes", "pods", "services", "poddisruptionbudgets", "custom resources"})
#: Seconds between writes of PodGroup and Queue status (per object; unchanged values are not written).
STATUS_INTERVAL_S = 2.0
#: Seconds between additions to the queues' usage history.
USAGE_INTERVAL_S = 10.0
#: Seconds after an unknown bind outcome before the pod is read back (if the watch has not told by then).
RECHECK_S = 5.0
#: Seconds a pod may wait for its PodGroup before ``PodGroupNotFound`` is told: ``kubectl apply`` of a file
#: holding both often delivers the pod first.
GROUP_GRACE_S = 5.0


class Operator:
    """Cache, queue, loop and writers for one cluster; see the module notes."""

    def __init__(
        self,
        client: Client,
        config: OperatorConfig,
        *,
        identity: str,
        scheduler_name: str = api_pod.SCHEDULER_NAME,
        batch: int = 64,
        batch_seconds: float = 0.05,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.config = config
        self.identity = identity
        #: The ``spec.schedulerName`` this operator serves (``gpusched run --scheduler-name``).
        self.scheduler_name = scheduler_name
        #: Namespace -> Service name -> its selector (``spec.selector``), for the cluster-default spreading.
        self.services: dict[str, dict[str, dict[str, str]]] = {}
        #: Pod key -> (the pod, the nominated node it should show; "" none) while a writer is at work for it.
        self._nominations: dict[str, tuple[PodRequest, str]] = {}
        self.batch = batch
        self.batch_seconds = batch_seconds
        self.clock = clock
        self.metrics = Metrics()
        self.cache = Cache()
        self.queue = SchedulingQueue(
            clock=clock, initial_backoff_s=config.backoff.initial_s, max_backoff_s=config.backoff.max_s
        )
        self.scheduler = Scheduler(self.cache, Framework.build(config.profile), self)
        self.metrics.instrument(self.scheduler.framework)
        self.loop = SchedulingLoop(
            self.scheduler,
            self.queue,
            clock=clock,
            events=self,
            evictor=self,
            reserve_after_s=config.reserve_after_s,
        )
        self.recorder = EventRecorder(client, settings=EventSettings(instance=identity), uid_of=self.uid_of)
        self.conditions = k8s_status.PodConditionWriter(client, still_pending=self._still_pending)
        status_settings = k8s_status.StatusSettings(interval=STATUS_INTERVAL_S)
        self.group_status = k8s_status.CustomStatusWriter(client, k8s_status.PODGROUPS, settings=status_settings)
        self.queue_status = k8s_status.CustomStatusWriter(client, k8s_status.QUEUES, settings=status_settings)
        self.binder: Binder | None = None
        #: Whether the first full listing is in (readiness), and which of :data:`LISTINGS` are.
        self.ready = False
        self._listed: set[str] = set()
        #: Whether this replica holds the lease (only then it decides and writes).
        self.leading = False
        #: The lease thread's own view (``scheduler.k8s.leader.LeaseThread``), read before every decision: it stops
        #: deciding the moment the lease is lost, even before ``set_leading(False)`` reaches this event loop.
        self.lease_held: Callable[[], bool] = lambda: True
        #: Why the API server refuses this replica the lease (``LeaseThread.refusal``; empty: nothing refused), for
        #: readiness (``scheduler.k8s.health``).
        self.lease_refusal: Callable[[], str] = lambda: ""
        #: Pods of ours waiting for a node, by key.
        self.pending: dict[str, PodRequest] = {}
        #: When each pending pod was first seen (time.monotonic()), for the end-to-end latency.
        self.first_seen: dict[str, float] = {}
        self.nodes: dict[str, api_node.NodeInfo] = {}
        self.podgroups: dict[str, api_podgroup.PodGroup] = {}
        self.queues: dict[str, api_queue.QueueSpec] = {}
        #: The cluster's Topology (``default``) as last accepted, also in the cache's levels; None: the built-in ones.
        self.topology: api_topology.TopologySpec | None = None
        self.topology_status = k8s_status.TopologyStatusWriter(
            client, may_write=lambda: self.leading and self.ready, spawn=self._spawn
        )
        #: "pod ns/name", "podgroup ns/name", "queue name", "node name" -> uid, for Events' involvedObject.
        self.uids: dict[str, str] = {}
        self._bind_started: dict[str, float] = {}
        self._wake = asyncio.Event()
        self._tasks: set[asyncio.Task[Any]] = set()
        #: Owner reads and PodGroups for workloads' pods (``scheduler.k8s.grouper``); only the leader writes.
        self.grouper = Grouper(client, may_write=lambda: self.leading, resolved=self._owners_read, spawn=self._spawn)
        #: Pods of ours without a PodGroup label whose owners are being read: key -> the pod as last seen.
        self.ungrouped: dict[str, Mapping[str, Any]] = {}
        #: scheduler-plugins PodGroups (``scheduling.x-k8s.io``) by key; a gpusched PodGroup of the same key wins.
        self.compat_podgroups: dict[str, api_podgroup.PodGroup] = {}
        self._last_status = 0.0
        self._last_usage = time.monotonic()
        #: Pods of ours whose spec could not be read: key -> (uid, why), told in their PodScheduled condition.
        self.unreadable_pods: dict[str, tuple[str, str]] = {}
        #: Pods naming a PodGroup not seen yet: key -> (since, time.monotonic(), the message once the grace is over).
        self._group_missing: dict[str, tuple[float, str]] = {}
        #: The last periodic message told per pod (members waiting for members), so an Event is written per change.
        self._told: dict[str, str] = {}
        #: Queues that cannot be used: name -> why (unreadable, or refused by the tree), for their status condition.
        self.queue_problems: dict[str, str] = {}
        #: Per queue, its Accepted condition.
        self._queue_accepted = k8s_status.AcceptedConditions(clock)
        #: Nodes whose ``gpusched.io/gpu-topology`` was refused, with the message last told.
        self._node_problems: dict[str, str] = {}
        #: Claims, volumes, classes and CSINodes into the cache; the volume PreBind (``scheduler.k8s.volumes``).
        self.volumes = k8s_volumes.VolumeWatches(
            self.cache.volumes, on_change=self.volumes_changed, invalid=self._invalid
        )
        self.volume_binder = k8s_volumes.VolumeBinder(client, self.volumes)
        #: DeviceClasses, ResourceSlices and ResourceClaims into the cache; the DRA PreBind (``scheduler.k8s.dra``).
        self.devices = k8s_dra.DeviceWatches(self.cache.devices, on_change=self.devices_changed, invalid=self._invalid)
        self.claim_writer = k8s_dra.ClaimWriter(client, self.cache.devices, on_change=self.devices_changed)
        #: Node name -> the whole GPUs it publishes through DRA, as last given to the cache.
        self._dra_gpus: dict[str, int] = {}
        #: Claim key -> the pending pods (keys) that use it, whose GPU count follows the claim.
        self._claim_users: dict[str, set[str]] = {}

    # --- lifecycle ---------------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the writers and the binder (on the running event loop)."""
        binding = self.config.binding
        self.binder = Binder(
            self.client,
            on_bound=self._on_bound,
            on_failed=self._on_failed,
            on_uncertain=self._on_uncertain,
            settings=BinderSettings(max_in_flight=binding.concurrency),
            prebind=self._prebind,
            unprebind=self.claim_writer.undo,
            nodes=self.nodes,
        )
        self.recorder.start()
        self.conditions.start()
        self.group_status.start()
        self.queue_status.start()

    async def _prebind(self, decision: Decision) -> str:
        """Before a binding: the volumes' PreBind, then the claims' (``scheduler.k8s.volumes``, ``.dra``)."""
        if decision.volumes:
            problem = await self.volume_binder.prebind(decision)
            if problem:
                return problem
        if decision.claims:
            return await self.claim_writer.prebind(decision)
        return ""

    async def close(self) -> None:
        if self.binder is not None:
            await self.binder.drain()
        for task in list(self._tasks):
            task.cancel()
        for writer in (self.recorder, self.conditions, self.group_status, self.queue_status):
            await writer.close()

    def set_leading(self, leading: bool) -> None:
        """The lease was taken (True) or lost (False); losing it stops the cycles before the next one."""
        if leading != self.leading:
            log.info("leadership", leading=leading, identity=self.identity)
        self.leading = leading
        self.metrics.is_leader.set(1.0 if leading else 0.0)
        if leading:
            self.grouper.leading()
        self._wake.set()

    # --- inputs: the watches -----------------------------------------------------------------------------------

    def part_listed(self, part: str) -> None:
        """One of :data:`LISTINGS` has delivered its first full listing; the last one makes the cache ready."""
        self._listed.add(part)
        if self._listed >= LISTINGS:
            self.listed()

    def held_pods(self) -> set[str]:
        """Keys of the pods the operator holds (pending, or counted on a node): what a relist reconciles."""
        return set(self.pending) | {entry.pod.key for entry in self.cache.pods()}

    def listed(self) -> None:
        """The first full listing of nodes, pods, PodGroups and Queues has been delivered: let the loop in."""
        if self.ready:
            return
        self.loop.queues_changed(list(self.queues.values()))
        for group in self.podgroups.values():
            self.loop.group_upsert(group)
        for key, group in self.compat_podgroups.items():
            if key not in self.podgroups:
                self.loop.group_upsert(group)
        for pod in self.pending.values():
            self.loop.pod_pending(pod)
        self.ready = True
        self.metrics.ready.set(1.0)
        log.info(
            "cache warm",
            nodes=self.cache.node_count,
            pods=sum(1 for _ in self.cache.pods()),
            pending=len(self.pending),
            podgroups=len(self.podgroups),
            queues=len(self.queues),
        )
        self._wake.set()

    def pod_event(self, body: Mapping[str, Any], *, deleted: bool = False) -> None:
        meta = _meta(body)
        key = f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"
        if deleted:
            self.ungrouped.pop(key, None)
            self._pod_gone(key)
            return
        spec = body.get("spec")
        spec = spec if isinstance(spec, Mapping) else {}
        if spec.get("schedulingGates") and not spec.get("nodeName"):
            # kube-scheduler's SchedulingGates: a gated pod is neither scheduled nor told anything (the API server
            # has set PodScheduled=False/SchedulingGated); gates can only be removed, and the update that removes
            # the last one brings it here again, into the queue.
            return
        try:
            if spec.get("nodeName"):
                # A bound pod counts on its node whatever its annotations say now (scheduler.api.pod).
                pod, problems = api_pod.parse_bound_pod(body)
                for problem in problems:
                    self._invalid("pod", key, problem)
            else:
                pod = api_pod.parse_pod(body, scheduler_name=self.scheduler_name)
        except InvalidObject as exc:
            ours = (spec.get("schedulerName") or "default-scheduler") == self.scheduler_name
            self._invalid("pod", key, exc, report=ours or bool(spec.get("nodeName")))
            if ours and not spec.get("nodeName"):
                self._unreadable_pod(key, str(meta.get("uid") or ""), exc)
            if ours and key in self.pending:
                self.pending.pop(key, None)
                self.loop.pod_gone(key)
            return
        self.uids[f"pod {key}"] = pod.uid
        if pod.terminal:
            self.ungrouped.pop(key, None)
            self._pod_gone(key, finished=pod.phase)
            return
        if pod.scheduler_name == self.scheduler_name and not pod.pod_group:
            grouped = self._grouped(pod, body)
            if grouped is None:
                if pod.node_name:
                    self.cache.upsert_pod(pod)  # holds its node now; charged to its gang's queue once grouped
                return
            pod = grouped
        if pod.node_name:
            self.pending.pop(key, None)
            self.first_seen.pop(key, None)
            self.conditions.forget(key)
            self.cache.upsert_pod(pod)
            if pod.scheduler_name == self.scheduler_name:
                # Counted against its job's queue from now on, before the first listing too: the loop moves it
                # to its PodGroup's queue whenever the group is known, in whatever order the two arrive.
                self.loop.pod_placed(pod)
            return
        if pod.scheduler_name != self.scheduler_name:
            self.cache.upsert_pod(pod)
            return
        if pod.deleting:
            return
        self.cache.upsert_pod(pod)
        if self.cache.pod(key) is not None:
            return  # handed to the binder: the watch will show it on its node
        # Only a pending pod's age matters (queue order); bound pods, by the thousand at start-up, skip this copy.
        pod = replace(
            pod,
            created=_timestamp(meta.get("creationTimestamp")),
            service_labels=api_affinity.services_selecting(pod.labels, self.services.get(pod.namespace, {}).values()),
        )
        if pod.resource_claims:
            pod = self._claim_gpus(pod)
        if self.pending.get(key) == pod:
            return  # a status-only change (our own condition, for one): nothing to reconsider
        self.pending[key] = pod
        self.first_seen.setdefault(key, time.monotonic())
        if self.ready:
            self.loop.pod_pending(pod)
            self._wake.set()

    def budget_keys(self) -> list[str]:
        """Keys of the PodDisruptionBudgets the loop holds: what a relist of them reconciles."""
        return list(self.loop.preemptor.budgets)

    def service_keys(self) -> list[str]:
        """Keys of the Services held: what a relist of them reconciles."""
        return [f"{ns}/{name}" for ns, named in self.services.items() for name in named]

    def service_event(self, body: Mapping[str, Any], *, deleted: bool = False) -> None:
        """A Service as its informer delivers it: its selector feeds the cluster-default spreading of the pods it
        selects (read when a pod enters the queue; a pod already waiting keeps what it was given)."""
        meta = _meta(body)
        namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
        spec = body.get("spec")
        selector = spec.get("selector") if isinstance(spec, Mapping) else None
        named = self.services.setdefault(namespace, {})
        if deleted or not isinstance(selector, Mapping):
            named.pop(name, None)
        else:
            named[name] = {str(k): str(v) for k, v in selector.items()}
        if not named:
            del self.services[namespace]

    def pdb_event(self, body: Mapping[str, Any], *, deleted: bool = False) -> None:
        """A PodDisruptionBudget as its informer delivers it: preemption weighs it (``scheduler.api.pdb``)."""
        meta = _meta(body)
        key = f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"
        if deleted:
            self.loop.budget_removed(key)
            return
        try:
            budget = api_pdb.parse_pdb(body)
        except InvalidObject as exc:
            self.loop.budget_removed(key)
            self._invalid("poddisruptionbudget", key, exc)
            return
        self.loop.budget_upsert(budget)

    def node_event(self, body: Mapping[str, Any], *, deleted: bool = False) -> None:
        name = str(_meta(body).get("name") or "")
        if deleted:
            if self.nodes.pop(name, None) is not None:
                self.cache.remove_node(name)
            self.uids.pop(f"node {name}", None)
            self._node_problems.pop(name, None)
            return
        try:
            info = api_node.parse_node(body)
        except InvalidObject as exc:
            self._invalid("node", name, exc)
            return
        self.uids[f"node {name}"] = str(_meta(body).get("uid") or "")
        old = self.nodes.get(name)
        if old is not None and replace(old, problems=()) == replace(info, problems=()):
            return
        self.nodes[name] = info
        self.cache.upsert_node(cache_dra.with_gpus(info, self.cache.devices))
        if old is None:
            for problem in info.problems:
                self._invalid("node", name, problem)
        self._check_gpu_topology(name)
        if self.ready:
            self.loop.cluster_event(ClusterEvent.NODE_ADDED if old is None else ClusterEvent.NODE_UPDATED)
            self._wake.set()

    def devices_changed(self, claims: set[str]) -> None:
        """A DeviceClass, ResourceSlice or ResourceClaim changed (``scheduler.k8s.dra``; ``claims``: the claims that
        did): nodes get the GPUs they publish now, pending pods using those claims their GPU count, and the pods
        waiting for a device may fit now."""
        gpus = self.cache.devices.gpu_nodes()
        for name in set(gpus) | set(self._dra_gpus):
            if gpus.get(name, 0) != self._dra_gpus.get(name, 0) and name in self.nodes:
                self.cache.upsert_node(cache_dra.with_gpus(self.nodes[name], self.cache.devices))
        self._dra_gpus = gpus
        for claim in claims:
            users = self._claim_users.get(claim, set())
            for key in list(users):
                pod = self.pending.get(key)
                if pod is None:
                    users.discard(key)  # bound or gone since
                    continue
                resolved = self._claim_gpus(pod)
                if resolved != pod:
                    self.pending[key] = resolved
                    if self.ready:
                        self.loop.pod_pending(resolved)
        if self.ready:
            self.loop.cluster_event(ClusterEvent.DEVICE_CHANGED)
            self._wake.set()

    def _claim_gpus(self, pod: PodRequest) -> PodRequest:
        """A pending pod with the whole GPUs its claims ask for (``scheduler.k8s.dra.claim_gpus``), and its claims
        indexed so that a change of one reads them again."""
        for pod_claim in pod.resource_claims:
            if pod_claim.claim_name:
                self._claim_users.setdefault(f"{pod.namespace}/{pod_claim.claim_name}", set()).add(pod.key)
        count = cache_dra.claim_gpus(self.cache.devices, pod)
        if count is None or count == pod.gpu.count:
            return pod
        return replace(pod, gpu=GpuRequest(count=count, milli=MILLI_PER_GPU) if count else NO_GPU)

    def volumes_changed(self) -> None:
        """A claim, volume, storage class or CSINode changed (``scheduler.k8s.volumes``): pods waiting for one may
        fit now."""
        if self.ready:
            self.loop.cluster_event(ClusterEvent.VOLUME_CHANGED)
            self._wake.set()

    def podgroup_event(self, body: Mapping[str, Any], *, deleted: bool = False) -> None:
        meta = _meta(body)
        key = f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"
        self.grouper.podgroup_seen(key, deleted=deleted)
        if deleted:
            self.podgroups.pop(key, None)
            self.uids.pop(f"podgroup {key}", None)
            self.group_status.forget(key)
            if self.ready:
                self.loop.group_removed(key)
                if (compat := self.compat_podgroups.get(key)) is not None:
                    self.loop.group_upsert(compat)
                    self._wake.set()
            return
        try:
            group = api_podgroup.parse_podgroup(body, created=_timestamp(meta.get("creationTimestamp")))
        except InvalidObject as exc:
            self._invalid("podgroup", key, exc)
            return
        self.uids[f"podgroup {key}"] = group.uid
        if self.podgroups.get(key) == group:
            return
        self.podgroups[key] = group
        if self.ready:
            self.loop.group_upsert(group)
            self._wake.set()

    def queue_event(self, body: Mapping[str, Any], *, deleted: bool = False) -> None:
        meta = _meta(body)
        name = str(meta.get("name") or "")
        old = self.queues.get(name)
        if deleted:
            self.queues.pop(name, None)
            self.loop.tenancy.set_unreadable(name, "")
            self.uids.pop(f"queue {name}", None)
            self.queue_status.forget(name)
            self._queue_accepted.forget(name)
        else:
            try:
                spec = api_queue.parse_queue(body)
            except InvalidObject as exc:
                self._invalid("queue", name, exc)
                # A queue that cannot be read holds no work: its pods wait (with an Event) until it is fixed, told
                # that it is not accepted and why (not that it does not exist).
                self.queues.pop(name, None)
                self.loop.tenancy.set_unreadable(name, str(exc.located(obj="")))
            else:
                self.loop.tenancy.set_unreadable(name, "")
                self.uids[f"queue {name}"] = str(meta.get("uid") or "")
                self.queues[name] = spec
        if self.queues.get(name) == old:
            return
        if self.ready:
            self.loop.queues_changed(list(self.queues.values()))
            self._wake.set()

    def topology_event(self, body: Mapping[str, Any], *, deleted: bool = False) -> None:
        """The Topology ``default`` replaces the built-in levels in the cache at once (before the first listing
        too, so no decision uses stale levels); deleting it restores them; an invalid one gets an Event and an
        ``Accepted=False`` status, and the levels in use stay. Jobs resolve their levels at every attempt, so a
        change wakes the waiting ones (a PodGroup naming a level only the new Topology has, among them)."""
        meta = _meta(body)
        name = str(meta.get("name") or "")
        before = self.cache.topology
        if deleted:
            self.uids.pop(f"topology {name}", None)
            if name != api_topology.NAME:
                return
            self.topology = None
            self.cache.set_topology(api_topology.DEFAULT_TOPOLOGY)
            self.topology_status.forget(name)
        else:
            self.uids[f"topology {name}"] = str(meta.get("uid") or "")
            try:
                spec = api_topology.parse_topology(body)
            except InvalidObject as exc:
                self._invalid("topology", name, exc)
                kept = ", ".join(before.level_label(i) for i in range(len(before.levels)))
                default = " (the built-in ones)" if self.topology is None else ""
                message = f"{exc}; the scheduler keeps the levels {kept}{default}"
                self.topology_status.rejected(name, generation=meta.get("generation"), message=message)
                return
            self.topology = spec
            self.cache.set_topology(spec)
            used = ", ".join(spec.level_label(i) for i in range(len(spec.levels)))
            self.topology_status.accepted(
                name,
                generation=meta.get("generation"),
                message=f"levels in use, widest first: {used}",
                levels=lambda: k8s_status.topology_levels(self.cache.domains()),
            )
        if self.cache.topology == before:
            return
        log.info("topology", levels=list(self.cache.topology.levels), deleted=deleted)
        if self.ready:
            self.loop.cluster_event(ClusterEvent.TOPOLOGY_CHANGED)
            self._wake.set()

    def compat_podgroup_event(self, body: Mapping[str, Any], *, deleted: bool = False) -> None:
        """A scheduler-plugins PodGroup (``scheduling.x-k8s.io/v1alpha1``): a gang of its ``minMember``,
        ``scheduleTimeoutSeconds`` and ``minResources``, for pods labelled ``scheduling.x-k8s.io/pod-group`` (or
        ours); a gpusched PodGroup of the same namespace and name wins."""
        meta = _meta(body)
        key = f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"
        if deleted:
            if self.compat_podgroups.pop(key, None) is not None and key not in self.podgroups and self.ready:
                self.loop.group_removed(key)
            return
        try:
            group = api_podgroup.parse_compat_podgroup(body, created=_timestamp(meta.get("creationTimestamp")))
        except InvalidObject as exc:
            self._invalid("podgroup", key, exc)
            return
        if self.compat_podgroups.get(key) == group:
            return
        self.compat_podgroups[key] = group
        if key not in self.podgroups and self.ready:
            self.loop.group_upsert(group)
            self._wake.set()

    def namespace_event(self, body: Mapping[str, Any], *, deleted: bool = False) -> None:
        """A Namespace's default queue (its ``gpusched.io/queue`` label): pods grouped from now on get it; pods and
        PodGroups already grouped keep theirs."""
        self.grouper.namespace_event(body, deleted=deleted)

    def _grouped(self, pod: PodRequest, body: Mapping[str, Any]) -> PodRequest | None:
        """A pod of ours without a PodGroup label as the core sees it: with its workload's gang and queue as labels,
        in memory only (``scheduler.api.workloads``); None while its owners are being read (it comes back then)."""
        grouping = self.grouper.group(body)
        if grouping is None:
            self.ungrouped[pod.key] = body
            return None
        self.ungrouped.pop(pod.key, None)
        if pod.key not in self.pending:
            for problem in grouping.problems:
                self._invalid("pod", pod.key, problem)
        labels = workloads.with_group(pod.labels, grouping)
        return pod if labels == dict(pod.labels) else replace(pod, labels=labels)

    def _owners_read(self, keys: set[str]) -> None:
        """The grouper has read the owners these pods waited for: feed them again."""
        for key in keys:
            body = self.ungrouped.get(key)
            if body is not None:
                self.pod_event(body)

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
        if now - self._last_status >= STATUS_INTERVAL_S / 2:
            self._last_status = now
            self.publish_status()

    def publish_status(self) -> None:
        """Hand the PodGroup and Queue status and the conditions of waiting pods to their writers (which skip
        unchanged values)."""
        if not self.leading:
            return
        for key in list(self.podgroups):
            status = self.loop.group_status(key)
            job = self.loop.gang(key)
            if status is not None and job is not None and job.group is not None:
                status["members"] = f"{len(job.placed)}/{job.group.min_member}"
                status["pending"] = len(job.pending)
                self.group_status.update(key, status)
        statuses = self.loop.queue_statuses()
        jobs = self._queue_jobs()
        for name in self.queues:
            status = statuses.get(name)
            if status is None:
                problem = self.queue_problems.get(name) or f"queue {name!r} could not be used"
                self._queue_refused(name, problem)
                continue
            self.queue_problems.pop(name, None)
            status = dict(status)
            status["pendingJobs"], status["admittedJobs"] = jobs.get(name, (0, 0))
            status["conditions"] = [self._queue_accepted.condition(name, "True", "Accepted", "the queue is in use")]
            self.queue_status.update(name, status)
        self._tell_waiting_pods()

    def _queue_jobs(self) -> dict[str, tuple[int, int]]:
        """Per queue (leaves and, summed, their ancestors): (jobs waiting in the queue, jobs holding capacity)."""
        tree = self.loop.tenancy.tree
        pending: dict[str, int] = {}
        admitted: dict[str, int] = {}
        for item in self.loop.queue.items():
            pending[item.queue] = pending.get(item.queue, 0) + 1
        for job in self.loop.jobs.all():
            if job.placed:
                admitted[job.queue] = admitted.get(job.queue, 0) + 1
        out: dict[str, list[int]] = {}
        for index, counts in enumerate((pending, admitted)):
            for leaf, n in counts.items():
                if leaf not in tree:
                    continue
                for name in (leaf, *tree.ancestors(leaf)):
                    out.setdefault(name, [0, 0])[index] += n
        return {name: (n[0], n[1]) for name, n in out.items()}

    def _queue_refused(self, name: str, message: str) -> None:
        """Mark a Queue that cannot be used in its status (``Accepted=False``), not only with an Event."""
        self.queue_problems[name] = message
        if self.leading:
            condition = self._queue_accepted.condition(name, "False", "Invalid", message)
            self.queue_status.update(name, {"conditions": [condition]})

    def _tell_waiting_pods(self) -> None:
        """Conditions (and an Event per change) for the pods the cycles say nothing about: gang members waiting
        for their siblings to exist, pods whose PodGroup is still missing after :data:`GROUP_GRACE_S`, pods of
        ours that cannot be read."""
        told: dict[str, str] = {}
        for job in self.loop.jobs.gangs():
            group = job.group
            if group is None or job.satisfied:
                continue
            if job.exists >= group.min_member:
                # Every member exists: the next attempt's FailedScheduling says why it waits; until then, a member
                # told that members were missing is told that they are all there.
                message = (
                    f"waiting for gang {group.key}: all {group.min_member} members exist; the gang waits its turn"
                    f" in queue {job.queue}"
                )
                for member in job.pending.values():
                    said = self.conditions.said.get(member.key, "")
                    if said.startswith(f"waiting for gang {group.key}: ") and "members exist; the gang is" in said:
                        self.conditions.unschedulable(member, message)
                continue
            message = (
                f"waiting for gang {group.key}: {job.exists} of {group.min_member} members exist; "
                f"the gang is tried once {group.min_member - job.exists} more are created"
            )
            for member in job.pending.values():
                told[member.key] = message
                self.conditions.unschedulable(member, message)
                if self._told.get(member.key) != message:
                    self.recorder.emit(obj=f"pod {member.key}", kind="Normal", reason="WaitingForGang", message=message)
        self._told = told
        now = time.monotonic()
        for key, (since, message) in list(self._group_missing.items()):
            pod = self.pending.get(key)
            if pod is None or self.loop.job_of(key) is not None or pod.pod_group == "":
                del self._group_missing[key]  # gone, or its group came
            elif now - since >= GROUP_GRACE_S and f"{pod.namespace}/{pod.pod_group}" not in self.podgroups:
                del self._group_missing[key]
                self.recorder.emit(obj=f"pod {key}", kind="Warning", reason="PodGroupNotFound", message=message)
                self.conditions.unschedulable(pod, message)
        for key, (uid, message) in list(self.unreadable_pods.items()):
            if key in self.pending or self.cache.pod(key) is not None:
                del self.unreadable_pods[key]  # readable again
            else:
                self.conditions.unschedulable_key(key, uid, message)

    # --- the core's ports: Binder, Events, Evictor ---------------------------------------------------------------

    def bind(self, decision: Decision) -> None:
        assert self.binder is not None, "start() the operator before scheduling"
        self._bind_started[decision.pod.key] = time.monotonic()
        self.binder.bind(decision)

    def emit(self, *, obj: str, kind: str, reason: str, message: str) -> None:
        """The loop's Events: written by the leader only. A failed attempt, or work waiting for its queue, also
        sets the PodScheduled condition of the pod (of every waiting member, for a gang: with an Event each).
        ``PodGroupNotFound`` waits :data:`GROUP_GRACE_S` and is told only if the group is still missing then."""
        word, _, key = obj.partition(" ")
        if reason == "PodGroupNotFound" and word == "pod":
            self._group_missing.setdefault(key, (time.monotonic(), message))
            return
        if reason == "InvalidQueue" and word == "queue":
            self._queue_refused(key, message)
        if reason == "Scheduled" and word == "pod":
            self.metrics.schedule_attempts.labels("scheduled").inc()
        elif reason == "Scheduled" and word == "podgroup" and (job := self.loop.gang(key)) is not None:
            first = job.first_attempt
            if first is not None:
                self.metrics.gang_wait.observe(max(0.0, self.clock() - first))
        elif reason == "FailedScheduling":
            self.metrics.schedule_attempts.labels("unschedulable").inc()
        if not self.leading:
            return
        self.recorder.emit(obj=obj, kind=kind, reason=reason, message=message)
        if reason not in ("FailedScheduling", "QueueNotFound", "QueueNotAccepted"):
            return
        if word == "pod" and key in self.pending:
            self.conditions.unschedulable(self.pending[key], message)
        elif word == "podgroup" and (job := self.loop.gang(key)) is not None and job.group is not None:
            told = f"waiting for gang {key}: {len(job.placed)} of {job.group.min_member} members placed; {message}"
            for member in job.pending.values():
                self.conditions.unschedulable(member, told)
                self.recorder.emit(obj=f"pod {member.key}", kind=kind, reason=reason, message=told)

    def evict(self, pods: list[PodRequest], reason: str) -> None:
        for pod in pods:
            self.metrics.preempted(self.loop.queue_of(pod), reason)
            self._spawn(self._delete(pod, reason))

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
        answer = await self.client.call(
            self.client.core.patch_namespaced_pod_status,
            name=pod.name,
            namespace=pod.namespace,
            body=body,
            _content_type="application/strategic-merge-patch+json",
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
        else:
            log.warning("preemption failed", pod=pod.key, status=answer.status, error=answer.message)

    # --- binding outcomes --------------------------------------------------------------------------------------

    def _on_bound(self, key: str) -> None:
        self._observe_bind(key, "bound")
        first = self.first_seen.pop(key, None)
        if first is not None:
            self.metrics.e2e_duration.observe(time.monotonic() - first)
        self.pending.pop(key, None)
        self.conditions.forget(key)

    def _on_failed(self, pod: PodRequest, reason: str, retry: bool, backoff: float) -> None:
        self._observe_bind(pod.key, "refused" if retry else "failed")
        self.scheduler.bind_failed(pod.key)
        if retry:
            # The reservation is released now; the pod comes back only after its backoff, so a refusal that
            # does not go away (a webhook) does not win the same GPUs every cycle.
            asyncio.get_running_loop().call_later(backoff, self._retry, pod, reason)
        # Otherwise the pod is gone or placed by someone else: the watch says which.

    def _retry(self, pod: PodRequest, reason: str) -> None:
        if pod.key not in self.pending or self.cache.pod(pod.key) is not None:
            return  # deleted, or placed meanwhile
        self.loop.bind_failed(pod, reason)
        current = self.pending[pod.key]
        if current != pod:
            # It changed while it was placed (its claims' GPUs, read again meanwhile): tried again as it is now.
            self.loop.pod_pending(current)
        self._wake.set()

    def _on_uncertain(self, key: str) -> None:
        self._observe_bind(key, "uncertain")
        pod = self.cache.pod(key)
        if pod is not None:
            asyncio.get_running_loop().call_later(RECHECK_S, lambda: self._spawn(self._recheck(pod.pod)))

    async def _recheck(self, pod: PodRequest) -> None:
        """An unknown outcome the watch has not cleared up: read the pod; unbound means the binding failed."""
        if not self.cache.is_assumed(pod.key):
            return  # the watch showed the truth
        answer = await self.client.call(self.client.core.read_namespaced_pod, name=pod.name, namespace=pod.namespace)
        if not answer.ok or not self.cache.is_assumed(pod.key):
            return  # gone (the watch will say), or unreadable: ask again after the next unknown outcome
        spec = answer.body.get("spec")
        if isinstance(spec, Mapping) and spec.get("nodeName"):
            return  # bound: the watch will confirm it
        self.scheduler.bind_failed(pod.key)
        self._retry(pod, "the binding's outcome was unknown and the pod is still unbound")

    def _observe_bind(self, key: str, result: str) -> None:
        self.metrics.binds.labels(result).inc()
        started = self._bind_started.pop(key, None)
        if started is not None:
            self.metrics.bind_duration.observe(time.monotonic() - started)

    # --- helpers -----------------------------------------------------------------------------------------------

    def uid_of(self, word: str, key: str) -> str:
        return self.uids.get(f"{word} {key}", "")

    def _still_pending(self, key: str) -> bool:
        return (key in self.pending or key in self.unreadable_pods) and self.cache.pod(key) is None

    def _pod_gone(self, key: str, *, finished: str = "") -> None:
        self.pending.pop(key, None)
        self.unreadable_pods.pop(key, None)
        self._group_missing.pop(key, None)
        self.first_seen.pop(key, None)
        self.uids.pop(f"pod {key}", None)
        held = self.cache.pod(key) is not None
        self.cache.remove_pod(key)
        self.conditions.forget(key)
        if self.binder is not None:
            self.binder.forget(key)
        self.loop.pod_gone(key, finished=finished)
        if self.ready and held:
            self.loop.cluster_event(ClusterEvent.POD_DELETED)
            self._wake.set()

    def _invalid(self, word: str, key: str, exc: InvalidObject, *, report: bool = True) -> None:
        self.metrics.invalid_objects.labels(word).inc()
        log.warning("invalid object", object=f"{word} {key}", error=str(exc))
        if report and self.leading:
            self.recorder.emit(obj=f"{word} {key}", kind="Warning", reason="InvalidObject", message=str(exc))
        if word == "queue":
            self._queue_refused(key, str(exc))

    def _unreadable_pod(self, key: str, uid: str, exc: InvalidObject) -> None:
        """A pod of ours that cannot be read waits with a condition saying why (an Event alone expires)."""
        message = f"{exc}; the pod is not scheduled until this is fixed"
        self.unreadable_pods[key] = (uid, message)
        if self.leading:
            self.conditions.unschedulable_key(key, uid, message)

    def _check_gpu_topology(self, name: str) -> None:
        """A refused ``gpusched.io/gpu-topology`` annotation: an Event and a log line when it changes; the gauge
        ``gpusched_node_annotation_problems`` counts such nodes at each scrape."""
        problem = self.cache.gpu_topology_problems.get(name)
        if problem is None:
            self._node_problems.pop(name, None)
            return
        if self._node_problems.get(name) == str(problem):
            return
        self._node_problems[name] = str(problem)
        self.metrics.invalid_objects.labels("node").inc()
        log.warning("invalid node annotation", object=f"node {name}", error=str(problem))
        if self.leading:
            self.recorder.emit(obj=f"node {name}", kind="Warning", reason="InvalidGPUTopology", message=str(problem))

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
    cache = Cache()
    cache.upsert_node(api_node.parse_node({"metadata": {"name": "warm-up"}, "status": {"allocatable": _WARM_NODE}}))
    scheduler = Scheduler(cache, Framework.build(config.profile), NoBinding())
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


def _meta(body: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = body.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _timestamp(value: object) -> float:
    """An RFC 3339 creationTimestamp as Unix seconds (0 when absent or unreadable)."""
    if not isinstance(value, str) or not value:
        return 0.0
    try:
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0
