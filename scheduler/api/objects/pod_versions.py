"""A pod seen from one version to the next: what of it a parse reads, and what moves as it is scheduled and starts.

A pod's versions after its binding are the kubelet's record of it, and a parse reads none of that record but its
phase, reason and start time. :func:`parts_read` is every part of a pod a parse (``scheduler.api.objects.pod``) may
read but those that move; :func:`moved` is a pod parsed from one version, as the next version with equal parts
parses. ``scheduler.k8s.feeds.pod_parses`` keeps a pod's parse with a digest of its parts, so that each version is
not parsed whole again. Kept beside the parse, whose readers it uses, so that the two stay in step.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping

from scheduler.api.basics import fields
from scheduler.api.basics.errors import InvalidObject
from scheduler.api.objects import pod as api_pod

#: What the kubelet writes of a pod as it starts and runs, and no parse reads: its conditions, its containers'
#: states, its addresses, its status message. With the metadata's resourceVersion and managedFields, and the kind and
#: apiVersion (a listing's items come without them, a watch event's with them), the only parts of a pod
#: :func:`parts_read` leaves out, besides what :func:`moved` reads afresh.
_UNREAD_STATUS = frozenset(
    {
        "conditions",
        "containerStatuses",
        "initContainerStatuses",
        "ephemeralContainerStatuses",
        "podIP",
        "podIPs",
        "hostIP",
        "hostIPs",
        "message",
    }
)
_UNREAD_META = frozenset({"resourceVersion", "managedFields"})
_UNREAD_TOP = frozenset({"kind", "apiVersion", "metadata", "spec", "status"})
#: What a parse reads of a pod's status that moves as it is scheduled and starts: its phase, reason and start time
#: (:func:`moved` reads them afresh, with the node and the GPU indices the binding wrote).
_MOVING_STATUS = frozenset({"phase", "reason", "startTime"})


def parts_read(raw: Mapping[str, object]) -> tuple[object, ...]:
    """Every part of ``raw`` a parse may read, but what moves as the pod is scheduled and starts (:func:`moved`):
    two versions of one pod with equal parts parse to the same pod but for those.

    Everything is kept but the few parts named in :data:`_UNREAD_STATUS`, :data:`_UNREAD_META` and
    :data:`_UNREAD_TOP`, which change as a pod runs and which no parse reads: a part that a parse comes to read is in
    here without anyone remembering to add it, unless it is one of those (``tests/k8s/test_pod_parses.py`` parses
    each of them changed)."""
    meta = raw.get("metadata")
    spec = raw.get("spec")
    status = raw.get("status")
    if isinstance(meta, Mapping):
        annotations = meta.get("annotations")
        meta = {key: value for key, value in meta.items() if key not in _UNREAD_META}
        if isinstance(annotations, Mapping) and (not annotations or api_pod.ANNOTATION_GPU_IDS in annotations):
            # The GPU indices as if never written; and no annotations as none at all, as a parse reads them: a pod
            # with no annotation but those had none, or an empty map, before its binding.
            others = {key: value for key, value in annotations.items() if key != api_pod.ANNOTATION_GPU_IDS}
            if others:
                meta["annotations"] = others
            else:
                del meta["annotations"]
    return (
        {key: value for key, value in raw.items() if key not in _UNREAD_TOP},
        meta,
        {key: value for key, value in spec.items() if key != "nodeName"} if isinstance(spec, Mapping) else spec,
        (
            {key: value for key, value in status.items() if key not in _UNREAD_STATUS and key not in _MOVING_STATUS}
            if isinstance(status, Mapping)
            else status
        ),
    )


def moved(pod: api_pod.PodRequest, raw: Mapping[str, object]) -> api_pod.PodRequest | None:
    """``pod``, parsed whole (no problem left out) from another version of the same pod with equal
    :func:`parts_read`, as ``raw`` parses: its node, phase, reason, start time and GPU indices read afresh. None
    where only a whole parse can tell: GPU indices that change once given, that count the pod's GPUs (a pod asking
    for them through claims or extended resources only), or that cannot be read.

    A pod waiting for a node whose version parsed as ``pod`` parses as it does on a node (what only a pending pod is
    refused for was refused then); the other way round, a pod on a node never comes back to wait, and a pending pod is
    parsed whole once it is (``scheduler.k8s.feeds.pod_parses``)."""
    meta = raw.get("metadata")
    spec = raw.get("spec")
    status = raw.get("status")
    node = str(spec.get("nodeName") or "") if isinstance(spec, Mapping) else ""
    status = status if isinstance(status, Mapping) else {}
    phase = str(status.get("phase") or "Pending")
    reason = str(status.get("reason") or "")
    started = fields.unix_time(status.get("startTime"))
    changes: dict[str, object] = {}
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    given = annotations.get(api_pod.ANNOTATION_GPU_IDS) if isinstance(annotations, Mapping) else None
    if given != pod.annotations.get(api_pod.ANNOTATION_GPU_IDS):
        # Indices changed once given, or that would count a pod's GPUs (its claims' or extended resources' when it
        # asks for none by the device plugin): read whole.
        counted = (pod.resource_claims or pod.extended_asks) and not pod.gpu.count
        if pod.gpu_ids or counted or not isinstance(given, str | None):
            return None
        try:
            kept = api_pod.str_map(annotations, obj=f"pod {pod.key}", field="metadata.annotations")
            changes["gpu_ids"] = api_pod.read_gpu_ids(kept, obj=f"pod {pod.key}")
        except InvalidObject:
            return None
        changes["annotations"] = kept
    if (node, phase, reason, started) != (pod.node_name, pod.phase, pod.status_reason, pod.started):
        changes.update(node_name=sys.intern(node), phase=sys.intern(phase), status_reason=reason, started=started)
    return dataclasses.replace(pod, **changes) if changes else pod  # type: ignore[arg-type]
