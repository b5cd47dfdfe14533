"""``gpusched simulate --snapshot DIR``: the team's own settings, and candidates, on its own cluster as it is now.

``gpusched snapshot`` writes the cluster's nodes, pods, PodGroups and Queues (``DIR/snapshot.json``, as the API
server returned them; ``scheduler.k8s.snapshot``). Here they are read with the operator's own parsers, so a node's
labels and taints and a pod's affinity, priority, queue and gang mean what they mean to ``gpusched run``. For each
config (the operator's config file, ``gpusched run --config``: its profile, and its reservations), a fresh core is
built on the snapshot's nodes; the pods on nodes take their places (ours charged to their queues, another
scheduler's holding their nodes); then the pending pods of ``gpusched`` reach the loop, as the first listing after a
restart hands them over, and the loop runs until it has nothing left to do, its backoff waits passing on a simulated
clock (preempting and consolidating where the profile's actions say so; an evicted pod is taken out and counted, not
recreated). What each config did is the
comparison: pods and GPUs placed, by queue, what stays pending, what was evicted, GPU allocation after.

The queues are the snapshot's, or the Queue objects of ``--queues`` files (YAML, the Queue CRD) instead: the same
for every config, so the table compares the configs.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol, TypeVar

import yaml

from scheduler.api.basics import fields
from scheduler.api.basics.errors import InvalidObject
from scheduler.api.crds import podgroup as api_podgroup
from scheduler.api.crds import queue as api_queue
from scheduler.api.crds.podgroup import PodGroup
from scheduler.api.crds.queue import QueueSpec
from scheduler.api.objects import node as api_node
from scheduler.api.objects import pod as api_pod
from scheduler.api.objects.node import NodeInfo
from scheduler.api.objects.pod import PodRequest
from scheduler.framework.interface import Decision
from scheduler.framework.profile import ProfileConfig
from scheduler.plugins import fit, node_rules
from scheduler.sim import jobsim

FORMAT = "gpusched-snapshot/v1"
FILE_NAME = "snapshot.json"
#: The queue column of pods in no queue.
NO_QUEUE = "(no queue)"

_T = TypeVar("_T")


class OperatorSettings(Protocol):
    """What the simulator reads of the operator's config file (``scheduler.k8s.config.OperatorConfig``)."""

    @property
    def profile(self) -> ProfileConfig: ...

    @property
    def reserve_after_s(self) -> float | None: ...


@dataclass(frozen=True, slots=True)
class Settings:
    """One config being compared, under the name the table gives it (its file's name)."""

    name: str
    profile: ProfileConfig
    reserve_after_s: float | None = None


@dataclass
class Snapshot:
    source: str
    taken: str
    nodes: list[NodeInfo]
    #: Pods on nodes, as the API server shows them.
    bound: list[PodRequest]
    #: Pending pods of ``gpusched``, oldest first.
    pending: list[PodRequest]
    groups: list[PodGroup]
    queues: list[QueueSpec]
    #: Pending pods of other schedulers (not simulated), and objects that could not be read (name: why).
    others_pending: int = 0
    skipped: dict[str, str] = field(default_factory=dict)
    #: What part of the cluster was exported (``gpusched snapshot --node-selector/--namespace``); empty: all of it.
    selection: str = ""

    @property
    def gpus(self) -> int:
        return sum(n.gpus for n in self.nodes)


def _document(path: Path) -> Mapping[str, Any]:
    try:
        raw = json.loads(path.read_text())
    except OSError as exc:
        hint = " (gpusched snapshot --out DIR writes it)" if isinstance(exc, FileNotFoundError) else ""
        raise InvalidObject(f"cannot read: {exc.strerror}{hint}", obj=f"snapshot {path}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidObject(f"not JSON: {exc}", obj=f"snapshot {path}") from None
    if not isinstance(raw, Mapping) or raw.get("format") != FORMAT:
        found = raw.get("format") if isinstance(raw, Mapping) else type(raw).__name__
        raise InvalidObject(f"not a snapshot of format {FORMAT} (found {found!r})", obj=f"snapshot {path}")
    return raw


def _items(raw: Mapping[str, Any], key: str, path: Path) -> list[Mapping[str, Any]]:
    items = raw.get(key) or []
    if not isinstance(items, list) or not all(isinstance(i, Mapping) for i in items):
        raise InvalidObject("must be a list of objects", obj=f"snapshot {path}", field=key)
    return items


def _podgroup(item: Mapping[str, Any]) -> PodGroup:
    return api_podgroup.parse_podgroup(
        item, created=fields.unix_time((item.get("metadata") or {}).get("creationTimestamp"))
    )


def _parsed(
    raw: Mapping[str, Any],
    key: str,
    path: Path,
    word: str,
    parse: Callable[[Mapping[str, Any]], _T],
    skipped: dict[str, str],
) -> list[_T]:
    """The objects under ``key`` that ``parse`` reads; the others named in ``skipped`` with the reason."""
    out = []
    for item in _items(raw, key, path):
        try:
            out.append(parse(item))
        except InvalidObject as exc:
            skipped[f"{word} {(item.get('metadata') or {}).get('name')}"] = str(exc)
    return out


def load(folder: str | Path, *, scheduler_name: str = api_pod.SCHEDULER_NAME) -> Snapshot:
    """Read ``folder/snapshot.json`` (or the file itself) with the operator's parsers. An object that cannot be read
    is left out and named in :attr:`Snapshot.skipped`, as the operator leaves it out (with an Event)."""
    path = Path(folder)
    if path.is_dir():
        path = path / FILE_NAME
    raw = _document(path)
    skipped: dict[str, str] = {}
    nodes = _parsed(raw, "nodes", path, "node", api_node.parse_node, skipped)
    if not nodes:
        raise InvalidObject("no nodes that can be read", obj=f"snapshot {path}", field="nodes")
    names = {n.name for n in nodes}
    bound, pending, others = [], [], 0
    for item in _items(raw, "pods", path):
        meta = item.get("metadata") or {}
        spec = item.get("spec") or {}
        key = f"pod {meta.get('namespace') or 'default'}/{meta.get('name')}"
        try:
            if spec.get("nodeName"):
                pod, _ = api_pod.parse_bound_pod(item)
            else:
                pod = api_pod.parse_pod(item, scheduler_name=scheduler_name)
        except InvalidObject as exc:
            skipped[key] = str(exc)
            continue
        if pod.terminal:
            continue
        if pod.node_name:
            if pod.node_name in names:
                bound.append(pod)
            else:
                skipped[key] = f"on node {pod.node_name}, which is not in the snapshot"
        elif pod.scheduler_name != scheduler_name:
            others += 1
        elif not spec.get("schedulingGates") and not pod.deleting:
            pending.append(replace(pod, created=fields.unix_time(meta.get("creationTimestamp"))))
    groups = _parsed(raw, "podGroups", path, "podgroup", _podgroup, skipped)
    queues = _parsed(raw, "queues", path, "queue", api_queue.parse_queue, skipped)
    pending.sort(key=lambda p: (p.created, p.key))
    given = raw.get("selection")
    chosen: Mapping[str, Any] = given if isinstance(given, Mapping) else {}
    selection = [f"nodes matching {chosen['nodeSelector']}"] if chosen.get("nodeSelector") else []
    if chosen.get("namespaces"):
        selection.append(f"pending pods of {', '.join(map(str, chosen['namespaces']))}")
    return Snapshot(
        source=str(path),
        taken=str(raw.get("taken") or ""),
        nodes=nodes,
        bound=bound,
        pending=pending,
        groups=groups,
        queues=queues,
        others_pending=others,
        skipped=skipped,
        selection="; ".join(selection),
    )


def load_queues(paths: Iterable[str | Path]) -> list[QueueSpec]:
    """The Queue objects of YAML files (several documents a file, or a ``List`` of them); a name given twice, or
    anything that is not a valid Queue, is an error naming the file."""
    queues: dict[str, QueueSpec] = {}
    for given in paths:
        path = Path(given)
        try:
            documents = list(yaml.safe_load_all(path.read_text()))
        except OSError as exc:
            raise InvalidObject(f"cannot read: {exc.strerror}", obj=f"queues {path}") from None
        except yaml.YAMLError as exc:
            raise InvalidObject(f"not valid YAML: {exc}", obj=f"queues {path}") from None
        objects: list[Any] = []
        for document in documents:
            if isinstance(document, Mapping) and document.get("kind") == "List":
                objects.extend(document.get("items") or [])
            elif document is not None:
                objects.append(document)
        for i, item in enumerate(objects):
            if not isinstance(item, Mapping) or item.get("kind") != "Queue":
                raise InvalidObject("not a Queue object (kind: Queue)", obj=f"queues {path}", field=f"object {i + 1}")
            try:
                spec = api_queue.parse_queue(item)
            except InvalidObject as exc:
                raise exc.located(obj=f"queues {path}") from None
            if spec.name in queues:
                raise InvalidObject(f"queue {spec.name!r} is given twice", obj=f"queues {path}")
            queues[spec.name] = spec
        if not objects:
            raise InvalidObject("no Queue objects", obj=f"queues {path}")
    return list(queues.values())


def settings_of(path: str, config: OperatorSettings) -> Settings:
    return Settings(name=Path(path).stem, profile=config.profile, reserve_after_s=config.reserve_after_s)


class SnapshotRun(jobsim.JobSimulation):
    """One config on the snapshot: the bound pods placed, the pending ones handed to the loop, one step."""

    def __init__(self, snapshot: Snapshot, settings: Settings, queues: Sequence[QueueSpec]) -> None:
        self.evictor = jobsim.Evictions()
        super().__init__(
            snapshot.nodes, settings.profile, evictor=self.evictor, reserve_after_s=settings.reserve_after_s
        )
        self.now = max((p.created for p in snapshot.pending), default=0.0)
        self.placed_keys: set[str] = set()
        self.evicted: list[PodRequest] = []
        self.loop.queues_changed(list(queues))
        for group in snapshot.groups:
            self.loop.group_upsert(group)
        for pod in snapshot.bound:
            self.cache.upsert_pod(pod)
            if pod.scheduler_name == api_pod.SCHEDULER_NAME:
                self.loop.pod_placed(pod)
            else:
                self.loop.pod_outside(pod)
        for pod in snapshot.pending:
            self.loop.pod_pending(pod)

    def placed(self, decision: Decision) -> None:
        self.placed_keys.add(decision.pod.key)

    def preempted(self) -> bool:
        if not self.evictor.pods:
            return False
        pods, self.evictor.pods = self.evictor.pods, []
        for pod in pods:
            self.placed_keys.discard(pod.key)
            self.cache.remove_pod(pod.key)
            self.loop.pod_gone(pod.key)
        self.evicted.extend(pods)
        self.pods_deleted()
        return True


def _gpus(pod: PodRequest) -> float:
    return pod.gpu.total_milli / 1000.0


def run(snapshot: Snapshot, settings: Settings, queues: Sequence[QueueSpec]) -> dict[str, Any]:
    """What ``settings`` does with the snapshot's pending pods (see the module's note)."""
    sim = SnapshotRun(snapshot, settings, queues)
    sim.step()
    # Then the backoff wake-ups, on the simulated clock: a preemptor waits out its backoff for its victims' room.
    sim.run()
    group_queue = {g.key: g.queue for g in snapshot.groups}

    def queue_of(pod: PodRequest) -> str:
        grouped = group_queue.get(f"{pod.namespace}/{pod.pod_group}") if pod.pod_group else None
        return grouped or pod.queue or NO_QUEUE

    by_queue: dict[str, dict[str, float]] = {}
    for pod in snapshot.pending:
        row = by_queue.setdefault(
            queue_of(pod), {"pending_pods": 0, "pending_gpus": 0.0, "placed_pods": 0, "placed_gpus": 0.0}
        )
        row["pending_pods"] += 1
        row["pending_gpus"] += _gpus(pod)
        if pod.key in sim.placed_keys:
            row["placed_pods"] += 1
            row["placed_gpus"] += _gpus(pod)
    evicted_keys = {p.key for p in sim.evicted}
    held = sum(_gpus(p) for p in snapshot.bound if p.key not in evicted_keys)
    placed = [p for p in snapshot.pending if p.key in sim.placed_keys]
    placed_gpus = sum(_gpus(p) for p in placed)
    return {
        "placed_pods": len(placed),
        "placed_gpus": placed_gpus,
        "pending_pods": len(snapshot.pending) - len(placed),
        "evicted_pods": len(sim.evicted),
        "evicted_gpus": sum(_gpus(p) for p in sim.evicted),
        "gpu_allocation": 100.0 * (held + placed_gpus) / snapshot.gpus if snapshot.gpus else 0.0,
        "queues": by_queue,
        "placed": sorted(sim.placed_keys),
    }


def compare(
    snapshot: Snapshot, configs: Sequence[Settings], queues: Sequence[QueueSpec] | None = None
) -> dict[str, dict[str, Any]]:
    """Every config on the snapshot, with ``queues`` (None: the snapshot's own)."""
    chosen = snapshot.queues if queues is None else queues
    return {settings.name: run(snapshot, settings, chosen) for settings in configs}


def describe(snapshot: Snapshot) -> str:
    held = sum(_gpus(p) for p in snapshot.bound)
    wanted = sum(_gpus(p) for p in snapshot.pending)
    line = (
        f"snapshot {snapshot.source} ({snapshot.taken or 'time not recorded'}): {len(snapshot.nodes)} nodes, "
        f"{snapshot.gpus} GPUs; {len(snapshot.bound)} pods on nodes holding {held:g} GPUs; "
        f"{len(snapshot.pending)} pending for gpusched asking {wanted:g} GPUs"
    )
    if snapshot.others_pending:
        line += f" ({snapshot.others_pending} pending for other schedulers, not simulated)"
    if snapshot.selection:
        line += f"\n  exported: {snapshot.selection}"
    passing = _passing_taints(snapshot.nodes)
    if passing:
        counts = ", ".join(f"{key} on {count}" for key, count in sorted(passing.items()))
        line += (
            f"\n  nodes out for a while when taken ({counts}): the node lifecycle controller or the cloud provider "
            "sets and clears these taints; pods that do not tolerate them are not placed there (if the condition "
            "has passed, take the snapshot again)"
        )
    for what, why in sorted(snapshot.skipped.items()):
        line += f"\n  left out {what}: {why}"
    return line


def _passing(key: str) -> bool:
    # A cordoned node (node.kubernetes.io/unschedulable) is out on purpose, not for a while.
    return key.startswith(fit.PASSING_TAINTS) and key != node_rules.UNSCHEDULABLE_TAINT.key


def _passing_taints(nodes: Iterable[NodeInfo]) -> dict[str, int]:
    """How many nodes carry each taint that keeps pods off for a while only (``fit.PASSING_TAINTS``: not ready,
    unreachable, not yet initialised...): a snapshot taken then sees those nodes out, which is worth saying, as a
    node just added is tainted not-ready for a moment after it is Ready."""
    counts: dict[str, int] = {}
    for node in nodes:
        for key in {t.key for t in node.taints if t.effect != "PreferNoSchedule" and _passing(t.key)}:
            counts[key] = counts.get(key, 0) + 1
    return counts


def table(results: Mapping[str, Mapping[str, Any]]) -> str:
    """One row per config, then per queue the pods and GPUs each config placed of those pending."""
    width = max([len(n) for n in results] + [6])
    lines = [
        f"{'config':<{width}}  {'placed pods':>11}  {'placed GPUs':>11}  {'still pending':>13}  {'evicted':>7}  "
        f"{'GPU allocation':>14}"
    ]
    for name, r in results.items():
        lines.append(
            f"{name:<{width}}  {r['placed_pods']:>11}  {r['placed_gpus']:>11g}  {r['pending_pods']:>13}  "
            f"{r['evicted_pods']:>7}  {r['gpu_allocation']:>13.1f}%"
        )
    queue_names = sorted({q for r in results.values() for q in r["queues"]})
    if queue_names:
        qwidth = max([len(q) for q in queue_names] + [5])
        lines += ["", f"{'queue':<{qwidth}}  " + "  ".join(f"{name:>{max(len(name), 22)}}" for name in results)]
        for queue_name in queue_names:
            cells = []
            for name, r in results.items():
                q = r["queues"].get(queue_name, {})
                cell = (
                    f"{q.get('placed_pods', 0)}/{q.get('pending_pods', 0)} pods, "
                    f"{q.get('placed_gpus', 0.0):g}/{q.get('pending_gpus', 0.0):g} GPUs"
                )
                cells.append(f"{cell:>{max(len(name), 22)}}")
            lines.append(f"{queue_name:<{qwidth}}  " + "  ".join(cells))
        lines.append("(placed of pending, per queue)")
    return "\n".join(lines)
