"""The reasons a node cannot take a pod, in the words kube-scheduler uses (which tools, autoscalers and Kubernetes'
own e2e tests read): one text per ``scheduler.kernels.layout`` reason code, a taint named per node."""

from __future__ import annotations

from collections import Counter

import numpy as np
import numpy.typing as npt

from scheduler.api import selectors
from scheduler.api.pod import PodRequest
from scheduler.cache.state import Snapshot
from scheduler.kernels import layout

REASONS = {
    layout.UNSCHEDULABLE: "node(s) were unschedulable",
    layout.TAINT: "node(s) had untolerated taint",  # a taint is named per node: taint_texts()
    layout.SELECTOR: "node(s) didn't match Pod's node affinity/selector",
    layout.GPU_MODEL: "GPU model not allowed",
    layout.GPU_COUNT: "Insufficient nvidia.com/gpu",
    layout.GPU_SHARE: "no GPU with enough free share",
    layout.GPU_MEMORY_SHORT: "Insufficient GPU memory",
    layout.RESERVED: "node(s) reserved for a waiting job",
    layout.TOPOLOGY: "node(s) outside the job's topology domain",
    layout.PORTS: "node(s) didn't have free ports for the requested pod ports",
    layout.POD_AFFINITY: "node(s) didn't match pod affinity rules",
    layout.POD_ANTI_AFFINITY: "node(s) didn't match pod anti-affinity rules",
    layout.EXISTING_ANTI_AFFINITY: "node(s) didn't satisfy existing pods anti-affinity rules",
    layout.SPREAD: "node(s) didn't match pod topology spread constraints",
    layout.SPREAD_MISSING_LABEL: "node(s) didn't match pod topology spread constraints (missing required label)",
    layout.VOLUME_NODE_CONFLICT: "node(s) had volume node affinity conflict",
    layout.VOLUME_BIND_CONFLICT: "node(s) didn't find available persistent volumes to bind",
    layout.VOLUME_MISSING: "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)",
    layout.VOLUME_ZONE: "node(s) had no available volume zone",
    layout.VOLUME_LIMIT: "node(s) exceed max volume count",
    layout.DRA_CANNOT_ALLOCATE: "cannot allocate all claims",
    layout.DRA_CLAIM_NODE: "node(s) did not match the node of an allocated ResourceClaim",
}


def reason_text(code: int, columns: list[str]) -> str:
    if code >= layout.RESOURCE:
        column = code - layout.RESOURCE
        return f"Insufficient {columns[column] if column < len(columns) else 'resource'}"
    return REASONS.get(code, f"reason {code}")


def taint_text(taint: selectors.Taint) -> str:
    """kube-scheduler's TaintToleration reason, naming the taint as it does (key and value)."""
    return f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}"


def untolerated_taints(
    snapshot: Snapshot, pod: PodRequest, slots: npt.NDArray[np.int64]
) -> list[tuple[selectors.Taint | None, int]]:
    """For the nodes ``slots``: each first taint ``pod`` does not tolerate (None where it tolerates them all), with
    how many of the nodes it keeps off; looked up once per distinct set of taints, not once per node."""
    ids, sets = snapshot.taint_index()
    counts = np.bincount(ids[slots] + 1, minlength=len(sets) + 1)  # entry 0 counts the nodes without taints
    out: list[tuple[selectors.Taint | None, int]] = []
    for at in np.flatnonzero(counts).tolist():
        taint = selectors.untolerated(sets[at - 1], pod.tolerations) if at > 0 else None
        out.append((taint, int(counts[at])))
    return out


def taint_texts(snapshot: Snapshot, pod: PodRequest, slots: npt.NDArray[np.int64]) -> Counter[str]:
    """The taint reasons of the nodes ``slots`` (each failed for a taint): how many nodes name each taint."""
    texts: Counter[str] = Counter()
    for taint, count in untolerated_taints(snapshot, pod, slots):
        texts[taint_text(taint) if taint is not None else REASONS[layout.TAINT]] += count
    return texts


def node_text(snapshot: Snapshot, pod: PodRequest, code: int, slot: int) -> str:
    """The reason one node (``slot``) cannot take ``pod``, failed with ``code``."""
    if code == layout.TAINT:
        return next(iter(taint_texts(snapshot, pod, np.array([slot], dtype=np.int64))))
    return reason_text(code, snapshot.columns)
