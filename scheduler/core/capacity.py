"""Whether work that fits nowhere now waits for something that can happen, or never fits as the cluster is.

A pod that fits no node either waits for what can come (pods leave, a reservation ends, a victim goes), or never
fits the cluster as it is: it asks more of a resource than any node it may use has even with nothing else on it,
or its node rules (taints, node selector and affinity, GPU model) leave it no node large enough. A gang
also never fits when its members together ask more GPUs than the cluster's nodes have. Pending reasons (the
``FailedScheduling`` message, ``PodScheduled`` and the gang's ``Scheduled`` condition) and ``gpusched explain``
say which, and what would change it, so nobody is told to wait for room that cannot come.

The node rules are the reasons their filters declare with a never-fits part (``scheduler.framework.reasons``:
taints, node selector and affinity, GPU model, a topology level's label); each says which of its nodes are out for
good (a taint the node lifecycle controller clears on its own is not) and what would change it. A cordon is not
one: it is lifted after maintenance.

Capacity is the nodes' allocatable amounts, as if nothing ran on them. Which nodes a pod may use is read from the
cycle's own filter results (the first reason each node failed, ``Scheduler.filter``), so this agrees with the
cycle; a node held for another job (``reasons.RESERVED``) is not filtered further and counts as one the pod may
use, so the doubt goes to "waits".
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import numpy.typing as npt

from scheduler.api.basics import quantity as api_quantity
from scheduler.api.basics import resources
from scheduler.api.objects.pod import PodRequest
from scheduler.cache.state import Snapshot
from scheduler.core import registry
from scheduler.kernels import layout

Mask = npt.NDArray[np.bool_]

#: How a pending reason starts its sentence on work that cannot fit until the cluster or the work changes.
NEVER = "Never fits as the cluster is"
#: The reason of a gang's ``Scheduled=False`` condition when its message says :data:`NEVER` (a gang whose members
#: fit one day, only not now, says ``NotAllMembersFit``).
NEVER_FITS = "NeverFits"


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
    rules = registry.REASONS.never
    ruled_out = np.zeros(reasons.shape[0], dtype=bool)
    for rule in rules:
        refused = present & (reasons == rule.code)
        lasting = rule.never.lasting if rule.never is not None else None
        ruled_out |= lasting(snapshot, pod, refused) if lasting is not None and refused.any() else refused
    for rule in rules:
        elsewhere = rule.never.elsewhere if rule.never is not None else None
        out = elsewhere(snapshot, pod) if elsewhere is not None else None
        if out is not None:
            # A node that failed first for something else may be out for this rule as well.
            other = present & ~ruled_out & out
            if other.any():
                reasons = np.where(other, rule.code, reasons)
                ruled_out |= other
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
        said = _rules(snapshot, pod, reasons, blocked)
        parts.append(f"of the nodes with room for it, {said}")
        change = f"it fits there once {_changes(snapshot, pod, reasons, blocked)}"
    else:
        if ruled_out.any() and may_use.any():
            parts.append(f"the others ({_rules(snapshot, pod, reasons, ruled_out)}) are no larger")
        elif ruled_out.any():
            parts.append(_rules(snapshot, pod, reasons, ruled_out))
            parts.append(f"and even without that {_too_small(snapshot, pod, request, present, 'nodes')}")
        change = "it fits once a node large enough joins, or it asks for less"
    return f"{NEVER}: {'; '.join(parts)}; {change}."


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
    for rule in registry.REASONS.never:
        slots = np.flatnonzero(nodes & (reasons == rule.code))
        counts.update(rule.count(snapshot, pod, slots))
    return ", ".join(f"{n} {text}" for text, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _changes(snapshot: Snapshot, pod: PodRequest, reasons: np.ndarray, nodes: Mask) -> str:
    """What would let ``pod`` use one of ``nodes``: a toleration, a label, an allowed GPU model (each rule's own
    clause; the rules that also hold on nodes refused first for something else, the broadest, last)."""
    codes = set(reasons[nodes].tolist())
    rules = [r for r in registry.REASONS.never if r.code in codes and r.never is not None]
    rules.sort(key=lambda r: r.never is not None and r.never.elsewhere is not None)
    changes = [r.never.change(snapshot, pod, nodes & (reasons == r.code)) for r in rules if r.never is not None]
    return " or ".join(change for change in changes if change)
