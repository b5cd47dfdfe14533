"""Filter: resources, GPUs (count, share, memory, model), node selectors, required affinity, taints.

A node whose GPU slots are MIG devices (the single MIG strategy, ``Cache.mig_slots``) holds whole-GPU pods by count
and no shared GPU: its device plugin gives every pod asking ``nvidia.com/gpu: 1`` a device of its own, so two pods
sharing a slot would take two devices.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from scheduler.api.basics import resources
from scheduler.api.objects import selectors
from scheduler.api.objects.pod import PodRequest
from scheduler.cache.state import Snapshot
from scheduler.framework import args as plugin_args
from scheduler.framework import reasons as framework_reasons
from scheduler.framework.interface import I8, I64, ROOM_FREED, ClusterEvent, CycleState
from scheduler.framework.reasons import NeverFits, Reason
from scheduler.kernels import fit as fit_kernel
from scheduler.kernels import layout

Mask = npt.NDArray[np.bool_]

#: A node's labels, taints or GPU model change only with the node (or a new node comes).
_NODE_CHANGED = frozenset({ClusterEvent.NODE_ADDED, ClusterEvent.NODE_UPDATED})
#: Taints the node lifecycle controller and cloud providers set and clear on their own (not ready, unreachable,
#: memory pressure, not yet initialised): a node out for them is out for a while, not for good.
PASSING_TAINTS = ("node.kubernetes.io/", "node.cloudprovider.kubernetes.io/")


def taint_text(taint: selectors.Taint) -> str:
    """kube-scheduler's TaintToleration reason, naming the taint as it does (key and value)."""
    return f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}"


def untolerated_taints(snapshot: Snapshot, pod: PodRequest, slots: I64) -> list[tuple[selectors.Taint | None, int]]:
    """For the nodes ``slots``: each first taint ``pod`` does not tolerate (None where it tolerates them all), with
    how many of the nodes it keeps off; looked up once per distinct set of taints, not once per node."""
    ids, sets = snapshot.taint_index()
    counts = np.bincount(ids[slots] + 1, minlength=len(sets) + 1)  # entry 0 counts the nodes without taints
    out: list[tuple[selectors.Taint | None, int]] = []
    for at in np.flatnonzero(counts).tolist():
        taint = selectors.untolerated(sets[at - 1], pod.tolerations) if at > 0 else None
        out.append((taint, int(counts[at])))
    return out


def _taint_texts(snapshot: Snapshot, pod: PodRequest, slots: I64) -> Counter[str]:
    """The taint reasons of the nodes ``slots`` (each failed for a taint): how many nodes name each taint."""
    texts: Counter[str] = Counter()
    for taint, count in untolerated_taints(snapshot, pod, slots):
        texts[taint_text(taint) if taint is not None else TAINT.text] += count
    return texts


def _lasting_taints(snapshot: Snapshot, pod: PodRequest, tainted: Mask) -> Mask:
    """Of the nodes ``tainted`` (refused for a taint), those whose taint does not clear on its own
    (:data:`PASSING_TAINTS`)."""
    lasting = tainted.copy()
    if not tainted.any():
        return lasting

    def passing(taints: tuple[selectors.Taint, ...]) -> bool:
        taint = selectors.untolerated(taints, pod.tolerations)
        return taint is not None and taint.key.startswith(PASSING_TAINTS)

    passes = _by_taint_set(snapshot, tainted.shape[0], passing)
    lasting[: passes.shape[0]] &= ~passes
    return lasting


def _by_taint_set(snapshot: Snapshot, size: int, answer: Callable[[tuple[selectors.Taint, ...]], bool]) -> Mask:
    """Per node slot (the first ``size``), ``answer`` about its set of taints, False for a node without: asked once
    per distinct set (``Cache.taint_index``), not once per node, since the nodes of a pool share theirs (often
    ``nvidia.com/gpu:NoSchedule`` on every GPU node; a loop over 1,000 such nodes took 0.47 ms a cycle)."""
    ids, sets = snapshot.taint_index()
    answers = np.array([answer(taints) for taints in sets] + [False], dtype=bool)  # the last stands for -1
    return answers[ids[:size]]


def _tolerate(snapshot: Snapshot, pod: PodRequest, nodes: Mask) -> str:
    taints = sorted(
        {
            f"{t.key}={t.value}:{t.effect}" if t.value else f"{t.key}:{t.effect}"
            for t, _ in untolerated_taints(snapshot, pod, np.flatnonzero(nodes))
            if t is not None
        }
    )
    return f"it tolerates {', '.join(taints)} (or the taint is removed)"


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


def _match_labels(snapshot: Snapshot, pod: PodRequest, nodes: Mask) -> str:
    missing = missing_labels(snapshot, pod)
    if missing:
        return f"a node is labelled {', '.join(missing)} (no node has that label)"
    return "its node selector and affinity match one of them (or one is labelled to match)"


def _model_ok(snapshot: Snapshot, pod: PodRequest) -> Mask:
    """Per node slot, whether its GPUs are of a model ``pod`` allows."""
    a = snapshot.arrays
    allowed = np.array([any(resources.model_matches(m, model) for m in pod.gpu.models) for model in snapshot.models])
    if not allowed.size:
        return np.zeros(a.slots, dtype=bool)
    return np.asarray((a.node_model >= 0) & allowed[a.node_model.clip(0)], dtype=bool)


def _other_model(snapshot: Snapshot, pod: PodRequest) -> Mask | None:
    """A node that failed first for something else may have a GPU model the pod does not allow as well."""
    if not (pod.gpu.count and pod.gpu.models):
        return None
    return ~_model_ok(snapshot, pod)


def _allow_model(snapshot: Snapshot, pod: PodRequest, nodes: Mask) -> str:
    return f"it allows their GPU model (it asks {', '.join(pod.gpu.models)})"


TAINT = Reason(
    3,
    "node(s) had untolerated taint",  # a taint is named per node
    eviction_helps=False,
    wakes=_NODE_CHANGED,
    texts=_taint_texts,
    never=NeverFits(change=_tolerate, lasting=_lasting_taints),
)
SELECTOR = Reason(
    4,
    "node(s) didn't match Pod's node affinity/selector",
    eviction_helps=False,
    wakes=_NODE_CHANGED,
    never=NeverFits(change=_match_labels),
)
GPU_MODEL = Reason(
    layout.GPU_MODEL,
    "GPU model not allowed",
    eviction_helps=False,
    wakes=_NODE_CHANGED,
    never=NeverFits(change=_allow_model, elsewhere=_other_model),
)


def _short(code: int, text: str) -> Reason:
    """A refusal for want of room on the node (the fit kernel's): pods leaving may clear it."""
    return Reason(code, text, eviction_helps=True, short_of_room=True, wakes=ROOM_FREED)


GPU_COUNT = _short(layout.GPU_COUNT, "Insufficient nvidia.com/gpu")
GPU_SHARE = _short(layout.GPU_SHARE, "no GPU with enough free share")
GPU_MEMORY_SHORT = _short(layout.GPU_MEMORY_SHORT, "Insufficient GPU memory")


class Fit:
    name = "fit"
    reasons = (TAINT, SELECTOR, GPU_MODEL, GPU_COUNT, GPU_SHARE, GPU_MEMORY_SHORT)

    def __init__(self, args: Mapping[str, Any]) -> None:
        plugin_args.check_keys(self.name, args, ())
        self._models_seen = -1
        self._model_cache: dict[tuple[str, ...], np.ndarray] = {}

    def _model_ok(self, allowed: tuple[str, ...], models: list[str]) -> np.ndarray:
        if self._models_seen != len(models):
            self._model_cache.clear()
            self._models_seen = len(models)
        mask = self._model_cache.get(allowed)
        if mask is None:
            mask = np.array([any(resources.model_matches(a, m) for a in allowed) for m in models] or [False])
            self._model_cache[allowed] = mask
        return mask

    def wakes(self, reason: int) -> frozenset[ClusterEvent] | None:
        if reason >= layout.RESOURCE:
            return ROOM_FREED  # Insufficient cpu, memory, ...
        return framework_reasons.wakes(self.reasons, reason)

    def filter(self, state: CycleState, reasons: I8) -> None:
        pod, snap = state.pod, state.snapshot
        if snap.taints:
            refused = _by_taint_set(
                snap, reasons.shape[0], lambda taints: not selectors.tolerated(taints, pod.tolerations)
            )
            fits = reasons[: refused.shape[0]]
            fits[(fits == layout.FIT) & refused] = TAINT.code
        if pod.node_selector or pod.affinity:
            match = snap.select(pod.node_selector, pod.affinity)
            reasons[(reasons == layout.FIT) & ~match] = SELECTOR.code
        a = snap.arrays
        gpu = pod.gpu
        any_model = not gpu.models
        model_ok = self._model_ok(gpu.models, snap.models) if not any_model else np.zeros(1, dtype=bool)
        fit_kernel.fit(
            a.cap,
            a.used,
            state.request,
            a.gpu_free,
            a.gpu_mem_free,
            a.gpu_count,
            a.node_model,
            model_ok,
            any_model,
            gpu.count,
            float(gpu.milli),
            float(gpu.memory),
            reasons.copy(),
            reasons,
            nodes=snap.node_count,
        )
        if gpu.shared:
            for slot in snap.mig_slots:
                if reasons[slot] == layout.FIT:
                    reasons[slot] = layout.GPU_SHARE
