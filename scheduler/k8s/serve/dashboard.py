"""The dashboard of ``gpusched run`` (``--dashboard-port``) and ``gpusched dashboard``: the operator's live state as
the read-only records of ``scheduler.dashboard.view``.

:class:`OperatorSource` reads the operator on the event loop (no cycle runs meanwhile) and writes nothing: the map
from the cache (``scheduler.dashboard.cluster_map``), the queues as their Queue objects' ``status`` shows them
(``scheduler.k8s.status.queue_status``: the same text, not a second computation), the waiting work in the
queue's order with the reason the pod's condition or the gang's condition last gave, and a job's page with
``gpusched explain``'s answer (``scheduler.k8s.serve.explain.answer``: the cycle's own filtering and what-if).

The dashboard is off unless a port is given, and it listens on a port of its own that the manifests do not expose
(docs/dashboard.md: ``kubectl port-forward``). A standby sends its viewers to the leader's dashboard, whose address
the leader publishes on its Lease (``gpusched.io/dashboard-url``).
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable, Iterable

import structlog

from scheduler.api.basics import resources
from scheduler.api.objects.pod import PodRequest
from scheduler.core import tenancy
from scheduler.core.jobs import Job
from scheduler.dashboard import access as dashboard_access
from scheduler.dashboard import cluster_map, history, server, view
from scheduler.framework import typical
from scheduler.k8s import status as k8s_status
from scheduler.k8s.operator import Operator
from scheduler.k8s.serve import dashboard_options, explain
from scheduler.k8s.serve.dashboard_access import KubernetesAccess

log = structlog.get_logger(__name__)

#: Seconds between two looks whether the first listing is in, before the history's first sample.
LISTING_POLL_S = 1.0
#: Seconds after which the pages re-render even when no pod or node changed (the reasons pods wait move on).
REASONS_REFRESH_S = 5.0


class OperatorSource:
    """The operator's state as the dashboard's records (see the module notes)."""

    def __init__(
        self,
        operator: Operator,
        *,
        leader: Callable[[], tuple[str, str]] = lambda: ("", ""),
        observer: bool = False,
    ) -> None:
        self.operator = operator
        #: (the leader's identity, its dashboard address) as the Lease says (``LeaseThread.holder``).
        self.leader = leader
        self.observer = observer
        self.maps = cluster_map.MapBuilder(operator.cache)
        self._namespaces: tuple[str, frozenset[str]] = ("", frozenset())
        #: The last hours, one sample a minute (:meth:`sample`, called by :func:`serve`'s sampler).
        self.kept = history.History()
        self._map: tuple[str, view.ClusterMap] | None = None

    def version(self) -> str:
        op = self.operator
        gen = op.cache.arrays.gen
        changed = int(gen.max()) if gen.size else 0
        tick = int(op.clock() // REASONS_REFRESH_S)
        return f"{changed}.{op.loop.version}.{len(op.pending)}.{len(op.cache.nodes)}.{tick}"

    def leadership(self) -> view.Leadership:
        holder, url = self.leader()
        return view.Leadership(leading=self.operator.leading, leader=holder, leader_url=url, observer=self.observer)

    def cluster_map(self) -> view.ClusterMap:
        version = self.version()
        if self._map is None or self._map[0] != version:  # the page and the history's present share one reading
            self._map = (version, self.maps.build(queue_of=self.operator.loop.queue_of, shapes=self._shapes()))
        return self._map[1]

    def _now(self) -> view.Sample:
        return history.sample(self.cluster_map(), pods_waiting=len(self.operator.pending), at=self.operator.clock())

    def sample(self) -> bool:
        """Keep the present in the history when the last sample is a minute old (whether it was kept); nothing before
        the first listing is in (an empty cache is no picture of the cluster)."""
        return self.operator.ready and self.kept.offer(self.operator.clock(), self._now)

    def history(self) -> list[view.Sample]:
        return [*self.kept.samples(), self._now()]

    def _shapes(self) -> list[typical.Shape]:
        """The typical pods the profile's fgd plugin measures against (learnt from the cluster's pods), else the
        generic ones."""
        for plugin, _, _ in self.operator.scheduler.framework.scorers:
            shapes = getattr(plugin, "shapes", None)
            if isinstance(shapes, list) and shapes:
                return shapes
        return list(typical.GENERIC)

    def queues(self) -> list[view.QueueRow]:
        loop = self.operator.loop
        tree = loop.tenancy.tree
        statuses = loop.queue_statuses()
        gpu = resources.GPU
        rows = []
        depth: dict[str, int] = {}
        for name in tree:
            spec = tree.spec(name)
            depth[name] = depth.get(spec.parent, -1) + 1 if spec.parent else 0
            status = statuses.get(name)
            rows.append(
                view.QueueRow(
                    name=name,
                    parent=spec.parent,
                    depth=depth[name],
                    weight=spec.weight,
                    guarantee=k8s_status.quantities(spec.guaranteed),
                    limit=k8s_status.quantities(spec.limit),
                    status=k8s_status.queue_status(status) if status is not None else {},
                    gpus=None
                    if status is None
                    else view.QueueGpus(
                        allocated=status.allocated.get(gpu, 0.0),
                        guarantee=float(spec.guaranteed.get(gpu, 0)),
                        limit=status.gpu_limit,
                        borrowed=status.borrowed.get(gpu, 0.0),
                        lendable=_lendable(
                            float(spec.guaranteed.get(gpu, 0)),
                            float(spec.unlendable().get(gpu, 0)),
                            status.allocated.get(gpu, 0.0),
                        ),
                    ),
                )
            )
        return view.with_lent(rows, capacity=loop.tenancy.capacity().get(gpu, 0.0))

    def waiting(self) -> list[view.WaitingJob]:
        op = self.operator
        loop = op.loop
        loop.sort_pending()  # the order the next cycle reads
        now = op.clock()
        positions: dict[str, int] = {}
        out = []
        for key, where in loop.queue.pending():
            queued = loop.jobs.queued(key)
            if queued is None:
                continue
            job, alone = queued
            leaf = job.queue
            position = None
            if where == "active":
                positions[leaf] = positions.get(leaf, 0) + 1
                position = positions[leaf]
            if job.group is not None and alone is None:
                group = job.group
                kind, namespace, name = "podgroup", group.namespace, group.name
                reason = next(
                    (c.message for c in job.conditions.values() if c.status == "False" and c.message), ""
                ) or _said(op, job.pending)
                progress = (len(job.placed), job.exists, group.min_member)
                waiting = list(job.pending.values())
            else:
                pod = alone if alone is not None else next(iter(job.pending.values()), None)
                if pod is None:
                    continue
                kind, namespace, name = "pod", pod.namespace, pod.name
                reason = op.conditions.said.get(pod.key, "")
                progress = (0, 0, 0)
                waiting = [pod]
            out.append(
                view.WaitingJob(
                    key=f"{kind}/{namespace}/{name}",
                    namespace=namespace,
                    name=name,
                    kind=kind,
                    queue=leaf,
                    where=where,
                    position=position,
                    reason=reason,
                    placed=progress[0],
                    exist=progress[1],
                    min_member=progress[2],
                    gpus=max((_gpus(pod) for pod in waiting), default=0.0),
                    waited_s=max((max(0.0, now - pod.created) for pod in waiting if pod.created), default=0.0),
                )
            )
        return out

    def job(self, kind: str, namespace: str, name: str) -> view.JobPage | None:
        op = self.operator
        try:
            explanation = explain.answer(op, f"{kind}/{name}", namespace)
        except explain.NotFound:
            return None
        key = f"{namespace}/{name}"
        members: list[view.Member] = []
        queue, phase = "", ""
        if kind == "podgroup":
            job = op.loop.gang(key)
            if job is not None:
                queue, phase = job.queue, job.phase
                for pod_key in sorted({*job.pending, *job.placed}):
                    members.append(view.Member(pod_key, self._node_of(pod_key), _member_state(job, pod_key)))
        else:
            pending = op.pending.get(key)
            node = self._node_of(key)
            queue = op.loop.queue_of(pending) if pending is not None else ""
            phase = "Pending" if pending is not None else ("Placed" if node else "")
            members.append(view.Member(key, node, phase.lower()))
        events = [f"{kind} {key}: {line}" for line in op.recorder.recent(f"{kind} {key}")]
        for member in members if kind == "podgroup" else []:
            events += [f"pod {member.key}: {line}" for line in op.recorder.recent(f"pod {member.key}")]
        return view.JobPage(
            key=f"{kind}/{key}",
            namespace=namespace,
            kind=kind,
            queue=queue,
            phase=phase,
            members=tuple(members),
            explanation=explanation,
            events=tuple(events),
        )

    def _node_of(self, pod_key: str) -> str:
        held = self.operator.cache.pod(pod_key)
        if held is None:
            return ""
        return self.operator.cache.names[held.placement.slot] or ""

    def namespaces(self) -> Iterable[str]:
        """The namespaces whose names the pages may show (held pods' and waiting work's); counted again only when
        the version moved (every request of the Kubernetes access check asks)."""
        version = self.version()
        if self._namespaces[0] != version:
            found = {entry.pod.namespace for entry in self.operator.cache.pods()}
            found.update(pod.namespace for pod in self.operator.pending.values())
            self._namespaces = (version, frozenset(found))
        return self._namespaces[1]


def _gpus(pod: PodRequest) -> float:
    """The GPUs a pod asks for as its queue counts them (a shared GPU as its fraction)."""
    return tenancy.request_of(pod).get(resources.GPU, 0.0)


def _lendable(guarantee: float, kept: float, allocated: float) -> float:
    """A queue's idle guarantee that other queues may use: the idle part beyond what its lending keeps."""
    return max(0.0, (guarantee - allocated) - max(0.0, kept - allocated))


def _said(operator: Operator, pods: Iterable[str]) -> str:
    return next((operator.conditions.said[key] for key in pods if key in operator.conditions.said), "")


def _member_state(job: Job, pod_key: str) -> str:
    for word, keys in (("running", job.running), ("succeeded", job.succeeded), ("failed", job.failed)):
        if pod_key in keys:
            return word
    return "placed" if pod_key in job.placed else "pending"


def access_of(args: argparse.Namespace, operator: Operator, source: OperatorSource) -> dashboard_access.Access:
    """The access check the arguments ask for (``dashboard_options.check_arguments`` first)."""
    dashboard_options.check_arguments(args)
    mode = dashboard_options.mode(args)
    if mode == "token":
        return dashboard_access.SharedToken.from_file(args.dashboard_token_file)
    if mode == "kubernetes":
        return KubernetesAccess(operator.client, namespaces=source.namespaces)
    return dashboard_access.Open()


async def serve(
    args: argparse.Namespace,
    operator: Operator,
    *,
    host: str,
    leader: Callable[[], tuple[str, str]] = lambda: ("", ""),
    observer: bool = False,
) -> server.Running | None:
    """Start the dashboard when ``--dashboard-port`` was given (None otherwise)."""
    if not dashboard_options.wanted(args):
        return None
    source = OperatorSource(operator, leader=leader, observer=observer)
    running = await server.serve(source, port=args.dashboard_port, host=host, access=access_of(args, operator, source))
    running.tasks.append(asyncio.create_task(_sampler(source), name="dashboard-history"))
    return running


async def _sampler(source: OperatorSource) -> None:
    """Offer the history a sample every ``history.EVERY_S`` seconds for as long as the pages are served, the first
    as soon as the first listing is in; a failed sample is logged and the next one tried a minute later (the charts'
    line spans the missing one; nothing else stops)."""
    while True:
        wait = history.EVERY_S if source.operator.ready else LISTING_POLL_S
        try:
            source.sample()
        except Exception:  # the dashboard never stops the scheduler
            log.exception("dashboard history sample failed")
        await asyncio.sleep(wait)
