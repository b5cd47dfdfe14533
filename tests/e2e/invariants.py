"""What must hold in the API server's state whatever happened to the scheduler: pure checks over plain dicts.

Each check takes the objects as the API server lists them (pods, nodes, PodGroups, Queues, Events: lists of
dicts) and returns a list of violations, one readable sentence each naming the objects; an empty list means the
invariant holds. Nothing here talks to a cluster or trusts the scheduler's own view, so the fault test
(test_faults_e2e.py) can run them on what it listed, and test_invariants.py can run them on crafted states.

How a pod is read (as gpusched documents it):

- it *holds* room when it has ``spec.nodeName`` and its phase is not Succeeded or Failed;
- whole GPUs: ``nvidia.com/gpu`` of its containers' requests (limits when no request);
- a shared GPU: the ``gpusched.io/gpu-milli`` annotation, 1..999 thousandths of one GPU;
- the GPUs it was given: the ``gpusched.io/gpu-ids`` annotation, comma-separated indices, written with the
  binding;
- its queue: its PodGroup's ``spec.queue`` when it is in a PodGroup that exists, else its label
  ``gpusched.io/queue``, else ``default``. A queue holds what its pods request (GPUs in GPUs, a shared GPU as its
  fraction, CPU in cores, memory in bytes); a parent queue holds what its subtree does.

Only app containers are summed (the fault test's pods have no init containers or overhead).
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

GPU = "nvidia.com/gpu"
CPU = "cpu"
MEMORY = "memory"
MILLI_PER_GPU = 1000
ANNOTATION_GPU_MILLI = "gpusched.io/gpu-milli"
ANNOTATION_GPU_IDS = "gpusched.io/gpu-ids"
ANNOTATION_GPU_MEMORY = "gpusched.io/gpu-memory"
LABEL_POD_GROUP = "gpusched.io/pod-group"
LABEL_POD_GROUP_COMPAT = "scheduling.x-k8s.io/pod-group"
LABEL_QUEUE = "gpusched.io/queue"
DEFAULT_QUEUE = "default"
#: Event reasons that say why a pod (or its PodGroup) is still waiting.
PENDING_REASONS = frozenset(
    {"FailedScheduling", "PodGroupNotFound", "QueueNotFound", "QueueNotAccepted", "InvalidObject"}
)
#: Tolerances for comparing a queue's status with the sum of its pods: the status writes GPUs with three
#: decimals and CPU in whole milli-cores.
TOLERANCE = {GPU: 0.0015, CPU: 0.0015, MEMORY: 1.0}

Obj = Mapping[str, Any]
Vector = dict[str, float]

_SUFFIX = {
    "n": 1e-9, "u": 1e-6, "m": 1e-3, "": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
    "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50, "Ei": 2.0**60,
}  # fmt: skip
_QUANTITY = re.compile(r"^\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)([a-zA-Z]*)\s*$")


def quantity(value: object) -> float:
    """A Kubernetes quantity (``500m``, ``2Gi``, ``8``, ``0.25``) as a float in base units."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a quantity")
    if isinstance(value, int | float):
        return float(value)
    match = _QUANTITY.match(str(value))
    if not match or match.group(2) not in _SUFFIX:
        raise ValueError(f"{value!r} is not a quantity")
    return float(match.group(1)) * _SUFFIX[match.group(2)]


# --------------------------------------------------------------------------------------------------------------
# reading one pod


def meta(obj: Obj) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def name_of(obj: Obj) -> str:
    m = meta(obj)
    return f"{m.get('namespace')}/{m.get('name')}" if m.get("namespace") else str(m.get("name"))


def node_of(pod: Obj) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def holds_room(pod: Obj) -> bool:
    """Bound and not finished: the pod counts against its node and its queue."""
    return bool(node_of(pod)) and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def requests_of(pod: Obj) -> Vector:
    """CPU (cores), memory (bytes) and GPUs (a shared GPU as its fraction) that the pod requests."""
    total: Vector = {}
    for container in (pod.get("spec") or {}).get("containers") or []:
        res = container.get("resources") or {}
        merged = dict(res.get("limits") or {})
        merged.update(res.get("requests") or {})
        for name, raw in merged.items():
            if name in (CPU, MEMORY, GPU):
                total[name] = total.get(name, 0.0) + quantity(raw)
    milli = charged_milli(pod)
    if milli:
        total[GPU] = total.get(GPU, 0.0) + milli / MILLI_PER_GPU
    return {k: v for k, v in total.items() if v}


def charged_milli(pod: Obj) -> int:
    """Thousandths of one GPU a shared-GPU pod counts against its queue. As docs/operator.md says of a bound pod
    whose ``gpusched.io/`` annotations were edited into something malformed: a shared GPU whose share can no
    longer be read whole (``gpu-milli``, or the ``gpu-memory`` that goes with it) counts as the whole GPU."""
    annotations = meta(pod).get("annotations") or {}
    if ANNOTATION_GPU_MILLI not in annotations or whole_gpus(pod):
        return 0
    milli = shared_milli(pod)
    if not milli:
        return MILLI_PER_GPU
    if ANNOTATION_GPU_MEMORY in annotations:
        try:
            quantity(annotations[ANNOTATION_GPU_MEMORY])
        except ValueError:
            return MILLI_PER_GPU
    return milli


def whole_gpus(pod: Obj) -> int:
    """Whole GPUs (``nvidia.com/gpu``) the pod requests."""
    total = 0.0
    for container in (pod.get("spec") or {}).get("containers") or []:
        res = container.get("resources") or {}
        raw = (res.get("requests") or {}).get(GPU, (res.get("limits") or {}).get(GPU, 0))
        total += quantity(raw)
    return int(total)


def shared_milli(pod: Obj) -> int:
    """Thousandths of one GPU from ``gpusched.io/gpu-milli`` (0 when absent or not a number in 1..999)."""
    raw = (meta(pod).get("annotations") or {}).get(ANNOTATION_GPU_MILLI)
    try:
        milli = int(str(raw))
    except ValueError:
        return 0
    return milli if 1 <= milli < MILLI_PER_GPU and not whole_gpus(pod) else 0


def gpu_ids(pod: Obj) -> tuple[int, ...] | None:
    """GPU indices from ``gpusched.io/gpu-ids`` (``()`` when absent, None when not a list of integers)."""
    raw = str((meta(pod).get("annotations") or {}).get(ANNOTATION_GPU_IDS) or "").strip()
    if not raw:
        return ()
    try:
        return tuple(int(part) for part in raw.split(","))
    except ValueError:
        return None


def group_of(pod: Obj) -> str:
    labels = meta(pod).get("labels") or {}
    return str(labels.get(LABEL_POD_GROUP) or labels.get(LABEL_POD_GROUP_COMPAT) or "")


def _groups_by_key(podgroups: Iterable[Obj]) -> dict[tuple[str, str], Obj]:
    return {(str(meta(g).get("namespace")), str(meta(g).get("name"))): g for g in podgroups}


def queue_of(pod: Obj, groups: Mapping[tuple[str, str], Obj]) -> str:
    """The pod's leaf queue: its PodGroup's ``spec.queue``, else its label, else ``default``."""
    group = group_of(pod)
    if group:
        pg = groups.get((str(meta(pod).get("namespace")), group))
        if pg is not None:
            return str((pg.get("spec") or {}).get("queue") or DEFAULT_QUEUE)
    return str((meta(pod).get("labels") or {}).get(LABEL_QUEUE) or DEFAULT_QUEUE)


def _fmt(vector: Mapping[str, float]) -> str:
    return "{" + ", ".join(f"{k}: {v:g}" for k, v in sorted(vector.items()) if abs(v) > 1e-12) + "}"


# --------------------------------------------------------------------------------------------------------------
# nodes and GPUs


def node_overcommit(pods: Iterable[Obj], nodes: Iterable[Obj]) -> list[str]:
    """Whole GPUs of the pods bound to a node above its allocatable ``nvidia.com/gpu``; pods on unknown nodes."""
    allocatable = {
        str(meta(n).get("name")): int(quantity(((n.get("status") or {}).get("allocatable") or {}).get(GPU, 0)))
        for n in nodes
    }
    used: dict[str, int] = defaultdict(int)
    holders: dict[str, list[str]] = defaultdict(list)
    for p in pods:
        if holds_room(p):
            node = node_of(p)
            used[node] += whole_gpus(p)
            holders[node].append(f"{name_of(p)}={whole_gpus(p)}")
    out = []
    for node, gpus in sorted(used.items()):
        if node not in allocatable:
            out.append(f"node {node}: does not exist but holds pods {holders[node]}")
        elif gpus > allocatable[node]:
            out.append(f"node {node}: {gpus} whole GPUs bound, allocatable {allocatable[node]}: {holders[node]}")
    return out


def gpu_sharing(pods: Iterable[Obj], nodes: Iterable[Obj]) -> list[str]:
    """Per GPU of a node: one whole-GPU pod at most, thousandths <= 1000, indices in range and as many as asked.

    A whole-GPU pod takes 1000 thousandths of each GPU it names; a shared pod its ``gpu-milli`` of its one GPU.
    """
    count = {
        str(meta(n).get("name")): int(quantity(((n.get("status") or {}).get("allocatable") or {}).get(GPU, 0)))
        for n in nodes
    }
    whole_owner: dict[tuple[str, int], list[str]] = defaultdict(list)
    milli: dict[tuple[str, int], int] = defaultdict(int)
    users: dict[tuple[str, int], list[str]] = defaultdict(list)
    out = []
    for p in pods:
        if not holds_room(p):
            continue
        node, name = node_of(p), name_of(p)
        ids = gpu_ids(p)
        whole, share = whole_gpus(p), shared_milli(p)
        if ids is None:
            out.append(
                f"pod {name} on {node}: unreadable {ANNOTATION_GPU_IDS} {meta(p)['annotations'][ANNOTATION_GPU_IDS]!r}"
            )
            continue
        wanted = whole if whole else (1 if share else 0)
        if len(ids) != wanted or len(set(ids)) != len(ids):
            out.append(
                f"pod {name} on {node}: asks for {wanted} GPU(s) but "
                f"{ANNOTATION_GPU_IDS}={','.join(map(str, ids)) or '(none)'}"
            )
        for i in ids:
            if node in count and not 0 <= i < count[node]:
                out.append(f"pod {name} on {node}: GPU index {i} outside 0..{count[node] - 1}")
            key = (node, i)
            if whole:
                whole_owner[key].append(name)
            milli[key] += MILLI_PER_GPU if whole else share
            users[key].append(f"{name}={MILLI_PER_GPU if whole else share}")
    for (node, i), owners in sorted(whole_owner.items()):
        if len(owners) > 1:
            out.append(f"node {node} GPU {i}: given whole to {len(owners)} pods {sorted(owners)}")
    for (node, i), total in sorted(milli.items()):
        if total > MILLI_PER_GPU:
            out.append(f"node {node} GPU {i}: {total} thousandths in use (> {MILLI_PER_GPU}): {users[(node, i)]}")
    return out


# --------------------------------------------------------------------------------------------------------------
# gangs


def partial_gangs(pods: Iterable[Obj], podgroups: Iterable[Obj]) -> list[str]:
    """PodGroups with some members bound but fewer than ``minMember``."""
    bound: dict[tuple[str, str], list[str]] = defaultdict(list)
    for p in pods:
        if holds_room(p) and group_of(p):
            bound[(str(meta(p).get("namespace")), group_of(p))].append(f"{meta(p).get('name')}@{node_of(p)}")
    out = []
    for key, g in sorted(_groups_by_key(podgroups).items()):
        need = int((g.get("spec") or {}).get("minMember") or 1)
        have = bound.get(key, [])
        if 0 < len(have) < need:
            out.append(f"podgroup {key[0]}/{key[1]}: {len(have)} of minMember {need} bound: {sorted(have)}")
    return out


# --------------------------------------------------------------------------------------------------------------
# queues


def leaf_usage(pods: Iterable[Obj], podgroups: Iterable[Obj]) -> dict[str, Vector]:
    """What each leaf queue's bound pods add up to."""
    groups = _groups_by_key(podgroups)
    usage: dict[str, Vector] = defaultdict(dict)
    for p in pods:
        if holds_room(p):
            vector = usage[queue_of(p, groups)]
            for name, amount in requests_of(p).items():
                vector[name] = vector.get(name, 0.0) + amount
    return dict(usage)


def _parents(queues: Iterable[Obj]) -> dict[str, str]:
    return {str(meta(q).get("name")): str((q.get("spec") or {}).get("parent") or "") for q in queues}


def subtree_usage(usage: Mapping[str, Vector], queues: Iterable[Obj]) -> dict[str, Vector]:
    """Each queue's usage with its whole subtree's (a leaf's own; a parent's the sum of its descendants')."""
    parents = _parents(queues)
    totals: dict[str, Vector] = defaultdict(dict)
    for leaf, vector in usage.items():
        seen: set[str] = set()
        name = leaf
        while name and name not in seen:  # a cycle is the scheduler's to refuse; do not loop on it
            seen.add(name)
            for r, amount in vector.items():
                totals[name][r] = totals[name].get(r, 0.0) + amount
            name = parents.get(name, "")
    return dict(totals)


def queues_over_limit(pods: Iterable[Obj], podgroups: Iterable[Obj], queues: Iterable[Obj]) -> list[str]:
    """Queues whose subtree's bound pods request more of a resource than the queue's ``spec.limit``."""
    queues = list(queues)
    totals = subtree_usage(leaf_usage(pods, podgroups), queues)
    out = []
    for q in queues:
        name = str(meta(q).get("name"))
        for resource, raw in ((q.get("spec") or {}).get("limit") or {}).items():
            held = totals.get(name, {}).get(resource, 0.0)
            if held > quantity(raw) + TOLERANCE.get(resource, 1e-9):
                out.append(f"queue {name}: holds {held:g} {resource}, above its limit {raw}")
    return out


def queue_status_diff(
    pods: Iterable[Obj],
    podgroups: Iterable[Obj],
    queues: Iterable[Obj],
    *,
    resources: Iterable[str] = (GPU, CPU, MEMORY),
    skip: Iterable[str] = (),
) -> list[str]:
    """Queues whose ``status.allocated`` differs from what their bound pods add up to (subtree for a parent).

    ``skip`` names queues the scheduler is expected to refuse (they get no status).
    """
    queues = list(queues)
    skipped = set(skip)
    totals = subtree_usage(leaf_usage(pods, podgroups), queues)
    out = []
    for q in queues:
        name = str(meta(q).get("name"))
        if name in skipped:
            continue
        status = (q.get("status") or {}).get("allocated") or {}
        expected = totals.get(name, {})
        diffs = []
        for resource in resources:
            try:
                shown = quantity(status.get(resource, 0))
            except ValueError:
                diffs.append(f"{resource} unreadable {status.get(resource)!r}")
                continue
            want = expected.get(resource, 0.0)
            if abs(shown - want) > TOLERANCE.get(resource, 1e-9):
                diffs.append(f"{resource} status {shown:g} vs pods {want:g} (diff {shown - want:+g})")
        if diffs:
            out.append(f"queue {name}: " + "; ".join(diffs))
    return out


def pods_of_refused_queues_bound(pods: Iterable[Obj], podgroups: Iterable[Obj], refused: Iterable[str]) -> list[str]:
    """Pods bound although their queue is one the scheduler must refuse (a cycle, an unknown parent)."""
    groups = _groups_by_key(podgroups)
    bad = set(refused)
    return [
        f"pod {name_of(p)} bound to {node_of(p)} in refused queue {queue_of(p, groups)}"
        for p in pods
        if holds_room(p) and queue_of(p, groups) in bad
    ]


# --------------------------------------------------------------------------------------------------------------
# pending pods, bindings over time, logs


def pending_without_reason(
    pods: Iterable[Obj], events: Iterable[Obj], podgroups: Iterable[Obj] = (), *, scheduler_name: str = "gpusched"
) -> list[str]:
    """Unbound pods of the scheduler with no reason to show: neither ``PodScheduled=False``, nor a reason Event
    (on the pod or on its PodGroup) among :data:`PENDING_REASONS`, nor a ``False`` condition with a reason in
    their PodGroup's status (how a gang still waiting for members says so, docs/gangs.md)."""
    group_reasons: dict[tuple[str, str], set[str]] = {}
    for g in podgroups:
        conditions = (g.get("status") or {}).get("conditions") or []
        group_reasons[(str(meta(g).get("namespace")), str(meta(g).get("name")))] = {
            f"{c.get('type')}={c.get('reason')}" for c in conditions if c.get("status") == "False" and c.get("reason")
        }
    reasons: dict[tuple[str, str, str], set[str]] = defaultdict(set)
    for e in events:
        obj = e.get("involvedObject") or {}
        reasons[(str(obj.get("kind")), str(obj.get("namespace")), str(obj.get("name")))].add(str(e.get("reason")))
    out = []
    for p in pods:
        if node_of(p) or meta(p).get("deletionTimestamp"):
            continue
        if (p.get("spec") or {}).get("schedulerName") != scheduler_name:
            continue
        ns, name = str(meta(p).get("namespace")), str(meta(p).get("name"))
        conditions = (p.get("status") or {}).get("conditions") or []
        if any(c.get("type") == "PodScheduled" and c.get("status") == "False" for c in conditions):
            continue
        seen = reasons.get(("Pod", ns, name), set())
        if group_of(p):
            seen = seen | reasons.get(("PodGroup", ns, group_of(p)), set())
            if group_reasons.get((ns, group_of(p))):
                continue
        if seen & PENDING_REASONS:
            continue
        out.append(
            f"pod {ns}/{name}: pending with no PodScheduled=False condition and no reason Event "
            f"(saw {sorted(seen) or 'none'})"
        )
    return out


def bound_twice(history: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Pods (by UID) seen on more than one node, or whose GPU ids changed once bound.

    ``history[uid]`` has ``name``, ``nodes`` (every non-empty nodeName seen) and ``gpu_ids`` (every non-empty
    ``gpusched.io/gpu-ids`` value seen while bound).
    """
    out = []
    for uid, seen in sorted(history.items()):
        nodes = sorted(set(seen.get("nodes") or ()))
        if len(nodes) > 1:
            out.append(f"pod {seen.get('name')} (uid {uid}): bound to {len(nodes)} nodes {nodes}")
        ids = sorted(set(seen.get("gpu_ids") or ()))
        if len(ids) > 1:
            out.append(f"pod {seen.get('name')} (uid {uid}): GPU ids changed while bound: {ids}")
    return out


def tracebacks(lines: Iterable[str]) -> list[str]:
    """Tracebacks in a log (JSON lines with an ``exception``, or raw Python tracebacks): one summary each."""
    out = []
    lines = list(lines)
    for number, line in enumerate(lines, 1):
        if "Traceback (most recent call last)" not in line:
            continue
        summary = line.strip()[:200]
        try:
            record = json.loads(line)
        except ValueError:
            # A raw traceback: its last line names the exception.
            tail = next((ln for ln in lines[number:] if ln and not ln.startswith((" ", "Traceback"))), "")
            summary = f"raw traceback: {tail.strip()[:200]}"
        else:
            if isinstance(record, dict):
                exc = str(record.get("exception") or "").strip().splitlines()
                summary = f"{record.get('event')!r} ({record.get('logger', '')}): {exc[-1] if exc else ''}"[:300]
        out.append(f"line {number}: {summary}")
    return out
