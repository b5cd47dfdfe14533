"""Whether work that fits nowhere now waits for something that can happen, or never fits as the cluster is.

A pod that fits no node either waits for what can come (pods leave, a reservation ends, a victim goes), or never
fits the cluster as it is: it asks more of a resource than any node it may use has even with nothing else on it,
or its node rules (taints, node selector and affinity, GPU model) leave it no node large enough. A gang
also never fits when its members together ask more GPUs than the cluster's nodes have. Pending reasons (the
``FailedScheduling`` message, ``PodScheduled`` and the gang's ``Scheduled`` condition) and ``gpusched explain``
say which, and what would change it, so nobody is told to wait for room that cannot come.

Capacity is the nodes' allocatable amounts, as if nothing ran on them. Which nodes a pod may use is read from the
cycle's own filter results (the first reason each node failed, ``Scheduler.filter``), so this agrees with the
cycle; a node held for another job (``layout.RESERVED``) is not filtered further and counts as one the pod may
use, so the doubt goes to "waits".
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import numpy.typing as npt

from scheduler.api import quantity as api_quantity
from scheduler.api import resources, selectors
from scheduler.api.pod import PodRequest
from scheduler.cache.state import Snapshot
from scheduler.core import reason_texts
from scheduler.kernels import layout

Mask = npt.NDArray[np.bool_]

#: How a pending reason starts its sentence on work that cannot fit until the cluster or the work changes.
NEVER = "Never fits as the cluster is"
#: The reason of a gang's ``Scheduled=False`` condition when its message says :data:`NEVER` (a gang whose members
#: fit one day, only not now, says ``NotAllMembersFit``).
NEVER_FITS = "NeverFits"
#: Reasons that depend only on the node and the pod's spec: no pod leaving can clear them. A cordon is not one (it
#: is lifted after maintenance), nor a taint Kubernetes sets for a node's condition (below).
NODE_RULES = (layout.TAINT, layout.SELECTOR, layout.GPU_MODEL)
#: Taints the node lifecycle controller and cloud providers set and clear on their own (not ready, unreachable,
#: memory pressure, not yet initialised): a node out for them is out for a while.
PASSING_TAINTS = ("node.kubernetes.io/", "node.cloudprovider.kubernetes.io/")


def says_never(message: str) -> bool:
    """Whether a pending reason says the work never fits as the cluster is: every such sentence, a pod's, a gang's
    or a topology level's, starts with :data:`NEVER`, wherever it stands in the message (after a member's name, or
    after kube-scheduler's ``0/N nodes are available`` sentence)."""
    return NEVER in message


def room_when_empty(snapshot: Snapshot, pod: PodRequest, request: npt.NDArray[np.float64]) -> Mask:
    """Per node slot, whether the node could hold ``pod`` with nothing else on it: every resource within its
    allocatable, enough GPUs, enough memory on one device for a shared GPU (the GPU model is a node rule)."""
    a = snapshot.arrays
    room = a.base_reason != layout.ABSENT
    for column in np.flatnonzero(request > 0).tolist():
        if column in (layout.GPU_MILLI, layout.GPU_MEMORY):
            continue  # the devices below say it per GPU
        room &= a.cap[:, column] >= request[column] if column < a.cap.shape[1] else False
    gpu = pod.gpu
    if gpu.count:
        room &= a.gpu_count >= gpu.count
        if gpu.shared and gpu.memory:
            room &= a.gpu_mem_each >= gpu.memory
    return np.asarray(room, dtype=bool)


def pod_never_fits(snapshot: Snapshot, pod: PodRequest, request: npt.NDArray[np.float64], reasons: np.ndarray) -> str:
    """ "" when some node ``pod`` may use could hold it once room frees there (it waits); else the sentence that says
    why no node ever can as the cluster is, and what would change it. ``reasons``: the cycle's filter results."""
    present = reasons != layout.ABSENT
    if not present.any():
        return ""
    ruled_out = present & _node_rules(reasons) & ~_passing_taint(snapshot, pod, reasons)
    ruled_out |= present & (reasons == layout.TOPOLOGY) & _unlabelled(snapshot, pod)
    if pod.gpu.count and pod.gpu.models:
        # A node that failed first for something else may have a GPU model the pod does not allow as well.
        other_model = present & ~ruled_out & ~_model_ok(snapshot, pod)
        if other_model.any():
            reasons = np.where(other_model, layout.GPU_MODEL, reasons)
            ruled_out |= other_model
    room = room_when_empty(snapshot, pod, request) & present
    if (room & ~ruled_out).any():
        return ""
    may_use = present & ~ruled_out
    parts = []
    if may_use.any():
        parts.append(
            _too_small(snapshot, pod, request, may_use, "the nodes it may use" if ruled_out.any() else "nodes")
        )
    blocked = room & ruled_out
    if blocked.any():
        rules = _rules(snapshot, pod, reasons, blocked)
        parts.append(f"of the nodes with room for it, {rules}")
        change = f"it fits there once {_changes(snapshot, pod, reasons, blocked)}"
    else:
        if ruled_out.any() and may_use.any():
            parts.append(f"the others ({_rules(snapshot, pod, reasons, ruled_out)}) are no larger")
        elif ruled_out.any():
            parts.append(_rules(snapshot, pod, reasons, ruled_out))
            parts.append(f"and even without that {_too_small(snapshot, pod, request, present, 'nodes')}")
        change = "it fits once a node large enough joins, or it asks for less"
    return f"{NEVER}: {'; '.join(parts)}; {change}."


def _node_rules(reasons: np.ndarray) -> Mask:
    """The nodes that failed for one of :data:`NODE_RULES` (three comparisons: cheaper than ``np.isin``)."""
    ruled = np.zeros(reasons.shape[0], dtype=bool)
    for code in NODE_RULES:
        ruled |= reasons == code
    return ruled


def _required_level(snapshot: Snapshot, pod: PodRequest) -> int | None:
    """The level a plain pod's ``gpusched.io/topology-required`` names (a gang's domains are the gang's)."""
    if pod.pod_group or not pod.topology.required:
        return None
    return snapshot.topology.find_level(pod.topology.required)


def _unlabelled(snapshot: Snapshot, pod: PodRequest) -> Mask:
    """The nodes without the label of the level ``pod`` requires: outside every domain of it, whatever runs."""
    level = _required_level(snapshot, pod)
    outside = np.zeros(snapshot.slots, dtype=bool)
    if level is not None:
        ids = snapshot.domain_ids()
        size = min(ids.shape[0], outside.shape[0])
        outside[:size] = ids[:size, level] < 0
        outside[size:] = True
    return outside


def _passing_taint(snapshot: Snapshot, pod: PodRequest, reasons: np.ndarray) -> Mask:
    """The nodes out for a taint that clears on its own (:data:`PASSING_TAINTS`)."""
    tainted = reasons == layout.TAINT
    passing = np.zeros(reasons.shape[0], dtype=bool)
    if not tainted.any():
        return passing
    ids, sets = snapshot.taint_index()
    passing_set = np.zeros(len(sets) + 1, dtype=bool)  # the last entry stands for -1: no taint
    size = min(ids.shape[0], reasons.shape[0])
    for at in np.flatnonzero(np.bincount(ids[:size][tainted[:size]] + 1, minlength=len(sets) + 1)[1:]).tolist():
        taint = selectors.untolerated(sets[at], pod.tolerations)
        passing_set[at] = taint is not None and taint.key.startswith(PASSING_TAINTS)
    passing[:size] = tainted[:size] & passing_set[ids[:size]]
    return passing


def _model_ok(snapshot: Snapshot, pod: PodRequest) -> Mask:
    """Per node slot, whether its GPUs are of a model ``pod`` allows."""
    a = snapshot.arrays
    allowed = np.array([any(resources.model_matches(m, model) for m in pod.gpu.models) for model in snapshot.models])
    if not allowed.size:
        return np.zeros(a.slots, dtype=bool)
    return np.asarray((a.node_model >= 0) & allowed[a.node_model.clip(0)], dtype=bool)


def _too_small(snapshot: Snapshot, pod: PodRequest, request: npt.NDArray[np.float64], nodes: Mask, who: str) -> str:
    """Which of what ``pod`` asks no node in ``nodes`` has, with the most one of them has."""
    a = snapshot.arrays
    short = []
    gpu = pod.gpu
    if gpu.count:
        most = int(a.gpu_count[nodes].max())
        if most < gpu.count:
            short.append(f"it asks {gpu.count} GPUs on one node and {who} have at most {most}")
        if gpu.shared and gpu.memory and float(a.gpu_mem_each[nodes].max()) < gpu.memory:
            each = api_quantity.text(resources.MEMORY, float(a.gpu_mem_each[nodes].max()))
            short.append(
                f"it asks {api_quantity.text(resources.MEMORY, gpu.memory)} of memory on one GPU and the GPUs of"
                f" {who} have at most {each}"
            )
    for column in np.flatnonzero(request > 0).tolist():
        if column in (layout.GPU_MILLI, layout.GPU_MEMORY):
            continue
        name = snapshot.columns[column] if column < len(snapshot.columns) else "resource"
        most_of = float(a.cap[nodes, column].max()) if column < a.cap.shape[1] else 0.0
        if most_of < request[column]:
            asked = f"it asks {name} {api_quantity.text(name, float(request[column]))}"
            has = f"at most {api_quantity.text(name, most_of)}" if most_of > 0 else "none"
            short.append(f"{asked} and {who} have {has}")
    if not short:
        short.append(f"no one of {who} has room for all it asks at once, even with nothing else on it")
    return "; ".join(short)


def _rules(snapshot: Snapshot, pod: PodRequest, reasons: np.ndarray, nodes: Mask) -> str:
    """The node rules that keep ``pod`` off ``nodes``, as counts of kube-scheduler's reasons."""
    counts: Counter[str] = Counter()
    for code in (*NODE_RULES, layout.TOPOLOGY):
        slots = np.flatnonzero(nodes & (reasons == code))
        if code == layout.TAINT:
            counts.update(reason_texts.taint_texts(snapshot, pod, slots))
        elif slots.size:
            counts[reason_texts.reason_text(code, snapshot.columns)] += int(slots.size)
    return ", ".join(f"{n} {text}" for text, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _changes(snapshot: Snapshot, pod: PodRequest, reasons: np.ndarray, nodes: Mask) -> str:
    """What would let ``pod`` use one of ``nodes``: a toleration, a label, an allowed GPU model."""
    changes: list[str] = []
    codes = set(reasons[nodes].tolist())
    if layout.TAINT in codes:
        slots = np.flatnonzero(nodes & (reasons == layout.TAINT))
        taints = sorted(
            {
                f"{t.key}={t.value}:{t.effect}" if t.value else f"{t.key}:{t.effect}"
                for t, _ in reason_texts.untolerated_taints(snapshot, pod, slots)
                if t is not None
            }
        )
        changes.append(f"it tolerates {', '.join(taints)} (or the taint is removed)")
    if layout.SELECTOR in codes:
        missing = missing_labels(snapshot, pod)
        if missing:
            changes.append(f"a node is labelled {', '.join(missing)} (no node has that label)")
        else:
            changes.append("its node selector and affinity match one of them (or one is labelled to match)")
    level = _required_level(snapshot, pod)
    if layout.TOPOLOGY in codes and level is not None:
        label, name = snapshot.topology.levels[level], snapshot.topology.level_label(level)
        labelled = bool((snapshot.domain_ids()[:, level] >= 0).any())
        changes.append(f"it runs on a node labelled {label} (level {name}{'' if labelled else '; no node has it'})")
    if layout.GPU_MODEL in codes:
        changes.append(f"it allows their GPU model (it asks {', '.join(pod.gpu.models)})")
    return " or ".join(changes)


def missing_labels(snapshot: Snapshot, pod: PodRequest) -> list[str]:
    """The labels ``pod``'s node selector or required node affinity asks for that no node has (``key=value``, or
    ``key`` for ``Exists``)."""
    missing = [f"{k}={v}" for k, v in pod.node_selector.items() if not snapshot.select({k: v}, ()).any()]
    for term in pod.affinity:
        for req in term.labels:
            if req.operator not in ("In", "Exists"):
                continue
            if not snapshot.select({}, (selectors.NodeSelectorTerm(labels=(req,)),)).any():
                values = "|".join(req.values)
                missing.append(f"{req.key}={values}" if req.operator == "In" else req.key)
    return missing
