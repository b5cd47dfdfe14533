"""The pod feed: raw Kubernetes objects from the watches, parsed, into the cache and the scheduling loop.

:class:`PodFeed` holds what the watches said last about the objects the core reads (pods of ours waiting for a
node, nodes, PodGroups, Queues, Services, the Topology) and is the only writer of that state. Its ``*_event``
methods take raw objects as the informers and kopf's handlers deliver them (``scheduler.k8s.feeds.handlers``,
``scheduler.k8s.run``; nothing else calls them). Invariants kept here:

- No decision before the first full listing: until :meth:`PodFeed.listed` is called, pending pods, PodGroups
  and Queues are only remembered (nodes and bound pods go to the cache at once); then the loop gets the queues,
  the groups and the pending pods in that order, so no pod waits on a queue or group merely not listed yet.
- A pod handed to the binder stays assumed in the cache until the watch shows it on its node (a success answer
  does not confirm it): an older watch event without ``spec.nodeName`` arriving after the answer must neither
  release its GPUs nor queue it again.
- Bound pods of every scheduler count on their nodes, whatever their annotations say later; pods of ours on a
  node are charged to their job's queue (``scheduler.core.jobs``), so queue usage after a restart is what the
  cluster holds, whatever order pods and PodGroups are listed in; pods of other schedulers are charged to no
  queue and shrink what the queues share (``scheduler.core.tenancy``).
- Per-pod state has one owner: the pods waiting for a node, when each was first seen, the unreadable ones, the
  ones whose owners are being read and every object's uid live here; a pod that leaves is dropped here and told to
  every other holder of per-pod state (``on_pod_gone``: the conditions writer, the status publisher, the binder).
- A pod of ours with scheduling gates (Kueue's, say) is never queued: it is only remembered in ``gated``, waiting
  for admission, until the update that removes its last gate brings it into the queue
  (``scheduler.api.objects.admission``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import structlog

from scheduler.api.basics import fields
from scheduler.api.basics.errors import InvalidObject
from scheduler.api.crds import podgroup as api_podgroup
from scheduler.api.crds import queue as api_queue
from scheduler.api.crds import reservation as api_reservation
from scheduler.api.crds import topology as api_topology
from scheduler.api.devices import topology_manager
from scheduler.api.objects import admission, workloads
from scheduler.api.objects import affinity as api_affinity
from scheduler.api.objects import node as api_node
from scheduler.api.objects import pdb as api_pdb
from scheduler.api.objects.pod import PodRequest
from scheduler.cache import dra_gpus
from scheduler.core.hints import ClusterEvent
from scheduler.core.loop import SchedulingLoop
from scheduler.k8s import status as k8s_status
from scheduler.k8s.context import OperatorContext
from scheduler.k8s.feeds import numa_zones
from scheduler.k8s.feeds.grouper import Grouper
from scheduler.k8s.feeds.pod_parses import PodParses
from scheduler.k8s.ports import device_claims, volume_binding
from scheduler.k8s.publisher import StatusPublisher

log = structlog.get_logger(__name__)

#: The listings readiness waits for: the informers' (nodes, pods, PodGroups; Services, which the default spread reads,
#: and PodDisruptionBudgets, which preemption must respect from its first decision) and kopf's (Queues, Reservations
#: and the Topology, see ``scheduler.k8s.feeds.handlers``). The NodeResourceTopology objects too, where ``gpusched
#: run`` expects them (:meth:`PodFeed.zones_changed`: listed, or not served).
LISTINGS = frozenset({"nodes", "pods", "podgroups", "services", "poddisruptionbudgets", "custom resources"})


class PodFeed:
    """The watches' objects into the cache and the loop; see the module notes."""

    def __init__(self, context: OperatorContext, *, loop: SchedulingLoop, publisher: StatusPublisher) -> None:
        self.cache = cache = context.cache
        self.loop = loop
        self.metrics = context.metrics
        self.recorder = context.recorder
        self.conditions = conditions = context.conditions
        self.publisher = publisher
        self.scheduler_name = context.scheduler_name
        self._leading = context.leading
        self._wake = context.wake
        #: Told the key of every pod that leaves, so that whoever keeps per-pod state drops it.
        self.on_pod_gone: list[Callable[[str], None]] = [conditions.forget, publisher.forget_pod]
        #: Whether the first full listing is in (readiness), and which of :data:`LISTINGS` are.
        self.ready = False
        self._listed: set[str] = set()
        #: Namespace -> Service name -> its selector (``spec.selector``), for the cluster-default spreading.
        self.services: dict[str, dict[str, dict[str, str]]] = {}
        #: Pods of ours waiting for a node, by key.
        self.pending: dict[str, PodRequest] = {}
        #: When each pending pod was first seen (time.monotonic()), for the end-to-end latency.
        self.first_seen: dict[str, float] = {}
        self.nodes: dict[str, api_node.NodeInfo] = {}
        self.podgroups: dict[str, api_podgroup.PodGroup] = {}
        self.queues: dict[str, api_queue.QueueSpec] = {}
        #: Reservations by key, as last read (with the status the scheduler wrote); those that cannot be read: why.
        self.reservations: dict[str, api_reservation.Reservation] = {}
        self.invalid_reservations: dict[str, str] = {}
        #: The cluster's Topology (``default``) as last accepted, also in the cache's levels; None: the built-in ones.
        self.topology: api_topology.TopologySpec | None = None
        #: "pod ns/name", "podgroup ns/name", "queue name", "node name" -> uid, for Events' involvedObject.
        self.uids: dict[str, str] = {}
        #: Owner reads and PodGroups for workloads' pods (``scheduler.k8s.feeds.grouper``); only the leader writes.
        self.grouper = Grouper(
            context.client, may_write=context.leading, resolved=self._owners_read, spawn=context.spawn
        )
        #: Pods of ours without a PodGroup label whose owners are being read: key -> the pod as last seen.
        self.ungrouped: dict[str, Mapping[str, Any]] = {}
        #: scheduler-plugins PodGroups (``scheduling.x-k8s.io``) by key; a gpusched PodGroup of the same key wins.
        self.compat_podgroups: dict[str, api_podgroup.PodGroup] = {}
        #: Pods of ours whose spec could not be read: key -> (uid, why), told in their PodScheduled condition.
        self.unreadable_pods: dict[str, tuple[str, str]] = {}
        #: Pods of ours held by scheduling gates (waiting for admission: Kueue's, for one), never tried: key -> who
        #: holds them.
        self.gated: dict[str, admission.Gated] = {}
        #: Each pod's last parse, for its next version (a bound pod's come with nothing scheduling reads changed).
        self.parses = PodParses()
        #: Nodes whose ``gpusched.io/gpu-topology`` was refused, with the message last told.
        self._node_problems: dict[str, str] = {}
        #: Claims, volumes, classes and CSINodes into the cache (``scheduler.k8s.ports.volume_binding``).
        self.volumes = volume_binding.VolumeWatches(cache.volumes, on_change=self.volumes_changed, invalid=self.invalid)
        #: DeviceClasses, ResourceSlices and ResourceClaims into the cache (``scheduler.k8s.ports.device_claims``).
        self.devices = device_claims.DeviceWatches(
            cache.devices, on_change=self.devices_changed, on_claims=self.claims_changed, invalid=self.invalid
        )
        #: ``DeviceStore.releases`` when the last device change was taken in.
        self._releases_seen = cache.devices.releases
        self.zones = numa_zones.ZoneWatches(cache.numa, on_change=self.zones_changed, invalid=self.invalid)
        #: Node name -> the whole GPUs it publishes through DRA, as last given to the cache.
        self._dra_gpus: dict[str, int] = {}
        #: Claim key -> the pending pods (keys) that use it, whose GPU count follows the claim.
        self._claim_users: dict[str, set[str]] = {}

    # --- listings ----------------------------------------------------------------------------------------------

    def part_listed(self, part: str) -> None:
        """One of :data:`LISTINGS` has delivered its first full listing; the last one makes the cache ready, with the
        NUMA zones listed where a listing of them is expected (:meth:`zones_changed`)."""
        self._listed.add(part)
        self._ready_if_listed()

    def _ready_if_listed(self) -> None:
        """Let the loop in once every listing of :data:`LISTINGS` is in and the NUMA zones are listed where a listing
        of them is expected: a pod placed before them would be placed blind to the zones, and the zones of what it
        took guessed afterwards; kube-scheduler too waits for every informer it reads (a CI run under load bound 12
        of the 24 pods of test_numa_peers_e2e[single] when the zones came late)."""
        if self._listed >= LISTINGS and self.cache.numa.listed:
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
        # Before the pods: an Available one is held again on its nodes before anyone else may take them, and its
        # owners' pods know it.
        for reservation in self.reservations.values():
            self._reservation_upsert(reservation)
        for key, message in self.invalid_reservations.items():
            self.loop.reservation_failed(key, message)
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
        self._wake()

    def budget_keys(self) -> list[str]:
        """Keys of the PodDisruptionBudgets the loop holds: what a relist of them reconciles."""
        return list(self.loop.budgets)

    def podgroup_keys(self) -> list[str]:
        """Keys of the PodGroups held: what a relist of them reconciles."""
        return list(self.podgroups)

    def service_keys(self) -> list[str]:
        """Keys of the Services held: what a relist of them reconciles."""
        return [f"{ns}/{name}" for ns, named in self.services.items() for name in named]

    # --- pods --------------------------------------------------------------------------------------------------

    def pod_event(self, body: Mapping[str, Any], *, deleted: bool = False) -> None:
        meta = _meta(body)
        key = f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"
        if deleted:
            self.ungrouped.pop(key, None)
            self._pod_gone(key)
            return
        spec = body.get("spec")
        spec = spec if isinstance(spec, Mapping) else {}
        ours = (spec.get("schedulerName") or "default-scheduler") == self.scheduler_name
        held = admission.gated(body)
        if held is not None:
            # kube-scheduler's SchedulingGates: a gated pod is neither scheduled nor told anything (the API server
            # has set PodScheduled=False/SchedulingGated); gates can only be removed, and the update that removes
            # the last one brings it here again, into the queue. Ours is remembered as waiting for admission.
            if ours:
                self.gated[key] = held
            return
        self.gated.pop(key, None)
        try:
            if spec.get("nodeName"):
                # A bound pod counts on its node whatever its annotations say now (scheduler.api.objects.pod). The
                # thousands of the first listing are not kept for their next versions.
                pod, problems = self.parses.bound(key, body, keep=self.ready)
                for problem in problems:
                    self.invalid("pod", key, problem)
            else:
                pod = self.parses.pending(key, body, scheduler_name=self.scheduler_name)
        except InvalidObject as exc:
            self.invalid("pod", key, exc, report=ours or bool(spec.get("nodeName")))
            if ours and not spec.get("nodeName"):
                self._unreadable_pod(key, str(meta.get("uid") or ""), exc)
            if ours and key in self.pending:
                self.pending.pop(key, None)
                self.loop.pod_gone(key)
            return
        self.uids[f"pod {key}"] = pod.uid
        if pod.extended_asks:
            # Extended resources a DeviceClass maps to DRA: the GPUs they are
            # (scheduler.api.devices.extended_resources).
            pod = dra_gpus.extended_gpu_request(self.cache.devices, pod)
        if pod.terminal:
            if pod.status_reason == topology_manager.TOPOLOGY_AFFINITY_ERROR:
                self._kubelet_refused(pod)
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
            else:
                # Another scheduler's: it holds its node and no queue, and is never evicted by us.
                self.loop.pod_outside(pod)
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
            created=fields.unix_time(meta.get("creationTimestamp")),
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
            self._wake()

    def bound(self, key: str) -> float | None:
        """The binder bound the pod: it waits for no node any more. Returns when it was first seen (monotonic)."""
        self.pending.pop(key, None)
        self.conditions.forget(key)
        return self.first_seen.pop(key, None)

    def still_pending(self, key: str) -> bool:
        """Whether the pod (of ours) still waits for a node: only then its PodScheduled condition is written."""
        return (key in self.pending or key in self.unreadable_pods) and self.cache.pod(key) is None

    def forget_readable(self) -> None:
        """Drop the unreadable pods that were read since (waiting for a node now, or on one)."""
        for key in [k for k in self.unreadable_pods if k in self.pending or self.cache.pod(k) is not None]:
            del self.unreadable_pods[key]

    def uid_of(self, word: str, key: str) -> str:
        return self.uids.get(f"{word} {key}", "")

    def _pod_gone(self, key: str, *, finished: str = "") -> None:
        self.parses.forget(key)
        self.pending.pop(key, None)
        self.gated.pop(key, None)
        self.unreadable_pods.pop(key, None)
        self.first_seen.pop(key, None)
        self.uids.pop(f"pod {key}", None)
        held = self.cache.pod(key) is not None
        self.cache.remove_pod(key)
        for forget in self.on_pod_gone:
            forget(key)
        self.loop.pod_gone(key, finished=finished)
        if self.ready and held:
            self.loop.cluster_event(ClusterEvent.POD_DELETED)
            self._wake()

    def _kubelet_refused(self, pod: PodRequest) -> None:
        """The kubelet refused ``pod`` for its NUMA zones: if it is ours, the other pods of its owner (the replacement
        its controller makes) keep off that node for a while (``scheduler.cache.kubelet_refusals``), and the node's
        Events say so."""
        refusals = self.cache.kubelet_refusals
        if pod.scheduler_name != self.scheduler_name or not pod.owner or not pod.node_name:
            return  # another scheduler places its pods; nothing makes another of a bare pod
        if not refusals.refused(owner=pod.owner, node=pod.node_name, at=pod.started):
            return  # known already (a relist, another pod of the owner), or long over
        owner = pod.owner_kind or "owner"
        message = (
            f"the kubelet refused pod {pod.key} ({pod.status_reason}): the other pods of its {owner} keep off this "
            f"node for {refusals.ttl_s:.0f} s from the refusal"
        )
        log.warning("kubelet refused a pod", pod=pod.key, node=pod.node_name, reason=pod.status_reason)
        if self._leading():
            self.recorder.emit(obj=f"node {pod.node_name}", kind="Warning", reason="KubeletRefusedPod", message=message)

    def _unreadable_pod(self, key: str, uid: str, exc: InvalidObject) -> None:
        """A pod of ours that cannot be read waits with a condition saying why (an Event alone expires)."""
        message = f"{exc}; the pod is not scheduled until this is fixed"
        self.unreadable_pods[key] = (uid, message)
        if self._leading():
            self.conditions.unschedulable_key(key, uid, message)

    def _grouped(self, pod: PodRequest, body: Mapping[str, Any]) -> PodRequest | None:
        """A pod of ours without a PodGroup label as the core sees it: with its workload's gang and queue as labels,
        in memory only (``scheduler.api.objects.workloads``); None while its owners are being read (it comes back
        then)."""
        grouping = self.grouper.group(body)
        if grouping is None:
            self.ungrouped[pod.key] = body
            return None
        self.ungrouped.pop(pod.key, None)
        if pod.key not in self.pending:
            for problem in grouping.problems:
                self.invalid("pod", pod.key, problem)
        labels = workloads.with_group(pod.labels, grouping)
        return pod if labels == dict(pod.labels) else replace(pod, labels=labels)

    def _owners_read(self, keys: set[str]) -> None:
        """The grouper has read the owners these pods waited for: feed them again."""
        for key in keys:
            body = self.ungrouped.get(key)
            if body is not None:
                self.pod_event(body)

    # --- nodes, devices, volumes -------------------------------------------------------------------------------

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
            self.invalid("node", name, exc)
            return
        self.uids[f"node {name}"] = str(_meta(body).get("uid") or "")
        old = self.nodes.get(name)
        if old is not None and replace(old, problems=()) == replace(info, problems=()):
            return
        self.nodes[name] = info
        self.cache.upsert_node(dra_gpus.with_gpus(info, self.cache.devices))
        if old is None:
            for problem in info.problems:
                self.invalid("node", name, problem)
        self._check_gpu_topology(name)
        if self.ready:
            self.loop.cluster_event(ClusterEvent.NODE_ADDED if old is None else ClusterEvent.NODE_UPDATED)
            self._wake()

    def zones_changed(self, node: str | None) -> None:
        """Node ``node``'s NUMA zones were published again (None: any node's; ``scheduler.k8s.feeds.numa_zones``):
        what its kubelet freed may let a waiting pod in, as a node update may. The node counts as changed, so that
        what was found on its old zones (a victim search that found none) is not recalled."""
        slots = range(self.cache.arrays.slots) if node is None else [self.cache.slot_of(node)]
        for slot in slots:
            if slot is not None:
                self.cache.arrays.touch(slot)
        self.loop.cluster_event(ClusterEvent.NODE_UPDATED)
        if node is None:
            self._ready_if_listed()  # the zones may be the last listing in (or discovery said there are none)

    def claims_changed(self, claims: set[str]) -> None:
        """ResourceClaims changed, and nothing else of DRA (:meth:`devices_changed`)."""
        self.devices_changed(claims, devices=False)

    def devices_changed(self, claims: set[str], *, devices: bool = True) -> None:
        """A DeviceClass, ResourceSlice or ResourceClaim changed (``scheduler.k8s.ports.device_claims``; ``claims``: the
        claims that did; ``devices``: a class or a slice may have): nodes get the GPUs they publish now, pending pods
        using those claims their GPU count, and the pods waiting for a device may fit now. When only claims changed
        and none stopped holding a device (a claim made, allocated, reserved), only the pods using them may: no
        device was freed for the others (``DeviceStore.releases``), so they are not woken (the queueing hints)."""
        gpus = self.cache.devices.gpu_nodes()
        for name in set(gpus) | set(self._dra_gpus):
            if gpus.get(name, 0) != self._dra_gpus.get(name, 0) and name in self.nodes:
                self.cache.upsert_node(dra_gpus.with_gpus(self.nodes[name], self.cache.devices))
        self._dra_gpus = gpus
        released = self.cache.devices.releases != self._releases_seen
        self._releases_seen = self.cache.devices.releases
        using: set[str] = set()
        for claim in claims:
            users = self._claim_users.get(claim, set())
            using |= users
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
            if devices or released:
                self.loop.cluster_event(ClusterEvent.DEVICE_CHANGED)
            else:
                self.loop.pods_changed(using, ClusterEvent.DEVICE_CHANGED)
            self._wake()

    def _claim_gpus(self, pod: PodRequest) -> PodRequest:
        """A pending pod with the GPUs its claims ask for (whole GPUs, or the share of one of a MIG device:
        ``scheduler.cache.dra_gpus.claim_gpu_request``), and its claims indexed so that a change of one reads them
        again."""
        for pod_claim in pod.resource_claims:
            if pod_claim.claim_name:
                self._claim_users.setdefault(f"{pod.namespace}/{pod_claim.claim_name}", set()).add(pod.key)
        gpu = dra_gpus.claim_gpu_request(self.cache.devices, pod)
        if gpu is None or (gpu.count, gpu.milli) == (pod.gpu.count, pod.gpu.milli):
            return pod
        return replace(pod, gpu=gpu)

    def volumes_changed(self) -> None:
        """A claim, volume, storage class or CSINode changed (``scheduler.k8s.ports.volume_binding``): pods waiting for
        one
        may fit now."""
        if self.ready:
            self.loop.cluster_event(ClusterEvent.VOLUME_CHANGED)
            self._wake()

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
        if self._leading():
            self.recorder.emit(obj=f"node {name}", kind="Warning", reason="InvalidGPUTopology", message=str(problem))

    # --- Services, budgets, PodGroups, Queues, the Topology, Namespaces ----------------------------------------

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
        """A PodDisruptionBudget as its informer delivers it: preemption weighs it (``scheduler.api.objects.pdb``)."""
        meta = _meta(body)
        key = f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"
        if deleted:
            self.loop.budget_removed(key)
            return
        try:
            budget = api_pdb.parse_pdb(body)
        except InvalidObject as exc:
            self.loop.budget_removed(key)
            self.invalid("poddisruptionbudget", key, exc)
            return
        self.loop.budget_upsert(budget)

    def podgroup_event(self, body: Mapping[str, Any], *, deleted: bool = False) -> None:
        meta = _meta(body)
        key = f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"
        self.grouper.podgroup_seen(key, deleted=deleted)
        if deleted:
            self.podgroups.pop(key, None)
            self.uids.pop(f"podgroup {key}", None)
            self.publisher.group_status.forget(key)
            if self.ready:
                self.loop.group_removed(key)
                if (compat := self.compat_podgroups.get(key)) is not None:
                    self.loop.group_upsert(compat)
                    self._wake()
            return
        group = self._read_group(api_podgroup.parse_podgroup, body, key)
        if group is None:
            return
        self.uids[f"podgroup {key}"] = group.uid
        if self.podgroups.get(key) == group:
            return
        self.podgroups[key] = group
        if self.ready:
            self.loop.group_upsert(group)
            self._wake()

    def reservation_event(self, body: Mapping[str, Any], *, deleted: bool = False) -> None:
        """A Reservation (``scheduler.api.crds.reservation``): placed and held by the loop, its status written by
        the publisher; one that cannot be read is marked Failed (an Event and its condition) and holds nothing."""
        meta = _meta(body)
        key = f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"
        if deleted:
            self.reservations.pop(key, None)
            self.invalid_reservations.pop(key, None)
            self.uids.pop(f"reservation {key}", None)
            self.publisher.reservation_status.forget(key)
            if self.ready:
                self.loop.reservation_removed(key)
                self._wake()
            return
        self.uids[f"reservation {key}"] = str(meta.get("uid") or "")
        try:
            reservation = api_reservation.parse_reservation(body, scheduler_name=self.scheduler_name)
        except InvalidObject as exc:
            self.invalid("reservation", key, exc)
            self.reservations.pop(key, None)
            self.invalid_reservations[key] = str(exc)
            if self.ready:
                self.loop.reservation_failed(key, str(exc))
                self._wake()
            return
        self.reservations[key] = reservation
        self.invalid_reservations.pop(key, None)
        if self.ready:
            self._reservation_upsert(reservation)
            self._wake()

    def _reservation_upsert(self, reservation: api_reservation.Reservation) -> None:
        ghosts = api_reservation.ghosts(reservation, scheduler_name=self.scheduler_name)
        self.loop.reservation_upsert(reservation, ghosts)

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
        group = self._read_group(api_podgroup.parse_compat_podgroup, body, key)
        if group is None:
            return
        if self.compat_podgroups.get(key) == group:
            return
        self.compat_podgroups[key] = group
        if key not in self.podgroups and self.ready:
            self.loop.group_upsert(group)
            self._wake()

    def _read_group(
        self, parse: Callable[..., api_podgroup.PodGroup], body: Mapping[str, Any], key: str
    ) -> api_podgroup.PodGroup | None:
        """The PodGroup of ``body`` as ``parse`` reads it (created at its creationTimestamp); None, reported as an
        invalid object, when it cannot be read."""
        try:
            return parse(body, created=fields.unix_time(_meta(body).get("creationTimestamp")))
        except InvalidObject as exc:
            self.invalid("podgroup", key, exc)
            return None

    def queue_event(self, body: Mapping[str, Any], *, deleted: bool = False) -> None:
        meta = _meta(body)
        name = str(meta.get("name") or "")
        old = self.queues.get(name)
        if deleted:
            self.queues.pop(name, None)
            self.loop.tenancy.set_unreadable(name, "")
            self.uids.pop(f"queue {name}", None)
            self.publisher.forget_queue(name)
        else:
            try:
                spec = api_queue.parse_queue(body)
            except InvalidObject as exc:
                self.invalid("queue", name, exc)
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
            self._wake()

    def topology_event(self, body: Mapping[str, Any], *, deleted: bool = False) -> None:
        """The Topology ``default`` replaces the built-in levels in the cache at once (before the first listing
        too, so no decision uses stale levels); deleting it restores them; an invalid one gets an Event and an
        ``Accepted=False`` status, and the levels in use stay. Jobs resolve their levels at every attempt, so a
        change wakes the waiting ones (a PodGroup naming a level only the new Topology has, among them)."""
        meta = _meta(body)
        name = str(meta.get("name") or "")
        before = self.cache.topology
        writer = self.publisher.topology_status
        if deleted:
            self.uids.pop(f"topology {name}", None)
            if name != api_topology.NAME:
                return
            self.topology = None
            self.cache.set_topology(api_topology.DEFAULT_TOPOLOGY)
            writer.forget(name)
        else:
            self.uids[f"topology {name}"] = str(meta.get("uid") or "")
            try:
                spec = api_topology.parse_topology(body)
            except InvalidObject as exc:
                self.invalid("topology", name, exc)
                kept = ", ".join(before.level_label(i) for i in range(len(before.levels)))
                default = " (the built-in ones)" if self.topology is None else ""
                message = f"{exc}; the scheduler keeps the levels {kept}{default}"
                writer.rejected(name, generation=meta.get("generation"), message=message)
                return
            self.topology = spec
            self.cache.set_topology(spec)
            used = ", ".join(spec.level_label(i) for i in range(len(spec.levels)))
            writer.accepted(
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
            self._wake()

    def namespace_event(self, body: Mapping[str, Any], *, deleted: bool = False) -> None:
        """A Namespace's default queue (its ``gpusched.io/queue`` label): pods grouped from now on get it; pods and
        PodGroups already grouped keep theirs."""
        self.grouper.namespace_event(body, deleted=deleted)

    # --- bad input ---------------------------------------------------------------------------------------------

    def invalid(self, word: str, key: str, exc: InvalidObject, *, report: bool = True) -> None:
        """An object that cannot be read: counted, logged, an Event (by the leader), and a refused Queue's
        status condition."""
        self.metrics.invalid_objects.labels(word).inc()
        log.warning("invalid object", object=f"{word} {key}", error=str(exc))
        if report and self._leading():
            self.recorder.emit(obj=f"{word} {key}", kind="Warning", reason="InvalidObject", message=str(exc))
        if word == "queue":
            self.publisher.queue_refused(key, str(exc))


def _meta(body: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = body.get("metadata")
    return meta if isinstance(meta, Mapping) else {}
